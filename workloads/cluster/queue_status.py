"""Each team's queue as Kueue holds it: quota per flavor, what is in use and borrowed, who waits and why. Pure.

``queues status`` lists the ClusterQueues, LocalQueues and Workloads once each (and asks
Kueue's visibility API for each ClusterQueue's pending list when the cluster serves it) and
reads them here:

- per ClusterQueue and flavor, in TPU chips (``google.com/tpu``: the queues also cover CPU
  and memory, which ``render/kueue.py`` sizes so they never limit a TPU run): the nominal
  quota (``spec.resourceGroups[].flavors[].resources[].nominalQuota``), what admitted runs
  use (``status.flavorsUsage[].resources[].total``) and how much of that is borrowed from
  the cohort (``...borrowed``);
- per pending run (a Workload without quota): its LocalQueue, priority, Kueue's reason
  and message (the ``QuotaReserved`` condition, or the admission checks it waits on:
  ``status.workload_status``) and its position in the ClusterQueue.

The position is Kueue's own when the cluster serves the visibility API
(``visibility.kueue.x-k8s.io``: ``positionInClusterQueue``, Kueue's on-demand visibility,
on by default in Kueue). A cluster that does not serve it (the local cluster runs Kueue with
it off) gets the order Kueue keeps a ClusterQueue's heap in: higher priority first, then
the time the Workload was queued — its creation, or its last eviction when it was evicted
and requeued (Kueue's default ``requeuingStrategy.timestamp: Eviction``) — marked
``estimated`` so nobody mistakes it for Kueue's word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.names import TPU_RESOURCE
from workloads.cluster import status as st
from workloads.cluster.run_list import epoch

POSITION_KUEUE = "kueue"  # Kueue's visibility API said it
POSITION_ESTIMATED = "estimated"  # ordered here the way Kueue orders its queue

_QUANTITY = re.compile(r"^([0-9]+)$")


def chips(quantity: Any) -> int | None:
    """A TPU quantity (a whole number of chips: Kueue writes it as a plain integer) as an int; None for anything else."""
    m = _QUANTITY.fullmatch(str(quantity).strip()) if quantity is not None else None
    return int(m.group(1)) if m and len(m.group(1)) <= 18 else None


@dataclass(frozen=True)
class FlavorRow:
    cluster_queue: str
    team: str | None
    flavor: str
    nominal: int | None  # TPU chips
    in_use: int
    borrowed: int
    admitted: int  # admitted Workloads in the whole ClusterQueue
    pending: int  # pending Workloads in the whole ClusterQueue
    cohort: str | None = None
    cluster: str | None = None  # the fleet member; None: one cluster

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PendingRow:
    cluster_queue: str
    team: str | None
    namespace: str
    run: str  # the Workload's owner (the run), else the Workload's own name
    workload: str
    local_queue: str | None
    priority: int | None
    position: int | None  # 0 = next in the ClusterQueue
    position_source: str  # POSITION_KUEUE | POSITION_ESTIMATED
    state: str  # pending | quota-reserved (waiting on admission checks) | evicted
    reason: str
    message: str
    queued: float | None  # epoch seconds it has been waiting since
    cluster: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueStatus:
    flavors: tuple[FlavorRow, ...]
    pending: tuple[PendingRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"flavors": [f.to_dict() for f in self.flavors], "pending": [p.to_dict() for p in self.pending]}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _tpu(resources: Iterable[Mapping[str, Any]], field: str) -> int | None:
    for r in resources or ():
        if r.get("name") == TPU_RESOURCE:
            return chips(r.get(field))
    return None


def flavor_rows(cq: Mapping[str, Any], team: str | None = None, cluster: str | None = None) -> list[FlavorRow]:
    """One row per flavor of a ClusterQueue that covers TPU chips, in the order its resource groups list them."""
    name = str(_meta(cq).get("name") or "")
    spec, status = cq.get("spec") or {}, cq.get("status") or {}
    usage = {u.get("name"): u.get("resources") or [] for u in status.get("flavorsUsage") or []}
    out = []
    for group in spec.get("resourceGroups") or []:
        if TPU_RESOURCE not in (group.get("coveredResources") or []):
            continue
        for fl in group.get("flavors") or []:
            used = usage.get(fl.get("name"), [])
            out.append(
                FlavorRow(
                    cluster_queue=name,
                    team=team,
                    flavor=str(fl.get("name") or ""),
                    nominal=_tpu(fl.get("resources") or [], "nominalQuota"),
                    in_use=_tpu(used, "total") or 0,
                    borrowed=_tpu(used, "borrowed") or 0,
                    admitted=int(status.get("admittedWorkloads") or 0),
                    pending=int(status.get("pendingWorkloads") or 0),
                    cohort=spec.get("cohortName") or spec.get("cohort"),
                    cluster=cluster,
                )
            )
    return out


def queued_at(wl: Mapping[str, Any]) -> float | None:
    """When Kueue queued the Workload: its last eviction (it was requeued then), else its creation."""
    evicted = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == "Evicted"), None)
    when = epoch(evicted.get("lastTransitionTime")) if evicted else None
    return when if when is not None else epoch(_meta(wl).get("creationTimestamp"))


def _owner(wl: Mapping[str, Any]) -> str:
    refs = _meta(wl).get("ownerReferences") or []
    controller = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return str((controller or {}).get("name") or _meta(wl).get("name") or "")


# The states a Workload waits in: no quota yet, quota held but admission checks pending, evicted and requeued.
_WAITING = (st.WorkloadState.PENDING, st.WorkloadState.QUOTA_RESERVED, st.WorkloadState.EVICTED)


def waiting_cluster_queues(workloads: Iterable[Mapping[str, Any]], local_queues: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ClusterQueues some listed Workload waits in: read from the Workloads themselves, since a
    ClusterQueue's ``pendingWorkloads`` counter is updated after them and lags a fresh submission."""
    cq_of = {(str(_meta(lq).get("namespace") or ""), str(_meta(lq).get("name") or "")): (lq.get("spec") or {}).get("clusterQueue") for lq in local_queues}
    out: set[str] = set()
    for wl in workloads:
        s = st.workload_status(wl)
        cq = cq_of.get((str(_meta(wl).get("namespace") or ""), s.queue or ""))
        if s.state in _WAITING and cq:
            out.add(str(cq))
    return out


def pending_rows(
    workloads: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    *,
    visibility: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    teams: Mapping[str, str] | None = None,
    cluster: str | None = None,
) -> list[PendingRow]:
    """The Workloads that wait, with the ClusterQueue their LocalQueue feeds and their place in it.

    ``visibility``: ClusterQueue -> Kueue's pending list (its items carry ``positionInClusterQueue``);
    a ClusterQueue missing from it is ordered here (``POSITION_ESTIMATED``). ``teams``: ClusterQueue -> team.
    """
    teams = teams or {}
    cq_of = {(str(_meta(lq).get("namespace") or ""), str(_meta(lq).get("name") or "")): (lq.get("spec") or {}).get("clusterQueue") for lq in local_queues}
    known: dict[tuple[str, str], int] = {}
    for items in (visibility or {}).values():
        for it in items:
            pos = it.get("positionInClusterQueue")
            if isinstance(pos, int):
                known[(str(_meta(it).get("namespace") or ""), str(_meta(it).get("name") or ""))] = pos
    waiting: dict[str, list[tuple[Mapping[str, Any], st.WorkloadStatus]]] = {}
    for wl in workloads:
        s = st.workload_status(wl)
        if s.state not in _WAITING:
            continue
        ns = str(_meta(wl).get("namespace") or "")
        cq = cq_of.get((ns, s.queue or "")) or "?"
        waiting.setdefault(cq, []).append((wl, s))
    out: list[PendingRow] = []
    for cq, found in waiting.items():
        asked = visibility is not None and cq in visibility
        # Kueue's heap order (see the module docstring): priority first, then the time queued.
        order = sorted(found, key=lambda p: (-(p[1].priority or 0), queued_at(p[0]) or 0.0, str(_meta(p[0]).get("name") or "")))
        estimated = {id(wl): i for i, (wl, s) in enumerate(x for x in order if x[1].state is not st.WorkloadState.QUOTA_RESERVED)}
        for wl, s in order:
            meta = _meta(wl)
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if asked:
                position, source = known.get(key), POSITION_KUEUE
            else:
                position, source = estimated.get(id(wl)), POSITION_ESTIMATED
            out.append(
                PendingRow(
                    cluster_queue=cq,
                    team=teams.get(cq),
                    namespace=key[0],
                    run=_owner(wl),
                    workload=key[1],
                    local_queue=s.queue,
                    priority=s.priority,
                    position=position,
                    position_source=source,
                    state=s.state.value,
                    reason=s.reason,
                    message=s.message,
                    queued=queued_at(wl),
                    cluster=cluster,
                )
            )
    out.sort(key=lambda r: (r.cluster or "", r.cluster_queue, r.position if r.position is not None else 1 << 30, r.workload))
    return out


def status(
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    *,
    visibility: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    teams: Mapping[str, str] | None = None,
    cluster: str | None = None,
) -> QueueStatus:
    """The flavor rows of every ClusterQueue and the pending rows of every waiting Workload (``teams``: ClusterQueue -> team)."""
    teams = teams or {}
    cqs = sorted(cluster_queues, key=lambda c: str(_meta(c).get("name") or ""))
    flavors = [row for cq in cqs for row in flavor_rows(cq, teams.get(str(_meta(cq).get("name") or "")), cluster)]
    return QueueStatus(tuple(flavors), tuple(pending_rows(workloads, local_queues, visibility=visibility, teams=teams, cluster=cluster)))
