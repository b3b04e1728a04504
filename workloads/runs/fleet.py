"""Apply a fleet (``infra.fleet``) to its clusters: each worker's side, the manager's kubeconfig Secrets, the manager's side.

The one flow ``queues apply --fleet`` runs against GKE and ``local up --fleet`` against the
loopback control planes. Order matters: a worker's identity must exist (and its token
be issued by the worker's token controller) before the manager can hold a kubeconfig
for it, and the manager's MultiKueueClusters are only useful once their Secrets exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.fleet import Fleet
from toolkit.errors import ClusterError
from toolkit.names import KUEUE_API, TGK_FIELD_MANAGER
from workloads.cluster import secret_data
from workloads.cluster.client import Cluster
from workloads.cluster.wait import WaitTimeout, wait_for
from workloads.render import multikueue

TOKEN_WAIT_S = 60.0


@dataclass(frozen=True)
class FleetApplied:
    workers: dict[str, int]  # objects applied per worker
    manager: int
    secrets: tuple[str, ...]
    active: dict[str, str]  # each MultiKueueCluster's Active condition: "True", else the reason

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "manager": self.manager, "secrets": list(self.secrets), "active": self.active}


def worker_token(worker: Cluster, *, timeout: float = TOKEN_WAIT_S) -> tuple[str, bytes]:
    """The token and CA of the manager's identity on ``worker``, once its token controller has filled the Secret."""
    info = worker.resource("v1", "Secret")

    def filled() -> Mapping[str, Any] | None:
        data = secret_data.data_of(worker.get(info, multikueue.IDENTITY, multikueue.KUEUE_NAMESPACE))
        return data if data and data.get("token") and data.get("ca.crt") else None

    try:
        data = wait_for(filled, timeout=timeout, what=f"the token of {multikueue.KUEUE_NAMESPACE}/{multikueue.IDENTITY}", interval=0.5)
    except WaitTimeout:
        raise ClusterError(
            f"the worker's token controller did not fill {multikueue.KUEUE_NAMESPACE}/{multikueue.IDENTITY} within {timeout:.0f}s — check kube-controller-manager runs with a service account key"
        ) from None
    where = f"{multikueue.KUEUE_NAMESPACE}/{multikueue.IDENTITY}"
    return secret_data.value(data, "token", where, text=True), secret_data.value(data, "ca.crt", where)


def apply_fleet(fleet: Fleet, manager: Cluster, workers: dict[str, Cluster], *, progress: Callable[[str], None] = lambda m: None) -> FleetApplied:
    counts: dict[str, int] = {}
    secrets = []
    for w in fleet.workers:
        kube = workers[w.name]
        objs = multikueue.worker_objects(fleet, w)
        progress(f"worker {w.name}: applying {len(objs)} objects (its queues and the manager's identity)")
        kube.apply(objs, field_manager=TGK_FIELD_MANAGER)
        counts[w.name] = len(objs)
        token, ca = worker_token(kube)
        config = multikueue.kubeconfig(w.name, kube.transport.server, ca, token)
        manager.apply([multikueue.kubeconfig_secret(w.name, config)], field_manager=TGK_FIELD_MANAGER)
        secrets.append(f"{multikueue.KUEUE_NAMESPACE}/{Fleet.secret_name(w.name)}")
        progress(f"manager: kubeconfig Secret {secrets[-1]} for worker {w.name} ({kube.transport.server})")
    mobjs = multikueue.manager_objects(fleet)
    progress(f"manager: applying {len(mobjs)} objects (MultiKueue check, config, clusters, queues)")
    manager.apply(mobjs, field_manager=TGK_FIELD_MANAGER)
    return FleetApplied(counts, len(mobjs), tuple(secrets), clusters_active(manager, fleet))


def clusters_active(manager: Cluster, fleet: Fleet) -> dict[str, str]:
    """Each worker's MultiKueueCluster ``Active`` condition on the manager: "True", or its reason and message."""
    info = manager.resource(KUEUE_API, "MultiKueueCluster")
    out = {}
    for w in fleet.workers:
        obj = manager.get(info, w.name) or {}
        cond = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
        out[w.name] = "True" if cond and cond.get("status") == "True" else (f"{cond.get('reason')}: {cond.get('message')}" if cond else "no status yet")
    return out


def wait_active(manager: Cluster, fleet: Fleet, *, timeout: float) -> dict[str, str]:
    """Until every worker's MultiKueueCluster is Active (the manager's Kueue reached it with its kubeconfig)."""
    try:
        wait_for(lambda: all(v == "True" for v in clusters_active(manager, fleet).values()), timeout=timeout, what="MultiKueueClusters active", interval=0.5)
    except WaitTimeout:
        pass
    return clusters_active(manager, fleet)


def landed_on(manager: Cluster, namespace: str, run: str) -> str | None:
    """The worker the manager dispatched ``run`` to (its Workload's ``status.clusterName``), None while it waits."""
    found = manager.find_run(namespace, run)
    if found is None:
        return None
    wl = manager.workload_for(namespace, found[1]) or {}
    return ((wl.get("status") or {}).get("clusterName")) or None


def follow(fleet: Fleet, manager: Cluster, namespace: str, run: str, kubeconfig: Any = None) -> tuple[Cluster, str | None]:
    """Where a run's pods are: the worker it landed on (connected through the fleet file), else the manager."""
    name = landed_on(manager, namespace, run)
    if name is None:
        return manager, None
    w = fleet.worker(name)
    worker = Cluster.connect(w.kubeconfig or kubeconfig, w.context)
    # A finished run's copy is removed from the worker once its status is mirrored back:
    # the manager then holds all there is.
    return (worker if worker.find_run(namespace, run) is not None else manager), name
