"""What resuming costs: the extra time a resumed tiny MaxText run spends restoring.

    python scripts/bench_resume.py [--runs N] [--recipe maxtext-6b] [--steps 6]

Per round, with real MaxText on CPU (``run-local --tiny``, checkpointing on as planned):
  1. a fresh run of S steps under run name A (saves its steps into <dir>/checkpoints/A);
  2. the same name with 2 x S steps: it resumes from step S-1 and trains S more steps;
  3. a control: a fresh run of S steps under a new name (same work as 2, no restore).

Prints the medians of
  - restore: MaxText's "trying to load this run's existing checkpoint" line to Orbax's
    "Finished load" line in the resumed run's log (the time spent restoring);
  - resumed vs control wall time (2 - 3): the end-to-end extra, with process start and
    compile noise in it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(recipe: str, out: Path, name: str, steps: int, *extra: str) -> dict:
    argv = [sys.executable, "-m", "workloads", "run-local", recipe, "--tiny", "--steps", str(steps), "--name", name, "--out", str(out), "-o", "json", *extra]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"run-local {name} failed (exit {proc.returncode}): {tail[0]}")
    return json.loads(proc.stdout)["local_run"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--recipe", default="maxtext-6b")
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    restores, extras, walls = [], [], []
    with tempfile.TemporaryDirectory(prefix="tgk-bench-resume-") as tmp:
        for i in range(a.runs):
            out = Path(tmp) / f"r{i}"
            _run(a.recipe, out, f"bench-resume-{i}", a.steps)
            resumed = _run(a.recipe, out, f"bench-resume-{i}", 2 * a.steps, "--resume")
            if resumed["restored_step"] != a.steps - 1 or resumed["restore_seconds"] is None:
                raise SystemExit(f"round {i}: expected a restore of step {a.steps - 1}, got {resumed['restored_step']} ({resumed['restore_seconds']} s)")
            control = _run(a.recipe, Path(tmp) / f"c{i}", f"bench-control-{i}", a.steps)
            restores.append(resumed["restore_seconds"])
            extras.append(resumed["seconds"] - control["seconds"])
            walls.append((resumed["seconds"], control["seconds"]))
            print(
                f"round {i}: restore {resumed['restore_seconds']:.3f} s; resumed {resumed['seconds']:.1f} s vs fresh {control['seconds']:.1f} s",
                file=sys.stderr,
            )
    print(f"{a.recipe} --tiny, {a.steps} new steps after resuming from step {a.steps - 1}, {a.runs} rounds (medians):")
    print(f"  restore (MaxText load line -> Orbax 'Finished load'): {statistics.median(restores):.3f} s  [range {min(restores):.3f}-{max(restores):.3f}]")
    print(f"  resumed run minus fresh run of the same steps (wall): {statistics.median(extras):+.1f} s  [range {min(extras):+.1f} to {max(extras):+.1f}]")
    print(f"  wall: resumed {statistics.median(w[0] for w in walls):.1f} s, fresh {statistics.median(w[1] for w in walls):.1f} s")


if __name__ == "__main__":
    main()
