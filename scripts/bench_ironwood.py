#!/usr/bin/env python3
"""Benchmark: the Ironwood rehearsals' recovery times on the local control plane (not a test).

    $venv/bin/python scripts/bench_ironwood.py [--samples 3] [--cases fault elastic] [--state-dir DIR] [-o json]

The cluster is tests/integration/test_ironwood.py's (``SPEC`` there: a dynamically sliced tpu7x
pool of two 4x4x4 sub-blocks, a tpu7x 2x2x2 pool, a CPU node large enough for a Pathways head),
started in its own state dir (default ``$TGK_CACHE/local-cluster/bench-ironwood``) and taken down
at the end. Each sample is a fresh run, submitted through ``python -m workloads submit``, and times
what the integration test prints as a figure, from the disruption (made in this process, so no
interpreter start is counted) to:

  fault     a 2x2x2 sub-slice run's sub-block made faulty (``local fault``: its partitions
            UNHEALTHY): the run Running again, every pod new, on the healthy sub-block. The
            rehearsal daemon plays GKE's and Kueue's slice controllers; the real Kueue evicts the
            run and admits it again through topology-aware scheduling, the real JobSet makes the pods.
  elastic   a Pathways run with an elastic slice (2 slices on the 2x2x2 pool, ``--elastic-slices 1``),
            slice 1 preempted (``local preempt --slice 1``, its nodes back after the default 5 s):
            the head's log shows the next completed step after the slice came back. The rehearsal
            plays the Pathways controller's wait and reload at the time factor.

Samples are polled every 0.1 s. The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import load_spec  # noqa: E402
from tests.integration.test_ironwood import NS, SPEC  # noqa: E402
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_NAME_LABEL  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.local import slices  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.local.disrupt import preempt  # noqa: E402
from workloads.local.rehearsal import pod_log_file, time_factor  # noqa: E402

T = TypeVar("T")
_STEP = re.compile(r"completed step: (\d+),")
_BACK = "Elastic: slice 1 back"


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def wait(check: Callable[[], T | None], timeout: float, what: str) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if got := check():
            return got
        time.sleep(0.1)
    raise SystemExit(f"bench: timed out after {timeout:.0f} s waiting for {what}")


def stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": round(statistics.median(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2)}


class Bench:
    def __init__(self, lc: LocalCluster, spec_file: Path) -> None:
        self.lc, self.spec_file, self.kube = lc, spec_file, lc.client()

    def wl(self, *args: str) -> None:
        r = subprocess.run([sys.executable, "-m", "workloads", *args], cwd=REPO, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"bench: workloads {args[0]} failed: {r.stderr.strip().splitlines()[-1:]}")

    def submit(self, run: str, *extra: str) -> None:
        self.wl("submit", "maxtext-6b", "--spec", str(self.spec_file), "--kubeconfig", str(self.lc.kubeconfig), "--name", run, "--no-wait", *extra)

    def delete_run(self, run: str) -> None:
        """`workloads delete RUN --yes`: the CLI deletes through the ledger."""
        self.wl("delete", run, "--spec", str(self.spec_file), "--kubeconfig", str(self.lc.kubeconfig), "--yes")

    def pods(self, run: str) -> list[dict[str, Any]]:
        return self.kube.list(self.kube.resource("v1", "Pod"), NS, label_selector=f"{JOBSET_NAME_LABEL}={run}")

    def running(self, run: str, n: int) -> list[dict[str, Any]] | None:
        pods = [p for p in self.pods(run) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods) else None

    def slices(self) -> list[dict[str, Any]]:
        return self.kube.list(self.kube.resource("accelerator.gke.io/v1beta1", "Slice"))

    def head_log(self, run: str) -> str:
        heads = [p for p in self.pods(run) if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "pathways-head"]
        path = pod_log_file(self.lc.state_dir, NS, heads[0]["metadata"]["name"]) if heads else None
        return path.read_text(errors="replace") if path and path.is_file() else ""

    def fault(self, i: int) -> float:
        run = f"sub-{i}"
        self.submit(run, "--topology", "2x2x2", "--rehearse-seconds", "600")
        pods = wait(lambda: self.running(run, 2), 300, "the sub-slice run Running")
        nodes = {n["metadata"]["name"]: n for n in self.kube.list(self.kube.resource("v1", "Node"))}
        (faulty,) = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_NODEPOOL_LABEL] for p in pods}
        old = {p["metadata"]["uid"] for p in pods}
        t0 = time.monotonic()
        slices.fault(self.kube, faulty)

        def moved() -> list[dict[str, Any]] | None:
            now = self.running(run, 2)
            return now if now and not ({p["metadata"]["uid"] for p in now} & old) else None

        moved_to = wait(moved, 300, "the run Running again off the faulty sub-block")
        elapsed = time.monotonic() - t0
        nodes = {n["metadata"]["name"]: n for n in self.kube.list(self.kube.resource("v1", "Node"))}
        if {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_NODEPOOL_LABEL] for p in moved_to} == {faulty}:
            raise SystemExit(f"bench: run {run} came back on the faulty sub-block {faulty}")
        self.delete_run(run)
        wait(lambda: not self.slices() or None, 180, "the run's Slice deleted with it")
        slices.repair(self.kube, faulty)
        return elapsed

    def elastic(self, i: int) -> float:
        run = f"elastic-{i}"
        self.submit(
            run, "--runtime", "pathways", "--pool", "pw", "--slices", "2", "--elastic-slices", "1", "--max-slice-restarts", "3",
            "--checkpoint-every", "0.5", "--rehearse-seconds", "300",
        )  # fmt: skip
        wait(lambda: self.running(run, 5), 300, "the Pathways head and 4 workers Running")
        wait(lambda: max([int(s) for s in _STEP.findall(self.head_log(run))] or [0]) >= 8 or None, 240, "8 steps done")
        t0 = time.monotonic()
        preempt(self.kube, self.lc.state_dir, NS, run, 1)

        def resumed() -> str | None:
            after = self.head_log(run).split(_BACK, 1)
            return after[1] if len(after) == 2 and _STEP.search(after[1]) else None

        wait(resumed, 300, "the program's next step after the slice came back")
        elapsed = time.monotonic() - t0
        self.delete_run(run)
        wait(lambda: not self.pods(run) or None, 180, "the run's pods gone")
        return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=3, help="fresh runs per case (at least 3)")
    ap.add_argument("--cases", nargs="+", default=["fault", "elastic"], choices=["fault", "elastic"])
    ap.add_argument("--state-dir", type=Path, default=cache_dir() / "local-cluster" / "bench-ironwood")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    if args.samples < 3:
        ap.error("--samples: at least 3 (the figure is a median)")

    spec_file = Path(tempfile.mkdtemp(prefix="tgk-bench-ironwood-")) / "ironwood.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    lc = LocalCluster(args.state_dir, progress=log)
    lc.down()
    out: dict[str, Any] = {"measured": time.strftime("%Y-%m-%d"), "time_factor": time_factor(), "cases": {}}
    try:
        lc.up(load_spec(spec_file), spec_path=str(spec_file), build=False, timeout=600)
        bench = Bench(lc, spec_file)
        for case in args.cases:
            xs = []
            for i in range(args.samples):
                xs.append(getattr(bench, case)(i))
                log(f"{case} sample {i + 1}: {xs[-1]:.2f} s")
            out["cases"][case] = stats(xs) | {"samples": [round(x, 2) for x in xs]}
    finally:
        lc.down()
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]

    if args.output == "json":
        print(json.dumps(out, indent=2))
        return 0
    what = {"fault": "faulty sub-block -> the run Running on a healthy one", "elastic": "elastic slice replacement -> the next step"}
    print(f"local control plane, time factor {out['time_factor']}, {out['measured']} (load {out['load_average'][0]:.1f} at the end); p50 [min-max] s")
    for case, v in out["cases"].items():
        print(f"  {what[case]:<55} {v['p50']:>6.2f} [{v['min']:.2f}-{v['max']:.2f}] n={v['n']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
