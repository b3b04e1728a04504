"""Run values reach the program inert, through the real components: a value never runs as a command.

tests/test_injection.py models two third-party steps; here they are the real thing:

- the kubelet's ``$(NAME)`` / ``$$`` expansion is Kubernetes v1.34.2's own Go function, and the
  K8sJobMode submitter container is built by KubeRay v1.6.0's own ``BuildJobSubmitCommand``
  (tests/support/kubeside: compiled from the module cache), and each model is checked against them;
- the RayJob's entrypoint goes through that submitter command under ``/bin/bash -ce``, the
  real ``ray job submit`` (Ray 2.54.0) against a real Ray head (``workloads.ray.standin_head``),
  whose job supervisor runs it with ``shell=True``; a stand-in ``python3`` on the head's PATH
  records what the JaxTrainer entrypoint's ``parse_args`` decodes.

Ray comes from scripts/setup-ray.sh (the Ray venv the ray tests use), or from
``$TGK_RAY_VENV``: any venv with ray[default]==2.54.0 (``workloads.ray.RAY_VERSION``).
No local control plane is started. A fixture that cannot build or start what it needs fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import REPO, kubeside
from tests.support.local_cluster import wait_for
from tests.support.shell_layers import Shims, kubelet_expand, kuberay_submitter, only_record, started
from tests.test_injection import INERT_TRICKY, ISSUE_EXAMPLE, RENDERERS, _plan, _TmpP, _worker_container, nasty
from workloads.local.procs import free_port
from workloads.ray import RAY_VERSION
from workloads.render import rayjob


@pytest.fixture(scope="module")
def probe() -> Path:
    t0 = time.monotonic()
    try:
        binary = kubeside.build()
    except (kubeside.KubesideError, OSError, subprocess.SubprocessError) as e:
        pytest.fail(f"tests/support/kubeside could not be built: {e}", pytrace=False)
    sys.stderr.write(f"[kubeside] {binary} ready in {time.monotonic() - t0:.1f}s\n")
    return binary


@pytest.fixture(scope="module")
def mark() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="tgk-inject-real-"))
    yield d / "p"
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def _random_values(seed: int, n: int) -> list[str]:
    """Values drawn from shell syntax, whitespace and non-ASCII text (seeded: a failure reproduces)."""
    rng = random.Random(seed)
    pieces = ["'", '"', "$", "`", ";", "\n", "\\", "$(", ")", "${IFS}", "$$", " ", "-", "=", "%", "\t", "é", "🚀", "(", "*", "~", "!", "#", "&", "|", "<", ">"]
    out = []
    for _ in range(n):
        parts = [rng.choice(pieces) if rng.random() < 0.6 else chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(0, 12))]
        out.append("".join(p for p in parts if not 0xD800 <= ord(p[0]) <= 0xDFFF))
    return out


# ------------------------------------------------------------------ the models are the real thing


@settings(max_examples=30, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.text(st.sampled_from("$()ab\\ x"), max_size=16),
            st.dictionaries(st.text(st.sampled_from("abx("), min_size=1, max_size=3), st.text(st.sampled_from("$()v"), max_size=4), max_size=3),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_the_kubelet_model_is_the_kubelets_expansion(probe: Path, items: list[tuple[str, dict[str, str]]]) -> None:
    got = kubeside.call(probe, {"expand": [{"text": t, "env": e} for t, e in items]})["expanded"]
    assert got == [kubelet_expand(t, e) for t, e in items]


def test_the_submitter_model_is_kuberays(probe: Path, mark: Path) -> None:
    values = nasty(mark)
    for chunk in range(0, len(values), 5):
        plan = _plan("ray", values[chunk : chunk + 5])
        rj = rayjob.rayjob(plan)
        rj["status"] = {"dashboardURL": "inj-abcde-head-svc.team-research.svc.cluster.local:8265", "jobId": "inj-xyz12"}
        real = kubeside.call(probe, {"rayjob": rj})
        argv, env = started(kuberay_submitter(rj))
        assert [*real["command"], *real["args"]] == argv
        assert real["env"] == env


# ------------------------------------------------------------------ JobSet and Job: the kubelet's own expansion


@pytest.mark.parametrize("runtime", ["jobset", "job"])
def test_values_reach_the_worker_program_through_the_real_expansion(runtime: str, probe: Path, mark: Path, tmp_path: Path) -> None:
    shims = Shims.make(tmp_path / "shims", ray=False)
    tmp_p = _TmpP()
    values = [*nasty(mark), *_random_values(21, 60)]
    for chunk in range(0, len(values), 5):
        plan = _plan(runtime, values[chunk : chunk + 5])
        real = kubeside.call(probe, {"container": _worker_container(RENDERERS[runtime](plan))})
        got = only_record(shims, shims.run([*real["command"], *real["args"]], real["env"], tmp_path))
        assert got["argv"] == [*plan.program.command[1:], *plan.program.args]
    assert not mark.exists() and tmp_p.untouched()


# ------------------------------------------------------------------ Ray: KubeRay's command, real bash, real Ray


@pytest.fixture(scope="module")
def ray_bin() -> Path:
    given_venv = os.environ.get("TGK_RAY_VENV")
    if given_venv:
        venv = Path(given_venv)
    else:
        done = subprocess.run(["bash", str(REPO / "scripts" / "setup-ray.sh")], capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0:
            pytest.fail(f"the Ray venv could not be built: {done.stderr.strip().splitlines()[-1:]}", pytrace=False)
        venv = Path(done.stdout.strip().splitlines()[-1])
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True, check=False)
    if version.stdout.strip() != RAY_VERSION:
        pytest.fail(f"{venv} has no Ray {RAY_VERSION} ({version.stdout.strip() or version.stderr.strip()[-200:]})", pytrace=False)
    return venv / "bin"


@contextlib.contextmanager
def _standin_head(ray_bin: Path, root: Path, env: dict[str, str], port: int | None = None) -> Iterator[str]:
    """A real Ray head (workloads.ray.standin_head) until the block ends; yields its dashboard address."""
    ready = root / "head.ready"
    log = open(root / "head.log", "w")  # noqa: SIM115 - closed below
    head = subprocess.Popen(
        [str(ray_bin / "python"), "-m", "workloads.ray.standin_head", "--ready-file", str(ready), "--num-cpus", "2"]
        + ([] if port is None else ["--dashboard-port", str(port)]),
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not ready.exists():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray head did not start: {(root / 'head.log').read_text()[-2000:]}", pytrace=False)
            time.sleep(0.5)
        yield f"127.0.0.1:{json.loads(ready.read_text())['port']}"
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()


@pytest.fixture(scope="module")
def ray_head(ray_bin: Path, tmp_path_factory) -> Iterator[tuple[str, Shims]]:
    """A real Ray head whose jobs find the stand-in ``python3`` first on PATH."""
    root = tmp_path_factory.mktemp("ray-head")
    shims = Shims.make(root / "shims", ray=False)
    env = {
        **shims.env(),
        "PATH": f"{shims.bin}:{ray_bin}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    with _standin_head(ray_bin, root, env, port=free_port()) as address:
        yield address, shims


def _submit_and_finish(address: str, job_id: str, entrypoint: str) -> dict[str, Any]:
    body = json.dumps({"entrypoint": entrypoint, "submission_id": job_id}).encode()
    req = urllib.request.Request(f"http://{address}/api/jobs/", data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback
        assert json.loads(r.read())["submission_id"] == job_id
    return wait_for(lambda: (j := _ray_job(address, job_id))["status"] in ("SUCCEEDED", "FAILED", "STOPPED") and j, 120, f"Ray job {job_id}")


def test_two_standin_heads_on_one_machine_each_run_their_jobs(ray_bin: Path, ray_head, tmp_path: Path) -> None:
    """The integration tier runs a stand-in head beside this module's: Ray's fixed agent port (52365) left the second unable to run a job."""
    first, _ = ray_head
    env = {"PATH": f"{ray_bin}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(tmp_path)}
    with _standin_head(ray_bin, tmp_path, env) as second:
        assert second != first
        for address in (first, second):
            job = _submit_and_finish(address, f"two-heads-{os.getpid()}-{address.rsplit(':', 1)[1]}", "echo ran")
            assert job["status"] == "SUCCEEDED", (address, job.get("message"))


def _ray_job(address: str, job_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address}/api/jobs/{job_id}", timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def _through_real_ray(plan, probe: Path, ray_bin: Path, address: str, shims: Shims, cwd: Path, job_id: str) -> dict[str, Any]:
    rj = rayjob.rayjob(plan)
    rj["status"] = {"dashboardURL": address, "jobId": job_id}
    real = kubeside.call(probe, {"rayjob": rj})
    env = {"PATH": f"{ray_bin}:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(cwd), "RAY_USAGE_STATS_ENABLED": "0", **real["env"]}
    done = subprocess.run([*real["command"], *real["args"]], env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    job = _ray_job(address, job_id)
    assert job["status"] == "SUCCEEDED", f"{job['status']}: {job.get('message')}; submitter rc={done.returncode} {done.stderr[-1500:]}"
    assert done.returncode == 0, done.stderr[-1500:]
    return only_record(shims, done)


def test_values_reach_the_jaxtrainer_through_kuberay_and_real_ray(probe: Path, ray_bin: Path, ray_head, mark: Path, tmp_path: Path) -> None:
    address, shims = ray_head
    tmp_p = _TmpP()
    cases = [[ISSUE_EXAMPLE, "it's"], INERT_TRICKY]
    values = nasty(mark)
    cases += [values[i : i + 5] for i in range(0, len(values), 5)]
    for n, case in enumerate(cases):
        plan = _plan("ray", case)
        got = _through_real_ray(plan, probe, ray_bin, address, shims, tmp_path, f"inj-{os.getpid()}-{n}")
        assert got.get("maxtext_args") == list(plan.program.args), got
    assert not mark.exists() and tmp_p.untouched()


def test_random_values_reach_the_jaxtrainer_through_real_ray(probe: Path, ray_bin: Path, ray_head, tmp_path: Path) -> None:
    address, shims = ray_head
    base = _plan("ray", [])
    for seed in (1, 2, 3):
        args = (*base.program.args, *(f"dataset_path={v}" for v in _random_values(seed, 50)))
        plan = replace(base, program=replace(base.program, args=args))
        got = _through_real_ray(plan, probe, ray_bin, address, shims, tmp_path, f"inj-{os.getpid()}-r{seed}")
        assert got.get("maxtext_args") == list(args), got


def test_the_old_entrypoint_injects_through_real_ray(probe: Path, ray_bin: Path, ray_head, mark: Path, tmp_path: Path) -> None:
    """The real layers catch the defect the fix removes: shlex.join's quoting ran the issue's value."""
    import shlex

    address, shims = ray_head
    plan = _plan("ray", [f"x;touch${{IFS}}{mark}"])
    rj = rayjob.rayjob(plan)
    rj["spec"]["entrypoint"] = shlex.join(rayjob.entrypoint_args(plan))
    rj["status"] = {"dashboardURL": address, "jobId": f"inj-{os.getpid()}-old"}
    real = kubeside.call(probe, {"rayjob": rj})
    env = {"PATH": f"{ray_bin}:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0", **real["env"]}
    subprocess.run([*real["command"], *real["args"]], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    shims.records()
    try:
        assert mark.exists()
    finally:
        mark.unlink(missing_ok=True)
