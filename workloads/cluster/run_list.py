"""Every run on a cluster, one row each, from what one list call per kind returned. Pure: no I/O.

``workloads list`` reads the cluster once per kind — the runs of each runtime (JobSet,
RayJob, plain Job), Kueue's Workloads and the run pods — however many runs there are,
and joins them here: a run's Workload by Kueue's job-uid label (else its owner
reference), its pods by the runtime's run label (``runkinds``), its state by the same
reading ``status`` makes of one run (``status.run_status``). Nothing here asks for more:
a list of hundreds of runs costs five requests, not five per run.

What a row holds and where it comes from:

- state, message, restarts: ``status.run_status`` over the run object, its Workload and its
  pods (events are left out: they are one request per run; ``status RUN`` shows them);
- slices: the run object's replicas (a JobSet's replicated Jobs, a RayJob's worker
  groups, 1 for a plain Job), and how many of them have every worker Running;
- team: the spec's team whose namespace the run is in (None: not a team's namespace);
- age: from the run object's ``creationTimestamp`` to ``now``;
- last step and goodput so far: not from these objects. Neither a JobSet, a Workload nor
  a pod says how far training got (MaxText writes no Kubernetes object, and a run's pods
  hold no API token to annotate themselves with: ``render/podsecurity.py``); the step lines
  are in the run's log. They are filled in only when asked (``list --wide``: one log read
  per run, ``workloads.runs.overview``), else left None.

Which objects are runs: every JobSet and RayJob, and every plain Job that no other object
owns (a JobSet's child Jobs, KubeRay's submitter Job and a CronJob's Jobs are parts of
something else) and that was submitted through Kueue or by the toolkit (its queue-name or
run label): the system's own Jobs are not training runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from toolkit.names import KUEUE_JOB_UID_LABEL, KUEUE_QUEUE_LABEL, TGK_RUN_LABEL
from workloads.cluster import runkinds as rk
from workloads.cluster import status as st

# The states `list --state` takes: RunPhase's values, lowercased.
STATES = tuple(p.value.lower() for p in st.RunPhase if p is not st.RunPhase.NOT_FOUND)


@dataclass(frozen=True)
class Listed:
    """What the list calls returned: the runtimes' objects (``kind`` set on each), Workloads and run pods."""

    runs: tuple[Mapping[str, Any], ...]
    workloads: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class RunRow:
    namespace: str
    name: str
    runtime: str  # jobset | job | ray
    team: str | None
    state: str  # a RunPhase value
    message: str
    queue: str | None  # the LocalQueue the run names
    slices: int
    slices_running: int
    pods_running: int
    pods_expected: int
    restarts: int
    created: float | None  # epoch seconds
    age_seconds: float | None
    workload_state: str | None  # a WorkloadState value; None: no Workload
    flavors: Mapping[str, str]
    waiting: str = ""  # why Kueue has not admitted it yet (its Workload's own words); "" once admitted
    priority: int | None = None
    cluster: str | None = None  # the fleet member it was read from; None: one cluster
    last_step: int | None = None  # list --wide only
    goodput: float | None = None  # list --wide only: productive / total so far (workloads.observe.goodput)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flavors"] = dict(self.flavors)
        return d


def epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_run(kind: rk.RunKind, obj: Mapping[str, Any]) -> bool:
    """Whether a listed object of ``kind`` is a run of its own (see the module docstring)."""
    if kind is not rk.JOB:
        return True
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    return not meta.get("ownerReferences") and (KUEUE_QUEUE_LABEL in labels or TGK_RUN_LABEL in labels)


def _matches(labels: Mapping[str, str], terms: str) -> bool:
    """``labels`` satisfy a selector of ``k=v`` terms (the only form ``runkinds`` writes)."""
    for term in filter(None, terms.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _pods_by_run(kind: rk.RunKind, pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for p in pods:
        meta = _meta(p)
        labels = meta.get("labels") or {}
        run = labels.get(kind.run_label)
        if run is None or not _matches(labels, kind.pod_filter):
            continue
        if kind is rk.JOB and rk.JOBSET.run_label in labels:
            continue  # a JobSet's pod: its child Job's name is not a plain Job run's
        out.setdefault((str(meta.get("namespace") or ""), run), []).append(p)
    return out


def _workloads_by_owner(workloads: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """uid of the job -> its newest Workload (Kueue's job-uid label, else an owner reference)."""
    out: dict[str, Mapping[str, Any]] = {}
    for wl in workloads:
        meta = _meta(wl)
        uids = {(meta.get("labels") or {}).get(KUEUE_JOB_UID_LABEL)} | {r.get("uid") for r in meta.get("ownerReferences") or []}
        for uid in filter(None, uids):
            held = out.get(uid)
            if held is None or str(meta.get("creationTimestamp") or "") > str(_meta(held).get("creationTimestamp") or ""):
                out[uid] = wl
    return out


def _waiting(s: st.RunStatus) -> str:
    w = s.workload
    if s.phase is not st.RunPhase.QUEUED or w is None:
        return ""
    return w.message or w.reason or w.state.value


def slices_of(obj: Mapping[str, Any]) -> int:
    """The slices a run asks for: a JobSet's replicated Jobs, a RayJob's worker groups' replicas, one for a plain Job."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job":
        return 1
    if obj.get("kind") == "RayJob":
        groups = (spec.get("rayClusterSpec") or {}).get("workerGroupSpecs") or []
        return sum(int(g.get("replicas", 0) or 0) for g in groups)
    return sum(int(rj.get("replicas", 1) or 1) for rj in spec.get("replicatedJobs") or [])


def rows(listed: Listed, *, now: float, teams: Mapping[str, str] | None = None, cluster: str | None = None) -> list[RunRow]:
    """One row per run in ``listed`` (``teams``: namespace -> team), ordered by namespace, then newest first."""
    teams = teams or {}
    wls = _workloads_by_owner(listed.workloads)
    by_kind = {k.kind: k for k in rk.LOOKUP_ORDER}
    pods = {k.kind: _pods_by_run(k, listed.pods) for k in rk.LOOKUP_ORDER}
    out: list[RunRow] = []
    for obj in listed.runs:
        kind = by_kind.get(str(obj.get("kind")))
        if kind is None or not is_run(kind, obj):
            continue
        meta = _meta(obj)
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        wl = wls.get(str(meta.get("uid") or ""))
        s = st.run_status(ns, name, obj, wl, list(pods[kind.kind].get((ns, name), [])))
        want = slices_of(obj)
        per_slice = s.expected_pods // want if want and s.expected_pods % want == 0 else 0
        full = sum(1 for sl in s.slices if per_slice and sl.running >= per_slice)
        created = epoch(meta.get("creationTimestamp"))
        out.append(
            RunRow(
                namespace=ns,
                name=name,
                runtime=kind.runtime,
                team=teams.get(ns),
                state=s.phase.value,
                message=s.message,
                queue=(meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL),
                slices=want,
                slices_running=min(full, want),
                pods_running=s.running,
                pods_expected=s.expected_pods,
                restarts=s.restarts,
                created=created,
                age_seconds=None if created is None else max(0.0, now - created),
                workload_state=s.workload.state.value if s.workload else None,
                flavors=dict(s.workload.flavors) if s.workload else {},
                waiting=_waiting(s),
                priority=s.workload.priority if s.workload else None,
                cluster=cluster,
            )
        )
    out.sort(key=lambda r: (r.cluster or "", r.namespace, -(r.created or 0.0), r.name))
    return out


@dataclass(frozen=True)
class Filters:
    """What ``list`` narrows to; an empty field keeps every run."""

    states: tuple[str, ...] = ()  # lowercased RunPhase values (STATES)
    runtimes: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()

    def keep(self, row: RunRow) -> bool:
        return (
            (not self.states or row.state.lower() in self.states)
            and (not self.runtimes or row.runtime in self.runtimes)
            and (not self.teams or row.team in self.teams)
            and (not self.clusters or row.cluster in self.clusters)
        )


def keep(rows_: Sequence[RunRow], filters: Filters) -> list[RunRow]:
    return [r for r in rows_ if filters.keep(r)]
