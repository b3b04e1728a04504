"""Node objects that look like the GKE nodes the environment spec creates.

Pure: spec in, list of Node dicts out. Every TPU slice node pool (one per slice,
named as ``TpuPoolSpec.node_pool_names()`` names them) becomes ``shape.nodes``
Nodes carrying the labels GKE puts on TPU nodes, the ``google.com/tpu`` capacity
and the ``google.com/tpu=present:NoSchedule`` taint; the CPU pool becomes plain
nodes. kwok (``kwok.x-k8s.io/node: fake``) then plays their kubelets.

Label facts (GKE docs and the cluster-autoscaler's GKE provider):
``cloud.google.com/gke-nodepool``, ``cloud.google.com/gke-tpu-accelerator``,
``cloud.google.com/gke-tpu-topology``, ``cloud.google.com/gke-spot`` (spot pools),
and for pools placed by a named resource policy — Ironwood (tpu7x) multi-host
workload policies — ``cloud.google.com/placement-policy-name``
(``cloud.google.com/gke-placement-group`` is the compact-placement-group label
of other machine families, not what TPU7x pods select on).
"""

from __future__ import annotations

import hashlib
from typing import Any

from infra import catalog
from infra.spec import CapacityOption, EnvSpec, TpuPoolSpec
from toolkit.names import (
    GKE_MACHINE_FAMILY_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_PLACEMENT_POLICY_LABEL,
    GKE_QUEUED_LABEL,
    GKE_SPOT_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    K8S_HOSTNAME_LABEL,
    K8S_INSTANCE_TYPE_LABEL,
    K8S_REGION_LABEL,
    K8S_ZONE_LABEL,
    KWOK_NODE_ANNOTATION,
    TGK_LOCAL_MANAGED_LABEL,
    TPU_RESOURCE,
    TPU_TAINT,
    CapacityMode,
)
from workloads.local import slices


def placement_policy_name(spec: EnvSpec, pool: TpuPoolSpec) -> str | None:
    """The workload-policy name GKE labels a tpu7x multi-host pool's nodes with, else None."""
    return spec.workload_policy_name(pool)


def _machine_resources(machine_type: str) -> tuple[int, str]:
    """(vCPU, memory quantity) of a node of ``machine_type``, from the catalog's machine table."""
    size = catalog.machine_size(machine_type, default=catalog.LOCAL_NODE_FALLBACK_SIZE)
    return size.vcpu, f"{size.memory_gib}Gi"


def _node_name(cluster: str, pool: str, index: int) -> str:
    # GKE names nodes gke-<cluster>-<pool>-<hash>-<suffix>; the name doubles as
    # the kubernetes.io/hostname label, which is capped at 63 characters.
    digest = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()[:8]
    suffix = f"-{digest}-{index:04d}"
    return (f"gke-{cluster}-{pool}"[: 63 - len(suffix)].rstrip("-")) + suffix


def _node(name: str, labels: dict[str, str], *, cpu: int, memory: str, pods: int, tpu: int = 0, taints: list[dict[str, str]]) -> dict[str, Any]:
    resources = {"cpu": str(cpu), "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    if tpu:
        resources[TPU_RESOURCE] = str(tpu)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                K8S_HOSTNAME_LABEL: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                # Marks the Nodes `local up` manages, so a re-apply can delete ones the spec dropped.
                TGK_LOCAL_MANAGED_LABEL: "true",
                **labels,
            },
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        # Capacity is taken from the Node as created; kwok's node stage keeps it.
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }
    return node


def tpu_nodes(spec: EnvSpec, pool: TpuPoolSpec) -> list[dict[str, Any]]:
    """Every VM of every node pool of ``pool``: each slice of each capacity option, as the stack declares them.

    Queued-provisioning options have none: their node pools sit at zero until GKE (locally,
    ``workloads.local.provisioner``) answers a ProvisioningRequest with whole slices.
    """
    return [n for option in pool.capacity_options() if not is_queued(option) for n in option_nodes(spec, pool, option)]


def is_queued(option: CapacityOption) -> bool:
    return bool(getattr(option.capacity, "queued", False))


def provisioned_nodes(spec: EnvSpec, pool: TpuPoolSpec, option: CapacityOption, node_pools: list[str], request: str) -> list[dict[str, Any]]:
    """The VMs GKE adds to the queued ``node_pools`` (one slice each) for ProvisioningRequest ``request``.

    They carry what queued nodes carry on GKE: the ``gke-queued`` label and taint, and the
    provisioning-request label Kueue puts into the admitted pods' nodeSelector.
    """
    from workloads.render.kueue import GKE_PROVISIONING_REQUEST_LABEL, QUEUED_TOLERATION

    taint = {k: QUEUED_TOLERATION[k] for k in ("key", "value", "effect")}
    wanted = set(node_pools)
    out = []
    for n in option_nodes(spec, pool, option):
        labels = n["metadata"]["labels"]
        if labels[GKE_NODEPOOL_LABEL] not in wanted:
            continue
        labels[GKE_QUEUED_LABEL] = "true"
        labels[GKE_PROVISIONING_REQUEST_LABEL] = request
        # Not `local up`'s: a later `local up` must not delete the provisioner's nodes.
        labels.pop(TGK_LOCAL_MANAGED_LABEL, None)
        n["spec"]["taints"] = [*n["spec"]["taints"], taint]  # option_nodes' nodes share one list
        out.append(n)
    return out


def option_nodes(spec: EnvSpec, pool: TpuPoolSpec, option: CapacityOption) -> list[dict[str, Any]]:
    """The VMs of one capacity option's node pools, labelled as GKE and the stack label them."""
    return [n for index, node_pool in enumerate(pool.option_node_pool_names(option)) for n in slice_nodes(spec, pool, option, node_pool, index)]


def slice_nodes(
    spec: EnvSpec, pool: TpuPoolSpec, option: CapacityOption, node_pool: str, index: int, *, extra_labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The VMs of one slice of ``option``: node pool ``node_pool``, slice ``index`` of the pool's multislice group."""
    shape = pool.shape
    cpu, memory = _machine_resources(shape.machine_type)
    base = {
        GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label,
        GKE_TPU_TOPOLOGY_LABEL: shape.topology,
        GKE_MACHINE_FAMILY_LABEL: shape.machine_type.split("-")[0],
        K8S_INSTANCE_TYPE_LABEL: shape.machine_type,
        K8S_REGION_LABEL: spec.region,
        K8S_ZONE_LABEL: spec.pool_zone(pool),
    }
    if option.mode == CapacityMode.SPOT:
        base[GKE_SPOT_LABEL] = "true"
    policy = placement_policy_name(spec, pool)
    if policy:
        base[GKE_PLACEMENT_POLICY_LABEL] = policy
    taint = [dict(TPU_TAINT)]
    labels = {**base, **pool.node_labels(option, index), GKE_NODEPOOL_LABEL: node_pool, **(extra_labels or {})}
    if pool.dynamic_slicing:
        # A PROVISION_ONLY sub-block: no slice topology or placement label of its own until a Slice on it is active.
        labels.pop(GKE_TPU_TOPOLOGY_LABEL, None)
        labels.pop(GKE_PLACEMENT_POLICY_LABEL, None)
    out = []
    for i in range(shape.nodes):
        name = _node_name(spec.cluster.name, node_pool, i)
        own = {**labels, **slices.partition_labels(_block(pool), node_pool, i)} if pool.dynamic_slicing else labels
        out.append(_node(name, own, cpu=cpu, memory=memory, pods=spec.network.tpu_max_pods_per_node, tpu=shape.chips_per_vm, taints=taint))
    return out


def _block(pool: TpuPoolSpec) -> str:
    """The block of a dynamically sliced pool's sub-blocks: one for the reservation (GKE's block ids are opaque)."""
    return "block-" + hashlib.sha256(getattr(pool.capacity, "name", pool.name).encode()).hexdigest()[:12]


def cpu_nodes(spec: EnvSpec) -> list[dict[str, Any]]:
    pool = spec.cpu_pool
    cpu, memory = _machine_resources(pool.machine_type)
    out = []
    # The autoscaler would grow the pool on demand; here it is simply at its maximum.
    for z, zone in enumerate(spec.zones):
        for i in range(pool.max_nodes):
            name = _node_name(spec.cluster.name, pool.name, z * pool.max_nodes + i)
            labels = {
                GKE_NODEPOOL_LABEL: pool.name,
                GKE_MACHINE_FAMILY_LABEL: pool.machine_type.split("-")[0],
                K8S_INSTANCE_TYPE_LABEL: pool.machine_type,
                K8S_REGION_LABEL: spec.region,
                K8S_ZONE_LABEL: zone,
            }
            out.append(_node(name, labels, cpu=cpu, memory=memory, pods=spec.network.cpu_max_pods_per_node, taints=[]))
    return out


def node_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Every Node of the environment: TPU slice pools first, then the CPU pool."""
    out: list[dict[str, Any]] = []
    for pool in spec.tpu_pools:
        out.extend(tpu_nodes(spec, pool))
    out.extend(cpu_nodes(spec))
    return out
