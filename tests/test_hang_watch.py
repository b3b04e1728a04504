"""The hang watch: the exit guard's watchdog against real processes (stopped, silent, stepping), and its bounds from the plan."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime

import pytest

from infra import recovery
from infra.spec import load_spec
from tests.support import EXAMPLES
from workloads.planning import hang
from workloads.planning.errors import PlanError
from workloads.planning.planner import Overrides, plan_run
from workloads.render import exitguard, jobset

# A stand-in for MaxText's absl logging: step lines on stderr, then what argv[2] asks.
STEPS_THEN = """
import os, signal, sys, time
for i in range(int(sys.argv[1])):
    print(f"I1127 20:00:00.000000 1 metric_logger.py:1] completed step: {i}, seconds: 0.2", file=sys.stderr, flush=True)
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.3)
print("stdout stays stdout", flush=True)
if sys.argv[2] == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
elif sys.argv[2] == "silent":
    time.sleep(600)
elif sys.argv[2] == "traceback":
    for n in range(2000):
        print(f"traceback line {n}", file=sys.stderr)
    sys.exit(3)
"""


def _run(*argv: str, after: int = 3, first: int | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    command, args = exitguard.wrap([sys.executable], ["-c", STEPS_THEN, *argv])
    env = dict(os.environ, TGK_HANG_AFTER_S=str(after), TGK_HANG_GRACE_S="2", TGK_NODE_NAME="vm-7")
    if first is not None:
        env["TGK_FIRST_STEP_WITHIN_S"] = str(first)
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_stopped_program_is_ended_as_hung_with_the_restartable_code() -> None:
    res = _run("3", "stop")
    assert res.returncode == exitguard.HANG_EXIT_CODE == hang.HANG_EXIT_CODE
    assert res.stdout == "stdout stays stdout\n"
    assert [ln for ln in res.stderr.splitlines() if "completed step" in ln] == [
        f"I1127 20:00:00.000000 1 metric_logger.py:1] completed step: {i}, seconds: 0.2" for i in range(3)
    ]
    assert "tgk-exit-guard: no new step for 3 s" in res.stderr
    assert res.stderr.rstrip().endswith("tgk-exit-guard: exit 124 on node vm-7")


def test_no_first_step_within_its_own_bound_is_a_hang() -> None:
    res = _run("0", "silent", after=60, first=2)
    assert res.returncode == 124
    assert "no new step for 2 s" in res.stderr


def test_a_program_that_keeps_stepping_is_never_ended_however_long_it_runs() -> None:
    # Twelve steps a second apart take well over the 3 s bound in all: only the gap between steps counts.
    res = _run("12", "done", "1.0", after=3)
    assert res.returncode == 0, res.stderr
    assert "tgk-exit-guard" not in res.stderr
    assert res.stderr.count("completed step") == 12


def test_the_last_lines_of_a_failing_program_reach_stderr_before_the_guard_exits() -> None:
    res = _run("1", "traceback")
    assert res.returncode == 3
    lines = res.stderr.splitlines()
    assert [ln for ln in lines if ln.startswith("traceback line")] == [f"traceback line {n}" for n in range(2000)]
    assert lines[-1].endswith("tgk-exit-guard: exit 3 on node vm-7")


def test_bounds_come_from_the_plan() -> None:
    w = hang.watch(12.0, checkpointing=True)
    assert w is not None and w.source == "plan"
    # compile + 10 steps, to the minute above; the first step also waits for a restore from the bucket
    assert w.between_steps_s == 60 * -(-(recovery.COMPILE.seconds + 10 * 12.0) // 60)
    assert w.first_step_s == w.between_steps_s + recovery.RESTORE["bucket"].seconds
    peer = hang.watch(12.0, checkpointing=True, multi_tier=True)
    assert peer is not None and peer.first_step_s == peer.between_steps_s + recovery.RESTORE["peer-ramdisk"].seconds
    # a synchronous save stalls the steps: it is in the bound
    sync = hang.watch(12.0, checkpointing=True, async_save=False)
    assert sync is not None and sync.between_steps_s > w.between_steps_s
    slow = hang.watch(120.0, checkpointing=False)
    assert slow is not None and slow.between_steps_s >= 10 * 120 and slow.first_step_s == slow.between_steps_s


def test_a_bound_below_a_compile_is_refused_and_zero_turns_the_watch_off() -> None:
    with pytest.raises(PlanError) as e:
        hang.watch(1.0, checkpointing=True, hang_after_min=1)
    assert e.value.exit_code == 2 and "--hang-after" in str(e.value) and "compile" in str(e.value)
    assert hang.watch(1.0, checkpointing=True, hang_after_min=0) is None
    given = hang.watch(1.0, checkpointing=True, hang_after_min=7.5)
    assert given is not None and given.between_steps_s == 450 and given.source == "--hang-after"


def _plan(recipe: str = "maxtext-6b", **o: object):
    return plan_run(recipe, load_spec(EXAMPLES / "default.yaml"), Overrides(**o), now=datetime(2026, 3, 4, 5, 6), rand="abc")


def test_the_rendered_pod_carries_the_plans_bounds_and_its_node() -> None:
    plan = _plan()
    env = {e["name"]: e for e in jobset.container(plan)["env"]}
    assert env[exitguard.NODE_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert plan.policy.hang is not None
    assert env["TGK_HANG_AFTER_S"]["value"] == str(plan.policy.hang.between_steps_s)
    assert env["TGK_FIRST_STEP_WITHIN_S"]["value"] == str(plan.policy.hang.first_step_s)


def test_the_planner_refuses_a_bound_below_a_compile_and_a_watch_a_plain_command_cannot_have() -> None:
    with pytest.raises(PlanError, match="--hang-after"):
        _plan(hang_after=1.0)
    with pytest.raises(PlanError, match="plain command"):
        _plan("hello-tpu", hang_after=5.0)
    assert _plan(hang_after=0.0).policy.hang is None
    assert _plan("hello-tpu").policy.hang is None


def test_render_refuses_a_short_hang_bound_in_one_line_exit_2(tmp_path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "workloads",
            "render",
            "maxtext-6b",
            "--spec",
            str(EXAMPLES / "default.yaml"),
            "--hang-after",
            "1",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "--hang-after" in res.stderr
    assert not (tmp_path / "out").exists()
