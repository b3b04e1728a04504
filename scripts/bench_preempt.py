#!/usr/bin/env python3
"""Benchmark: time from a preemption to all pods Running again, on the local cluster.

A 2-slice maxtext-6b rehearsal (submitted through `python -m workloads submit`, long
enough to outlast the benchmark) is preempted N times, one slice after the other,
through the same code as `python -m workloads local preempt`. Each sample is the time
from the preemption to every worker of the restarted JobSet Running, with the
intermediate times: the JobSet's restart (its new attempt's pods exist) and the node
pool back (every replaced Node Ready and schedulable).

Two series: with the default node replacement delay (`local preempt`'s
--replace-after, 5 s: the figure a user sees) and with 0 (the replacement's own floor:
the nodes stay NotReady 1 s and are created again 1 s after they went; the rest is the
control plane and kwok). A spot preemption (the kubelet's node shutdown) by default;
--maintenance drains through the Eviction API instead.

Runs in its own state dir (default $TGK_CACHE/local-cluster/bench-preempt-state) and
takes the cluster down at the end. Usage:

  $venv/bin/python scripts/bench_preempt.py [--samples 7] [--maintenance] [--output json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import DEFAULT_SPEC_PATH, load_spec  # noqa: E402
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_NAME_LABEL  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.client import Cluster  # noqa: E402
from workloads.cluster.wait import WaitTimeout, wait_for  # noqa: E402
from workloads.local import CONTEXT  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.local.disrupt import DEFAULT_REPLACE_AFTER_S, preempt  # noqa: E402

NS = "research"
RUN = "bench-preempt"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def poll(check, timeout: float, what: str, interval: float = 0.05):
    try:
        return wait_for(check, timeout=timeout, what=what, interval=interval)
    except WaitTimeout as e:
        raise SystemExit(f"bench: {e}") from None


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "p50": round(statistics.median(s), 2), "p90": round(s[int(0.9 * (len(s) - 1))], 2), "min": round(s[0], 2), "max": round(s[-1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=7, help="preemptions per series (at least 5)")
    ap.add_argument("--maintenance", action="store_true", help="drain through the Eviction API instead of a spot preemption")
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    if args.samples < 5:
        ap.error("--samples: at least 5 (the figure is a median)")

    lc = LocalCluster(args.state_dir or cache_dir() / "local-cluster" / "bench-preempt-state", progress=log)
    lc.down()
    spec = load_spec(DEFAULT_SPEC_PATH)
    out: dict = {"how": "maintenance (Eviction API)" if args.maintenance else "spot preemption (kubelet node shutdown)"}
    try:
        lc.up(spec, spec_path=str(DEFAULT_SPEC_PATH), build=False)
        kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
        workers = spec.tpu_pools[0].shape.nodes * 2
        sub = subprocess.run(
            [
                sys.executable,
                "-m",
                "workloads",
                "submit",
                "maxtext-6b",
                "--slices",
                "2",
                "--name",
                RUN,
                "--rehearse-seconds",
                "3600",
                "--kubeconfig",
                str(lc.kubeconfig),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if sub.returncode != 0:
            raise SystemExit(f"bench: submit failed: {sub.stderr.strip().splitlines()[-1:]}")
        pod_info, node_info = kube.resource("v1", "Pod"), kube.resource("v1", "Node")

        def pods(attempt: int) -> list[dict]:
            return [
                p
                for p in kube.list(pod_info, NS, label_selector=f"{JOBSET_NAME_LABEL}={RUN},{ATTEMPT}={attempt}")
                if not p["metadata"].get("deletionTimestamp")
            ]

        def all_running(attempt: int) -> bool:
            ps = pods(attempt)
            return len(ps) == workers and all(p["status"].get("phase") == "Running" for p in ps)

        def pool_back(pool: str) -> bool:
            ns = [n for n in kube.list(node_info, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}")]
            return bool(ns) and all(
                not n["spec"].get("unschedulable") and any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                for n in ns
            )

        poll(lambda: all_running(0), 300, "the rehearsal's workers Running", 0.25)
        attempt = 0
        for replace_after in (DEFAULT_REPLACE_AFTER_S, 0.0):
            total, restart, nodes_back = [], [], []
            for i in range(args.samples):
                t0 = time.monotonic()
                res = preempt(kube, lc.state_dir, NS, RUN, i % 2, maintenance=args.maintenance, replace_after=replace_after)
                nxt = attempt + 1
                t_restart = t_nodes = None
                while True:
                    now = time.monotonic()
                    if t_restart is None and pods(nxt):
                        t_restart = now - t0
                    if t_nodes is None and pool_back(res.pool):
                        t_nodes = now - t0
                    if t_restart is not None and t_nodes is not None and all_running(nxt):
                        break
                    if now - t0 > 300:
                        raise SystemExit(f"bench: attempt {nxt} not Running after 300 s")
                    time.sleep(0.05)
                dt = time.monotonic() - t0
                attempt = nxt
                total.append(dt)
                restart.append(t_restart)
                nodes_back.append(t_nodes)
                log(
                    f"replace-after {replace_after:g}s, sample {i + 1}: slice {i % 2} preempted -> JobSet restarted {t_restart:.2f}s, "
                    f"nodes back {t_nodes:.2f}s, all {workers} pods Running {dt:.2f}s"
                )
            key = f"replace_after_{replace_after:g}s"
            out[key] = {
                "preempted_to_all_running_s": stats(total),
                "preempted_to_jobset_restart_s": stats(restart),
                "preempted_to_nodes_ready_s": stats(nodes_back),
            }
        js = kube.jobset(NS, RUN)
        out["jobset_restarts"] = js["status"].get("restarts")
        out["restarts_counted_toward_max"] = js["status"].get("restartsCountTowardsMax", 0)
    finally:
        lc.down()

    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
