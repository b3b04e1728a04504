"""How long a slice takes to come (back), by capacity mode, and what each recovery path adds: the figures Kueue's
waitForPodsReady is derived from and held to, and that the goodput benchmark is built from.

Every figure says where it comes from (``Figure.source``) and what it is (``Figure.kind``):
``published`` (a page or a repository anyone can open, with its date), ``measured`` (by a
script of this repository, with the date it was run) or ``assumption`` (no published figure
was found; the reason for the value is in ``source``). Pure data and pure functions.

Kueue's waitForPodsReady has one ``timeout`` and one ``recoveryTimeout`` for the whole
cluster (config.kueue.x-k8s.io/v1beta2 ``WaitForPodsReady``), so the spec's defaults are the
largest that any of its pools needs:

  timeout          admission -> every pod Ready: the slowest capacity mode's slice provisioning
                   (autoscaled pools create their VMs only after admission) + a pod's start
  recoveryTimeout  a running run's pod lost -> every pod Ready again: the slowest mode's slice
                   re-provisioning (GKE recreates a multi-host slice whole) + what the restart
                   path itself takes + a pod's start

Neither covers a checkpoint restore: MaxText restores after its pods are Ready, inside the
program, so a slow restore (Cloud Storage) or a fast one (multi-tier checkpointing, a peer's
RAM disk) changes goodput, not the timeouts (``RESTORE`` is for the goodput benchmark).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from toolkit.names import CapacityMode

MINUTE = 60.0

# The JobSet restart strategies the toolkit renders (workloads/render/jobset.py), by the spec's names.
RECREATE = "recreate"
IN_PLACE = "in-place"
RESTART_PATHS = (RECREATE, IN_PLACE)


@dataclass(frozen=True)
class Figure:
    seconds: float
    kind: Literal["published", "measured", "assumption"]
    source: str  # where it comes from (a public page or a file here, and its date), or why this value

    @property
    def minutes(self) -> float:
        return self.seconds / MINUTE


# ------------------------------------------------------------------ a slice's VMs

_NO_PUBLISHED_SLICE_TIME = (
    "no published figure for the time GKE takes to create a multi-host TPU slice's VMs was found (searched 2026-11-27); "
    "the upper end of the 10-30 min usually quoted, which is also Kueue v0.19's own waitForPodsReady default of 30 min "
    "(github.com/kubernetes-sigs/kueue apis/config/v1beta2/defaults.go, v0.19.2, 2026-08-20)"
)

# Admission -> the slice's VMs Ready, for a pool that creates them after admission (autoscaled,
# or a slice lost and re-created). GKE treats a multi-host slice as one unit: it is created or
# recreated whole (docs.cloud.google.com/kubernetes-engine/docs/concepts/tpus).
SLICE_PROVISIONING: dict[str, Figure] = {
    CapacityMode.SPOT: Figure(30 * MINUTE, "assumption", _NO_PUBLISHED_SLICE_TIME),
    CapacityMode.ON_DEMAND: Figure(30 * MINUTE, "assumption", _NO_PUBLISHED_SLICE_TIME),
    # Queued provisioning admits a run only once GKE has the capacity; without it the autoscaler
    # waits for capacity like on-demand. Either way the VMs are then created as on-demand ones are.
    CapacityMode.FLEX_START: Figure(30 * MINUTE, "assumption", _NO_PUBLISHED_SLICE_TIME),
    # Reserved capacity cannot stock out: what is left is the VMs' own start. The closest published
    # figure is All Capacity mode's report-host-as-faulty replacement, 10-12 min
    # (docs.cloud.google.com/tpu/docs/all-capacity-report-faulty-hosts, read 2026-11-27).
    CapacityMode.RESERVATION: Figure(
        12 * MINUTE,
        "published",
        "a reserved host replaced: 10-12 min (docs.cloud.google.com/tpu/docs/all-capacity-report-faulty-hosts, read 2026-11-27)",
    ),
}

# Bound VMs -> a worker's container running: image pull on a fresh VM (a MaxText image is several
# GB) and the container's start. GKE's 65,000-node benchmark created and ran 50,000 training pods
# in under 2 minutes on warm nodes (cloud.google.com/blog, "65,000-node GKE", 2025-04); a fresh
# VM's pull comes on top.
POD_START = Figure(
    5 * MINUTE,
    "assumption",
    "under 2 min to create and run 50,000 pods on a 65,000-node GKE cluster (Google Cloud blog, 2025-04), "
    "plus a multi-GB image pull on fresh VMs: no published figure for the pull, 3 min assumed",
)

# Kubernetes' Job controller holds a failed pod's replacement back: 10 s, doubling with each failure
# in a row, at most 10 min (pkg/controller/job/job_controller.go DefaultJobPodFailureBackOff and
# MaxJobPodFailureBackOff, v1.34; hard-coded, no flag: the local control plane's controller waits
# as long as GKE's).
JOB_POD_FAILURE_BACKOFF_S = 10.0
JOB_POD_FAILURE_BACKOFF_MAX_S = 600.0

# What the restart path itself adds before the new pods can be Ready, beyond the lost slice's
# VMs (which every path waits for). Measured on the local control plane at its scale (a few
# pods); at 1,000+ nodes JobSet's KEP-467 says recreating every pod "can take several minutes
# per restart" (github.com/kubernetes-sigs/jobset keps/467-InPlaceRestart/README.md, v0.12.0, 2026-05-08).
RESTART_PATH: dict[str, Figure] = {
    RECREATE: Figure(
        3 * MINUTE,
        "published",
        "every pod deleted, recreated and scheduled again: 'several minutes per restart' at 1,000+ nodes "
        "(jobset keps/467-InPlaceRestart, v0.12.0, 2026-05-08); seconds at this repository's scale (scripts/bench_recovery.py)",
    ),
    # Healthy pods restart their containers in place (no cost here), but the lost slice's pods are
    # replaced by the Job controller after its pod-failure backoff (``job_replacement_backoff``).
    IN_PLACE: Figure(
        JOB_POD_FAILURE_BACKOFF_MAX_S,
        "published",
        "healthy pods restart their containers in place (jobset keps/467-InPlaceRestart, v0.12.0, 2026-05-08); the lost "
        "slice's pods are new only after the Job controller's pod-failure backoff, at most 10 min "
        "(github.com/kubernetes/kubernetes pkg/controller/job/job_controller.go MaxJobPodFailureBackOff, v1.34)",
    ),
}


def job_replacement_backoff(failures: int) -> float:
    """Seconds Kubernetes' Job controller waits before it replaces a failed pod, after ``failures`` failures in a row.

    What it counts (pkg/controller/job/backoff_utils.go, v1.34): with ``backoffLimitPerIndex`` the
    failures of the pod's own index (``getRemainingTimePerIndex``), else every pod of the Job that
    failed since one last succeeded. A pod failed by a disruption counts, though the podFailurePolicy
    ignores it for the Job's fate. A recreate run's Jobs are new at every restart; an in-place run
    keeps them, so its k-th loss of a slice waits ``job_replacement_backoff(k)`` per index
    (workloads/render/inplace.py sets ``backoffLimitPerIndex``; per Job it would be the slice's
    hosts times k failures: 80 s at the first loss of a 4-host slice, 10 min from the second).
    """
    if failures <= 0:
        return 0.0
    return min(JOB_POD_FAILURE_BACKOFF_S * 2 ** (failures - 1), JOB_POD_FAILURE_BACKOFF_MAX_S)


def provisioning(mode: str) -> Figure:
    return SLICE_PROVISIONING[CapacityMode(mode)]


def start_seconds(mode: str) -> float:
    """Admission -> every pod Ready, for a pool of ``mode`` whose VMs are created after admission."""
    return provisioning(mode).seconds + POD_START.seconds


def recovery_seconds(mode: str, path: str) -> float:
    """A slice of ``mode`` lost -> every pod of the run Ready again, restarting by ``path``."""
    return provisioning(mode).seconds + RESTART_PATH[path].seconds + POD_START.seconds


def whole_minutes(seconds: float) -> int:
    return math.ceil(seconds / MINUTE)


# ------------------------------------------------------------------ restore, compile (goodput benchmark)

# The checkpoint a restarted run resumes from, by where it is read.
RESTORE: dict[str, Figure] = {
    "peer-ramdisk": Figure(
        1 * MINUTE,
        "published",
        "multi-tier checkpointing restores 'in under a minute' across thousands of nodes "
        "(Google Cloud blog 'Using multi-tier checkpointing for large AI training jobs', 2025-06-17)",
    ),
    "bucket": Figure(
        30 * MINUTE,
        "published",
        "restoring from Cloud Storage takes 'up to 30 minutes' at large scale without multi-tier checkpointing "
        "(Google Cloud blog 'Using multi-tier checkpointing for large AI training jobs', 2025-06-17)",
    ),
}

# XLA compilation of the training step at every (re)start of the program.
COMPILE = Figure(
    2 * MINUTE,
    "published",
    "XLA compilation 'a couple of minutes', avoided only when the controller never exits "
    "(github.com/AI-Hypercomputer/maxtext pull 4043, elastic training, 2026-06-02)",
)

# How long a checkpoint takes to be complete in its storage after the step it holds (an async
# save: training goes on meanwhile). A preemption before that leaves it incomplete, and the run
# resumes from the one before.
SAVE = Figure(
    5 * MINUTE,
    "published",
    "multi-tier checkpointing's save 'scales sub-linearly to < 5 minutes' on a 35K-chip job "
    "(Google Cloud blog 'Using multi-tier checkpointing for large AI training jobs', 2025-06-17); used for every save",
)
