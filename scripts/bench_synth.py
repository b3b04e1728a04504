"""Synth wall time and peak memory for 1, 16 and 256 TPU pools (not a test).

Each size runs in a fresh Python process, so every number includes starting the
jsii node runtime and loading the provider, as a user's `python -m infra synth`
does. Peak memory is reported for the Python process and for the jsii node
child separately (their sum bounds the pair's footprint): the child reads its
own peak with getrusage(RUSAGE_SELF) and the node child's with
getrusage(RUSAGE_CHILDREN) after jsii's exit hook has reaped it.

    $venv/bin/python scripts/bench_synth.py [--sizes 1,16,256]

``--fleet`` times ``infra synth`` of examples/fleet/fleet.yaml (two workers and the
MultiKueue manager: three stacks in one app) against one of its stacks alone, each in a
fresh process started as a user's shell starts it (no NODE_OPTIONS), ``--samples`` times,
and prints the medians. ``--repo DIR`` measures another checkout of the toolkit (e.g. an
older commit, for a before/after) with this script.

    $venv/bin/python scripts/bench_synth.py --fleet [--samples 5] [--repo DIR]
"""

from __future__ import annotations

import argparse
import atexit
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _spec_data(pools: int) -> dict:
    import yaml

    data = yaml.safe_load((REPO / "examples" / "default.yaml").read_text())
    data["cluster"]["name"] = "bench"
    data["tpu_pools"] = [{"name": f"p{i}", "type": "v5litepod-16", "slices": 1, "capacity": "spot"} for i in range(pools)]
    return data


def child(pools: int) -> None:
    result: dict[str, float] = {"pools": pools}

    def report() -> None:
        # Registered before cdktn is imported, so it runs after jsii's own exit
        # hook has stopped and waited for the node process.
        result["python_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result["node_peak_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()

    atexit.register(report)
    t0 = time.perf_counter()
    from infra.spec import parse_spec

    spec = parse_spec(_spec_data(pools))
    t1 = time.perf_counter()
    from infra.stack import synth

    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        path = synth(spec, Path(out))
        t3 = time.perf_counter()
        doc = json.loads(path.read_text())
    result.update(
        spec_s=round(t1 - t0, 3),
        import_cdk_s=round(t2 - t1, 3),
        build_and_synth_s=round(t3 - t2, 3),
        total_s=round(t3 - t0, 3),
        node_pools=len(doc["resource"]["google_container_node_pool"]),
    )


def fleet_child(repo: str, spec: str) -> None:
    """``infra synth --spec SPEC`` of ``repo``'s toolkit, in process: its time and both processes' peaks on stdout."""
    sys.path.insert(0, repo)
    result: dict[str, float | str] = {"spec": spec}

    def report() -> None:
        result["python_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result["node_peak_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()

    atexit.register(report)
    t0 = time.perf_counter()
    from infra.fleet import load_spec_or_fleet
    from infra.synth_out import synth_into

    found = load_spec_or_fleet(Path(repo) / spec)
    with tempfile.TemporaryDirectory() as out:
        result["stacks"] = len(synth_into(found, Path(out)))
    result["synth_s"] = round(time.perf_counter() - t0, 3)


def fleet_bench(repo: Path, samples: int) -> int:
    import os
    import statistics

    from toolkit import tools

    env = {k: v for k, v in os.environ.items() if k != "NODE_OPTIONS"}  # a user's shell: the toolkit sets what jsii needs
    print(f"toolkit at {repo}; {samples} samples each, medians [min-max]")
    print(f"{'synth':<34} {'stacks':>6} {'wall s':>18} {'python MB':>10} {'node MB':>16}")
    for label, spec in (("--spec examples/fleet/fleet.yaml", "examples/fleet/fleet.yaml"), ("--spec examples/fleet/west.yaml", "examples/fleet/west.yaml")):
        rows = []
        for _ in range(samples):
            t0 = time.perf_counter()
            proc = tools.run([sys.executable, __file__, "--fleet-child", spec, "--repo", str(repo)], cwd=repo, env=env)
            wall = time.perf_counter() - t0
            if not proc.ok:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            rows.append({**json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1]), "wall": wall})

        def cell(key: str, fmt: str, rows: list[dict] = rows) -> str:
            xs = [r[key] for r in rows]
            return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"

        print(
            f"{label:<34} {rows[0]['stacks']:>6} {cell('wall', '.2f'):>18} {statistics.median(r['python_peak_mb'] for r in rows):>10.0f} {cell('node_peak_mb', '.0f'):>16}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,16,256")
    ap.add_argument("--fleet", action="store_true", help="the fleet example's synth against one of its stacks")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--repo", type=Path, default=REPO, help="the toolkit checkout to measure (--fleet)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--fleet-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
    if args.fleet_child is not None:
        fleet_child(str(args.repo.resolve()), args.fleet_child)
        return 0
    if args.fleet:
        return fleet_bench(args.repo.resolve(), args.samples)
    from toolkit import tools

    print(f"{'pools':>6} {'node pools':>10} {'import cdk s':>12} {'build+synth s':>13} {'wall s':>7} {'python MB':>9} {'node MB':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        t0 = time.perf_counter()
        proc = tools.run([sys.executable, __file__, "--child", str(n)], cwd=REPO)
        wall = time.perf_counter() - t0
        if not proc.ok:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
        print(
            f"{n:>6} {r['node_pools']:>10} {r['import_cdk_s']:>12.2f} {r['build_and_synth_s']:>13.2f} {wall:>7.2f} "
            f"{r['python_peak_mb']:>9.0f} {r['node_peak_mb']:>8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
