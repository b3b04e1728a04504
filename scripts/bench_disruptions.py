#!/usr/bin/env python3
"""Benchmark: a node upgrade and announced host maintenance met by a multislice run, on the local control plane.

One 2-slice maxtext-6b rehearsal (long enough to outlast the samples) on a spec with three v5e-16
slice pools (one spare, so a slice moved off a pool has somewhere to go), with the toolkit's
``maintain`` watching it (``workloads.runs.maintain``, one pass every ``--poll`` seconds, lead 10 min).
For each event, N samples, alternating the run's slices:

  upgrade      ``local upgrade --pool P`` of a slice's pool (cordon, drain through the Eviction API,
               VMs recreated at a new kubelet version)
               detected   upgrade -> ``maintain`` has recorded it as an upgrade (what ``status`` shows)
  maintenance  ``local maintenance --node N --in W`` on a slice's pool (GKE's
               ``cloud.google.com/scheduled-maintenance-time`` label), moved ahead of the window
               detected   announcement -> ``maintain`` has cordoned the announced nodes and evicted the slice
  unmoved      the same announcement with ``maintain`` not moving the run (lead 0): the window
               comes, the daemon drains the pool (ONGOING) and replaces its VMs; times from the
               window's start
               detected   window -> ``maintain`` has recorded it as host maintenance

and for both:

  running      event -> every worker of the run's next attempt Running (the rehearsal daemon's book)
  redone       steps redone: worker 0's last logged step of the ended attempt minus the step the next
               attempt restored (0 when the drain's SIGTERM saved the step reached)

What the local control plane cannot show: GKE's drain and VM recreation times, a real program's
save and restore; those are in scripts/bench_spot_goodput.py's published inputs.

Runs in its own state dir (default $TGK_CACHE/local-cluster/bench-disruptions-state) and takes
the cluster down at the end. Usage:

  $venv/bin/python scripts/bench_disruptions.py [--samples 3] [--events upgrade maintenance]
      [--window 40] [--poll 0.5] [--output json]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import DEFAULT_SPEC_PATH, load_spec  # noqa: E402
from toolkit.errors import ToolkitError  # noqa: E402
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.client import Cluster  # noqa: E402
from workloads.local import CONTEXT  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.local.disrupt import pending  # noqa: E402
from workloads.local.rehearsal import time_factor  # noqa: E402
from workloads.local.upgrade import announce, pending_maintenance, upgrade  # noqa: E402
from workloads.runs.maintain import Watch, maintain_once  # noqa: E402

NS = "research"
RUN = "bench-disruptions"
STEP = re.compile(r"completed step: (\d+),")
RESTORED = re.compile(r"restoring from this run's directory step (\d+)")
LEAD_S = 600.0


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "p50": round(statistics.median(s), 2), "min": round(s[0], 2), "max": round(s[-1], 2)}


def wait(check, timeout: float, what: str, interval: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise SystemExit(f"bench: timed out after {timeout:.0f} s waiting for {what}")


class Watcher(threading.Thread):
    """``maintain`` beside the run: one pass every ``poll`` seconds; when each kind of action first happened."""

    def __init__(self, kube: Cluster, poll: float) -> None:
        super().__init__(daemon=True)
        self.kube, self.poll, self.memory, self.lead_s = kube, poll, Watch(), LEAD_S
        self.seen: list[tuple[float, str]] = []  # (wall time, "moved" | a recorded disruption's kind)
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                res = maintain_once(self.kube, NS, RUN, lead_s=self.lead_s, watch=self.memory)
                now = time.time()
                if res.evicted:
                    self.seen.append((now, "moved"))
                self.seen.extend((now, d.kind) for d in res.recorded)
            except ToolkitError as e:
                log(f"maintain: {e}")
            self.halt.wait(self.poll)

    def first(self, kind: str, after: float) -> float | None:
        return next((t for t, k in self.seen if k == kind and t >= after), None)


class Bench:
    def __init__(self, lc: LocalCluster, kube: Cluster) -> None:
        self.lc, self.kube = lc, kube

    def book(self) -> dict:
        js = self.kube.jobset(NS, RUN) or {}
        uid = (js.get("metadata") or {}).get("uid", "")
        try:
            return json.loads((self.lc.state_dir / "rehearsal" / "runs" / f"{uid}.json").read_text()).get("attempts") or {}
        except (OSError, ValueError):
            return {}

    def pods(self) -> list[dict]:
        return self.kube.list(self.kube.resource("v1", "Pod"), NS, label_selector=f"{JOBSET_NAME_LABEL}={RUN}")

    def worker0_log(self, pod_name: str) -> str:
        try:
            return (self.lc.state_dir / "pod-logs" / NS / f"{pod_name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def worker0(self) -> str | None:
        for p in self.pods():
            ann = p["metadata"].get("annotations") or {}
            if (
                p["status"].get("phase") == "Running"
                and ann.get("jobset.sigs.k8s.io/job-index") == "0"
                and ann.get("batch.kubernetes.io/job-completion-index") == "0"
            ):
                return p["metadata"]["name"]
        return None

    def slice_pool_and_node(self, slice_index: int) -> tuple[str, str]:
        node_info = self.kube.resource("v1", "Node")
        for p in self.pods():
            if p["metadata"]["labels"].get(JOBSET_JOB_INDEX_LABEL) == str(slice_index) and p["spec"].get("nodeName") and p["status"].get("phase") == "Running":
                n = self.kube.get(node_info, p["spec"]["nodeName"])
                return n["metadata"]["labels"][GKE_NODEPOOL_LABEL], n["metadata"]["name"]
        raise SystemExit(f"bench: slice {slice_index} has no running pod")

    def settled(self) -> bool:
        return not pending(self.lc.state_dir) and not pending_maintenance(self.lc.state_dir)

    def sample(self, watcher: Watcher, event: str, i: int, window_s: float) -> dict[str, float]:
        wait(self.settled, 300, "earlier node replacements to finish")
        old_w0 = wait(self.worker0, 120, "worker 0 running")
        wait(lambda: STEP.search(self.worker0_log(old_w0)), 120, "worker 0's first step of this attempt")
        before = set(self.book())
        pool, node = self.slice_pool_and_node(i % 2)
        t0 = time.time()
        watcher.lead_s = -1e9 if event == "unmoved" else LEAD_S  # unmoved: never ahead of the window
        if event == "upgrade":
            upgrade(self.kube, self.lc.state_dir, pool, f"v1.99.{i}-gke.1", replace_after=5.0)
        else:
            start = announce(self.kube, self.lc.state_dir, node, window_s).window_start
            if event == "unmoved":
                t0 = start  # what the run meets is the window, not the notice

        def new_attempt() -> str | None:
            new = [a for a, c in self.book().items() if a not in before and "joined_at" in c]
            return new[0] if new else None

        attempt = wait(new_attempt, 300 + window_s, "the next attempt's workers all running")
        running = float(self.book()[attempt]["joined_at"]) - t0
        kind = {"upgrade": "upgrade", "maintenance": "moved", "unmoved": "maintenance"}[event]
        detected_at = wait(lambda: watcher.first(kind, t0), 300 + window_s, f"maintain to see the {event}")
        new_w0 = wait(lambda: (w := self.worker0()) != old_w0 and w, 120, "the next attempt's worker 0")
        restored = wait(lambda: RESTORED.search(self.worker0_log(new_w0)), 120, "the next attempt's restore")
        steps = [int(s) for s in STEP.findall(self.worker0_log(old_w0))]
        redone = max(0, (steps[-1] if steps else 0) - int(restored.group(1)))
        return {"detected_s": detected_at - t0, "running_s": running, "redone_steps": float(redone)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=3, help="samples per event (at least 3)")
    ap.add_argument("--events", nargs="+", default=["upgrade", "maintenance", "unmoved"], choices=["upgrade", "maintenance", "unmoved"])
    ap.add_argument("--window", type=float, default=40.0, help="seconds from the maintenance announcement to the window's start")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between maintain passes")
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--keep-up", action="store_true", help="leave the cluster up at the end")
    ap.add_argument("--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    if args.samples < 3:
        ap.error("--samples: at least 3")

    doc = copy.deepcopy(yaml.safe_load(DEFAULT_SPEC_PATH.read_text()))
    pool = next(p for p in doc["tpu_pools"] if p["name"] == "v5e-16")
    pool["slices"] = 3  # a spare slice pool: a slice moved off its pool has somewhere to go
    spec_file = Path(tempfile.mkdtemp(prefix="tgk-bench-disruptions-")) / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    spec = load_spec(spec_file)
    lc = LocalCluster(args.state_dir or cache_dir() / "local-cluster" / "bench-disruptions-state", progress=log)
    lc.down()
    out: dict = {
        "measured": time.strftime("%Y-%m-%d"),
        "time_factor": time_factor(),
        "window_s": args.window,
        "poll_s": args.poll,
        "load_average": list(__import__("os").getloadavg()),
        "events": {},
    }
    watcher = None
    try:
        lc.up(spec, spec_path=str(spec_file), build=False)
        kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
        sub = subprocess.run(
            [sys.executable, "-m", "workloads", "submit", "maxtext-6b", "--slices", "2", "--name", RUN, "--rehearse-seconds", "3600",
             "--spec", str(spec_file), "--kubeconfig", str(lc.kubeconfig)],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if sub.returncode != 0:
            raise SystemExit(f"bench: submit failed: {sub.stderr.strip().splitlines()[-1:]}")
        bench = Bench(lc, kube)
        wait(lambda: any("joined_at" in c for c in bench.book().values()), 300, "the first attempt running")
        watcher = Watcher(kube, args.poll)
        for event in args.events:
            rows = []
            for i in range(args.samples):
                row = bench.sample(watcher, event, i, args.window)
                rows.append(row)
                log(f"{event} sample {i + 1}: detected {row['detected_s']:.2f} s, all running {row['running_s']:.2f} s, {row['redone_steps']:.0f} steps redone")
            out["events"][event] = {k: stats([r[k] for r in rows]) for k in ("detected_s", "running_s", "redone_steps")}
        js = kube.jobset(NS, RUN) or {}
        out["jobset_status"] = {k: (js.get("status") or {}).get(k) for k in ("restarts", "restartsCountTowardsMax")}
        kube.delete_jobset(NS, RUN)
    finally:
        if watcher is not None:
            watcher.halt.set()
        if not args.keep_up:
            lc.down()

    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print(f"local control plane, time factor {out['time_factor']}, measured {out['measured']} (load {out['load_average'][0]:.1f}); p50 [min-max]")
        for event, v in out["events"].items():
            d, r, s = v["detected_s"], v["running_s"], v["redone_steps"]
            print(
                f"  {event:<12} detected {d['p50']:>6.2f} s [{d['min']:.2f}-{d['max']:.2f}]   all running {r['p50']:>6.2f} s "
                f"[{r['min']:.2f}-{r['max']:.2f}]   steps redone {s['p50']:.0f} [{s['min']:.0f}-{s['max']:.0f}]  (n={d['n']})"
            )
        print(f"  the run: {out['jobset_status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
