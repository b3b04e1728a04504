"""Goodput: how much of a run's wall time trained the model, and where the rest went.

Pure functions over a MaxText log (absl lines carry a time of day) and, when the run
was followed on a cluster, its timeline (JobSet created, Kueue admitted, finished).
A run read from Cloud Logging comes cut by pod, one attempt each
(``from_attempt_logs``); a log that spans several attempts in one text (a saved file
of them) is split into attempts where MaxText says it restored a checkpoint or where
the step count goes back.

The breakdown (seconds; they add up to the total):

- ``queueing``: JobSet created -> Kueue admitted (needs the timeline);
- ``startup``: each attempt's start -> its first completed step, less one steady step
  (process start, JAX init, checkpoint restore and XLA compile);
- ``restarts``: gaps between one attempt's last line and the next attempt's first
  (pods evicted, slices recreated, re-admission);
- ``redone``: steps computed again after a restore because the preempted attempt had
  gone past the last checkpoint;
- ``hang``: an attempt the exit guard ended as hung (``tgk-exit-guard: no new step for N
  s``, ``workloads.render.exitguard``): its last step (or start) -> the guard's line, the
  chips held while nothing trained;
- ``productive``: every other step's time, counted once;
- ``other``: what is left (e.g. the tail after the last step: final checkpoint save).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from workloads.observe.metrics import MAX_STEP, MIN_STEP_SECONDS, STEP_LIMITS, metric_number

MAX_STEP_SECONDS = STEP_LIMITS["seconds"]  # the limits metrics holds a step to

_ABSL_TIME = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,6}) ", re.ASCII)
_STEP = re.compile(r"completed step: (\d+), seconds: ([0-9.eE+-]+)", re.ASCII)
_RESTORE = re.compile(r"restoring from this run's directory step (\d+)", re.ASCII)
_HANG = re.compile(r"tgk-exit-guard: no new step for (\d+) s", re.ASCII)
_SAVE = re.compile(r"(?:Started an asynchronous checkpoint save for step|Saved a checkpoint at step|saved a checkpoint at step) (\d+)", re.ASCII)


def _step(text: str | None) -> int | None:
    """A step number in MaxText's range (an int32); None for any other text (an impossible line is not a step)."""
    return int(text) if text is not None and len(text) <= 10 and int(text) <= MAX_STEP else None


def _step_at(m: re.Match[str] | None, at: float) -> StepAt | None:
    """The step a line reports, if its numbers are possible (the limits ``metrics`` holds a step to)."""
    if m is None:
        return None
    step, seconds = _step(m.group(1)), metric_number(m.group(2))
    if step is None or seconds is None or not (math.isfinite(seconds) and (seconds == 0 or MIN_STEP_SECONDS <= seconds <= MAX_STEP_SECONDS)):
        return None
    return StepAt(step, at, seconds)


@dataclass(frozen=True)
class StepAt:
    step: int
    at: float  # seconds on the log's clock when the step was reported
    seconds: float  # the step's own time, as MaxText measured it


@dataclass(frozen=True)
class Attempt:
    """One run of the program, from its first log line to its last."""

    start: float
    end: float
    restored_step: int | None  # the checkpoint step it resumed from, if any
    steps: tuple[StepAt, ...]
    checkpoints: tuple[int, ...] = ()  # steps it saved (or started saving)
    hung_at: float | None = None  # when the exit guard ended it as hung

    @property
    def last_step(self) -> int | None:
        return self.steps[-1].step if self.steps else None


@dataclass(frozen=True)
class Timeline:
    """What the cluster says about a run (epoch seconds; None when unknown)."""

    created: float | None = None
    admitted: float | None = None
    finished: float | None = None
    restarts: int = 0
    restarts_counted: int = 0


@dataclass(frozen=True)
class Goodput:
    total: float
    productive: float
    queueing: float
    startup: float
    restarts: float
    redone: float
    other: float
    attempts: int
    steps_redone: int
    last_checkpoint: int | None = None
    hang: float = 0.0
    hangs: int = 0  # attempts ended as hung
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def goodput(self) -> float | None:
        return self.productive / self.total if self.total > 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: round(v, 3) if isinstance(v, float) else v for k, v in self.__dict__.items() if k != "notes"}
        out["goodput"] = None if self.goodput is None else round(self.goodput, 4)
        out["notes"] = list(self.notes)
        return out


def _clock(line: str, year: int) -> float | None:
    m = _ABSL_TIME.match(line)
    if not m:
        return None
    mo, d, h, mi, s, frac = m.groups()
    try:
        t = datetime(year, int(mo), int(d), int(h), int(mi), int(s))
    except ValueError:
        return None
    return t.timestamp() + int(frac.ljust(6, "0")) / 1e6


@dataclass(frozen=True)
class _Line:
    at: float
    step: StepAt | None
    restored: int | None
    saved: int | None
    hung: bool = False


def _lines(text: str, year: int) -> list[_Line]:
    out = []
    for line in text.splitlines():
        t = _clock(line, year)
        if t is None:
            continue
        restore, save = _RESTORE.search(line), _SAVE.search(line)
        hung = _HANG.search(line) is not None
        out.append(_Line(t, _step_at(_STEP.search(line), t), _step(restore.group(1) if restore else None), _step(save.group(1) if save else None), hung))
    return out


def _starts(lines: list[_Line]) -> list[int]:
    """Indexes where attempts begin.

    An attempt is known to have begun by the time MaxText restores a checkpoint or
    reports a step that is not past the last one; it began at the largest pause in
    the lines since the previous attempt's last step (a new process logs its start-up
    without pauses, while a restart is a pause).
    """
    starts = [0]
    last_at: int | None = None
    last_step: int | None = None
    for k, ln in enumerate(lines):
        boundary = ln.restored is not None or (ln.step is not None and last_step is not None and ln.step.step <= last_step)
        if boundary and last_at is not None:
            window = range(last_at + 1, k + 1)
            starts.append(max(window, key=lambda j: lines[j].at - lines[j - 1].at))
            last_at, last_step = None, None
        if ln.step is not None:
            last_at, last_step = k, ln.step.step
    return starts


def attempts(text: str, *, year: int = 2000) -> list[Attempt]:
    """The attempts in a log, in order. Lines without an absl time are ignored."""
    lines = _lines(text, year)
    if not lines:
        return []
    starts = _starts(lines)
    out = []
    for a, b in zip(starts, [*starts[1:], len(lines)], strict=True):
        chunk = lines[a:b]
        out.append(
            Attempt(
                start=chunk[0].at,
                end=chunk[-1].at,
                restored_step=next((ln.restored for ln in chunk if ln.restored is not None), None),
                steps=tuple(ln.step for ln in chunk if ln.step is not None),
                checkpoints=tuple(ln.saved for ln in chunk if ln.saved is not None),
                hung_at=next((ln.at for ln in chunk if ln.hung), None),
            )
        )
    return out


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


@dataclass
class _Tally:
    startup: float = 0.0
    restarts: float = 0.0
    redone: float = 0.0
    productive: float = 0.0
    other: float = 0.0
    hang: float = 0.0
    hangs: int = 0
    steps_redone: int = 0
    reached: int = -1  # highest step an earlier attempt completed


def _attempt(tally: _Tally, a: Attempt, first_steady_step: int) -> None:
    if a.hung_at is not None:
        # From the last step (or the start) to the guard's line: the chips were held, nothing trained.
        since = a.steps[-1].at if a.steps else a.start
        tally.hang += max(0.0, a.hung_at - since)
        tally.hangs += 1
        tally.other += max(0.0, a.end - a.hung_at)
        if not a.steps:
            return
        a = dataclasses.replace(a, end=since)
    if not a.steps:
        tally.startup += a.end - a.start  # started, never finished a step
        return
    # Wall time between reports: the interval that ends at a step's report is that step's.
    ats = [a.start, *(s.at for s in a.steps)]
    intervals = [ats[k + 1] - ats[k] for k in range(len(a.steps))]
    steady = _median(intervals[first_steady_step:]) or _median(intervals[1:]) or 0.0
    for k, s in enumerate(a.steps):
        secs = intervals[k]
        if k < first_steady_step:
            # Start-up, restore and every attempt's compile: the excess over a steady step.
            extra = max(0.0, secs - steady)
            tally.startup += extra
            secs -= extra
        if s.step <= tally.reached:
            tally.redone += secs
            tally.steps_redone += 1
        else:
            tally.productive += secs
    tally.other += a.end - a.steps[-1].at  # after the last step: final saves, shutdown
    tally.reached = max(tally.reached, a.steps[-1].step)


def breakdown(runs: list[Attempt], timeline: Timeline | None = None, *, first_steady_step: int = 2) -> Goodput:
    """Split the wall time of ``runs`` (and the queueing before them) into the buckets above."""
    timeline = timeline or Timeline()
    notes: list[str] = []
    if not runs:
        return Goodput(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, notes=("no timed log lines",))
    queueing = 0.0
    if timeline.created is not None and timeline.admitted is not None:
        queueing = max(0.0, timeline.admitted - timeline.created)
    else:
        notes.append("queueing unknown (no cluster timeline)")
    tally = _Tally()
    for i, a in enumerate(runs):
        if i:
            tally.restarts += max(0.0, a.start - runs[i - 1].end)
        _attempt(tally, a, first_steady_step)
    saves = [c for a in runs for c in a.checkpoints]
    return Goodput(
        total=runs[-1].end - runs[0].start + queueing,
        productive=tally.productive,
        queueing=queueing,
        startup=tally.startup,
        restarts=tally.restarts,
        redone=tally.redone,
        other=tally.other,
        attempts=len(runs),
        steps_redone=tally.steps_redone,
        last_checkpoint=max(saves) if saves else None,
        hang=tally.hang,
        hangs=tally.hangs,
        notes=tuple(notes),
    )


def last_checkpoint(text: str) -> int | None:
    """The highest checkpoint step a log says was saved (or started saving) or restored, else None.

    A restarted pod's log begins with its own attempt: until it saves, the step it restored
    is the newest checkpoint it knows of.
    """
    steps = [n for m in (*_SAVE.finditer(text), *_RESTORE.finditer(text)) if (n := _step(m.group(1))) is not None]
    return max(steps) if steps else None


def from_log(text: str, timeline: Timeline | None = None, *, first_steady_step: int = 2) -> Goodput:
    return breakdown(attempts(text), timeline, first_steady_step=first_steady_step)


def from_attempt_logs(texts: Iterable[str], timeline: Timeline | None = None, *, first_steady_step: int = 2) -> Goodput:
    """Goodput over logs already cut by attempt (one per pod, as Cloud Logging tells pods apart), in order.

    Each log is still split where MaxText itself restarted inside it; an attempt that never
    reached a step stays an attempt of its own (its time is start-up), which one joined log
    could not show.
    """
    return breakdown([a for text in texts for a in attempts(text)], timeline, first_steady_step=first_steady_step)
