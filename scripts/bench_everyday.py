"""Wall time and peak memory of the everyday commands, each in a fresh process (not a test).

    source scripts/env.sh
    $venv/bin/python scripts/bench_everyday.py [--runs 5] [--pools 1,16,64] [--xpk PATH] [--compare DIR] [-o json]

Measures, with the median of ``--runs`` fresh processes each (a user's command is a
fresh interpreter, and for synth a fresh jsii node runtime too):

- ``python -m infra synth`` of examples/default.yaml                 (aim <= 2 s, never > 3 s)
- the same for generated specs with 1, 16 and 64 TPU pools            (flat in the pool count)
- ``python -m workloads submit maxtext-6b --slices 2 --dry-run``      (aim <= 0.2 s)
- the same with ``--slices 64`` against a generated 64-slice spec    (aim <= 0.3 s)
- ``python -m infra --help`` and ``python -m workloads --help``       (aim <= 0.2 s)
- with ``--xpk PATH``: ``xpk workload create --dry-run`` for the same 2-slice job

Peak memory is the largest sum of the resident sets of the command's process tree
(Python and the jsii node children), sampled every 20 ms; short commands can finish
between samples, so it is at least the largest single process's ru_maxrss from
wait4. CPU is user + system time of the whole tree (wait4), which a busy machine
disturbs less than wall time; the load average is printed with the results.

``--compare DIR`` runs every command in another checkout too (e.g. a copy of the tree
before a change), alternating the two run by run, so both see the same machine load;
``--compare-python PATH`` runs that checkout with another interpreter (the venv of the
pins before a change).

Bytecode: a user's Python caches compiled modules (pip compiles them at install; an
editable install writes them on first import). This machine's environment sets
PYTHONDONTWRITEBYTECODE=1, which makes every command recompile the toolkit's own
modules, so by default each tree gets a bytecode cache of its own in a temporary
directory (PYTHONPYCACHEPREFIX) and one unmeasured warm-up run per command.
``--no-bytecode-cache`` measures the recompiling case instead.

Calibration: the same host runs the same instructions up to ~1.5x slower at some times
than at others (measured here with callgrind: one ``submit --dry-run`` is 1.23 G
instructions either way). The results end with the time of a fixed pure-Python loop in
a fresh process (``CALIBRATION``), so figures from different runs can be put side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")

SPEC_64 = """\
project: bench-project
region: us-west4
zones: [us-west4-a]
cluster: {name: bench}
tpu_pools:
  - {name: v5e-16, type: v5litepod-16, slices: 64, capacity: spot}
teams:
  - {name: research, namespace: research}
buckets:
  - {name: bench-project-ckpt, purpose: checkpoints}
"""


def _pools_spec(pools: int) -> str:
    """examples/default.yaml with ``pools`` one-slice v5e pools instead of its own."""
    import yaml

    data = yaml.safe_load((REPO / "examples" / "default.yaml").read_text())
    data["cluster"]["name"] = "bench"
    data["tpu_pools"] = [{"name": f"p{i}", "type": "v5litepod-16", "slices": 1, "capacity": "spot"} for i in range(pools)]
    return yaml.safe_dump(data, sort_keys=False)


# ------------------------------------------------------------------ sampling


def _children_of(pids: set[int]) -> set[int]:
    """``pids`` and every descendant (one /proc scan per level; no psutil in the venv)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: the ppid follows the last ')'
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = set(pids), set(pids)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in out}
        out |= frontier
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak bytes) of one fresh run of ``argv``; raises when it fails."""
    peak = 0
    stop = threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def sample() -> None:
        nonlocal peak
        tree: set[int] = {proc.pid}
        tick = 0
        while not stop.wait(0.02):
            if tick % 5 == 0:  # rescan for new children every 100 ms; read known ones every 20 ms
                tree = _children_of({proc.pid})
            tick += 1
            peak = max(peak, sum(_rss(p) for p in tree))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) failed ({proc.returncode}): {err.strip()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, max(peak, usage.ru_maxrss * 1024)


@dataclass
class Result:
    name: str
    argv: list[str]
    tree: str = ""
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    target_s: float | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpus)

    @property
    def peak_mib(self) -> float:
        return max(self.peaks) / 2**20

    def row(self) -> dict:
        return {
            "name": self.name,
            "tree": self.tree,
            "median_s": round(self.median_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "min_s": round(min(self.walls), 3),
            "max_s": round(max(self.walls), 3),
            "peak_mib": round(self.peak_mib, 1),
            "runs": len(self.walls),
            "target_s": self.target_s,
            "argv": self.argv,
        }


@dataclass(frozen=True)
class Tree:
    """A checkout to run the commands in, with the interpreter and environment to run them with."""

    path: Path
    python: str
    env: dict[str, str]

    def argv(self, argv: list[str]) -> list[str]:
        return [self.python if a == PY else a for a in argv]


PY = "{python}"  # stands for each tree's interpreter in an argv

# A fixed CPU-bound loop (no imports, no I/O): how fast this host runs Python right now.
CALIBRATION = "t = 0\nfor i in range(3_000_000):\n    t += i * i % 7\n"


def calibrate(runs: int) -> float:
    """Median seconds of CALIBRATION in a fresh interpreter (startup included)."""
    return statistics.median(_run_once([sys.executable, "-c", CALIBRATION], dict(os.environ), REPO)[0] for _ in range(max(3, runs)))


def measure(name: str, argv: list[str], runs: int, trees: list[Tree], target_s: float | None = None, warmup: bool = True) -> list[Result]:
    """One Result per tree; the trees take turns, run by run (after one unmeasured run each when ``warmup``)."""
    results = [Result(name, t.argv(argv), tree=str(t.path), target_s=target_s) for t in trees]
    if warmup:
        for tree in trees:
            _run_once(tree.argv(argv), tree.env, tree.path)
    for _ in range(runs):
        for tree, r in zip(trees, results, strict=True):
            wall, cpu, peak = _run_once(tree.argv(argv), tree.env, tree.path)
            r.walls.append(wall)
            r.cpus.append(cpu)
            r.peaks.append(peak)
    for r in results:
        print(f"  {name} [{r.tree}]: {r.median_s:.3f} s", file=sys.stderr, flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (median); at least 5")
    ap.add_argument("--pools", default="1,16,64", help="pool counts for the synth size sweep ('' to skip)")
    ap.add_argument("--xpk", help="an xpk executable to time for the same 2-slice job (xpk's --dry-run)")
    ap.add_argument("--only", default="", help="comma-separated name prefixes to run (synth, submit, help, xpk)")
    ap.add_argument("--compare", type=Path, help="another checkout to measure alongside this one (e.g. the tree before a change)")
    ap.add_argument("--compare-python", help="the interpreter for --compare's checkout (default: this one)")
    ap.add_argument("--no-bytecode-cache", action="store_true", help="measure with PYTHONDONTWRITEBYTECODE=1 and no cache (recompiling every run)")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if not os.environ.get("JSII_NODE"):
        print("warning: JSII_NODE is unset; `source scripts/env.sh` first to measure what users run", file=sys.stderr)
    py = PY
    only = tuple(p for p in args.only.split(",") if p)
    results: list[Result] = []
    load_before = os.getloadavg()

    def want(name: str) -> bool:
        return not only or name.startswith(only)

    with tempfile.TemporaryDirectory(prefix="tgk-bench-") as tmp_:
        tmp = Path(tmp_)

        def tree(path: Path, python: str, label: str) -> Tree:
            env = dict(os.environ)
            if args.no_bytecode_cache:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
                env.pop("PYTHONPYCACHEPREFIX", None)
            else:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                env["PYTHONPYCACHEPREFIX"] = str(tmp / f"pycache-{label}")
            return Tree(path.resolve(), python, env)

        trees = [tree(REPO, sys.executable, "this")]
        if args.compare is not None:
            trees.insert(0, tree(args.compare, args.compare_python or sys.executable, "compare"))
        warm = not args.no_bytecode_cache
        spec64 = tmp / "spec-64.yaml"
        spec64.write_text(SPEC_64)
        n = args.runs
        if want("synth"):
            out = tmp / "out"
            results += measure("synth default", [py, "-m", "infra", "synth", "--spec", "examples/default.yaml", "--out", str(out)], n, trees, 2.0, warm)
            for pools in (int(x) for x in args.pools.split(",") if x):
                path = tmp / f"pools-{pools}.yaml"
                path.write_text(_pools_spec(pools))
                results += measure(f"synth {pools} pools", [py, "-m", "infra", "synth", "--spec", str(path), "--out", str(out)], n, trees, 2.0, warm)
        if want("submit"):
            results += measure(
                "submit maxtext-6b --slices 2 --dry-run", [py, "-m", "workloads", "submit", "maxtext-6b", "--slices", "2", "--dry-run"], n, trees, 0.2, warm
            )
            results += measure(
                "submit maxtext-6b --slices 64 --dry-run",
                [py, "-m", "workloads", "submit", "maxtext-6b", "--slices", "64", "--dry-run", "--spec", str(spec64)],
                n,
                trees,
                0.3,
                warm,
            )
        if want("help"):
            results += measure("python -m infra --help", [py, "-m", "infra", "--help"], n, trees, 0.2, warm)
            results += measure("python -m workloads --help", [py, "-m", "workloads", "--help"], n, trees, 0.2, warm)
        if args.xpk and want("xpk"):
            # The same job as `submit maxtext-6b --slices 2`: two v5e 4x4 slices; xpk's
            # --dry-run prints the commands and the JobSet without calling gcloud or kubectl.
            xpk_argv = [
                args.xpk, "workload", "create", "--dry-run", "--project", "my-tpu-project", "--zone", "us-west4-a",
                "--cluster", "tpu-dev", "--workload", "bench-6b", "--tpu-type", "v5litepod-16", "--num-slices", "2",
                "--docker-image", "python:3.11", "--command", "python3 -m maxtext.trainers.pre_train.train",
            ]  # fmt: skip
            results += measure("xpk workload create --num-slices 2 --dry-run", xpk_argv, n, trees[-1:], None, warm)

    load = (load_before, os.getloadavg())
    calibration = calibrate(args.runs)
    if args.output == "json":
        doc = {"loadavg": load, "bytecode_cache": not args.no_bytecode_cache, "calibration_s": round(calibration, 3), "results": [r.row() for r in results]}
        print(json.dumps(doc, indent=2))
        return 0
    label = {str(trees[0].path): "before", str(trees[-1].path): "after"} if args.compare is not None else {}
    print(f"{'command':<44} {'tree':<7} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>6} {'peak MiB':>9} {'aim s':>6}")
    for r in results:
        aim = f"{r.target_s:.1f}" if r.target_s else "-"
        tree = label.get(r.tree, "")
        print(f"{r.name:<44} {tree:<7} {r.median_s:>9.3f} {min(r.walls):>7.3f} {max(r.walls):>7.3f} {r.cpu_s:>6.2f} {r.peak_mib:>9.0f} {aim:>6}")
    print(f"(median of {args.runs} fresh processes each; cpu = median user+sys of the process tree; peak = largest sampled RSS sum)")
    print(
        "(no bytecode cache: every run recompiles the toolkit's modules)"
        if args.no_bytecode_cache
        else "(bytecode cached per tree, as on a user's machine; one warm-up run per command)"
    )
    print(f"(load average before {load[0][0]:.1f}, after {load[1][0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"(calibration: the fixed Python loop took {calibration:.3f} s; compare runs by it, see the docstring)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
