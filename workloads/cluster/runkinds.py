"""The top-level object of a run in each runtime, and how its pods are found. Pure data.

``status``, ``logs`` and ``delete`` take a run name only: ``Cluster.find_run`` tries
these kinds in ``LOOKUP_ORDER`` and takes the first that exists. The RayJob comes
before the Job because KubeRay's submitter Job (K8sJobMode) carries the RayJob's name.

A RayJob's TPU workers are found by the run label the renderer puts on every pod
template and KubeRay's ``ray.io/node-type=worker``; their slice and host are KubeRay's
multi-host indexing labels (v1.6.0, on by default). Its *driver* is the submitter Job's
pod: ``ray job submit`` follows the job, so that log has what the JaxTrainer's workers
print (MaxText's step lines); ``logs`` shows it unless a worker is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit import names


@dataclass(frozen=True)
class RunKind:
    runtime: str
    api_version: str
    kind: str
    run_label: str  # the pod label whose value is the run's name
    slice_label: str | None  # the pod label with the slice index (None: one slice)
    worker_label: str  # the pod label with the worker index within its slice
    pod_filter: str = ""  # more selector terms: only the TPU workers (Ray's head is not one)
    driver_filter: str = ""  # selector terms (after the run label) of the pod whose log is the run's own; "" = worker 0

    def pod_selector(self, run: str) -> str:
        return ",".join(t for t in (f"{self.run_label}={run}", self.pod_filter) if t)

    def driver_selector(self, run: str) -> str | None:
        return ",".join((f"{self.run_label}={run}", self.driver_filter.format(run=run))) if self.driver_filter else None

    def worker_selector(self, run: str, slice_index: int, worker: int) -> str:
        terms = [self.pod_selector(run), f"{self.worker_label}={worker}"]
        if self.slice_label:
            terms.append(f"{self.slice_label}={slice_index}")
        return ",".join(terms)


JOBSET = RunKind("jobset", names.JOBSET_API, "JobSet", names.JOBSET_NAME_LABEL, names.JOBSET_JOB_INDEX_LABEL, names.K8S_COMPLETION_INDEX_LABEL)
JOB = RunKind("job", names.JOB_API, "Job", names.K8S_JOB_NAME_LABEL, None, names.K8S_COMPLETION_INDEX_LABEL)

# KubeRay's: its slice and host are its multi-host indexing labels.
RAYJOB = RunKind(
    "ray",
    names.RAY_API,
    "RayJob",
    names.TGK_RUN_LABEL,
    names.RAY_REPLICA_INDEX_LABEL,
    names.RAY_HOST_INDEX_LABEL,
    pod_filter=f"{names.RAY_NODE_TYPE_LABEL}=worker",
    driver_filter=f"{names.K8S_JOB_NAME_LABEL}={{run}}",
)
RAY_HEAD_FILTER = f"{names.RAY_NODE_TYPE_LABEL}=head"

# A Pathways run is a JobSet too, labelled with its runtime: its program's log is the head's, and its
# slices are the worker replicated job's (workloads.render.pathways).
PATHWAYS_RUNTIME_LABEL = f"{names.TGK}/runtime"
PATHWAYS = RunKind(
    "pathways",
    names.JOBSET_API,
    "JobSet",
    names.JOBSET_NAME_LABEL,
    names.JOBSET_JOB_INDEX_LABEL,
    names.K8S_COMPLETION_INDEX_LABEL,
    pod_filter="jobset.sigs.k8s.io/replicatedjob-name=worker",
    driver_filter="jobset.sigs.k8s.io/replicatedjob-name=pathways-head",
)

LOOKUP_ORDER: tuple[RunKind, ...] = (JOBSET, RAYJOB, JOB)
BY_RUNTIME = {**{k.runtime: k for k in LOOKUP_ORDER}, PATHWAYS.runtime: PATHWAYS}


def refine(kind: RunKind, obj: dict) -> RunKind:
    """The run kind of a found object: a JobSet labelled as a Pathways run is one."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return PATHWAYS if kind is JOBSET and labels.get(PATHWAYS_RUNTIME_LABEL) == PATHWAYS.runtime else kind
