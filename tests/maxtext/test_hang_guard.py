"""The exit guard's hang watch against real MaxText: the tiny CPU run, as run-local starts it, under the guard the
pods run it under; stopped with SIGSTOP mid-training (a process that is there and does nothing, as a hung
collective leaves it), it is ended with 124 once no step came for the bound, every step line passed through."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from infra.spec import load_spec
from tests.maxtext.test_resume import _trainer
from tests.support import EXAMPLES
from workloads.maxtext import run_local as rl
from workloads.planning.planner import Overrides, plan_run
from workloads.render import exitguard

STEP = re.compile(r"completed step: ([0-9]+),")


def test_a_stopped_maxtext_is_ended_by_the_guard_with_124(maxtext_venv, tmp_path: Path) -> None:
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(steps=400, name="hang-guard", sets=("enable_checkpointing=false",)))
    workdir = Path(tempfile.mkdtemp(prefix="tgk-hang-", dir=tmp_path))
    argv, env = rl.command(plan, maxtext_venv, workdir, tmp_path, None, metrics_path=workdir / "metrics.jsonl")
    command, args = exitguard.wrap(argv[:1], argv[1:])
    # The first step waits for JAX's start and the compile on a loaded CPU; then a step is a second or so.
    env = {**env, "TGK_FIRST_STEP_WITHIN_S": "900", "TGK_HANG_AFTER_S": "30", "TGK_HANG_GRACE_S": "5", "TGK_NODE_NAME": "cpu-vm"}
    err = tmp_path / "stderr.log"
    with open(err, "w") as f:
        proc = subprocess.Popen([*command, *args], cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=f)
    try:
        deadline = time.monotonic() + 900
        while len(STEP.findall(err.read_text(errors="replace"))) < 5:
            assert proc.poll() is None, err.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no fifth step within 900 s"
            time.sleep(0.2)
        trainer = _trainer(proc.pid)
        assert trainer is not None
        os.kill(trainer, signal.SIGSTOP)
        stopped_at = len(STEP.findall(err.read_text(errors="replace")))
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.read_text(errors="replace")
    assert rc == exitguard.HANG_EXIT_CODE, text[-3000:]
    steps = [int(s) for s in STEP.findall(text)]
    assert steps == list(range(len(steps))) and len(steps) >= stopped_at and steps[-1] < 399  # every line MaxText wrote got through
    assert "tgk-exit-guard: no new step for 30 s" in text
    assert text.rstrip().endswith("tgk-exit-guard: exit 124 on node cpu-vm")
    assert not Path(f"/proc/{trainer}").exists() or "Z" in Path(f"/proc/{trainer}/stat").read_text().split()[2]
