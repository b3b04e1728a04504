"""Which runs, Kueue Workloads and checkpoint directories `workloads cleanup` removes.

The choice is pure (``Run`` records and ``CheckpointDir`` listings in, a ``CleanupPlan``
out, the clock passed in); ``collect`` and ``execute`` are the two places that talk to
the API server. A run is *finished* when its top-level object says so (JobSet
``Completed``/``Failed``, Job ``Complete``/``Failed``, RayJob ``jobDeploymentStatus``
``Complete``/``Failed``); its age counts from that
condition's ``lastTransitionTime``. A run that is queued or running is never removed
unless ``force``; naming one without ``force`` is refused before anything is deleted.

What may go at all is the ownership ledger's to say (``toolkit.ledger``): a run is a
candidate only when it carries the toolkit's labels (``run_object``); a JobSet, Job or
RayJob without them is kept and listed as kept, whatever its state.

Kueue Workloads: a run's Workload is owned by it and goes with the Foreground delete.
A finished Workload whose owner is already gone (deleted by hand, or a
``ttlSecondsAfterFinished`` GC that raced Kueue) is an orphan, removed as well — only when
its owner was a kind of run the toolkit submits and Kueue copied the toolkit's run label
onto it (``orphan_workload``; ``queues manager-config`` asks Kueue to).

A run's checkpoints (``<run>/checkpoints/`` and ``<run>/metrics/``, in a bucket or on the
team's Lustre) go by ``toolkit.ledger.run_output``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from toolkit import ledger
from toolkit.errors import FieldError
from workloads.cluster import runkinds as rk

if TYPE_CHECKING:
    from workloads.cluster.api import DeleteResult
    from workloads.cluster.client import Cluster

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_DURATION_S = 3650 * 86400.0  # ten years: no run or checkpoint retention needs more


def parse_duration(text: str, flag: str = "--older-than") -> float:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise FieldError(flag, f"{text[:40]!r} is not a duration", "write a number and a unit: 30m, 12h, 7d or 2w")
    seconds = float(m.group(1)) * _UNIT[m.group(2)]  # 400 digits are inf: the ceiling refuses them too
    if not seconds <= MAX_DURATION_S:
        raise FieldError(
            flag, f"{text[:40]} is longer than {MAX_DURATION_S // 86400:g} days", "write a shorter duration (a run or checkpoint older than that is just old)"
        )
    return seconds


def _epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Run:
    namespace: str
    name: str
    kind: str  # JobSet or Job
    finished: bool
    state: str  # Succeeded, Failed, Active
    finished_at: float | None  # epoch seconds of the finishing condition
    uid: str = ""
    owned: ledger.Verdict | None = field(default=None, compare=False)  # the ledger's word on it (None: not asked)

    def age(self, now: float) -> float | None:
        return None if self.finished_at is None else max(0.0, now - self.finished_at)


def run_from(obj: Mapping[str, Any]) -> Run:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "JobSet")
    conds = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
    done = "Complete" if kind == "Job" else "Completed"
    state, when = "Active", None
    if kind == "RayJob":  # KubeRay reports the end in status fields, not conditions
        st = obj.get("status") or {}
        deploy = st.get("jobDeploymentStatus")
        if deploy in ("Complete", "Failed"):
            state = "Succeeded" if deploy == "Complete" and st.get("jobStatus") == "SUCCEEDED" else "Failed"
            when = _epoch(st.get("endTime"))
        conds = {}
    for ctype, label in ((done, "Succeeded"), ("Failed", "Failed")):
        c = conds.get(ctype) or {}
        if str(c.get("status", "")).lower() == "true":
            state, when = label, _epoch(c.get("lastTransitionTime"))
            break
    owned = ledger.run_object({"apiVersion": _API.get(kind, ""), **obj})
    return Run(str(meta.get("namespace") or ""), str(meta.get("name") or ""), kind, state != "Active", state, when, str(meta.get("uid") or ""), owned)


_API = {k.kind: k.api_version for k in rk.LOOKUP_ORDER}


@dataclass(frozen=True)
class OrphanWorkload:
    namespace: str
    name: str
    finished_at: float | None
    permit: ledger.Permit | None = field(default=None, compare=False)


def orphan_from(wl: Mapping[str, Any], live_uids: set[str]) -> OrphanWorkload | ledger.Kept | None:
    """A finished Workload none of whose owners is among the live objects: deletable (the ledger's permit) or kept; None: not an orphan."""
    verdict = ledger.orphan_workload(wl, live_uids)
    if verdict is None or isinstance(verdict, ledger.Kept):
        return verdict
    meta = wl.get("metadata") or {}
    fin = next(c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == "Finished")
    return OrphanWorkload(str(meta.get("namespace") or ""), str(meta.get("name") or ""), _epoch(fin.get("lastTransitionTime")), verdict)


@dataclass(frozen=True)
class CheckpointDir:
    """A run's output directory (``gs://<bucket>/<run>/`` or ``lustre:<instance>/<namespace>/<run>/``) as listed, and the
    ledger's permit to delete its checkpoints and metrics (None until ``choose`` gives one)."""

    dir: ledger.OutputDir
    permit: ledger.Permit | None = field(default=None, compare=False)

    @property
    def uri(self) -> str:
        return self.dir.where

    @property
    def run(self) -> str:
        return self.dir.run

    @property
    def objects(self) -> int:
        return self.dir.objects

    @property
    def size(self) -> int:
        return self.dir.size

    @property
    def parts(self) -> tuple[str, ...]:
        return ledger.OUTPUT_PARTS


@dataclass(frozen=True)
class CleanupPlan:
    runs: tuple[Run, ...] = ()
    orphans: tuple[OrphanWorkload, ...] = ()
    checkpoints: tuple[CheckpointDir, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()  # (what, why)
    extra: dict[str, Any] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.runs or self.orphans or self.checkpoints)


def choose(
    runs: Iterable[Run],
    orphans: Iterable[OrphanWorkload | ledger.Kept],
    *,
    now: float,
    older_than: float,
    names: Iterable[str] = (),
    force: bool = False,
    checkpoints: Iterable[CheckpointDir] = (),
    retention: float | None = None,
) -> CleanupPlan:
    """What to delete. Raises FieldError (nothing deleted yet) for a named run that is missing or still active without ``force``."""
    runs = list(runs)
    wanted = list(dict.fromkeys(names))
    by_name: dict[str, list[Run]] = {}
    for r in runs:
        by_name.setdefault(r.name, []).append(r)
    for n in wanted:
        if n not in by_name:
            raise FieldError("RUN", f"no run {n!r} (JobSet or Job) in the namespaces searched", "check the name and --team (`status` lists a run)")
        for r in by_name[n]:
            if not r.finished and not force:
                raise FieldError(
                    "RUN",
                    f"run {r.namespace}/{r.name} is still queued or running",
                    "wait for it to finish, or pass --force to delete it anyway (its pods are killed and its checkpoints stay)",
                )
    chosen: list[Run] = []
    kept: list[tuple[str, str]] = []
    for r in runs:
        if wanted and r.name not in wanted:
            continue
        what = f"{r.kind} {r.namespace}/{r.name}"
        if not isinstance(r.owned, ledger.Permit):
            why = r.owned.why if isinstance(r.owned, ledger.Kept) else "not judged by the ownership ledger"
            if wanted:
                raise FieldError("RUN", f"{what} {why}", "pick the name of a run this toolkit submitted (status lists them)")
            if r.finished:
                kept.append((what, why))
            continue
        if not r.finished:
            if force:
                chosen.append(r)
            else:
                kept.append((what, "still queued or running (--force deletes it)"))
            continue
        age = r.age(now)
        if not wanted and age is not None and age < older_than:
            kept.append((what, f"finished {_human(age)} ago, younger than --older-than"))
            continue
        chosen.append(r)
    gone = {(r.namespace, r.name) for r in chosen}
    orph: list[OrphanWorkload] = []
    for o in orphans if not wanted else ():
        if isinstance(o, ledger.Kept):
            kept.append((o.what, o.why))
        elif o.finished_at is None or now - o.finished_at >= older_than:
            orph.append(o)
    ckpts: list[CheckpointDir] = []
    if retention is not None:
        # Any run under the name still on the cluster, the toolkit's or not: it may be writing there.
        live = {r.name for r in runs if (r.namespace, r.name) not in gone}
        for c in checkpoints:
            verdict = ledger.run_output(c.dir, live=live, now=now, retention=retention)
            if isinstance(verdict, ledger.Permit):
                ckpts.append(CheckpointDir(c.dir, verdict))
            else:
                kept.append((verdict.what, verdict.why))
    return CleanupPlan(tuple(chosen), tuple(orph), tuple(ckpts), tuple(kept))


_human = ledger.human


# ------------------------------------------------------------------ the edges


def collect(cluster: Cluster, namespaces: Iterable[str]) -> tuple[list[Run], list[OrphanWorkload | ledger.Kept]]:
    """Every run (JobSet, RayJob, plain Job) and orphaned finished Workload in the namespaces, each with the ledger's word.

    Every object of each kind is listed (a Workload is an orphan only when no live object of
    any kind owns it); a Job owned by something else (a JobSet's, KubeRay's submitter) is not
    a run of its own. A runtime or Kueue that is not installed has nothing to clean up; a
    refused read (Forbidden) is raised: a cleanup that skipped what it may not see would
    report "nothing to remove" for a cluster it never looked at.
    """
    runs: list[Run] = []
    orphans: list[OrphanWorkload | ledger.Kept] = []
    from toolkit.errors import NotFound

    for ns in namespaces:
        live_uids: set[str] = set()
        for kind in rk.LOOKUP_ORDER:
            try:
                info = cluster.resource(kind.api_version, kind.kind)
            except NotFound:
                continue  # that runtime is not installed
            for obj in cluster.list(info, ns):
                meta = obj.get("metadata") or {}
                live_uids.add(str(meta.get("uid") or ""))
                if kind is rk.JOB and meta.get("ownerReferences"):
                    continue  # a JobSet's child Job, or KubeRay's submitter: not a run of its own
                runs.append(run_from({"apiVersion": kind.api_version, "kind": kind.kind, **obj}))
        try:
            workloads = cluster.list(cluster.kueue("Workload"), ns)
        except NotFound:
            workloads = []  # Kueue is not installed
        for wl in workloads:
            o = orphan_from(wl, live_uids)
            if o is not None:
                orphans.append(o)
    return runs, orphans


def execute(cluster: Cluster, plan: CleanupPlan, *, dry_run: bool) -> list[DeleteResult]:
    """Delete the plan's runs (Foreground: pods and Workload first; the ledger asked again) and orphaned Workloads (by their permits)."""
    out: list[DeleteResult] = []
    for r in plan.runs:
        out.extend(cluster.delete_run(r.namespace, r.name, dry_run=dry_run))
    for o in plan.orphans:
        if o.permit is not None:
            out.append(cluster.delete_owned(o.permit, cluster.kueue("Workload"), o.name, o.namespace, dry_run=dry_run))
    return out


def delete_toolkit_object(cluster: Any, info: Any, kind: str, name: str, namespace: str, permit: ledger.Permit, **kw: Any) -> None:
    """Delete an object the toolkit made that is no run (``toolkit.ledger.toolkit_object``'s permit)."""
    ledger.require(permit, ledger.Kind.TOOLKIT_OBJECT, f"{kind} {namespace}/{name}")
    cluster.delete(info, name, namespace, **kw)
