"""Address-range sizing: the node, pod and Service ranges, checked when given and sized from the node count when not.

GKE gives every node a pod range of its own, at least twice its max pods and a power of
two (``pods_block_per_node``), so a cluster's pod range must hold one block per node of
every pool. A range the spec leaves empty is sized for the nodes times ``network.headroom``
(room for surge upgrades and growth), never smaller than a /22 (nodes), /18 (pods) or /20
(Services); a given one must hold what the nodes need and overlap no other (nor the
control plane's, with private nodes). Pure.
"""

from __future__ import annotations

import ipaddress
import math

from pydantic import BaseModel, ConfigDict

from infra.spec.cluster import ClusterSpec
from infra.spec.network import NetworkSpec
from toolkit.errors import SpecError


class Cidrs(BaseModel):
    model_config = ConfigDict(frozen=True)
    nodes: str
    pods: str
    services: str


def pods_block_per_node(max_pods: int) -> int:
    """GKE gives each node a pod range with at least twice max_pods addresses, a power of two."""
    return 1 << math.ceil(math.log2(2 * max_pods))


def pod_addresses_needed(network: NetworkSpec, *, tpu_nodes: int, cpu_nodes: int) -> int:
    return tpu_nodes * pods_block_per_node(network.tpu_max_pods_per_node) + cpu_nodes * pods_block_per_node(network.cpu_max_pods_per_node)


def _prefix_for(addresses: int) -> int:
    return 32 - max(0, math.ceil(math.log2(max(addresses, 1))))


def derive_cidrs(network: NetworkSpec, cluster: ClusterSpec, *, tpu_nodes: int, cpu_nodes: int) -> Cidrs:
    """Given ranges are checked against the node count; missing ones are sized from it."""
    n = network
    total_nodes = tpu_nodes + cpu_nodes
    nodes_needed = total_nodes + 4  # GCP reserves 4 addresses per subnet
    pods_needed = pod_addresses_needed(network, tpu_nodes=tpu_nodes, cpu_nodes=cpu_nodes)

    def pick(field: str, given: str | None, needed: int, base: str, floor_prefix: int, what: str) -> str:
        if given:
            net = ipaddress.ip_network(given)
            if net.num_addresses < needed:
                want = _prefix_for(needed)
                raise SpecError(
                    f"network.{field}",
                    f"{given} holds {net.num_addresses} addresses but {what} need {needed}",
                    f"use a /{want} or larger, or remove it to derive one",
                )
            return given
        prefix = min(floor_prefix, _prefix_for(int(needed * n.headroom)))
        return str(ipaddress.ip_network(f"{base}/{prefix}", strict=False))

    tpu_block = pods_block_per_node(n.tpu_max_pods_per_node)
    cpu_block = pods_block_per_node(n.cpu_max_pods_per_node)
    cidrs = Cidrs(
        nodes=pick("nodes_cidr", n.nodes_cidr, nodes_needed, "10.0.0.0", 22, f"{total_nodes} nodes"),
        pods=pick(
            "pods_cidr",
            n.pods_cidr,
            pods_needed,
            "10.64.0.0",
            18,
            f"{tpu_nodes} TPU nodes x {tpu_block} and {cpu_nodes} CPU nodes x {cpu_block} (per-node pod blocks)",
        ),
        services=pick("services_cidr", n.services_cidr, 1024, "10.128.0.0", 20, "Services"),
    )
    nets = {k: ipaddress.ip_network(v) for k, v in cidrs.model_dump().items()}
    if cluster.private_nodes:
        nets["master"] = ipaddress.ip_network(cluster.master_cidr)
    keys = list(nets)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if nets[a].overlaps(nets[b]):
                field = "cluster.master_cidr" if "master" in (a, b) else f"network.{b}_cidr"
                raise SpecError(field, f"{nets[b]} overlaps the {a} range {nets[a]}", "choose ranges that do not overlap")
    return cidrs
