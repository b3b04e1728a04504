"""Resume, proven with real MaxText: `run-local --tiny` checkpoints by default, and a second
run with the same --name (with --resume when it asks for more steps) continues from the last
saved step (MaxText's own restore line),
after a clean stop and after the training process was SIGKILLed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import REPO, run_module
from workloads.maxtext import run_local as rl
from workloads.observe import metrics as m

RECIPE = "maxtext-6b"


def _run_local(out: Path, name: str, steps: int, *extra: str) -> dict:
    r = run_module("workloads", "run-local", RECIPE, "--tiny", "--steps", str(steps), "--name", name, "--out", str(out), "-o", "json", *extra, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return json.loads(r.stdout)["local_run"]


def _logged_steps(out: Path) -> tuple[list[int], list[int]]:
    log_steps = [s.step for s in m.load((out / "maxtext.log").read_text(), None).steps]
    file_steps = [s.step for s in m.load(None, (out / "metrics.jsonl").read_text()).steps]
    return log_steps, file_steps


def test_resume_after_a_clean_stop(maxtext_venv, tmp_path):
    out = tmp_path / "run"
    first = _run_local(out, "resume-clean", 6)
    log = (out / "maxtext.log").read_text()
    assert first["restored_step"] is None and "No existing checkpoints found, not restoring checkpoint." in log
    ckpt = Path(first["checkpoint_dir"])
    assert ckpt == (out / rl.CHECKPOINTS_NAME).resolve()  # the default: under --out
    # Period max(1, 6 // 3) = 2 and the last step on completion; retention keeps the plan's 3.
    assert rl.saved_steps(ckpt, "resume-clean") == [2, 4, 5]
    assert _logged_steps(out) == ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])

    second = _run_local(out, "resume-clean", 9, "--resume")  # more steps: another submission, resumed on purpose
    log = (out / "maxtext.log").read_text()
    assert "restoring from this run's directory step 5" in log  # MaxText's own line
    assert second["restored_step"] == 5 and second["restore_seconds"] is not None and second["restore_seconds"] >= 0
    assert _logged_steps(out) == ([6, 7, 8], [6, 7, 8])  # continued, not from 0
    assert rl.saved_steps(ckpt, "resume-clean")[-1] == 8
    print(f"\n[maxtext tier] resume: restored step 5 in {second['restore_seconds']} s; runs {first['seconds']} s + {second['seconds']} s")


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _trainer(pid: int) -> int | None:
    """The MaxText training process below ``pid`` (run-local's child)."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            cmdline = (Path("/proc") / str(p) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The trainer's python: a shell that runs it (the exit guard) carries its name in argv too.
        if b"python" in cmdline[0] and b"maxtext.trainers.pre_train.train" in cmdline:
            return p
        todo += _children(p)
    return None


def test_resume_after_sigkill_mid_training(maxtext_venv, tmp_path):
    out, ckpt, name, steps = tmp_path / "run", tmp_path / "ckpt", "resume-killed", 120
    argv = [
        sys.executable,
        "-m",
        "workloads",
        "run-local",
        RECIPE,
        "--tiny",
        "--steps",
        str(steps),
        "--name",
        name,
        "--out",
        str(out),
        "--checkpoint-dir",
        str(ckpt),
        "--set",
        "checkpoint_period=10",
        "-o",
        "json",
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("TGK_SPEC", None)
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not [s for s in rl.saved_steps(ckpt, name) if s >= 10]:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint after step 0 within 600 s"
            time.sleep(0.1)
        trainer = _trainer(proc.pid)
        assert trainer is not None
        os.kill(trainer, signal.SIGKILL)  # what a lost node does: no SIGTERM, no final save
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "exited -9" in stderr, stderr[-2000:]
    survived = rl.saved_steps(ckpt, name)
    assert 10 <= survived[-1] < steps - 1, survived  # killed mid-run, after a save

    resumed = _run_local(out, name, steps, "--checkpoint-dir", str(ckpt), "--set", "checkpoint_period=10")
    assert f"restoring from this run's directory step {survived[-1]}" in (out / "maxtext.log").read_text()
    assert resumed["restored_step"] == survived[-1]
    log_steps, file_steps = _logged_steps(out)
    assert log_steps == file_steps == list(range(survived[-1] + 1, steps))
    assert rl.saved_steps(ckpt, name)[-1] == steps - 1
