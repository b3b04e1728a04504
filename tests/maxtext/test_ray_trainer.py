"""The JaxTrainer entrypoint for real: Ray 2.54 from PyPI, Ray Train's JaxTrainer, MaxText 0.2.5, on CPU.

What a ``--runtime ray`` RayJob runs on its head (workloads/ray/jax_trainer.py), started
with the Ray venv (scripts/setup-ray.sh: Ray layered over the MaxText venv) and the
llama3-8b recipe's MaxText command line as ``run-local --tiny`` shrinks it. It proves
the Ray/JAX/MaxText wiring: a private local Ray, a Train V2 controller, a
RayTrainWorker actor whose ``train_loop_per_worker`` imports MaxText and runs its
``main`` with the recipe's arguments, steps with a falling-or-finite loss in the
metrics file, and the entrypoint's exit code and summary line.

Only a TPU exercises: ``use_tpu=True`` (the slice reservation through the TPU head
resource and the ``ray.io/tpu-slice-name`` labels, one worker per TPU VM), Ray's
``jax.distributed.initialize`` across workers and the multislice coordinator variables,
and MaxText on libtpu. A failing fixture fails the tier: a missing Ray is never a pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, REPO
from workloads.maxtext import env as maxtext_env
from workloads.maxtext import run_local as rl
from workloads.observe import metrics as m
from workloads.planning.planner import Overrides, plan_run
from workloads.ray import RAY_VERSION

STEPS = 5


@pytest.fixture(scope="session")
def ray_venv(maxtext_venv) -> Path:
    start = time.monotonic()
    done = subprocess.run(["bash", str(REPO / "scripts" / "setup-ray.sh")], capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        pytest.fail(f"the Ray venv could not be built: {done.stderr.strip().splitlines()[-1:]}", pytrace=False)
    venv = Path(done.stdout.strip().splitlines()[-1])
    print(f"\n[maxtext tier] Ray venv {venv} ready in {time.monotonic() - start:.1f} s")
    return venv


def _tiny_llama_command(maxtext_venv: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    """The llama3-8b recipe's MaxText args and env on the seed's v6e 4x4, shrunk exactly as run-local --tiny does."""
    spec = load_spec(EXAMPLES / "v6e-reservation.yaml")
    plan = plan_run("llama3-8b", spec, Overrides(slices=1, steps=STEPS), now=datetime.now(UTC), rand="ray")
    workdir = Path(tempfile.mkdtemp(prefix="tgk-ray-test-", dir=out))
    argv, env = rl.command(plan, maxtext_venv, workdir, out)
    assert argv[1:3] == ["-m", "maxtext.trainers.pre_train.train"], argv
    run_env = {k: v for k, v in env.items() if k not in maxtext_env.INHERITED_ENV}
    return argv[3:], run_env


def test_jaxtrainer_entrypoint_trains_tiny_llama_on_cpu(maxtext_venv, ray_venv, tmp_path):
    maxtext_args, run_env = _tiny_llama_command(maxtext_venv, tmp_path)
    assert maxtext_args[0] == "src/maxtext/configs/base.yml" and "model_name=llama3-8b" in maxtext_args
    env_flags = [f for k, v in sorted(run_env.items()) for f in ("--env", f"{k}={v}")]
    cmd = [
        str(ray_venv / "bin" / "python"),
        "-m",
        "workloads.ray.jax_trainer",
        "--cpu",
        "--num-workers",
        "1",
        "--run-name",
        "tiny-llama",
        "--storage-path",
        str(tmp_path / "ray-results"),
        *env_flags,
        "--",
        *maxtext_args,
    ]
    proc_env = {k: os.environ[k] for k in maxtext_env.INHERITED_ENV if k in os.environ}
    proc_env.update({"PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"})
    proc_env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=proc_env, capture_output=True, text=True, timeout=1200, check=False)
    wall = time.monotonic() - t0
    (tmp_path / "stdout.txt").write_text(done.stdout)
    (tmp_path / "stderr.txt").write_text(done.stderr)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])

    summary_lines = [ln for ln in done.stdout.splitlines() if ln.startswith("tgk-jaxtrainer ")]
    assert len(summary_lines) == 1, done.stdout[-2000:]
    summary = json.loads(summary_lines[0].split(" ", 1)[1])
    assert summary == {**summary, "run_name": "tiny-llama", "workers": 1, "use_tpu": False, "error": None}

    # MaxText ran inside a Ray Train worker actor (Ray prefixes what actors print with their name).
    both = done.stdout + done.stderr
    assert "RayTrainWorker" in both, both[-3000:]
    # Its steps, through the cluster path's parser: every step, a finite positive loss.
    steps = m.load(None, (tmp_path / rl.METRICS_NAME).read_text()).steps
    assert [s.step for s in steps] == list(range(STEPS))
    assert all(s.loss is not None and s.loss > 0 for s in steps)
    version = subprocess.run([str(ray_venv / "bin" / "python"), "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == RAY_VERSION
    print(f"\n[maxtext tier] JaxTrainer tiny llama3-8b on CPU: {wall:.1f} s wall (entrypoint's own: {summary['seconds']} s)")
