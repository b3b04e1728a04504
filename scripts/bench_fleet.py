#!/usr/bin/env python3
"""Benchmark: a fleet on loopback — 1 MultiKueue manager + 2 worker control planes (`local up --fleet`).

A fleet of its own (default $TGK_CACHE/local-cluster/bench-fleet), two workers of one
v5e 2x2 slice each (us-west4, us-east5). Prints:

- up: wall time of a fresh `python -m workloads local up --fleet` (every member started,
  the MultiKueue Secrets wired, every MultiKueueCluster Active), and the RSS of every
  process of every member once up;
- second worker: with one worker full (a run holds its only slice), submit -> every pod
  Running on the other worker, through `submit` to the manager (median and range over
  --samples, each a fresh pair of runs);
- worker lost: a run Running on a worker whose API server is then stopped -> Running on
  the other worker (the manager's Kueue waits workerLostTimeout, scaled by the rehearsal
  time factor like every duration: 300 s x 0.03 = 9 s here, then requeues it). Each sample
  restarts the lost worker afterwards.

Usage:

  $venv/bin/python scripts/bench_fleet.py [--samples 5] [--lost-samples 3] [--output json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.fleet import load_fleet  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.wait import wait_for  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.local.fleet import LocalFleet  # noqa: E402
from workloads.local.rehearsal import time_factor  # noqa: E402
from workloads.runs.fleet import apply_fleet, landed_on, wait_active  # noqa: E402

NS = "research"
LOST_TIMEOUT_S = 300


def write_fleet(d: Path, root: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, region in (("west", "us-west4"), ("east", "us-east5")):
        doc = {
            "project": "my-tpu-project",
            "region": region,
            "zones": [f"{region}-a"],
            "cluster": {"name": f"bench-{name}"},
            "cpu_pool": {"min_nodes": 1, "max_nodes": 1},
            "tpu_pools": [{"name": "v5e-4", "type": "v5litepod-4", "slices": 1, "capacity": "spot"}],
            "teams": [{"name": "research", "namespace": NS}],
            "buckets": [{"name": f"my-tpu-project-bench-{name}-ckpt", "purpose": "checkpoints"}],
        }
        (d / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    fleet = {
        "name": "bench-fleet",
        "manager": {"cluster": "bench-mgr", "kubeconfig": str(root / "manager" / "kubeconfig")},
        "workers": [{"name": n, "spec": f"{n}.yaml", "kubeconfig": str(root / f"worker-{n}" / "kubeconfig")} for n in ("west", "east")],
        "multikueue": {"worker_lost_timeout_seconds": LOST_TIMEOUT_S, "gc_interval_seconds": 60},
    }
    path = d / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


def wl(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "workloads", *args], cwd=REPO, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"workloads {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-600:]}")
    return r


def submit(lf: LocalFleet, path: Path, run: str) -> None:
    wl("submit", "hello-tpu", "--spec", str(path), "--kubeconfig", str(lf.manager_dir / "kubeconfig"), "--name", run, "--rehearse-seconds", "900", "--no-wait")


def delete(lf: LocalFleet, path: Path, run: str) -> None:
    wl("delete", run, "--yes", "--spec", str(path), "--kubeconfig", str(lf.manager_dir / "kubeconfig"))


def running(kube, run: str) -> bool:
    pods = [p for p in kube.pods(NS, run) if not p["metadata"].get("deletionTimestamp")]
    return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)


def gone_everywhere(workers: dict, run: str) -> None:
    for kube in workers.values():
        wait_for(lambda kube=kube: kube.jobset(NS, run) is None and not kube.pods(NS, run), timeout=180, what=f"{run} gone", interval=0.25)


def second_worker_sample(lf: LocalFleet, path: Path, manager, workers: dict) -> float:
    first, second = f"b1-{secrets.token_hex(3)}", f"b2-{secrets.token_hex(3)}"
    submit(lf, path, first)
    full = wait_for(lambda: landed_on(manager, NS, first), timeout=180, what="first dispatched", interval=0.1)
    wait_for(lambda: running(workers[full], first), timeout=180, what="first Running", interval=0.1)
    t0 = time.monotonic()
    submit(lf, path, second)
    other = wait_for(lambda: landed_on(manager, NS, second), timeout=180, what="second dispatched", interval=0.1)
    assert other != full, f"the second run went to the full worker {full}"
    wait_for(lambda: running(workers[other], second), timeout=180, what="second Running", interval=0.1)
    took = time.monotonic() - t0
    for run in (first, second):
        delete(lf, path, run)
    for run in (first, second):
        gone_everywhere(workers, run)
    return took


def lost_sample(lf: LocalFleet, path: Path, fleet) -> float:
    manager, workers = lf.clients(fleet)
    run = f"bl-{secrets.token_hex(3)}"
    submit(lf, path, run)
    lost = wait_for(lambda: landed_on(manager, NS, run), timeout=180, what="dispatched", interval=0.1)
    wait_for(lambda: running(workers[lost], run), timeout=180, what="Running", interval=0.1)
    other = next(n for n in workers if n != lost)
    t0 = time.monotonic()
    LocalCluster(lf.worker_dir(lost)).daemon("kube-apiserver").stop()
    wait_for(lambda: landed_on(manager, NS, run) == other and running(workers[other], run), timeout=600, what="requeued and Running", interval=0.1)
    took = time.monotonic() - t0
    delete(lf, path, run)
    wait_for(lambda: workers[other].jobset(NS, run) is None, timeout=180, what="gone", interval=0.25)
    # Bring the lost worker back: a fresh control plane (new token), the Secret rewired.
    LocalCluster(lf.worker_dir(lost)).down()
    lf.up(fleet, build=False, timeout=600)
    manager, workers = lf.clients(fleet)
    apply_fleet(fleet, manager, workers)
    states = wait_active(manager, fleet, timeout=120)
    assert all(v == "True" for v in states.values()), states
    return took


def summary(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "p50_s": round(statistics.median(xs), 2), "min_s": round(min(xs), 2), "max_s": round(max(xs), 2)} if xs else {"n": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--lost-samples", type=int, default=3)
    ap.add_argument("--root", type=Path, default=cache_dir() / "local-cluster" / "bench-fleet")
    ap.add_argument("--output", choices=["text", "json"], default="text")
    ap.add_argument("--keep", action="store_true", help="leave the fleet running")
    a = ap.parse_args()

    lf = LocalFleet(a.root)
    path = write_fleet(a.root.parent / "bench-fleet-spec", a.root)
    fleet = load_fleet(path)
    lf.down()
    t0 = time.monotonic()
    wl("local", "up", "--fleet", str(path), "--state-dir", str(a.root), "--no-build", "--timeout", "600")
    up_s = time.monotonic() - t0
    time.sleep(5)  # let start-up allocations settle before reading RSS
    st = lf.status()
    rss = {name: {"total_mib": m["rss_mib_total"], "daemons": {d: v["rss_mib"] for d, v in m["daemons"].items()}} for name, m in st["members"].items()}
    try:
        manager, workers = lf.clients(fleet)
        second = [second_worker_sample(lf, path, manager, workers) for _ in range(a.samples)]
        lost = [lost_sample(lf, path, fleet) for _ in range(a.lost_samples)]
    finally:
        if not a.keep:
            lf.down()
    out = {
        "up_seconds": round(up_s, 1),
        "rss_mib_total": st["rss_mib_total"],
        "rss_mib": rss,
        "submit_to_running_on_second_worker": summary(second),
        "worker_lost_to_running_on_other": summary(lost),
        "worker_lost_timeout_scaled_s": round(LOST_TIMEOUT_S * time_factor(), 1),
    }
    if a.output == "json":
        print(json.dumps(out, indent=2))
        return
    print(f"local up --fleet (1 manager + 2 workers): {out['up_seconds']} s, RSS {out['rss_mib_total']} MiB")
    for name, r in rss.items():
        top = ", ".join(f"{d} {v}" for d, v in sorted(r["daemons"].items(), key=lambda kv: -kv[1])[:3])
        print(f"  {name:<8} {r['total_mib']:>7} MiB  ({top} ...)")
    for key, label in (
        ("submit_to_running_on_second_worker", "submit -> Running on the second worker"),
        ("worker_lost_to_running_on_other", "worker lost -> Running on the other"),
    ):
        s = out[key]
        print(f"{label}: p50 {s.get('p50_s')} s (min {s.get('min_s')}, max {s.get('max_s')}, n={s['n']})")


if __name__ == "__main__":
    main()
