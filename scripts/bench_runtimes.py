"""Dry-run render time of each runtime (jobset, job, ray): what the toolkit adds per runtime (not a test).

    source scripts/env.sh
    $venv/bin/python scripts/bench_runtimes.py [--runs 7] [-o json]

The same run (llama3-8b, the one recipe all three runtimes carry, on
examples/v6e-reservation.yaml, team research) is planned and rendered for each runtime:

- ``cli``: ``python -m workloads submit llama3-8b --runtime R --dry-run -o json`` in a fresh
  process (what a user waits for), median wall seconds of ``--runs``;
- ``render``: in this process, plan + ``render_run`` (the Kustomize tree, read back once: what
  ``submit`` does before it connects), median milliseconds of ``--runs`` x 20 after one warm-up;
- ``objects``/``bytes``: what the dry run prints.

Each runtime is timed in turn within every round, so all three see the same machine load;
the load average is printed with the results.
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

RUNTIMES = ("jobset", "job", "ray")
SPEC = REPO / "examples" / "v6e-reservation.yaml"
RECIPE = "llama3-8b"


def _cli(runtime: str) -> tuple[float, int, int]:
    cmd = [
        sys.executable,
        "-m",
        "workloads",
        "submit",
        RECIPE,
        "--runtime",
        runtime,
        "--team",
        "research",
        "--name",
        f"bench-{runtime}",
        "--spec",
        str(SPEC),
        "--dry-run",
        "-o",
        "json",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{runtime}: {done.stderr.strip()}")
    return wall, len(json.loads(done.stdout)), len(done.stdout)


def _render_ms(runtime: str, repeat: int) -> float:
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render.kustomize import render_run

    spec = load_spec(SPEC)
    overrides = Overrides(runtime=runtime, team="research", name=f"bench-{runtime}")
    render_run(plan_run(RECIPE, spec, overrides))  # warm-up: imports, recipe cache
    t0 = time.perf_counter()
    for _ in range(repeat):
        render_run(plan_run(RECIPE, spec, overrides))
    return (time.perf_counter() - t0) / repeat * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    cli: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    render: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    sizes: dict[str, tuple[int, int]] = {}
    for _ in range(a.runs):
        for r in RUNTIMES:
            wall, objects, size = _cli(r)
            cli[r].append(wall)
            sizes[r] = (objects, size)
            render[r].append(_render_ms(r, 20))
    rows = {
        r: {
            "cli_median_s": round(statistics.median(cli[r]), 3),
            "cli_min_s": round(min(cli[r]), 3),
            "render_median_ms": round(statistics.median(render[r]), 2),
            "objects": sizes[r][0],
            "bytes": sizes[r][1],
        }
        for r in RUNTIMES
    }
    load = os.getloadavg()[0]
    if a.output == "json":
        print(json.dumps({"runs": a.runs, "loadavg_1m": round(load, 2), "runtimes": rows}, indent=2))
        return 0
    print(f"submit {RECIPE} --dry-run on {SPEC.name}, median of {a.runs} (load average {load:.2f})")
    print(f"{'runtime':<8} {'cli wall':>9} {'cli min':>8} {'render':>9} {'objects':>8} {'bytes':>7}")
    for r, row in rows.items():
        print(f"{r:<8} {row['cli_median_s']:>8.3f}s {row['cli_min_s']:>7.3f}s {row['render_median_ms']:>7.2f}ms {row['objects']:>8} {row['bytes']:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
