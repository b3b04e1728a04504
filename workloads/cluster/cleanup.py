"""Which runs, Kueue Workloads and checkpoint directories `workloads cleanup` removes.

The choice is pure (``Run`` records and ``CheckpointDir`` listings in, a ``CleanupPlan``
out, the clock passed in); ``collect`` and ``execute`` are the two places that talk to
the API server. A run is *finished* when its top-level object says so (JobSet
``Completed``/``Failed``, Job ``Complete``/``Failed``, RayJob ``jobDeploymentStatus``
``Complete``/``Failed``); its age counts from that
condition's ``lastTransitionTime``. A run that is queued or running is never removed
unless ``force``; naming one without ``force`` is refused before anything is deleted.

Kueue Workloads: a run's Workload is owned by it and goes with the Foreground delete.
A finished Workload whose owner is already gone (deleted by hand, or a
``ttlSecondsAfterFinished`` GC that raced Kueue) is an orphan, removed as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from toolkit.errors import FieldError
from toolkit.names import TGK_RUN_LABEL
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
    return Run(str(meta.get("namespace") or ""), str(meta.get("name") or ""), kind, state != "Active", state, when, str(meta.get("uid") or ""))


@dataclass(frozen=True)
class OrphanWorkload:
    namespace: str
    name: str
    finished_at: float | None


def orphan_from(wl: Mapping[str, Any], live_uids: set[str]) -> OrphanWorkload | None:
    """A finished Workload none of whose owners is among the live objects; None otherwise."""
    meta = wl.get("metadata") or {}
    owners = {r.get("uid") for r in meta.get("ownerReferences") or []}
    if owners & live_uids:
        return None
    fin = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == "Finished"), None)
    if not fin or str(fin.get("status", "")).lower() != "true":
        return None
    return OrphanWorkload(str(meta.get("namespace") or ""), str(meta.get("name") or ""), _epoch(fin.get("lastTransitionTime")))


@dataclass(frozen=True)
class CheckpointDir:
    """``gs://<bucket>/<run>/checkpoints/``: MaxText's checkpoints of one run (base_output_directory/run_name)."""

    bucket: str
    run: str
    objects: int
    size: int
    last_write: float  # epoch seconds of the newest object
    owner: str | None = None  # the run its identity (<run>/tgk-run.json, written by submit) names; None: no identity

    @property
    def prefix(self) -> str:
        return f"{self.run}/checkpoints/"

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"


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
    orphans: Iterable[OrphanWorkload],
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
    orph = tuple(o for o in orphans if not wanted and (o.finished_at is None or now - o.finished_at >= older_than))
    ckpts: list[CheckpointDir] = []
    if retention is not None:
        live = {r.name for r in runs if (r.namespace, r.name) not in gone}
        for c in checkpoints:
            if c.owner != c.run:
                # Only what a run of the toolkit's wrote goes: a converted base checkpoint, say, has no identity.
                why = "no tgk-run.json beside it" if c.owner is None else f"its tgk-run.json names run {c.owner}"
                kept.append((c.uri, f"{why}: not written by a run this toolkit submitted (delete it yourself if it is garbage)"))
            elif c.run in live:
                kept.append((c.uri, "its run is still on the cluster"))
            elif now - c.last_write < retention:
                kept.append((c.uri, f"last written {_human(now - c.last_write)} ago, within retention"))
            else:
                ckpts.append(c)
    return CleanupPlan(tuple(chosen), orph, tuple(ckpts), tuple(kept))


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


# ------------------------------------------------------------------ the edges


def collect(cluster: Cluster, namespaces: Iterable[str]) -> tuple[list[Run], list[OrphanWorkload]]:
    """Every run (JobSet, RayJob, and plain Job made by the toolkit) and orphaned finished Workload in the namespaces.

    A runtime or Kueue that is not installed has nothing to clean up; a refused read
    (Forbidden) is raised: a cleanup that skipped what it may not see would report
    "nothing to remove" for a cluster it never looked at.
    """
    runs: list[Run] = []
    orphans: list[OrphanWorkload] = []
    from toolkit.errors import NotFound

    for ns in namespaces:
        live_uids: set[str] = set()
        for kind in rk.LOOKUP_ORDER:
            try:
                info = cluster.resource(kind.api_version, kind.kind)
            except NotFound:
                continue  # that runtime is not installed
            selector = f"{TGK_RUN_LABEL}" if kind is rk.JOB else None
            for obj in cluster.list(info, ns, label_selector=selector):
                meta = obj.get("metadata") or {}
                live_uids.add(str(meta.get("uid") or ""))
                if kind is rk.JOB and meta.get("ownerReferences"):
                    continue  # a JobSet's child Job, not a run of its own
                obj = {"kind": kind.kind, **obj}
                runs.append(run_from(obj))
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
    """Delete the plan's runs (Foreground: pods and Workload first) and orphaned Workloads."""
    out: list[DeleteResult] = []
    for r in plan.runs:
        out.extend(cluster.delete_run(r.namespace, r.name, dry_run=dry_run))
    if plan.orphans:
        info = cluster.kueue("Workload")
        for o in plan.orphans:
            out.append(cluster.delete(info, o.name, o.namespace, dry_run=dry_run))
    return out
