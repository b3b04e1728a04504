"""What a run gets when the user does not say: the policy defaults, by capacity mode where they differ.

Plain data (importing only ``toolkit.names`` for the capacity modes), so the planner applies these and the CLI's help quotes them
(``workloads.planning.overrides``) from the same objects without loading the run model.
``workloads.planning.model`` re-exports them as part of the model.
"""

from __future__ import annotations

from toolkit.names import CapacityMode

# Exit codes that mean "the program itself is wrong": rerunning it cannot help
# (Python exits 1 on an uncaught exception, 2 on a usage error). A recipe may add more.
PROGRAM_ERROR_EXIT_CODES = (1, 2)
DEFAULT_TTL_SECONDS = 3 * 24 * 3600  # finished runs stay inspectable (logs, status) for 3 days

# Restarts allowed for failures that are neither a disruption (free) nor a program
# error (fatal): signal deaths, OOM kills, a peer lost mid-collective. Spot and
# flex-start slices vanish often enough that such knock-on failures are expected (a
# peer slice can crash before the preempted one is reported); on on-demand and
# reserved capacity one retry covers a transient crash without looping on a
# deterministic one.
DEFAULT_MAX_RESTARTS: dict[str, int] = {CapacityMode.SPOT: 3, CapacityMode.FLEX_START: 3, CapacityMode.ON_DEMAND: 1, CapacityMode.RESERVATION: 1}

# Restarts allowed to a run that restarts in place (JobSet's InPlaceRestart). JobSet v0.12 counts
# every in-place restart, disruptions included, against maxRestarts (and fails the run when one
# container has restarted more often), so the budget must cover the preemptions a run expects:
# a week of spot capacity preempted every 2 h is ~84.
DEFAULT_IN_PLACE_MAX_RESTARTS: dict[str, int] = {
    CapacityMode.SPOT: 200,
    CapacityMode.FLEX_START: 200,
    CapacityMode.ON_DEMAND: 20,
    CapacityMode.RESERVATION: 20,
}

# Minutes between checkpoints by capacity mode: spot can be reclaimed at any time with
# ~30 s notice; flex-start slices end at their max run duration; on-demand and reserved
# slices lose work only to maintenance, for which Google advises about hourly.
DEFAULT_CHECKPOINT_MINUTES: dict[str, float] = {CapacityMode.SPOT: 15, CapacityMode.FLEX_START: 30, CapacityMode.ON_DEMAND: 60, CapacityMode.RESERVATION: 60}
DEFAULT_CHECKPOINTS_KEPT = 3  # the latest few steps; older ones are deleted as new ones land
AUTOCHECKPOINT_CAPACITY = frozenset({CapacityMode.SPOT})  # MaxText saves at the preemption step (SIGTERM)

SUBMIT_TIMEOUT_S = 600.0  # how long `submit` waits for Kueue admission
MAX_REHEARSAL_S = 24 * 3600.0  # a rehearsal on the local cluster (--rehearse-seconds) plays at most a day
MAX_WAIT_S = 7 * 24 * 3600.0  # the longest a command waits (--timeout): a week; longer is a job for a scheduler, not a terminal

# The largest int32: the type of the Kubernetes fields a run's counts become (JobSet
# replicas and failurePolicy.maxRestarts, RayJob backoffLimit, ttlSecondsAfterFinished)
# and of MaxText's step counter (the train state's step), so of every step figure.
INT32_MAX = 2**31 - 1
MAX_CHECKPOINT_MINUTES = 365 * 24 * 60.0  # a year between checkpoints is already none

# Steps skipped before the profiler starts: past compilation (steps 0-1) and the first
# steady steps, so the trace shows the steady state.
DEFAULT_PROFILE_START = 5


def by_capacity(defaults: dict) -> str:
    """``{"spot": 3, "flex-start": 3, "on-demand": 1}`` as ``spot/flex-start 3, on-demand 1`` (modes with one value together)."""
    groups: dict[object, list[str]] = {}
    for mode, value in defaults.items():
        groups.setdefault(value, []).append(str(getattr(mode, "value", mode)))
    return ", ".join(f"{'/'.join(modes)} {value:g}" for value, modes in groups.items())
