"""Goodput from MaxText logs: attempts split at restores, every second in one bucket."""

from __future__ import annotations

import pytest

from workloads.observe import goodput as gp

REPO_LOG = "tests/data/maxtext/tiny_cpu.log"


def _line(t: float, msg: str) -> str:
    h, rem = divmod(t, 3600)
    m, s = divmod(rem, 60)
    return f"I1123 {int(h):02d}:{int(m):02d}:{s:09.6f} 1 train.py:1] {msg}"


def _attempt(start: float, first_step: int, last_step: int, *, init: float, compile_extra: float, step: float, restored: int | None):
    lines = [_line(start, "start")]
    if restored is not None:
        lines.append(_line(start + 1, f"restoring from this run's directory step {restored}"))
    t = start + init
    for k, n in enumerate(range(first_step, last_step + 1)):
        secs = step + (compile_extra if k == 0 else 0.0)
        t += secs
        lines.append(_line(t, f"completed step: {n}, seconds: {secs:.3f}, TFLOP/s/device: 1.0, Tokens/s/device: 10.0, loss: 5.0"))
        if n % 10 == 0:
            lines.append(_line(t, f"Started an asynchronous checkpoint save for step {n}"))
    return lines, t


def test_single_attempt_buckets_add_up() -> None:
    lines, end = _attempt(0.0, 0, 19, init=5.0, compile_extra=30.0, step=1.0, restored=None)
    g = gp.from_log("\n".join(lines))
    assert g.attempts == 1 and g.steps_redone == 0 and g.last_checkpoint == 10
    assert g.startup == pytest.approx(5.0 + 30.0)
    assert g.productive == pytest.approx(20.0)
    assert g.total == pytest.approx(end) and g.queueing == 0.0 and "queueing unknown" in g.notes[0]
    assert g.productive + g.startup + g.restarts + g.redone + g.other == pytest.approx(g.total)


def test_preempted_attempt_redoes_steps_past_the_checkpoint() -> None:
    # Attempt 1 reaches step 25 (checkpoint at 20), is preempted; attempt 2 restores 20 after a 60 s gap.
    a1, end1 = _attempt(0.0, 0, 25, init=5.0, compile_extra=30.0, step=1.0, restored=None)
    a2, end2 = _attempt(end1 + 60.0, 21, 40, init=8.0, compile_extra=30.0, step=1.0, restored=20)
    timeline = gp.Timeline(created=-12.0, admitted=0.0)
    g = gp.from_log("\n".join(a1 + a2), timeline)
    assert g.attempts == 2
    assert g.steps_redone == 5  # steps 21-25 ran twice
    assert g.redone == pytest.approx(5.0)
    assert g.restarts == pytest.approx(60.0)
    assert g.queueing == pytest.approx(12.0)
    assert g.startup == pytest.approx(5.0 + 30.0 + 8.0 + 30.0)
    assert g.productive == pytest.approx(26.0 + 15.0)  # steps 0-25 once, 26-40 once
    assert g.productive + g.startup + g.restarts + g.redone + g.queueing + g.other == pytest.approx(g.total)
    assert 0 < g.goodput < 1 and g.last_checkpoint == 40


def test_step_going_back_without_a_restore_line_is_a_new_attempt() -> None:
    a1, end1 = _attempt(0.0, 0, 9, init=1.0, compile_extra=2.0, step=1.0, restored=None)
    a2, _ = _attempt(end1 + 5.0, 0, 9, init=1.0, compile_extra=2.0, step=1.0, restored=None)
    g = gp.from_log("\n".join(a1 + a2))
    assert g.attempts == 2 and g.steps_redone == 10


def test_real_tiny_run_log() -> None:
    text = open(REPO_LOG).read()
    g = gp.from_log(text)
    assert g.attempts == 1 and g.steps_redone == 0
    assert g.productive > 0 and g.startup > g.productive  # a tiny CPU run is mostly start-up and compile
    assert g.productive + g.startup + g.other == pytest.approx(g.total)


def test_no_timed_lines() -> None:
    g = gp.from_log("completed step: 1, seconds: 1.0\n")
    assert g.attempts == 0 and g.goodput is None


def test_metrics_and_report_show_goodput(tmp_path) -> None:
    import json

    from tests.support import cli

    a1, end1 = _attempt(0.0, 0, 25, init=5.0, compile_extra=30.0, step=1.0, restored=None)
    a2, _ = _attempt(end1 + 60.0, 21, 40, init=8.0, compile_extra=30.0, step=1.0, restored=20)
    log = tmp_path / "run.log"
    log.write_text("\n".join(a1 + a2) + "\n")
    r = cli("workloads", "metrics", str(log), "-o", "json")
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)["goodput"]
    assert (g["attempts"], g["steps_redone"], g["restarts"]) == (2, 5, 60.0)
    r = cli("workloads", "report", str(log), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Goodput" in md and "| steps redone after a restore | 5.0 |" in md
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["goodput"]["steps_redone"] == 5


def test_a_restarted_pods_log_knows_the_checkpoint_it_restored() -> None:
    text = "I1124 10:00:00.000000 1 checkpointing.py:705] restoring from this run's directory step 40\nI1124 10:00:05.000000 1 m.py:1] completed step: 41, seconds: 1.0\n"
    assert gp.last_checkpoint(text) == 40
    assert gp.last_checkpoint(text + "I1124 10:00:06.000000 1 checkpointing.py:596] Started an asynchronous checkpoint save for step 50\n") == 50
    assert gp.last_checkpoint("completed step: 1, seconds: 1.0\n") is None


def test_an_attempt_the_exit_guard_ended_as_hung_is_its_own_badput() -> None:
    """Steps, then silence until the guard's line: that silence is ``hang``, not productive time, start-up or other."""
    from workloads.observe import goodput as gp

    def at(s: float) -> str:
        return f"I0101 00:{int(s) // 60:02d}:{int(s) % 60:02d}.000000 1 x.py:1]"

    first = [f"{at(0)} start"] + [f"{at(10 + 2 * k)} completed step: {k}, seconds: 2.0" for k in range(5)]
    first.append("E0101 00:01:38.000000 0 exitguard.sh:0] tgk-exit-guard: no new step for 80 s; ending the attempt with exit 124 to have it restarted")
    first.append("E0101 00:01:39.000000 0 exitguard.sh:0] tgk-exit-guard: exit 124 on node vm-1")
    second = [f"{at(200)} restoring from this run's directory step 3"] + [f"{at(210 + 2 * k)} completed step: {k}, seconds: 2.0" for k in range(4, 8)]
    g = gp.from_attempt_logs(["\n".join(first), "\n".join(second)])
    assert g.hangs == 1
    assert g.hang == pytest.approx(98 - 18)  # the last step at 0:18 -> the guard's line at 1:38
    assert g.other == pytest.approx(1.0)  # the guard's line -> its exit line
    parts = g.productive + g.queueing + g.startup + g.restarts + g.redone + g.other + g.hang
    assert parts == pytest.approx(g.total)
    assert g.to_dict()["hang"] == pytest.approx(80.0) and g.to_dict()["hangs"] == 1
