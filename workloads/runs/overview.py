"""Every run and every queue at a glance: the flow behind ``list`` and ``queues status``, as functions returning data.

    scope(spec, team, namespace) -> Scope                  pure: where to look, which team each namespace and queue is
    list_runs(cluster, scope, now) -> Listing              the runs, one list call per kind (run_list.rows)
    list_runs(..., wide=True, analyse=f)                   + last step and goodput so far, one log read per run
    queue_status(cluster, scope) -> Queues                 quota, usage, borrowing and who waits (queue_status.status)
    list_fleet / queues_fleet(members, ...)                the same over a fleet's manager and workers, each row named

The cluster is read once per kind whatever the number of runs: the runs of each runtime,
Kueue's Workloads and the run pods (``workloads.cluster.run_list``), or the ClusterQueues,
LocalQueues and Workloads (``workloads.cluster.queue_status``). ``requests`` counts the
calls made, so a benchmark (scripts/bench_overview.py) can show it does not grow with the runs.

Where it looks: the whole cluster when the caller may list it; a caller whose identity is
refused that (a team member whose RBAC is its namespace) gets the spec's team namespaces
instead, one call per kind each, and a namespace it may not read is named in ``notes``,
never shown as "no runs". ``--team`` or ``--namespace`` looks in that namespace only.

Last step and goodput so far come from the run's log, not its objects
(``workloads.cluster.run_list`` says why): ``wide`` reads it per run through the caller's
``analyse`` (the CLI's is ``metrics RUN``'s reading, ``workloads.observe.analysis``: Cloud
Logging's attempts, else the pod's log), a few runs at a time; a run whose log cannot be
read keeps None and a note.

Through a fleet, the manager's runs are the ones MultiKueue has not dispatched yet (or whose
worker copy is gone once finished: the manager mirrors its status), the workers' are where
the rest run; each row names its member. A member that does not answer is named in
``unreachable`` and the others are still listed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from toolkit.errors import ClusterError, Forbidden, NotFound, Unreachable
from toolkit.names import KUEUE_QUEUE_LABEL
from workloads.cluster import queue_status as qs
from workloads.cluster import run_list as rl
from workloads.cluster import runkinds as rk

if TYPE_CHECKING:
    from infra.spec import EnvSpec
    from workloads.cluster.client import Cluster

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"  # Kueue's on-demand visibility API (an aggregated API server)
T = TypeVar("T")
WIDE_PARALLEL = 4  # log reads in flight at once with --wide

# The pods of each runtime's runs, one selector each (the Job selector leaves a JobSet's pods out).
_POD_SELECTORS = {
    rk.JOBSET.kind: rk.JOBSET.run_label,
    rk.JOB.kind: f"{rk.JOB.run_label},!{rk.JOBSET.run_label}",
    rk.RAYJOB.kind: f"{rk.RAYJOB.run_label},{rk.RAYJOB.pod_filter}",
}


@dataclass(frozen=True)
class Scope:
    """Where to look and whose each namespace and ClusterQueue is."""

    namespaces: tuple[str, ...] | None  # None: the whole cluster (the spec's team namespaces if that is refused)
    fallback: tuple[str, ...] = ()
    teams: Mapping[str, str] = field(default_factory=dict)  # namespace -> team
    queues: Mapping[str, str] = field(default_factory=dict)  # ClusterQueue -> team


def scope(spec: EnvSpec | None, *, team: str | None = None, namespace: str | None = None) -> Scope:
    """``--team`` (its namespace), ``--namespace``, else the whole cluster; the spec names the teams."""
    from workloads.render.kueue import cluster_queue_name

    teams = {t.ns: t.name for t in spec.teams} if spec is not None else {}
    queues = {cluster_queue_name(t): t.name for t in spec.teams} if spec is not None else {}
    fallback = list(teams)
    if spec is not None and spec.xpk.enabled and spec.xpk.namespace not in fallback:
        fallback.append(spec.xpk.namespace)  # xpk's runs live there
    if team is not None:
        assert spec is not None
        return Scope((spec.team(team).ns,), (), teams, queues)
    return Scope((namespace,) if namespace else None, tuple(fallback), teams, queues)


class _Counted:
    """The cluster's list calls, counted (``Listing.requests``)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.requests = 0

    def list(self, info: Any, namespace: str | None, selector: str | None = None) -> list[dict]:
        self.requests += 1
        return self.cluster.list(info, namespace, label_selector=selector)


def _read(sc: Scope, read: Callable[[Sequence[str | None]], T], notes: list[str]) -> T:
    """``read`` over ``sc``'s namespaces, else the whole cluster (None), else — refused that — the spec's team namespaces."""
    if sc.namespaces is not None:
        return read(sc.namespaces)
    try:
        return read([None])
    except Forbidden as e:
        if not sc.fallback:
            raise
        notes.append(f"not allowed to list the whole cluster ({e}); listed the spec's team namespaces: {', '.join(sc.fallback)}")
        return read(sc.fallback)


def _listed(counted: _Counted, namespaces: Sequence[str | None], notes: list[str]) -> rl.Listed:
    c = counted.cluster
    runs: list[dict] = []
    workloads: list[dict] = []
    pods: list[dict] = []
    infos = {}
    for kind in rk.LOOKUP_ORDER:
        try:
            infos[kind.kind] = c.resource(kind.api_version, kind.kind)
        except NotFound:
            continue  # that runtime's CRDs are not installed: no run of it here
    try:
        wl_info = c.kueue("Workload")
    except NotFound:
        wl_info = None  # Kueue is not installed: runs without Workloads
    pod_info = c.resource("v1", "Pod")
    for ns in namespaces:
        kinds_found: set[str] = set()  # the runtimes with runs here: their pods are listed
        try:
            for kind in rk.LOOKUP_ORDER:
                if kind.kind not in infos:
                    continue
                selector = KUEUE_QUEUE_LABEL if kind is rk.JOB else None  # Jobs submitted through Kueue (a JobSet's children are filtered out)
                found = [{**o, "kind": kind.kind} for o in counted.list(infos[kind.kind], ns, selector)]
                found = [o for o in found if rl.is_run(kind, o)]
                if found:
                    kinds_found.add(kind.kind)
                runs.extend(found)
            if wl_info is not None:
                workloads.extend(counted.list(wl_info, ns))
            for kind in rk.LOOKUP_ORDER:
                if kind.kind in kinds_found:
                    pods.extend(counted.list(pod_info, ns, _POD_SELECTORS[kind.kind]))
        except Forbidden as e:
            if ns is None:
                raise
            notes.append(f"namespace {ns}: not allowed to list its runs ({e})")
    return rl.Listed(tuple(runs), tuple(workloads), tuple(pods))


@dataclass(frozen=True)
class Listing:
    rows: tuple[rl.RunRow, ...]
    notes: tuple[str, ...] = ()
    requests: int = 0
    unreachable: tuple[str, ...] = ()  # fleet members that did not answer, with why

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.rows], "notes": list(self.notes), "requests": self.requests, "unreachable": list(self.unreachable)}


# One run's log analysed (its namespace, name) -> (last step, goodput); raises a ToolkitError when it cannot be read.
Analyse = Callable[[str, str], tuple[int | None, float | None]]


def list_runs(
    cluster: Cluster,
    sc: Scope,
    *,
    now: float,
    name: str | None = None,
    filters: rl.Filters | None = None,
    wide: bool = False,
    analyse: Analyse | None = None,
) -> Listing:
    """The runs ``sc`` covers (``name``: the fleet member they are read from), ``filters`` applied; ``wide``: with ``analyse``."""
    counted = _Counted(cluster)
    notes: list[str] = []
    listed = _read(sc, lambda namespaces: _listed(counted, namespaces, notes), notes)
    rows = rl.keep(rl.rows(listed, now=now, teams=sc.teams, cluster=name), filters or rl.Filters())
    if wide:
        rows, more = _wide(rows, analyse)
        notes.extend(more)
    return Listing(tuple(rows), tuple(notes), counted.requests)


def _wide(rows: list[rl.RunRow], analyse: Analyse | None) -> tuple[list[rl.RunRow], list[str]]:
    """Last step and goodput of every run that has started, a few log reads at a time."""
    assert analyse is not None, "wide needs a log reader"
    started = [i for i, r in enumerate(rows) if r.state not in ("Queued", "Suspended")]
    notes: list[str] = []

    def one(i: int) -> tuple[int, tuple[int | None, float | None] | str]:
        r = rows[i]
        try:
            return i, analyse(r.namespace, r.name)
        except ClusterError as e:
            if isinstance(e, Unreachable):
                raise
            return i, str(e)
        except Exception as e:  # noqa: BLE001 — one unreadable log must not cost the whole list; it is named
            return i, " ".join(str(e).split())[:200] or type(e).__name__

    out = list(rows)
    with ThreadPoolExecutor(max_workers=WIDE_PARALLEL) as pool:
        for i, got in pool.map(one, started):
            if isinstance(got, str):
                notes.append(f"{rows[i].namespace}/{rows[i].name}: last step unknown: {got}")
            else:
                out[i] = replace(out[i], last_step=got[0], goodput=got[1])
    return out, notes


# ------------------------------------------------------------------ queues


@dataclass(frozen=True)
class Queues:
    status: qs.QueueStatus
    notes: tuple[str, ...] = ()
    requests: int = 0
    unreachable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.status.to_dict(), "notes": list(self.notes), "requests": self.requests, "unreachable": list(self.unreachable)}


def queue_status(cluster: Cluster, sc: Scope, *, name: str | None = None) -> Queues:
    """Every ClusterQueue's quota, usage and borrowing per flavor, and every waiting run with Kueue's reason and its position."""
    counted = _Counted(cluster)
    notes: list[str] = []
    try:
        cq_info, lq_info, wl_info = cluster.kueue("ClusterQueue"), cluster.kueue("LocalQueue"), cluster.kueue("Workload")
    except NotFound:
        raise NotFound("the cluster does not serve Kueue's API — apply the queues first: python -m workloads queues apply") from None
    cqs = counted.list(cq_info, None)  # cluster-scoped: a caller who may not read them gets the refusal, one line

    def read(namespaces: Sequence[str | None]) -> tuple[list[dict], list[dict]]:
        lqs: list[dict] = []
        wls: list[dict] = []
        for ns in namespaces:
            try:
                lqs.extend(counted.list(lq_info, ns))
                wls.extend(counted.list(wl_info, ns))
            except Forbidden as e:
                if ns is None:
                    raise
                notes.append(f"namespace {ns}: not allowed to list its queues ({e})")
        return lqs, wls

    lqs, wls = _read(sc, read, notes)
    if sc.namespaces is not None:
        # One team's view: its own ClusterQueues (the ones its LocalQueues feed).
        mine = {(lq.get("spec") or {}).get("clusterQueue") for lq in lqs}
        cqs = [c for c in cqs if (c.get("metadata") or {}).get("name") in mine]
    visibility = _visibility(cluster, counted, cqs, qs.waiting_cluster_queues(wls, lqs), notes)
    return Queues(qs.status(cqs, lqs, wls, visibility=visibility, teams=sc.queues, cluster=name), tuple(notes), counted.requests)


def _visibility(
    cluster: Cluster, counted: _Counted, cqs: Sequence[Mapping[str, Any]], seen_waiting: set[str], notes: list[str]
) -> dict[str, list[dict]] | None:
    """Kueue's pending list per ClusterQueue with waiting runs (its positions); None when the cluster does not serve it.

    A ClusterQueue waits when its status counts pending Workloads or a Workload listed here waits in it
    (``seen_waiting``): the counter is written after the Workload, so it alone misses a run just queued."""
    names = [str((c.get("metadata") or {}).get("name")) for c in cqs]
    counted_waiting = {n for c, n in zip(cqs, names, strict=True) if int(((c.get("status") or {}).get("pendingWorkloads")) or 0) > 0}
    waiting = [n for n in names if n in counted_waiting or n in seen_waiting]
    if not waiting:
        return {}
    try:
        version = cluster.preferred_version(VISIBILITY_GROUP)
    except NotFound:
        notes.append(f"positions estimated: the cluster does not serve Kueue's visibility API ({VISIBILITY_GROUP})")
        return None
    out: dict[str, list[dict]] = {}
    for cq in waiting:
        counted.requests += 1
        try:
            out[cq] = list((cluster.request("GET", f"/apis/{version}/clusterqueues/{cq}/pendingworkloads") or {}).get("items") or [])
        except (Forbidden, NotFound) as e:
            notes.append(f"{cq}: positions estimated: Kueue's visibility API refused ({e})")
    return out


# ------------------------------------------------------------------ a fleet


@dataclass(frozen=True)
class Member:
    """One cluster of a fleet, as the commands connect to it: the manager or a worker."""

    name: str
    connect: Callable[[], Cluster]
    manager: bool = False


def list_fleet(
    members: Sequence[Member],
    sc: Scope,
    *,
    now: float,
    filters: rl.Filters | None = None,
    wide: bool = False,
    analyse_on: Callable[[Cluster], Analyse] | None = None,
) -> Listing:
    """Every member's runs, each row named by its member; the manager's dispatched copies give way to the worker's."""
    rows: list[rl.RunRow] = []
    notes: list[str] = []
    requests = 0
    unreachable: list[str] = []
    manager_rows: list[rl.RunRow] = []
    for m in members:
        try:
            kube = m.connect()
            got = list_runs(kube, sc, now=now, name=m.name, wide=wide and not m.manager, analyse=analyse_on(kube) if (wide and analyse_on) else None)
        except (Unreachable, Forbidden) as e:
            unreachable.append(f"{m.name}: {e}")
            continue
        requests += got.requests
        notes.extend(f"{m.name}: {n}" for n in got.notes)
        (manager_rows if m.manager else rows).extend(got.rows)
    on_workers = {(r.namespace, r.name) for r in rows}
    rows.extend(r for r in manager_rows if (r.namespace, r.name) not in on_workers)
    rows = rl.keep(rows, filters or rl.Filters())
    rows.sort(key=lambda r: (r.cluster or "", r.namespace, -(r.created or 0.0), r.name))
    return Listing(tuple(rows), tuple(notes), requests, tuple(unreachable))


def queues_fleet(members: Sequence[Member], sc: Scope) -> Queues:
    """Every member's queues (the manager's: the runs MultiKueue has not dispatched yet), each row named by its member."""
    flavors: list[qs.FlavorRow] = []
    pending: list[qs.PendingRow] = []
    notes: list[str] = []
    requests = 0
    unreachable: list[str] = []
    for m in members:
        try:
            got = queue_status(m.connect(), sc, name=m.name)
        except (Unreachable, Forbidden) as e:
            unreachable.append(f"{m.name}: {e}")
            continue
        flavors.extend(got.status.flavors)
        pending.extend(got.status.pending)
        notes.extend(f"{m.name}: {n}" for n in got.notes)
        requests += got.requests
    return Queues(qs.QueueStatus(tuple(flavors), tuple(pending)), tuple(notes), requests, tuple(unreachable))


def fleet_members(fleet: Any, kubeconfig: Any, connect: Callable[[Any, str | None], Cluster]) -> list[Member]:
    """The fleet's manager, then its workers, each connected when first listed (``connect(kubeconfig, context)``)."""
    out = [Member(fleet.manager_cluster, lambda: connect(fleet.manager_kubeconfig or kubeconfig, fleet.manager_context), manager=True)]
    out += [Member(w.name, lambda w=w: connect(w.kubeconfig or kubeconfig, w.context)) for w in fleet.workers]
    return out
