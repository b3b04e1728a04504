#!/usr/bin/env python3
"""Benchmarks of the Ray runtime on the local cluster (real KubeRay, Kueue, Ray head stand-in).

  1. `local up --with ray` with everything cached: the extra start-up KubeRay and the
     stand-in Ray head cost (printed by `up` itself as up_seconds);
  2. per RayJob (llama3-8b --runtime ray through `submit`, one at a time, each deleted
     before the next): submitted -> Kueue admitted -> all workers Running -> the RayJob
     Complete (the rehearsed Ray job lasts --job-seconds on the stand-in head), median
     and max over --jobs;
  3. with --trainer: the tiny JaxTrainer entrypoint on CPU (what
     tests/maxtext/test_ray_trainer.py runs), wall time of one run.

Runs in its own state dir (default $TGK_CACHE/local-cluster/bench-ray-state) and takes
the cluster down at the end. Usage:

  $venv/bin/python scripts/bench_ray.py [--jobs 5] [--job-seconds 2] [--trainer] [--output json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import load_spec  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402

SPEC = REPO / "examples" / "v6e-reservation.yaml"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def wl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TGK_SPEC", None)
    return subprocess.run([sys.executable, "-m", "workloads", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def until(check, timeout: float = 300.0) -> float:
    """Poll ``check`` every 50 ms; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.05)
    raise SystemExit(f"bench: timed out after {timeout:.0f}s")


def one_rayjob(lc: LocalCluster, ns: str, hosts: int, job_seconds: float) -> dict[str, float]:
    kube = lc.client()
    rj_info, pod_info = kube.resource("ray.io/v1", "RayJob"), kube.resource("v1", "Pod")
    wl_info = kube.resource("kueue.x-k8s.io/v1beta2", "Workload")
    t0 = time.monotonic()
    r = wl(
        "submit", "llama3-8b", "--runtime", "ray", "--spec", str(SPEC), "--team", "pretrain", "--kubeconfig", str(lc.kubeconfig),
        "--no-wait", "-o", "json", "--rehearse-seconds", f"{job_seconds:g}",
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"bench: submit failed: {r.stderr.strip().splitlines()[-1:]}")
    doc = json.loads(r.stdout)
    run = doc["run"]
    t_submitted = time.monotonic()

    def admitted() -> bool:
        return any(
            (w.get("status") or {}).get("admission") and any(o.get("name") == run for o in w["metadata"].get("ownerReferences", []))
            for w in kube.list(wl_info, ns)
        )

    def workers_running() -> bool:
        pods = kube.list(pod_info, ns, label_selector="ray.io/node-type=worker")
        return sum(1 for p in pods if run in p["metadata"]["name"] and (p.get("status") or {}).get("phase") == "Running") == hosts

    def complete() -> bool:
        st = (kube.get(rj_info, run, ns) or {}).get("status") or {}
        if st.get("jobDeploymentStatus") == "Failed":
            raise SystemExit(f"bench: RayJob {run} failed: {st.get('message')}")
        return st.get("jobDeploymentStatus") == "Complete"

    t_adm = until(admitted)
    t_run = until(workers_running)
    t_done = until(complete)
    d = wl("delete", run, "--yes", "--spec", str(SPEC), "--team", "pretrain", "--kubeconfig", str(lc.kubeconfig))
    if d.returncode != 0:
        raise SystemExit(f"bench: delete failed: {d.stderr.strip()[-300:]}")
    return {
        "submit_cli_s": round(t_submitted - t0, 2),
        "submitted_to_admitted_s": round(t_adm - t_submitted, 2),
        "submitted_to_workers_running_s": round(t_run - t_submitted, 2),
        "submitted_to_complete_s": round(t_done - t_submitted, 2),
    }


def trainer_run() -> dict[str, float]:
    """The tiny JaxTrainer test, timed (its own print has the entrypoint's wall time)."""
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:xdist", "-m", "maxtext", "tests/maxtext/test_ray_trainer.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    line = next((ln for ln in r.stdout.splitlines() if "JaxTrainer tiny llama3-8b on CPU" in ln), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"bench: the JaxTrainer test failed: {r.stdout[-1500:]}")
    wall = float(line.split(": ", 1)[1].split(" s wall", 1)[0])
    return {"jaxtrainer_tiny_cpu_wall_s": wall, "pytest_total_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--job-seconds", type=float, default=2.0)
    ap.add_argument("--state-dir", type=Path, default=cache_dir() / "local-cluster" / "bench-ray-state")
    ap.add_argument("--trainer", action="store_true", help="also time the tiny JaxTrainer run on CPU")
    ap.add_argument("--output", choices=("text", "json"), default="text")
    a = ap.parse_args()

    out: dict[str, object] = {}
    if a.trainer:
        log("timing the tiny JaxTrainer run on CPU")
        out.update(trainer_run())
    spec = load_spec(SPEC)
    ns = spec.team("pretrain").ns
    hosts = spec.tpu_pools[0].shape.nodes
    lc = LocalCluster(a.state_dir, progress=log)
    lc.down()
    try:
        st = lc.up(spec, spec_path=str(SPEC), timeout=600, with_ray=True)
        out["up_with_ray_s"] = st["up_seconds"]
        rounds = []
        for i in range(a.jobs):
            rounds.append(one_rayjob(lc, ns, hosts, a.job_seconds))
            log(f"RayJob {i + 1}/{a.jobs}: {rounds[-1]}")
        for key in rounds[0]:
            vals = [r[key] for r in rounds]
            out[key] = {"median": round(statistics.median(vals), 2), "max": max(vals)}
        out["jobs"] = a.jobs
        out["job_seconds"] = a.job_seconds
    finally:
        lc.down()
    if a.output == "json":
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:36} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
