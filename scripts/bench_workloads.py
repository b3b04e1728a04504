"""Wall-time benchmarks for the workloads CLI's cold paths.

    python scripts/bench_workloads.py [--runs N]

Prints the median wall time of
  1. ``python -m workloads --help``                  (target <= 0.3 s)
  2. ``python -m workloads submit maxtext-6b --slices 64 --dry-run``
     against a spec with 64 v5e 4x4 slices            (target <= 0.5 s)
and the in-process plan + render time for (2). Each CLI run is a fresh
interpreter, as a user's is.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SPEC_64 = """\
project: bench-project
region: us-west4
zones: [us-west4-a]
cluster: {name: bench}
tpu_pools:
  - {name: v5e, type: v5litepod-16, slices: 64, capacity: spot}
buckets:
  - {name: bench-project-ckpt, purpose: checkpoints}
"""


def _time_cmd(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.strip()}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    n = ap.parse_args().runs

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec-64.yaml"
        spec.write_text(SPEC_64)
        help_s = _time_cmd(["-m", "workloads", "--help"], n)
        submit_s = _time_cmd(["-m", "workloads", "submit", "maxtext-6b", "--slices", "64", "--dry-run", "--spec", str(spec), "--name", "bench"], n)

        sys.path.insert(0, str(REPO))
        from infra.spec import load_spec
        from workloads.planning.planner import Overrides, plan_run
        from workloads.render import yamlio
        from workloads.render.jobset import run_objects

        env = load_spec(spec)
        start = time.perf_counter()
        for _ in range(20):
            yamlio.dump_all(run_objects(plan_run("maxtext-6b", env, Overrides(slices=64, name="bench"))))
        inproc_ms = (time.perf_counter() - start) / 20 * 1000

    print(f"python -m workloads --help:                      {help_s:.3f} s (median of {n}; target <= 0.3 s)")
    print(f"submit maxtext-6b --slices 64 --dry-run:         {submit_s:.3f} s (median of {n}; target <= 0.5 s)")
    print(f"  in-process plan + JobSet + YAML (warm):        {inproc_ms:.1f} ms")


if __name__ == "__main__":
    main()
