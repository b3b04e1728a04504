"""The top-level object of a run in each runtime, and how its pods are found. Pure data.

``status``, ``logs`` and ``delete`` take a run name only: ``Cluster.find_run`` tries
these kinds in ``LOOKUP_ORDER`` and takes the first that exists. The RayJob comes
before the Job because KubeRay's submitter Job (K8sJobMode) carries the RayJob's name.
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

    def pod_selector(self, run: str) -> str:
        return ",".join(t for t in (f"{self.run_label}={run}", self.pod_filter) if t)

    def worker_selector(self, run: str, slice_index: int, worker: int) -> str:
        terms = [self.pod_selector(run), f"{self.worker_label}={worker}"]
        if self.slice_label:
            terms.append(f"{self.slice_label}={slice_index}")
        return ",".join(terms)


JOBSET = RunKind("jobset", names.JOBSET_API, "JobSet", names.JOBSET_NAME_LABEL, names.JOBSET_JOB_INDEX_LABEL, names.K8S_COMPLETION_INDEX_LABEL)
JOB = RunKind("job", names.JOB_API, "Job", names.K8S_JOB_NAME_LABEL, None, names.K8S_COMPLETION_INDEX_LABEL)

LOOKUP_ORDER: tuple[RunKind, ...] = (JOBSET, JOB)
BY_RUNTIME = {k.runtime: k for k in LOOKUP_ORDER}
