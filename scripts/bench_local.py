#!/usr/bin/env python3
"""Benchmarks of the local simulated cluster (real control plane, kwok nodes).

  1. `up` time with the binaries cached: a fresh start, then a start after `down`.
  2. submit -> Admitted latency over N one-slice JobSets (p50/p90/max), one at a
     time, each deleted before the next so the queue is never the bottleneck.
  3. a 16-slice x 16-node multislice JobSet (256 pods) on 16 v5e-64 node pools:
     submit -> Admitted, -> all pods scheduled, -> all pods Running.
  4. RSS of every control-plane process, idle and with the 256 pods running.

Runs in its own state dir (default $TGK_CACHE/local-cluster/bench-state) and
takes the cluster down at the end. Usage:

  $venv/bin/python scripts/bench_local.py [--jobs 20] [--output json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from infra.spec import DEFAULT_SPEC_PATH, load_spec, parse_spec  # noqa: E402
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_API, JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.client import Cluster  # noqa: E402
from workloads.cluster.wait import WaitTimeout, wait_for  # noqa: E402
from workloads.local import CONTEXT  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402
from workloads.render import jobset as manifests  # noqa: E402

COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def big_spec():
    """The default environment with 16 slices of v5e-64 (16 VMs each): 256 TPU nodes."""
    data = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())
    data["tpu_pools"] = [{"name": "v5e-64", "type": "v5litepod-64", "slices": 16, "capacity": "spot"}]
    return parse_spec(data, source="bench")


def jobset(spec, name: str, slices: int, complete_after: str) -> dict:
    plan = plan_run("hello-tpu", spec, Overrides(slices=slices, name=name))
    (js,) = copy.deepcopy(manifests.run_objects(plan))
    tmpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    tmpl.setdefault("metadata", {}).setdefault("annotations", {})[COMPLETE_DELAY] = complete_after
    return js


def admitted(wl: dict | None) -> bool:
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in ((wl or {}).get("status") or {}).get("conditions") or [])


def poll(check, timeout: float, what: str, interval: float = 0.05):
    try:
        return wait_for(check, timeout=timeout, what=what, interval=interval)
    except WaitTimeout as e:
        raise SystemExit(f"bench: {e}") from None


def rss(lc: LocalCluster) -> dict[str, float]:
    st = lc.status()
    return {**{k: v["rss_mib"] for k, v in st["daemons"].items()}, "total": st["rss_mib_total"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--output", choices=["text", "json"], default="text")
    args = ap.parse_args()

    lc = LocalCluster(args.state_dir or cache_dir() / "local-cluster" / "bench-state", progress=log)
    lc.down()
    spec = load_spec(DEFAULT_SPEC_PATH)
    out: dict = {}

    t = time.monotonic()
    lc.up(spec, spec_path=str(DEFAULT_SPEC_PATH), build=False)
    out["up_first_s"] = round(time.monotonic() - t, 2)
    lc.down()
    t = time.monotonic()
    lc.up(spec, spec_path=str(DEFAULT_SPEC_PATH), build=False)
    out["up_warm_s"] = round(time.monotonic() - t, 2)
    out["rss_idle_mib"] = rss(lc)

    try:
        cluster = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
        js_info = cluster.resource(JOBSET_API, "JobSet")
        lat = []
        for i in range(args.jobs):
            js = jobset(spec, f"bench-adm-{i}", 1, "1s")
            t0 = time.monotonic()
            cluster.apply([js], field_manager="tgk-bench")
            live = poll(lambda js=js: cluster.jobset("research", js["metadata"]["name"]), 30, "the JobSet")
            poll(lambda live=live: admitted(cluster.workload_for("research", live)), 120, f"admission of job {i}", 0.02)
            lat.append(time.monotonic() - t0)
            cluster.delete(js_info, js["metadata"]["name"], "research", propagation="Background")
            poll(
                lambda js=js, live=live: cluster.workload_for("research", live) is None and cluster.jobset("research", js["metadata"]["name"]) is None,
                120,
                "cleanup",
            )
        lat.sort()
        out["admit_latency_s"] = {
            "n": len(lat),
            "p50": round(statistics.median(lat), 3),
            "p90": round(lat[int(0.9 * (len(lat) - 1))], 3),
            "max": round(lat[-1], 3),
        }
        log(f"submit -> Admitted p50 {out['admit_latency_s']['p50']}s over {len(lat)} jobs")

        big = big_spec()
        t = time.monotonic()
        lc.up(big, spec_path="bench:16x v5e-64", build=False)
        out["resync_to_256_tpu_nodes_s"] = round(time.monotonic() - t, 2)
        js = jobset(big, "bench-256", 16, "3600s")
        pods_info = cluster.resource("v1", "Pod")
        sel = f"{JOBSET_NAME_LABEL}=bench-256"
        t0 = time.monotonic()
        cluster.apply([js], field_manager="tgk-bench")
        live = poll(lambda: cluster.jobset("research", "bench-256"), 30, "the JobSet")
        poll(lambda: admitted(cluster.workload_for("research", live)), 300, "admission of the 256-pod JobSet", 0.1)
        t_adm = time.monotonic() - t0
        poll(
            lambda: len([p for p in cluster.list(pods_info, "research", label_selector=sel) if p["spec"].get("nodeName")]) == 256,
            900,
            "256 pods scheduled",
            0.5,
        )
        t_sched = time.monotonic() - t0
        pods = poll(
            lambda: (
                (ps := cluster.list(pods_info, "research", label_selector=sel))
                and len(ps) == 256
                and all(p["status"].get("phase") == "Running" for p in ps)
                and ps
            ),
            900,
            "256 pods Running",
            0.5,
        )
        t_run = time.monotonic() - t0
        pools = {}
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in cluster.list(cluster.resource("v1", "Node"))}
        for p in pods:
            pools.setdefault(p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL], set()).add(nodes[p["spec"]["nodeName"]])
        out["multislice_256"] = {
            "admitted_s": round(t_adm, 2),
            "all_scheduled_s": round(t_sched, 2),
            "all_running_s": round(t_run, 2),
            "slices_on_one_pool_each": all(len(v) == 1 for v in pools.values()) and len({next(iter(v)) for v in pools.values()}) == 16,
        }
        out["rss_256_pods_mib"] = rss(lc)
        log(f"256 pods Running after {t_run:.1f}s")
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
