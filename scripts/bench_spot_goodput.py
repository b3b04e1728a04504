"""Goodput of a long run disrupted every N hours, by recovery path, built from measured and published parts.

    python scripts/bench_spot_goodput.py [--hours 72] [--every 8] [--repeats 5] [--seed 1]
        [--measured bench-recovery.json] [--reprovision-minutes 30] [-o json]

What runs: the real planner plans each recipe on its spec for as many steps as ``--hours`` of
training take (its step-time estimate, its checkpoint cadence, multi-tier checkpointing where
the case uses it); the run is then played on a simulated clock by the rehearsal's own model
(``workloads.local.rehearsal``: the step clock, ``MaxTextLog``'s lines, the saves), one log per
attempt as Cloud Logging keeps them, and the goodput is what ``metrics RUN`` computes from
those logs (``workloads.observe.goodput.from_attempt_logs``). A disruption falls at a uniformly
random point of every ``--every`` hours; the median of ``--repeats`` draws is printed.

Each disruption costs, in order (every input named with its source in the output):

  restart       disruption -> every worker running again: the control plane's part, measured on
                the local control plane by scripts/bench_recovery.py for the case's restart path
                (MEASURED below, or ``--measured``); plus, when the case's slice comes back on new
                VMs, the slice's provisioning (``infra.recovery.SLICE_PROVISIONING``) and the pods'
                start on them (``infra.recovery.POD_START``)
  start-up      the restore (``infra.recovery.RESTORE``: a peer's RAM disk with multi-tier
                checkpointing, else the bucket) and the XLA compile (``infra.recovery.COMPILE``)
  redone work   the steps since the checkpoint the restore reads: multi-tier checkpointing's local
                saves (every ~5 min), else the bucket's saves (spot: every 15 min) or, for a spot run
                that restarts by recreating, the save MaxText makes at the preemption's SIGTERM

The cases (the same run, each on its own recovery path):

  in-place (VMs kept)      a failure that leaves the VMs (a crashed or hung worker, a host error
                           the VM survives): JobSet's in-place restart, multi-tier restore from RAM
  recreate + MTC (spare)   a slice lost and the run restarted at once on capacity that is there (a
                           spare slice of the pool: the spec holds slices + 1), multi-tier restore
                           from the surviving slice's RAM disk
  re-provisioned + GCS     a slice lost and made again (today's default path): Kueue's
                           recoveryTimeout is in force and longer, so the run waits; restore from
                           the bucket
  re-provisioned + MTC     the same, restoring from the surviving slice's RAM disk

For the re-provisioned cases the output also says what cadence of disruptions keeps 95%.

Events of a long run (``--events``, on by default), each played alone at a random point of the
run on today's default path (recreate, restore from the bucket), its cost in hours measured as
above, and multiplied by its rate over the run's hours (``EVENTS``: every rate with its source, or
said to be an assumption where nobody publishes one):

  upgrade       a node-pool upgrade drains the slice (SIGTERM: the save at the preemption), GKE
                recreates it on new VMs; none with a maintenance exclusion over the run
  maintenance   host maintenance stops a VM at its window (SIGTERM first), the slice rescheduled
                on other hosts
  bad host      a VM whose container fails at every start: ``--attempts`` failed attempts, the time
                until ``badhost --cordon`` is run, then the slice rebuilt elsewhere; no save (the
                program aborted)
  hang          steps stop; the exit guard ends the attempt after the plan's hang bound (without
                it: until someone looks, ``--unwatched-hang-hours``); no save (a hung collective
                cannot)
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

from infra import recovery  # noqa: E402
from infra.spec import DEFAULT_SPEC_PATH, EXAMPLES_DIR, load_spec  # noqa: E402
from workloads.local.cloudlogging import cri_fields  # noqa: E402
from workloads.local.rehearsal import MaxTextLog, Rehearsal, finish_time, saved_steps, step_end, steps_done_by  # noqa: E402
from workloads.observe import goodput  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402

HOUR = 3600.0
# The control plane's part of a restart, measured on the local control plane by
# scripts/bench_recovery.py (p50, time factor 0.03; 2026-11-27, load 15-22 on 2 shared cores; the
# samples and ranges are in docs/performance.md): disruption -> every worker of the next attempt
# running. "crash": a worker's program exits, its VM stays; "preempt": a slice preempted, its nodes
# back at once. In place after a preemption: measured again 2026-11-28, after the Job controller's
# replacement backoff was counted per index (docs/performance.md#recovery); no case here uses it.
MEASURED: dict[str, dict[str, float]] = {
    "recreate": {"crash": 7.87, "preempt": 12.22},
    "in-place": {"crash": 2.74, "preempt": 21.57},
}
MEASURED_SOURCE = "scripts/bench_recovery.py on the local control plane (p50 of 5; 2026-11-27, in place after a preemption 2026-11-28)"


@dataclass(frozen=True)
class Case:
    name: str
    path: str  # recovery.RECREATE | recovery.IN_PLACE
    disruption: str  # the measured disruption whose control-plane time applies ("crash" | "preempt")
    new_vms: bool  # the slice comes back on new VMs that must be provisioned (else: kept, or a spare)
    pull: bool  # its pods start on VMs that have not pulled the image
    multi_tier: bool  # restore from a peer's RAM disk (local saves every ~5 min), else from the bucket


CASES = (
    Case("in-place (VMs kept)", recovery.IN_PLACE, "crash", new_vms=False, pull=False, multi_tier=True),
    Case("recreate + MTC (spare)", recovery.RECREATE, "preempt", new_vms=False, pull=True, multi_tier=True),
    Case("re-provisioned + GCS", recovery.RECREATE, "preempt", new_vms=True, pull=True, multi_tier=False),
    Case("re-provisioned + MTC", recovery.RECREATE, "preempt", new_vms=True, pull=True, multi_tier=True),
)


@dataclass(frozen=True)
class Recipe:
    name: str
    spec: Path
    capacity_note: str


RECIPES = (
    Recipe("maxtext-6b", DEFAULT_SPEC_PATH, "the default spec: 2 spot v5e 4x4 slices"),
    Recipe("llama3-8b", EXAMPLES_DIR / "v6e-reservation.yaml", "v6e-reservation: 2 reserved v6e 4x4 slices with multi-tier checkpointing"),
)


@dataclass(frozen=True)
class Played:
    logs: list[str]
    preemptions: int


def plan(recipe: Recipe, hours: float, case: Case) -> Rehearsal:
    spec = load_spec(recipe.spec)
    probe = plan_run(recipe.name, spec, Overrides(name="bench-goodput"))
    step_s = probe.program.estimated_step_seconds
    steps = max(1, int(hours * HOUR / step_s))
    p = plan_run(recipe.name, spec, Overrides(name="bench-goodput", steps=steps))
    r = Rehearsal.of(p, wall_seconds=p.program.steps * p.program.estimated_step_seconds)  # time factor 1: a simulated hour is an hour
    if case.multi_tier:
        # The restore reads the newest local save (multi-tier checkpointing's RAM disks, every ~5 min).
        from workloads.planning.policy import MTC_LOCAL_MINUTES

        local = max(1, int(MTC_LOCAL_MINUTES * 60 / step_s))
        return replace(r, checkpoint_period=local, autocheckpoint=False, mtc_local_period=None, mtc_backup_period=None, save_seconds=0.0)
    # In place, the agent ends the program with SIGKILL: no save at the preemption.
    return replace(r, autocheckpoint=r.autocheckpoint and case.path == recovery.RECREATE, save_seconds=0.0)


def _lines_text(lines: list[str]) -> str:
    return "\n".join(cri_fields(line.rstrip("\n"), 0.0)[2] for line in lines)


def play(r: Rehearsal, preempt_at: list[float], restart_s: float, startup_s: float, first_startup_s: float) -> Played:
    logs: list[str] = []
    t, first, saved, k, hits = 0.0, 0, None, 0, 0
    pending = sorted(preempt_at)
    while True:
        log = MaxTextLog(r, f"bench-slice-0-0-{k:05d}", 0)
        lines = log.start(t)
        t0 = t + (startup_s if k else first_startup_s)
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
        return Played(logs, hits)


def preemption_times(hours: float, every: float, rng: random.Random) -> list[float]:
    """One at a random point of every ``every`` hours (over twice the run, as restarts stretch it)."""
    windows = int(2 * hours / every) + 1
    return [(w + rng.random()) * every * HOUR for w in range(windows)]


def costs(case: Case, measured: dict[str, dict[str, float]], reprovision_s: float) -> tuple[float, float, list[tuple[str, float, str]]]:
    """(restart s, start-up s after a restart, the inputs with their sources)."""
    inputs = [(f"control plane ({case.path}, {case.disruption})", measured[case.path][case.disruption], MEASURED_SOURCE)]
    if case.new_vms:
        inputs.append(("slice provisioning", reprovision_s, recovery.SLICE_PROVISIONING["spot"].source))
    if case.pull:
        inputs.append(("pods' start on fresh VMs", recovery.POD_START.seconds, recovery.POD_START.source))
    restart = sum(v for _, v, _ in inputs)
    restore = recovery.RESTORE["peer-ramdisk" if case.multi_tier else "bucket"]
    inputs += [
        (f"restore ({'peer RAM disk' if case.multi_tier else 'bucket'})", restore.seconds, restore.source),
        ("compile", recovery.COMPILE.seconds, recovery.COMPILE.source),
    ]
    return restart, restore.seconds + recovery.COMPILE.seconds, inputs


def measure(r: Rehearsal, hours: float, every: float, restart_s: float, startup_s: float, repeats: int, rng: random.Random) -> dict:
    runs = []
    for _ in range(repeats):
        played = play(r, preemption_times(hours, every, rng), restart_s, startup_s, recovery.COMPILE.seconds)
        g = goodput.from_attempt_logs(played.logs)
        d = g.to_dict()
        runs.append(
            {
                "preemptions": played.preemptions,
                "hours": round(g.total / HOUR, 2),
                "goodput": d["goodput"],
                "breakdown_hours": {k: round(d[k] / HOUR, 3) for k in ("productive", "redone", "restarts", "startup", "other")},
            }
        )
    runs.sort(key=lambda x: x["goodput"])
    return {**runs[len(runs) // 2], "goodput_range": [runs[0]["goodput"], runs[-1]["goodput"]]}


def cadence_for(target: float, row: dict) -> float | None:
    """The shortest interval between disruptions (hours) that keeps ``target``, from the case's own loss per disruption.

    Over an interval of ``every`` hours a disruption costs L hours (the median draw's non-productive
    time over its disruptions: restart, start-up, redone steps), so goodput is (every - L) / every,
    at least ``target`` from every = L / (1 - target) on.
    """
    b, n = row["breakdown_hours"], row["preemptions"]
    if not n:
        return None
    lost = (row["hours"] - b["productive"] - b["other"]) / n
    return round(lost / (1 - target), 1)


# ------------------------------------------------------------------ events of a long run

DAY = 24 * HOUR


@dataclass(frozen=True)
class Event:
    name: str
    per_hour: float  # expected events per hour of this run (the rate below, scaled to its chips or pools)
    rate_source: str
    restart_s: float  # the event -> the next attempt's start
    save: bool  # a SIGTERM first: MaxText saves the step it reached (autocheckpoint)
    stall_s: float = 0.0  # steps stop at the event; the attempt ends this much later (a hang)
    detail: str = ""


# Llama 3's 54-day pre-training snapshot: 419 unexpected interruptions on 16,384 GPUs, ~78% confirmed or
# suspected hardware (arXiv 2407.21783, "The Llama 3 Herd of Models", Table 5, 2024). No TPU figure is published.
HW_PER_ACCEL_HOUR = 419 * 0.78 / (54 * 24 * 16384)
HW_SOURCE = "Llama 3 paper (arXiv 2407.21783, Table 5): 419 unexpected interruptions in 54 days on 16,384 GPUs, ~78% hardware; per accelerator-hour, applied to TPU chips (no TPU figure published)"
UPGRADE_EVERY_DAYS = 28.0
UPGRADE_SOURCE = (
    "assumption: no published cadence of GKE node auto-upgrades; one node-pool upgrade per pool every 4 weeks "
    "(release channels roll new patch versions every few weeks), 0 with a maintenance exclusion over the run"
)
MAINTENANCE_EVERY_DAYS = 30.0
MAINTENANCE_SOURCE = (
    "assumption: no published rate of TPU host maintenance; one event per VM every 30 days (SCHEDULED ones come with 7 days' notice: "
    "docs.cloud.google.com/tpu/docs/view-maintenance-notifications); a slice is rescheduled 'as soon as possible', up to a few hours for large ones "
    "(docs.cloud.google.com/tpu/docs/manually-start-maintenance)"
)
HANG_EVERY_DAYS = 7.0
HANG_SOURCE = "assumption: no published rate of hung collectives or stuck reads; one per run-week"
OPERATOR_MINUTES = 15.0  # an alert on restarts/hour -> someone runs `badhost --cordon` (assumption)


def events(recipe: Recipe, hours: float, measured: dict[str, dict[str, float]], reprovision_s: float, unwatched_hang_h: float, attempts: int) -> list[Event]:
    """The four events with their rates (per hour of this run) and what each costs before the next attempt."""
    from workloads.planning.hang import derived_between_s

    spec = load_spec(recipe.spec)
    p = plan_run(recipe.name, spec, Overrides(name="bench-goodput"))
    chips, vms = p.target.devices, p.target.nodes
    pools = p.target.slices
    new_slice = reprovision_s + recovery.POD_START.seconds  # a slice made again on new VMs
    crash = measured[recovery.RECREATE]["crash"]  # the control plane's part, same VMs
    startup = recovery.RESTORE["bucket"].seconds + recovery.COMPILE.seconds
    bound = float(p.policy.hang.between_steps_s if p.policy.hang else derived_between_s(p.program.estimated_step_seconds or 1.0))
    return [
        Event("upgrade", pools / (UPGRADE_EVERY_DAYS * DAY) * HOUR, UPGRADE_SOURCE, measured[recovery.RECREATE]["preempt"] + new_slice, True),
        Event("maintenance", vms / (MAINTENANCE_EVERY_DAYS * DAY) * HOUR, MAINTENANCE_SOURCE, measured[recovery.RECREATE]["preempt"] + new_slice, True),
        Event(
            "bad host",
            chips * HW_PER_ACCEL_HOUR,
            HW_SOURCE,
            attempts * (crash + startup) + OPERATOR_MINUTES * 60 + crash + new_slice,
            False,
            detail=f"{attempts} failed attempts, {OPERATOR_MINUTES:g} min to badhost --cordon (assumption), the slice rebuilt on new VMs",
        ),
        Event(
            "hang (exit guard)", 1 / (HANG_EVERY_DAYS * DAY) * HOUR, HANG_SOURCE, crash, False, stall_s=bound, detail=f"the plan's bound: {bound / 60:g} min"
        ),
        Event(
            "hang (unwatched)",
            1 / (HANG_EVERY_DAYS * DAY) * HOUR,
            HANG_SOURCE,
            crash,
            False,
            stall_s=unwatched_hang_h * HOUR,
            detail=f"until someone looks: {unwatched_hang_h:g} h (assumption)",
        ),
    ]


def play_event(r: Rehearsal, at: float, e: Event, startup_s: float) -> list[str]:
    """Two attempts: the first ends at ``at`` as ``e`` ends it, the second restores and finishes (one log each)."""
    from workloads.render import exitguard

    logs: list[str] = []
    log = MaxTextLog(r, "bench-slice-0-0-00000", 0)
    lines = log.start(0.0)
    t0 = recovery.COMPILE.seconds
    lines += log.joined(t0, None)
    done = steps_done_by(r, t0, 0, at)
    for step in range(0, done):
        lines += log.step(step_end(r, t0, 0, step), step, 0)
    periodic = saved_steps(r, 0, done)
    saved = periodic[-1] if periodic else None
    end = at
    if e.stall_s:
        end = at + e.stall_s
        lines.append(log.line(end, "exitguard.sh:0", exitguard.HANG_LINE.format(seconds=int(e.stall_s)), "E"))
    elif e.save and r.autocheckpoint and done > 0:
        lines += log.preempted(at, done - 1)
        saved = done - 1
    logs.append(_lines_text(lines))
    t = end + e.restart_s
    first = 0 if saved is None else saved + 1
    log = MaxTextLog(r, "bench-slice-0-0-00001", 0)
    lines = log.start(t)
    t0 = t + startup_s
    lines += log.joined(t0, saved)
    for step in range(first, r.steps):
        lines += log.step(step_end(r, t0, first, step), step, first)
    logs.append(_lines_text(lines))
    return logs


def event_costs(
    recipe: Recipe,
    hours: float,
    measured: dict[str, dict[str, float]],
    reprovision_s: float,
    unwatched_hang_h: float,
    attempts: int,
    repeats: int,
    rng: random.Random,
) -> dict:
    case = next(c for c in CASES if c.name == "re-provisioned + GCS")
    r = plan(recipe, hours, case)
    startup = recovery.RESTORE["bucket"].seconds + recovery.COMPILE.seconds
    base = goodput.from_attempt_logs(play(r, [], 0.0, startup, recovery.COMPILE.seconds).logs)
    base_lost = base.total - base.productive
    rows = []
    total_lost = 0.0
    for e in events(recipe, hours, measured, reprovision_s, unwatched_hang_h, attempts):
        costs_h = []
        for _ in range(repeats):
            g = goodput.from_attempt_logs(play_event(r, rng.uniform(0.1, 0.9) * hours * HOUR, e, startup))
            costs_h.append((g.total - g.productive - base_lost) / HOUR)
        costs_h.sort()
        cost = costs_h[len(costs_h) // 2]
        expected = e.per_hour * hours
        if e.name != "hang (unwatched)":
            total_lost += expected * cost
        rows.append(
            {
                "event": e.name,
                "per_run": round(expected, 3),
                "cost_hours": round(cost, 3),
                "expected_loss_hours": round(expected * cost, 3),
                "goodput_with_it": round(base.productive / (base.total + expected * cost * HOUR), 4),
                "rate_source": e.rate_source,
                "detail": e.detail or f"{e.restart_s / 60:.1f} min to the next attempt, then {startup / 60:g} min restore + compile",
            }
        )
    return {
        "recipe": recipe.name,
        "case": case.name,
        "baseline_goodput": round(base.productive / base.total, 4),
        "goodput_with_all": round(base.productive / (base.total + total_lost * HOUR), 4),
        "events": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=72.0, help="training time without disruptions (sets the steps)")
    ap.add_argument("--every", type=float, default=8.0, help="one disruption at a random point of every this many hours")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="random draws per case (the median is printed)")
    ap.add_argument("--measured", type=Path, default=None, help="scripts/bench_recovery.py --output json, instead of MEASURED")
    ap.add_argument(
        "--reprovision-minutes", type=float, default=recovery.SLICE_PROVISIONING["spot"].minutes, help="a lost slice made again (default: infra.recovery's)"
    )
    ap.add_argument("--target", type=float, default=0.95, help="the goodput the re-provisioned cases are asked the cadence for")
    ap.add_argument("--no-events", action="store_true", help="leave out the events of a long run (upgrade, maintenance, bad host, hang)")
    ap.add_argument("--unwatched-hang-hours", type=float, default=4.0, help="how long a hang lasts without the exit guard's watch (assumption)")
    ap.add_argument("--attempts", type=int, default=2, help="failed attempts before badhost names the VM")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    measured, source = MEASURED, MEASURED_SOURCE
    if a.measured is not None:
        doc = json.loads(a.measured.read_text())
        measured = {p: {k: v["to_all_running_s"]["p50"] for k, v in kinds.items() if "to_all_running_s" in v} for p, kinds in doc["paths"].items()}
        source = f"{a.measured} (scripts/bench_recovery.py, {doc.get('measured')})"
    globals()["MEASURED_SOURCE"] = source
    reprovision_s = a.reprovision_minutes * 60
    out = []
    for recipe in RECIPES:
        rows = []
        for case in CASES:
            r = plan(recipe, a.hours, case)
            restart_s, startup_s, inputs = costs(case, measured, reprovision_s)
            row = {
                "case": case.name,
                "restart_path": case.path,
                "restart_minutes": round(restart_s / 60, 2),
                "startup_minutes": round(startup_s / 60, 2),
                "restore_point_every_steps": r.checkpoint_period,
                "autocheckpoint": r.autocheckpoint,
                **measure(r, a.hours, a.every, restart_s, startup_s, a.repeats, random.Random(a.seed)),
                "inputs": [{"what": w, "seconds": round(v, 2), "source": s} for w, v, s in inputs],
            }
            if case.new_vms:
                row["cadence_for_target_hours"] = cadence_for(a.target, row)
            rows.append(row)
        out.append({"recipe": recipe.name, "spec": str(recipe.spec.relative_to(REPO)), "capacity": recipe.capacity_note, "cases": rows})
    ev = (
        []
        if a.no_events
        else [event_costs(rec, a.hours, measured, reprovision_s, a.unwatched_hang_hours, a.attempts, a.repeats, random.Random(a.seed)) for rec in RECIPES[:1]]
    )
    if a.output == "json":
        print(json.dumps({"hours": a.hours, "every": a.every, "repeats": a.repeats, "recipes": out, "events": ev}, indent=2))
        return
    print(f"{a.hours:g} h of training, one disruption at a random point of every {a.every:g} h, median of {a.repeats} draws")
    for rec in out:
        print(f"\n{rec['recipe']} on {rec['spec']} ({rec['capacity']})")
        print(f"  {'case':<24}{'restart':>9}{'start-up':>10}{'goodput':>9}{'range':>16}  productive / redone / restarts / startup / other (h)")
        for row in rec["cases"]:
            b, (lo, hi) = row["breakdown_hours"], row["goodput_range"]
            print(
                f"  {row['case']:<24}{row['restart_minutes']:>7.1f}m{row['startup_minutes']:>8.1f}m{row['goodput'] * 100:>8.2f}%{f'{lo * 100:.2f}-{hi * 100:.2f}%':>16}  "
                f"{b['productive']:.2f} / {b['redone']:.2f} / {b['restarts']:.2f} / {b['startup']:.2f} / {b['other']:.2f}"
            )
            if "cadence_for_target_hours" in row:
                c = row["cadence_for_target_hours"]
                print(
                    f"  {'':<24}{a.target:.0%} takes one disruption every {c:g} h or fewer"
                    if c
                    else f"  {'':<24}{a.target:.0%} is not reached at any cadence up to 72 h"
                )
    print("\ninputs (seconds, source):")
    seen = set()
    for rec in out:
        for row in rec["cases"]:
            for i in row["inputs"]:
                key = (i["what"], i["seconds"])
                if key not in seen:
                    seen.add(key)
                    print(f"  {i['what']}: {i['seconds']:g} s — {i['source']}")

    for block in ev:
        print(f"\nevents of a {a.hours:g} h run: {block['recipe']}, {block['case']} (no events: goodput {block['baseline_goodput'] * 100:.2f}%)")
        print(f"  {'event':<20}{'per run':>9}{'cost/event':>12}{'expected loss':>15}{'goodput':>9}")
        for row in block["events"]:
            print(
                f"  {row['event']:<20}{row['per_run']:>9.3f}{row['cost_hours']:>10.2f} h{row['expected_loss_hours']:>13.3f} h{row['goodput_with_it'] * 100:>8.2f}%"
            )
        print(f"  all of them (the hang watched): goodput {block['goodput_with_all'] * 100:.2f}%")
        print("  rates and costs:")
        for row in block["events"]:
            print(f"    {row['event']}: {row['detail']}; rate — {row['rate_source']}")


if __name__ == "__main__":
    main()
