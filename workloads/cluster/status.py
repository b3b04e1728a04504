"""Turn API objects (JobSet, Kueue Workload, pods) into a typed run status. Pure: no I/O.

The shapes read here are the same in Kueue v1beta1 and v1beta2 (conditions,
``status.admission.podSetAssignments[].flavors``) and JobSet v1alpha2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from toolkit.names import JOBSET_JOB_INDEX_LABEL, K8S_COMPLETION_INDEX_LABEL, K8S_JOB_NAME_LABEL, RAY_HOST_INDEX_LABEL, RAY_REPLICA_INDEX_LABEL, TPU_RESOURCE


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _true(conds: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return str((conds.get(kind) or {}).get("status", "")).lower() == "true"


# --------------------------------------------------------------------- workload


class WorkloadState(str, Enum):
    MISSING = "missing"  # Kueue has not created a Workload (no queue label, Kueue down)
    PENDING = "pending"  # waiting for quota
    QUOTA_RESERVED = "quota-reserved"  # quota held, admission checks (e.g. provisioning) pending
    ADMITTED = "admitted"
    EVICTED = "evicted"  # preempted or timed out; Kueue requeues unless deactivated
    INACTIVE = "inactive"  # spec.active=false: Kueue will not consider it again by itself
    FINISHED = "finished"


@dataclass(frozen=True)
class WorkloadStatus:
    name: str
    queue: str | None
    state: WorkloadState
    cluster_queue: str | None = None
    flavors: Mapping[str, str] = field(default_factory=dict)  # podset -> TPU flavor
    reason: str = ""  # the deciding condition's reason (Pending, Preempted, ...)
    message: str = ""  # Kueue's own words, e.g. "insufficient quota for google.com/tpu ..."
    priority: int | None = None

    def describe(self) -> str:
        if self.state is WorkloadState.ADMITTED:
            fl = ", ".join(f"{k}={v}" for k, v in self.flavors.items()) or "no flavor recorded"
            return f"Workload {self.name} admitted by ClusterQueue {self.cluster_queue or '?'} ({fl})"
        if self.state is WorkloadState.QUOTA_RESERVED:
            return f"Workload {self.name} has quota; waiting for admission checks: {self.message or self.reason or 'pending'}"
        if self.state is WorkloadState.PENDING:
            return f"Workload {self.name} pending in queue {self.queue or '?'}: {self.message or self.reason or 'waiting for quota'}"
        return f"Workload {self.name} {self.state.value}: {self.message or self.reason or '-'}"


def workload_status(wl: Mapping[str, Any]) -> WorkloadStatus:
    meta = _meta(wl)
    spec = wl.get("spec") or {}
    status = wl.get("status") or {}
    conds = _conditions(wl)
    admission = status.get("admission") or {}
    flavors: dict[str, str] = {}
    for psa in admission.get("podSetAssignments") or []:
        fl = psa.get("flavors") or {}
        chosen = fl.get(TPU_RESOURCE) or next(iter(fl.values()), None)
        if chosen:
            flavors[psa.get("name", "main")] = chosen

    def pick(kind: str) -> tuple[str, str]:
        c = conds.get(kind) or {}
        return str(c.get("reason") or ""), " ".join(str(c.get("message") or "").split())

    if _true(conds, "Finished"):
        state, (reason, msg) = WorkloadState.FINISHED, pick("Finished")
    elif spec.get("active") is False:
        state, (reason, msg) = WorkloadState.INACTIVE, pick("Evicted") if "Evicted" in conds else ("Deactivated", "spec.active is false")
    elif _true(conds, "Admitted"):
        state, (reason, msg) = WorkloadState.ADMITTED, pick("Admitted")
    elif _true(conds, "Evicted"):
        state, (reason, msg) = WorkloadState.EVICTED, pick("Evicted")
    elif _true(conds, "QuotaReserved"):
        state, (reason, msg) = WorkloadState.QUOTA_RESERVED, pick("Admitted") if "Admitted" in conds else pick("QuotaReserved")
        checks = [
            f"{c.get('name')}: {c.get('state')}{' (' + c['message'] + ')' if c.get('message') else ''}"
            for c in status.get("admissionChecks") or []
            if c.get("state") != "Ready"
        ]
        if checks:
            msg = "; ".join(checks)
    else:
        state, (reason, msg) = WorkloadState.PENDING, pick("QuotaReserved")
    return WorkloadStatus(
        name=str(meta.get("name", "")),
        queue=spec.get("queueName"),
        state=state,
        cluster_queue=admission.get("clusterQueue"),
        flavors=flavors,
        reason=reason,
        message=msg,
        priority=spec.get("priority"),
    )


# -------------------------------------------------------------------------- pods


@dataclass(frozen=True)
class PodStatus:
    name: str
    slice: int | None
    worker: int | None
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None
    ready: bool
    restarts: int
    detail: str = ""  # why it is not running: Unschedulable, ImagePullBackOff, exit code...


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def pod_status(pod: Mapping[str, Any]) -> PodStatus:
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    cstats = status.get("containerStatuses") or []
    detail = ""
    for cs in cstats:
        state = cs.get("state") or {}
        if "waiting" in state and (state["waiting"] or {}).get("reason"):
            w = state["waiting"]
            detail = w["reason"] + (f": {' '.join(str(w.get('message')).split())[:160]}" if w.get("message") else "")
            break
        if "terminated" in state:
            t = state["terminated"] or {}
            detail = f"{t.get('reason') or 'Terminated'} (exit {t.get('exitCode')})"
            if t.get("exitCode") not in (0, None):
                break
    if not detail and phase == "Pending":
        sched = _conditions(pod).get("PodScheduled") or {}
        if str(sched.get("status", "")).lower() == "false":
            detail = f"{sched.get('reason') or 'Unschedulable'}: {' '.join(str(sched.get('message') or '').split())[:200]}"
    if not detail and status.get("reason"):
        detail = str(status["reason"])
    slice_index = _int(labels.get(JOBSET_JOB_INDEX_LABEL))
    worker = _int(labels.get(K8S_COMPLETION_INDEX_LABEL, ann.get(K8S_COMPLETION_INDEX_LABEL)))
    if RAY_REPLICA_INDEX_LABEL in labels:  # a RayJob's TPU worker: KubeRay's replica (slice) and host
        slice_index, worker = _int(labels[RAY_REPLICA_INDEX_LABEL]), _int(labels.get(RAY_HOST_INDEX_LABEL, 0))
    elif slice_index is None and K8S_JOB_NAME_LABEL in labels:
        slice_index = 0  # a plain Job (the job runtime) is one slice
    return PodStatus(
        name=str(meta.get("name", "")),
        slice=slice_index,
        worker=worker,
        phase=phase,
        node=(pod.get("spec") or {}).get("nodeName"),
        ready=_true(_conditions(pod), "Ready"),
        restarts=sum(int(cs.get("restartCount") or 0) for cs in cstats),
        detail=detail,
    )


# ---------------------------------------------------------------------- run/jobset


class RunPhase(str, Enum):
    NOT_FOUND = "NotFound"
    QUEUED = "Queued"  # suspended by Kueue, waiting for admission
    STARTING = "Starting"  # admitted; pods being created, scheduled or pulled
    RUNNING = "Running"  # every expected pod is running
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"  # suspended with no Workload: nobody will resume it


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


# Pod phases in the order a slice summary lists them.
_PHASES = ("Running", "Pending", "Succeeded", "Failed", "Unknown")
# Waiting reasons every starting pod goes through: not a sign of trouble.
_ROUTINE_WAITS = ("ContainerCreating", "PodInitializing")


def abnormal(pod: PodStatus) -> bool:
    """A worker worth a line of its own: failed, unknown, restarted, or stuck with a reason."""
    if pod.phase in ("Failed", "Unknown") or pod.restarts:
        return True
    if pod.phase in ("Running", "Succeeded"):
        return False
    return bool(pod.detail) and not pod.detail.startswith(_ROUTINE_WAITS)


@dataclass(frozen=True)
class SliceStatus:
    index: int | None
    pods: tuple[PodStatus, ...]

    @property
    def running(self) -> int:
        return sum(p.phase == "Running" for p in self.pods)

    @property
    def phases(self) -> dict[str, int]:
        """Pods per phase, in _PHASES order (other phases after), phases with no pod left out."""
        counts: dict[str, int] = {}
        for p in self.pods:
            counts[p.phase] = counts.get(p.phase, 0) + 1
        order = [ph for ph in _PHASES if ph in counts] + sorted(ph for ph in counts if ph not in _PHASES)
        return {ph: counts[ph] for ph in order}

    @property
    def vms(self) -> int:
        """TPU VMs (nodes) the slice's pods are placed on."""
        return len({p.node for p in self.pods if p.node})

    @property
    def restarts(self) -> int:
        """Container restarts summed over the slice's pods."""
        return sum(p.restarts for p in self.pods)

    @property
    def abnormal(self) -> tuple[PodStatus, ...]:
        return tuple(p for p in self.pods if abnormal(p))

    def summary(self) -> str:
        """One line for the whole slice, however many workers it has."""
        counts = ", ".join(f"{n} {ph}" for ph, n in self.phases.items()) or "no pods"
        n = len(self.pods)
        return (
            f"slice {self.index if self.index is not None else '?'}: {n} worker{'s' if n != 1 else ''} ({counts}), "
            f"on {self.vms} VM{'s' if self.vms != 1 else ''}, {self.restarts} restart{'s' if self.restarts != 1 else ''}"
        )


@dataclass(frozen=True)
class RunStatus:
    namespace: str
    run: str
    phase: RunPhase
    message: str
    expected_pods: int = 0
    restarts: int = 0  # JobSet-level restarts (failurePolicy), free ones included
    restarts_counted: int = 0  # the restarts that count toward maxRestarts
    max_restarts: int | None = None
    last_failure: str = ""  # why the run last restarted or failed, when the cluster says
    last_checkpoint: int | None = None  # the last checkpoint step the run's log shows, when known
    conditions: tuple[Condition, ...] = ()
    workload: WorkloadStatus | None = None
    slices: tuple[SliceStatus, ...] = ()

    @property
    def pods(self) -> tuple[PodStatus, ...]:
        return tuple(p for s in self.slices for p in s.pods)

    @property
    def running(self) -> int:
        return sum(s.running for s in self.slices)

    def progress(self) -> str:
        """One line for a live wait: the phase, the running pods once, and what it waits on."""
        if self.phase in (RunPhase.STARTING, RunPhase.RUNNING):
            return f"{self.phase.value}: {self.message}"  # the message starts with the pod count
        if not self.pods or self.phase is RunPhase.SUCCEEDED:
            return f"{self.phase.value}: {self.message}"
        return f"{self.phase.value}: {self.running}/{self.expected_pods or '?'} pods running — {self.message}"

    def to_dict(self) -> dict[str, Any]:
        def conv(v: Any) -> Any:
            if isinstance(v, Enum):
                return v.value
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [conv(x) for x in v]
            return v

        return conv(asdict(self))


def expected_pods(jobset: Mapping[str, Any]) -> int:
    """Pods of the whole run: a JobSet's replicated Jobs, or a plain Job's parallelism."""
    if jobset.get("kind") == "Job":
        spec = jobset.get("spec") or {}
        return int(spec.get("parallelism", spec.get("completions", 1)) or 1)
    if jobset.get("kind") == "RayJob":  # the TPU workers: replicas (slices) x hosts per replica
        groups = (((jobset.get("spec") or {}).get("rayClusterSpec") or {}).get("workerGroupSpecs")) or []
        return sum(int(g.get("replicas", 0) or 0) * int(g.get("numOfHosts", 1) or 1) for g in groups)
    total = 0
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") == "pathways-head":
            continue  # a Pathways run's slices are its workers (runkinds.PATHWAYS counts only them)
        job_spec = ((rj.get("template") or {}).get("spec")) or {}
        per_job = job_spec.get("parallelism", job_spec.get("completions", 1)) or 1
        total += int(rj.get("replicas", 1) or 1) * int(per_job)
    return total


def last_failure(jobset: Mapping[str, Any], events: list[Mapping[str, Any]] = ()) -> str:
    """Why the run last failed or restarted: the Failed condition, else the newest Warning event on the JobSet."""
    for c in (jobset.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and str(c.get("status")) == "True":
            return " ".join(f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".split()).rstrip(":")
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not warnings:
        return ""

    def when(e: Mapping[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")

    e = max(warnings, key=when)
    return " ".join(f"{e.get('reason') or 'Warning'}: {e.get('message') or ''}".split()).rstrip(":")


def run_status(
    namespace: str,
    run: str,
    jobset: Mapping[str, Any] | None,
    workload: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]],
    events: list[Mapping[str, Any]] = (),
) -> RunStatus:
    if jobset is None:
        return RunStatus(namespace, run, RunPhase.NOT_FOUND, f"no run {run!r} (JobSet, Job or RayJob) in namespace {namespace!r}")
    conds = _conditions(jobset)
    conditions = tuple(
        Condition(c.get("type", ""), str(c.get("status", "")), str(c.get("reason") or ""), " ".join(str(c.get("message") or "").split()))
        for c in ((jobset.get("status") or {}).get("conditions") or [])
    )
    wl = workload_status(workload) if workload else None
    pstats = sorted((pod_status(p) for p in pods), key=lambda p: (p.slice if p.slice is not None else 1 << 30, p.worker or 0, p.name))
    by_slice: dict[int | None, list[PodStatus]] = {}
    for p in pstats:
        by_slice.setdefault(p.slice, []).append(p)
    slices = tuple(SliceStatus(k, tuple(v)) for k, v in by_slice.items())
    want = expected_pods(jobset)
    running = sum(p.phase == "Running" for p in pstats)
    suspended = bool((jobset.get("spec") or {}).get("suspend"))

    ray = _ray_outcome(jobset) if jobset.get("kind") == "RayJob" else None
    done = "Complete" if jobset.get("kind") == "Job" else "Completed"  # a Job's condition vs a JobSet's
    if ray is not None:
        phase, msg = ray
    elif _true(conds, done):
        phase, msg = RunPhase.SUCCEEDED, (conds[done].get("message") or "all jobs completed")
    elif _true(conds, "Failed"):
        c = conds["Failed"]
        phase, msg = RunPhase.FAILED, f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".rstrip(": ")
    elif suspended and (wl is None or wl.state is not WorkloadState.ADMITTED):
        if wl is None:
            phase, msg = RunPhase.SUSPENDED, "suspended and no Kueue Workload exists (missing queue-name label, or Kueue is not running)"
        else:
            phase, msg = RunPhase.QUEUED, wl.describe()
    elif want and running >= want:
        phase, msg = RunPhase.RUNNING, f"{running}/{want} pods running"
    else:
        # The first worker that is stuck or failed (a finished or routinely starting one is not).
        stuck = next((p for p in pstats if p.phase != "Running" and p.detail and abnormal(p)), None)
        msg = f"{running}/{want} pods running"
        if stuck:
            msg += f"; {stuck.name}: {stuck.detail}"
        phase = RunPhase.STARTING
    status, spec = jobset.get("status") or {}, jobset.get("spec") or {}
    if jobset.get("kind") == "RayJob":
        if ray is None:
            msg = f"{msg}; {_ray_progress(jobset)}"
        # KubeRay retries a failed RayJob with a new RayCluster up to backoffLimit times.
        restarts = counted = int(status.get("failed") or 0) - (phase is RunPhase.FAILED)
        budget = spec.get("backoffLimit")
        failure = " ".join(f"{status.get('reason')}: {status.get('message') or ''}".split()).rstrip(":") if status.get("reason") else ""
    else:
        restarts, counted = int(status.get("restarts") or 0), int(status.get("restartsCountTowardsMax") or 0)
        budget = (spec.get("failurePolicy") or {}).get("maxRestarts")
        failure = last_failure(jobset, list(events))
    return RunStatus(
        namespace=namespace,
        run=run,
        phase=phase,
        message=" ".join(str(msg).split()),
        expected_pods=want,
        restarts=max(0, restarts),
        restarts_counted=max(0, counted),
        max_restarts=budget,
        last_failure=failure or last_failure(jobset, list(events)),
        conditions=conditions,
        workload=wl,
        slices=slices,
    )


# KubeRay v1.6.0 RayJob status (apis/ray/v1/rayjob_types.go): jobStatus is the Ray job's own
# state, jobDeploymentStatus the operator's (cluster up, job submitted, finished).
_RAY_FAILED_DEPLOYMENT = ("Failed", "ValidationFailed")
_RAY_FAILED_JOB = ("FAILED", "STOPPED")


def _ray_outcome(rayjob: Mapping[str, Any]) -> tuple[RunPhase, str] | None:
    """SUCCEEDED/FAILED once KubeRay says so; None while it is queued, starting or running."""
    status = rayjob.get("status") or {}
    job, deployment = status.get("jobStatus") or "", status.get("jobDeploymentStatus") or ""
    why = " ".join(str(status.get("message") or "").split())
    if job == "SUCCEEDED" and deployment not in _RAY_FAILED_DEPLOYMENT:
        return RunPhase.SUCCEEDED, f"Ray job SUCCEEDED ({deployment or 'finishing'})"
    if deployment in _RAY_FAILED_DEPLOYMENT or (job in _RAY_FAILED_JOB and deployment in ("Complete", "")):
        reason = status.get("reason") or deployment or job
        return RunPhase.FAILED, f"{reason}: Ray job {job or 'not submitted'}{' — ' + why if why else ''}"
    return None


def _ray_progress(rayjob: Mapping[str, Any]) -> str:
    status = rayjob.get("status") or {}
    return f"Ray job {status.get('jobStatus') or 'not submitted'} (deployment {status.get('jobDeploymentStatus') or 'New'})"
