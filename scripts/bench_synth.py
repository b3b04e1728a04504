"""Synth wall time and peak memory for 1, 16 and 256 TPU pools (not a test).

Each size runs in a fresh Python process, so every number includes starting the
jsii node runtime and loading the provider, as a user's `python -m infra synth`
does. Peak memory is reported for the Python process and for the jsii node
child separately (their sum bounds the pair's footprint): the child reads its
own peak with getrusage(RUSAGE_SELF) and the node child's with
getrusage(RUSAGE_CHILDREN) after jsii's exit hook has reaped it.

    $venv/bin/python scripts/bench_synth.py [--sizes 1,16,256]
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

from toolkit import tools  # noqa: E402


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,16,256")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
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
