"""Benchmark `python -m workloads preflight <recipe> --compile`: wall time and peak memory.

    $venv/bin/python scripts/bench_preflight.py                  # maxtext-6b, v5e-16 x 2, 1 run
    $venv/bin/python scripts/bench_preflight.py --runs 3 --slices 1 --json bench.json

Runs the CLI as a user would (a subprocess), and reports per run:
- wall time of the whole command (venv lookup + MaxText config check + AOT compile);
- the compile's own time and peak RSS (train_compile, measured by the toolkit);
- the peak RSS of the whole process tree (toolkit.tools.run's wait4 on the CLI: the
  maximum over it and every child it waited for, i.e. the largest single process, not
  their sum);
- the verdict and the compiled memory per device.

The machine's load matters (2 cores shared with other builds here): report `uptime`'s
load average with the figures, which this script prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from toolkit import tools  # noqa: E402


def one_run(recipe: str, slices: int, sets: list[str]) -> dict:
    cmd = [sys.executable, "-m", "workloads", "preflight", recipe, "--compile", "--slices", str(slices), "-o", "json"]
    for s in sets:
        cmd += ["--set", s]
    with tempfile.TemporaryDirectory(prefix="tgk-bench-preflight-") as logs:
        done = tools.run(cmd, cwd=REPO, log_dir=Path(logs), log_name="preflight")  # files: wait4 gives the tree's peak RSS
        out = done.stdout_text()
        if done.returncode not in (0, 1):
            raise SystemExit(f"preflight exited {done.returncode}: {out[-2000:] or done.stderr_text()[-2000:]}")
    d = json.loads(out)
    return {
        "exit_code": done.returncode,
        "verdict": d["verdict"],
        "wall_seconds": round(done.seconds, 1),
        "compile_seconds": d["compile_seconds"],
        "compile_peak_rss_gib": round(d["peak_rss_bytes"] / 2**30, 2),
        "tree_peak_rss_gib": round(done.peak_rss_bytes / 2**30, 2),
        "memory_gib_per_device": d.get("memory_gib"),
        "oom": d.get("oom"),
        "model_tflop_per_step_per_device": d.get("model_tflop_per_step_per_device"),
        "load_average": os.getloadavg(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="maxtext-6b")
    ap.add_argument("--slices", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()

    print(f"bench: preflight {a.recipe} --compile --slices {a.slices} {' '.join('--set ' + s for s in a.sets)}; cpus={os.cpu_count()}, load={os.getloadavg()}")
    runs = []
    for i in range(a.runs):
        r = one_run(a.recipe, a.slices, a.sets)
        runs.append(r)
        mem = r["memory_gib_per_device"] or {}
        print(
            f"  run {i + 1}: {r['verdict']}, wall {r['wall_seconds']} s (compile {r['compile_seconds']} s), "
            f"peak RSS compile {r['compile_peak_rss_gib']} GiB / tree {r['tree_peak_rss_gib']} GiB, "
            f"{mem.get('total', '-')} GiB/device, load {tuple(round(x, 1) for x in r['load_average'])}"
        )
    walls = [r["wall_seconds"] for r in runs]
    print(f"wall: median {statistics.median(walls)} s, min {min(walls)} s, max {max(walls)} s over {len(runs)} run(s)")
    if a.json:
        a.json.write_text(json.dumps({"recipe": a.recipe, "slices": a.slices, "sets": a.sets, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
