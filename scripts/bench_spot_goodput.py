"""Goodput of a long spot run, rehearsed on a simulated clock: maxtext-6b on the default spec, preempted at random.

    python scripts/bench_spot_goodput.py [--hours 72] [--every 8] [--preemptions N ...] [--seed 1]
        [--restart-minutes 6] [--startup-minutes 3] [--checkpoint-every MIN] [--no-autocheckpoint] [-o json]

What runs: the real planner plans ``maxtext-6b`` on ``examples/default.yaml`` (its step-time
estimate, its checkpoint cadence for spot capacity, autocheckpoint) for as many steps as
``--hours`` of training take. The run is then played on a simulated clock by the rehearsal's
own model, the functions the rehearsal daemon plays a run with (``workloads.local.rehearsal``:
the step clock, ``MaxTextLog``'s lines, the period and autocheckpoint saves): each attempt is
one pod of worker 0 with a log of its own, as GKE keeps them in Cloud Logging. A preemption
falls at a uniformly random point of every ``--every`` simulated hours (or ``N`` of them at
random points over the run, for each ``--preemptions N``); the attempt stops there (saving
the step it reached when autocheckpoint is on), and the next starts ``--restart-minutes``
later (GKE recreating the spot slice's node pool, re-admission, pods scheduled and the
image pulled) and spends ``--startup-minutes`` (JAX initialisation, checkpoint restore,
XLA compile) before its first step, restoring the newest saved step.

The goodput and its breakdown are what ``metrics RUN`` computes from those per-pod logs
(``workloads.observe.goodput.from_attempt_logs``): productive, redone, restart, queueing
(0: a spot slice's re-admission is inside the restart time here), start-up (compile) and
other. Nothing is waited for: a 72-hour run takes seconds.

The restart and start-up minutes are assumptions, not measurements of GKE (no cloud account
here); they are flags so the figures can be redone with measured ones.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import DEFAULT_SPEC_PATH, load_spec  # noqa: E402
from workloads.local.cloudlogging import cri_fields  # noqa: E402
from workloads.local.rehearsal import MaxTextLog, Rehearsal, finish_time, saved_steps, step_end, steps_done_by  # noqa: E402
from workloads.observe import goodput  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402

HOUR = 3600.0


@dataclass(frozen=True)
class Played:
    logs: list[str]  # each pod's (attempt's) log, in order
    wall: float  # first start to the end of the last step
    preemptions: int
    period_steps: int | None
    step_seconds: float
    steps: int


def plan(hours: float, checkpoint_every: float | None, autocheckpoint: bool) -> Rehearsal:
    spec = load_spec(DEFAULT_SPEC_PATH)
    probe = plan_run("maxtext-6b", spec, Overrides(name="bench-spot"))
    step_s = probe.program.estimated_step_seconds
    steps = max(1, int(hours * HOUR / step_s))
    extra = {"checkpoint_every": checkpoint_every} if checkpoint_every is not None else {}
    p = plan_run("maxtext-6b", spec, Overrides(name="bench-spot", steps=steps, **extra))
    r = Rehearsal.of(p, wall_seconds=p.program.steps * p.program.estimated_step_seconds)  # time factor 1: a simulated hour is an hour
    return replace(r, autocheckpoint=autocheckpoint and r.autocheckpoint)


def _lines_text(lines: list[str]) -> str:
    # The pod log holds CRI records; Cloud Logging's entries hold the text, as the agent takes it apart.
    return "\n".join(cri_fields(line.rstrip("\n"), 0.0)[2] for line in lines)


def play(r: Rehearsal, preempt_at: list[float], restart_s: float, startup_s: float) -> Played:
    logs: list[str] = []
    t, first, saved, k, hits = 0.0, 0, None, 0, 0
    pending = sorted(preempt_at)
    while True:
        log = MaxTextLog(r, f"bench-spot-slice-0-0-{k:05d}", 0)
        lines = log.start(t)
        t0 = t + startup_s
        end = finish_time(r, t0, first)
        cut = next((p for p in pending if p >= t), None)
        if cut is not None and cut < end:
            pending.remove(cut)
            hits += 1
            if cut >= t0:
                lines += log.joined(t0, saved)
                done = steps_done_by(r, t0, first, cut)
                for step in range(first, done):
                    lines += log.step(step_end(r, t0, first, step), step, first)
                periodic = saved_steps(r, first, done)
                if periodic:
                    saved = periodic[-1]
                if r.autocheckpoint and done > first:
                    lines += log.preempted(cut, done - 1)
                    saved = done - 1
            logs.append(_lines_text(lines))
            t, k = cut + restart_s, k + 1
            first = 0 if saved is None else saved + 1
            continue
        lines += log.joined(t0, saved)
        for step in range(first, r.steps):
            lines += log.step(step_end(r, t0, first, step), step, first)
        final = log.final_save_step()
        if final is not None:
            lines += log.save(end, final)
        logs.append(_lines_text(lines))
        return Played(logs, end, hits, r.checkpoint_period, r.wall_step_seconds, r.steps)


def preemption_times(kind: str, n: int | None, hours: float, every: float, rng: random.Random) -> list[float]:
    """One at a random point of every ``every`` hours (over twice the run, as restarts stretch it), or ``n`` over the run."""
    if kind == "every":
        windows = int(2 * hours / every) + 1
        return [(w + rng.random()) * every * HOUR for w in range(windows)]
    return sorted(rng.random() * hours * HOUR for _ in range(n or 0))


def measure(r: Rehearsal, times: list[float], restart_s: float, startup_s: float) -> dict:
    played = play(r, times, restart_s, startup_s)
    g = goodput.from_attempt_logs(played.logs)
    d = g.to_dict()
    return {
        "preemptions": played.preemptions,
        "attempts": g.attempts,
        "hours": round(g.total / HOUR, 2),
        "goodput": d["goodput"],
        "breakdown_hours": {k: round(d[k] / HOUR, 3) for k in ("productive", "redone", "restarts", "queueing", "startup", "other")},
        "steps_redone": g.steps_redone,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=72.0, help="training time without preemptions (sets the steps)")
    ap.add_argument("--every", type=float, default=8.0, help="one preemption at a random point of every this many hours")
    ap.add_argument("--preemptions", type=int, nargs="*", default=[1, 4, 16], help="also: this many preemptions at random points")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="random draws per case (the median is printed)")
    ap.add_argument("--restart-minutes", type=float, default=6.0)
    ap.add_argument("--startup-minutes", type=float, default=3.0)
    ap.add_argument("--checkpoint-every", type=float, default=None, help="minutes (default: the planner's for spot)")
    ap.add_argument("--no-autocheckpoint", action="store_true")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    r = plan(a.hours, a.checkpoint_every, not a.no_autocheckpoint)
    restart_s, startup_s = a.restart_minutes * 60, a.startup_minutes * 60
    rng = random.Random(a.seed)
    cases = [("every", None, f"one every {a.every:g} h")] + [("n", n, f"{n} at random") for n in a.preemptions]
    rows = []
    for kind, n, label in cases:
        runs = sorted(
            (measure(r, preemption_times(kind, n, a.hours, a.every, rng), restart_s, startup_s) for _ in range(a.repeats)), key=lambda x: x["goodput"]
        )
        rows.append({"case": label, **runs[len(runs) // 2], "goodput_range": [runs[0]["goodput"], runs[-1]["goodput"]]})
    setup = {
        "recipe": "maxtext-6b",
        "spec": str(DEFAULT_SPEC_PATH.relative_to(REPO)),
        "steps": r.steps,
        "step_seconds": round(r.wall_step_seconds, 3),
        "checkpoint_period_steps": r.checkpoint_period,
        "checkpoint_period_minutes": round((r.checkpoint_period or 0) * r.wall_step_seconds / 60, 1),
        "autocheckpoint": r.autocheckpoint,
        "restart_minutes": a.restart_minutes,
        "startup_minutes": a.startup_minutes,
        "repeats": a.repeats,
    }
    if a.output == "json":
        print(json.dumps({"setup": setup, "cases": rows}, indent=2))
        return
    print(
        f"maxtext-6b on the default spec: {r.steps} steps x {setup['step_seconds']} s ({a.hours:g} h of training); checkpoint every "
        f"{r.checkpoint_period} steps ({setup['checkpoint_period_minutes']} min); autocheckpoint {'on' if r.autocheckpoint else 'off'}; "
        f"restart {a.restart_minutes:g} min + start-up {a.startup_minutes:g} min per attempt; median of {a.repeats}"
    )
    print(f"{'case':<20}{'preempt':>8}{'hours':>8}{'goodput':>9}{'range':>16}  productive / redone / restart / queueing / startup / other (h)")
    for row in rows:
        b = row["breakdown_hours"]
        lo, hi = row["goodput_range"]
        print(
            f"{row['case']:<20}{row['preemptions']:>8}{row['hours']:>8.1f}{row['goodput'] * 100:>8.2f}%{f'{lo * 100:.2f}-{hi * 100:.2f}%':>16}  "
            f"{b['productive']:.2f} / {b['redone']:.2f} / {b['restarts']:.2f} / {b['queueing']:.2f} / {b['startup']:.2f} / {b['other']:.2f}"
        )


if __name__ == "__main__":
    main()
