"""How long a MaxText run may go without a new step before its attempt is ended as hung. Pure.

    watch(step_s, checkpoint, multi_tier, hang_after_min) -> HangWatch | None

A hung run (a collective that never completes, a data read that never returns) keeps its
pods Running and every chip busy: nothing in Kubernetes sees it. The exit guard
(``workloads.render.exitguard``) watches the program's log for MaxText's ``completed step:``
line and, when none comes for the bound, ends the attempt with ``HANG_EXIT_CODE``, which
the JobSet restarts as any other failure that is neither a disruption nor a program error
(counted toward maxRestarts: a run that hangs every attempt still ends).

The bounds come from the plan, never a fixed number:

    between steps   compile + a synchronous save (when saves are not async) + STEPS_OF_SLACK steps
                    XLA compiles again between two steps (the first eval step, a new shape), so
                    no bound may be shorter than a compile: ``--hang-after`` below it is refused
    first step      the restore the run would read (a peer's RAM disk with multi-tier
                    checkpointing, else the bucket) + the bound between steps

Compile, restore and save times are ``infra.recovery``'s published figures; the step time is
the planner's estimate. Each is rounded up to a whole minute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra import recovery
from workloads.planning.errors import PlanError

HANG_EXIT_CODE = 124  # what timeout(1) exits with when its command timed out; not 1 or 2 (program errors)
STEPS_OF_SLACK = 10  # steps a slow step (a straggler, a slow read) may take before it is a hang
FLAG = "--hang-after"


@dataclass(frozen=True)
class HangWatch:
    """The exit guard's bounds, in seconds, and where they come from."""

    between_steps_s: int  # no new step for this long after a step: hung
    first_step_s: int  # no first step for this long after the program started: hung
    source: str  # "plan" (derived) or FLAG

    def env(self) -> dict[str, str]:
        """What the exit guard reads (``workloads.render.exitguard``)."""
        return {"TGK_HANG_AFTER_S": str(self.between_steps_s), "TGK_FIRST_STEP_WITHIN_S": str(self.first_step_s)}


def _minutes_up(seconds: float) -> int:
    return int(math.ceil(seconds / 60.0) * 60)


def compile_seconds() -> float:
    return recovery.COMPILE.seconds


def derived_between_s(step_s: float, *, async_save: bool = True) -> int:
    save = 0.0 if async_save else recovery.SAVE.seconds
    return _minutes_up(compile_seconds() + save + STEPS_OF_SLACK * step_s)


def watch(step_s: float, *, checkpointing: bool, async_save: bool = True, multi_tier: bool = False, hang_after_min: float | None = None) -> HangWatch | None:
    """The run's bounds (None when ``--hang-after 0`` turns the watch off); a PlanError for a bound below a compile."""
    restore = 0.0
    if checkpointing:
        restore = recovery.RESTORE["peer-ramdisk" if multi_tier else "bucket"].seconds
    derived = derived_between_s(step_s, async_save=async_save)
    if hang_after_min is None:
        between, source = derived, "plan"
    elif hang_after_min == 0:
        return None
    else:
        if hang_after_min * 60 < compile_seconds():
            raise PlanError(
                FLAG,
                f"{hang_after_min:g} min is shorter than an XLA compile ({compile_seconds() / 60:g} min), which can come between two steps",
                f"pass {FLAG} {math.ceil(compile_seconds() / 60)} or more, 0 to turn the watch off, or leave it out for the plan's {derived // 60} min",
            )
        between, source = int(math.ceil(hang_after_min * 60)), FLAG
    return HangWatch(between_steps_s=between, first_step_s=_minutes_up(restore + between), source=source)
