#!/usr/bin/env python3
"""Benchmark: capacity on the local cluster — queued provisioning, fallback, borrow and reclaim.

One cluster of its own (default $TGK_CACHE/local-cluster/bench-capacity-state), built
from the spec below: a v5e pool with a capacity list [reservation, spot], a v6e queued
flex-start pool, and two teams of half the chips each. Each sample is a fresh run (or
pair of runs) submitted through `python -m workloads submit`:

- queued: submit -> ProvisioningRequest Provisioned -> every worker Running, under the
  simulated provisioner (workloads.local.provisioner) with --delay seconds of "DWS
  wait" (default 2 s; the figure to read is the time beyond it);
- fallback: with the reservation's flavor full (each team holds its half of it), submit
  -> admitted on the spot flavor;
- borrow: team B's 2-slice run while team A is idle, submit -> admitted;
- reclaim: team A's 1-slice run while B borrows, submit -> admitted (B preempted);
- compute class: a run on a ComputeClass pool (v6e 4x8) whose first priority (a reservation) is out
  of capacity, submit -> every worker Running on the slice the simulated autoscaler made
  from the next priority (spot); then until the idle slice is removed.

Prints the median and range of each. Usage:

  $venv/bin/python scripts/bench_capacity.py [--samples 5] [--delay 2] [--output json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import load_spec  # noqa: E402
from toolkit.names import GKE_COMPUTE_CLASS_LABEL, GKE_SPOT_LABEL, TPU_RESOURCE  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.wait import WaitTimeout, wait_for  # noqa: E402
from workloads.local import provisioner  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402

SPEC: dict[str, Any] = {
    "project": "my-tpu-project",
    "region": "us-west4",
    "zones": ["us-west4-a"],
    "cluster": {"name": "bench-capacity"},
    "cpu_pool": {"min_nodes": 1, "max_nodes": 1},
    "tpu_pools": [
        {"name": "v5e", "type": "v5litepod-16", "slices": 2, "capacity": [{"mode": "reservation", "name": "v5e-res", "zone": "us-west4-a"}, "spot"]},
        {"name": "flex", "type": "v6e-16", "slices": 2, "capacity": {"mode": "flex-start", "queued": True}},
        {"name": "shared", "type": "v5litepod-32", "slices": 2, "capacity": "spot"},
        {
            "name": "cc",  # a shape of its own: runs of one shape go to whichever pool of it Kueue admits them on
            "type": "v6e-32",
            "slices": 2,
            "capacity": [{"mode": "reservation", "name": "cc-res", "zone": "us-west4-a"}, "spot"],
            "compute_class": True,
        },
    ],
    "teams": [{"name": "team-a", "quota_share": 0.5}, {"name": "team-b", "quota_share": 0.5, "borrowing_limit": 0.5}],
    "buckets": [{"name": f"my-tpu-project-bench-{t}-ckpt", "purpose": "checkpoints", "team": t} for t in ("team-a", "team-b")],
}
A, B = "team-a", "team-b"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    try:
        return wait_for(check, timeout=timeout, what=what, interval=0.05)
    except WaitTimeout as e:
        raise SystemExit(f"bench: {e}") from None


class Bench:
    def __init__(self, lc: LocalCluster, spec_path: Path) -> None:
        self.lc, self.spec_path, self.kube = lc, spec_path, lc.client()
        self.n = 0

    def submit(self, team: str, recipe: str, pool: str, slices: int, seconds: float) -> str:
        self.n += 1
        run = f"bc-{self.n}"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "workloads",
                "submit",
                recipe,
                "--spec",
                str(self.spec_path),
                "--kubeconfig",
                str(self.lc.kubeconfig),
                "--team",
                team,
                "--pool",
                pool,
                "--slices",
                str(slices),
                "--name",
                run,
                "--rehearse-seconds",
                str(seconds),
                "--no-wait",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise SystemExit(f"bench: submit failed: {r.stderr.strip().splitlines()[-1:]}")
        return run

    def delete(self, team: str, run: str) -> None:
        self.kube.delete_run(team, run)
        poll(lambda: not self.kube.pods(team, run) and self.kube.jobset(team, run) is None, 120, f"{run} gone")

    def flavor(self, team: str, run: str) -> str | None:
        js = self.kube.jobset(team, run)
        wl = self.kube.workload_for(team, js) if js else None
        conds = {c["type"]: c["status"] for c in ((wl or {}).get("status") or {}).get("conditions") or []}
        if conds.get("Admitted") != "True":
            return None
        return wl["status"]["admission"]["podSetAssignments"][0]["flavors"][TPU_RESOURCE]

    def running(self, team: str, run: str, n: int) -> bool:
        pods = [p for p in self.kube.pods(team, run) if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    def queued(self) -> dict[str, float]:
        pr_info = self.kube.resource(provisioner.PR_API, "ProvisioningRequest")
        t0 = time.monotonic()
        run = self.submit(A, "hello-tpu", "flex", 1, 600)
        poll(lambda: any(provisioner.is_true(p, "Provisioned") for p in self.kube.list(pr_info, A)), 120, "provisioned")
        t_prov = time.monotonic() - t0
        poll(lambda: self.running(A, run, 4), 120, "Running")
        t_run = time.monotonic() - t0
        self.delete(A, run)
        poll(
            lambda: (
                not [
                    n for n in self.kube.list(self.kube.resource("v1", "Node")) if (n["metadata"].get("annotations") or {}).get(provisioner.REQUEST_ANNOTATION)
                ]
            ),
            60,
            "nodes gone",
        )
        return {"provisioned_s": t_prov, "running_s": t_run}

    def fallback(self) -> dict[str, float]:
        # Each team holds its half of the reservation: nothing idle there to borrow either.
        hold_a, hold_b = self.submit(A, "hello-tpu", "v5e", 1, 600), self.submit(B, "hello-tpu", "v5e", 1, 600)
        poll(lambda: self.flavor(A, hold_a) == self.flavor(B, hold_b) == "v5e-res", 120, "the reservation held")
        t0 = time.monotonic()
        run = self.submit(A, "hello-tpu", "v5e", 1, 600)
        got = poll(lambda: self.flavor(A, run), 120, "fallback admission")
        t = time.monotonic() - t0
        if got != "v5e-spot":
            raise SystemExit(f"bench: fell to {got}, not v5e-spot")
        for team, r in ((A, run), (A, hold_a), (B, hold_b)):
            self.delete(team, r)
        return {"fallback_admitted_s": t}

    def compute_class(self) -> dict[str, float]:
        node_info = self.kube.resource("v1", "Node")

        def class_nodes() -> list[dict]:
            return [n for n in self.kube.list(node_info) if n["metadata"]["labels"].get(GKE_COMPUTE_CLASS_LABEL) == "cc"]

        provisioner.configure(self.lc.state_dir, class_refuse=1)
        try:
            t0 = time.monotonic()
            run = self.submit(A, "hello-tpu", "cc", 1, 600)
            poll(lambda: self.running(A, run, 8), 120, "Running on the class's slice")
            t_run = time.monotonic() - t0
            made = {n["metadata"]["name"]: n for n in class_nodes()}
            on = {p["spec"]["nodeName"] for p in self.kube.pods(A, run)}
            if not made or not on <= set(made) or not all(n["metadata"]["labels"].get(GKE_SPOT_LABEL) == "true" for n in made.values()):
                raise SystemExit("bench: the run is not on a slice made from the class's second priority (spot)")
            t1 = time.monotonic()
            self.delete(A, run)
            poll(lambda: not class_nodes(), 120, "the idle slice removed")
            return {"class_running_s": t_run, "class_scaled_down_s": time.monotonic() - t1}
        finally:
            provisioner.configure(self.lc.state_dir, class_refuse=0)

    def borrow_reclaim(self) -> dict[str, float]:
        t0 = time.monotonic()
        b = self.submit(B, "maxtext-6b", "shared", 2, 600)
        poll(lambda: self.flavor(B, b), 120, "borrowing admission")
        t_borrow = time.monotonic() - t0
        poll(lambda: self.running(B, b, 16), 120, "B Running")
        t1 = time.monotonic()
        a = self.submit(A, "maxtext-6b", "shared", 1, 600)
        poll(lambda: self.flavor(A, a), 120, "reclaiming admission")
        t_reclaim = time.monotonic() - t1
        poll(lambda: self.running(A, a, 8), 120, "A Running")
        t_reclaim_run = time.monotonic() - t1
        self.delete(A, a)
        self.delete(B, b)
        return {"borrow_admitted_s": t_borrow, "reclaim_admitted_s": t_reclaim, "reclaim_running_s": t_reclaim_run}


def summary(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for key in samples[0]:
        vals = [s[key] for s in samples]
        out[key] = {"median": round(statistics.median(vals), 2), "min": round(min(vals), 2), "max": round(max(vals), 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--delay", type=float, default=2.0, help="the simulated DWS wait before a request is answered (s)")
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    if args.samples < 3:
        ap.error("--samples: at least 3 (the figures are medians)")
    state = args.state_dir or cache_dir() / "local-cluster" / "bench-capacity-state"
    spec_path = state.parent / "bench-capacity.yaml"
    state.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    lc = LocalCluster(state, progress=log)
    lc.down()
    results: dict[str, Any] = {"delay_s": args.delay, "samples": args.samples}
    try:
        lc.up(load_spec(spec_path), spec_path=str(spec_path), build=False)
        provisioner.configure(lc.state_dir, delay_seconds=args.delay, refuse=0)
        bench = Bench(lc, spec_path)
        for name, fn in (("queued", bench.queued), ("fallback", bench.fallback), ("class", bench.compute_class), ("teams", bench.borrow_reclaim)):
            samples = []
            for i in range(args.samples):
                samples.append(fn())
                log(f"{name} {i + 1}/{args.samples}: " + ", ".join(f"{k} {v:.2f}" for k, v in samples[-1].items()))
            results[name] = summary(samples)
    finally:
        lc.down()
    if args.output == "json":
        print(json.dumps(results, indent=2))
    else:
        print(f"local cluster, {args.samples} samples each, simulated DWS wait {args.delay:g} s (median [min-max], seconds)")
        for group in ("queued", "fallback", "class", "teams"):
            for key, v in results[group].items():
                print(f"  {group:8} {key:22} {v['median']:6.2f}  [{v['min']:.2f}-{v['max']:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
