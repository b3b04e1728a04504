"""What the environment spec puts into the local cluster: its simulated nodes and its cluster objects.

``sync_nodes``: one kwok Node per VM of the spec's pools (``nodes``), old ones the toolkit
made and the spec no longer has deleted, the rest created or updated, then every one
Ready. ``apply_cluster_objects``: ``workloads.render.kueue.cluster_objects(spec)``, what
`queues apply` (and so the provision pipeline) applies to GKE, through the same client
call; a fleet member applies its role's objects instead. Both run at ``local up`` and
again when a running cluster is reused with another spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infra.spec import EnvSpec
from toolkit.errors import ToolkitError
from toolkit.names import TGK_FIELD_MANAGER, TGK_LOCAL_FIELD_MANAGER, TGK_LOCAL_MANAGED_LABEL
from workloads.cluster.client import Cluster
from workloads.cluster.wait import WaitTimeout, wait_for
from workloads.local import LocalClusterError, addons, nodes
from workloads.render import kueue

Progress = Callable[[str], None]
Wait = Callable[[str, Callable[[], bool], float], None]  # Daemons.wait: (what, check, timeout)


def node_ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", []))


def sync_nodes(kube: Cluster, spec: EnvSpec, *, tpu_nodes: bool, wait: Wait, timeout: float, progress: Progress) -> None:
    """The spec's nodes (only its CPU nodes without ``tpu_nodes``), and no other node the toolkit made, all Ready."""
    wanted = nodes.node_objects(spec) if tpu_nodes else nodes.cpu_nodes(spec)
    names = {n["metadata"]["name"] for n in wanted}
    progress(f"creating {len(wanted)} simulated nodes from the spec ({len(wanted) - len(nodes.cpu_nodes(spec))} TPU VMs)")
    node_info = kube.resource("v1", "Node")
    for n in kube.list(node_info, label_selector=f"{TGK_LOCAL_MANAGED_LABEL}=true"):
        if n["metadata"]["name"] not in names:
            kube.delete(node_info, n["metadata"]["name"], propagation="Background")
    existing = {n["metadata"]["name"] for n in kube.list(node_info)}
    for n in wanted:
        if n["metadata"]["name"] in existing:
            # Status (capacity) is a subresource once the Node exists.
            kube.apply([{k: v for k, v in n.items() if k != "status"}], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        else:
            kube.create(n, field_manager=TGK_LOCAL_FIELD_MANAGER)

    def all_ready() -> bool:
        got = {n["metadata"]["name"]: n for n in kube.list(node_info)}
        return all(name in got and node_ready(got[name]) for name in names)

    wait(f"{len(names)} nodes Ready (kwok)", all_ready, timeout)


def apply_cluster_objects(
    kube: Cluster, spec: EnvSpec, *, objects: tuple[dict[str, Any], ...] | None = None, source: str = "", progress: Progress = lambda m: None
) -> None:
    """Apply the spec's cluster objects through the toolkit's own code path.

    ``workloads.render.kueue.cluster_objects(spec)`` (what `queues apply` and so the
    provision pipeline apply) through ``Cluster.apply`` (server-side apply, the
    toolkit's field manager); ``objects`` (named by ``source``) in their place for a
    fleet member. A spec with ``network.dcn`` first gets the GKE networking CRDs, which
    GKE serves on a cluster with multi-networking.
    """
    if spec.network.dcn is not None:
        progress("installing the GKE networking CRDs (network.dcn: GKENetworkParamSet, Network)")
        kube.apply(addons.gke_networking_crds(), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
    objs = list(objects) if objects is not None else kueue.cluster_objects(spec)
    source = source if objects is not None else "workloads.render.kueue.cluster_objects"
    progress(f"applying {len(objs)} objects from the spec ({source})")
    errors: list[ToolkitError] = []

    def applied() -> bool:
        try:
            kube.apply(objs, field_manager=TGK_FIELD_MANAGER)
            return True
        except ToolkitError as e:
            # Right after start-up the default ServiceAccount admission or a
            # webhook CA rotation can still refuse a request for a moment.
            errors.append(e)
            kube.forget_discovery()
            return False

    try:
        wait_for(applied, timeout=60, what="the spec's cluster objects to apply", interval=1.0)
    except WaitTimeout:
        raise LocalClusterError(f"applying the spec's cluster objects failed: {str(errors[-1]).splitlines()[0]}") from None
