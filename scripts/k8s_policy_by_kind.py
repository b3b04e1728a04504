#!/usr/bin/env python3
"""checkov's Kubernetes policies over every rendered manifest, counted by kind.

    .venv/bin/python scripts/k8s_policy_by_kind.py [-o json]

Renders what tests/support/k8s_scan.py lays out (every example's cluster objects, every runtime's
runs, what the controllers create from them), runs the pinned checkov once, and prints per
kind: objects scanned, checks passed and failed, and the failed check ids. Raw counts:
accepted findings (tests/test_k8s_policy.py ACCEPTED) are counted too, which is the point.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.k8s_scan import write_scan_tree  # noqa: E402


def checkov() -> str:
    exe = os.environ.get("TGK_CHECKOV") or shutil.which("checkov")
    if not exe:
        sys.exit("error: checkov: not installed — run `bash scripts/setup.sh` and `source scripts/env.sh`")
    return exe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="k8s-policy-") as tmp:
        root = Path(tmp)
        objects = write_scan_tree(root)
        proc = subprocess.run(
            [checkov(), "-d", str(root), "--framework", "kubernetes", "--skip-download", "--compact", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        )
        if proc.returncode not in (0, 1):
            sys.exit(f"error: checkov failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    (report,) = [r for r in (out if isinstance(out, list) else [out]) if r.get("check_type") == "kubernetes"]
    scanned = collections.Counter(o["kind"] for objs in objects.values() for o in objs)
    passed = collections.Counter(f["resource"].split(".")[0] for f in report["results"]["passed_checks"])
    failed = collections.Counter(f["resource"].split(".")[0] for f in report["results"]["failed_checks"])
    ids: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for f in report["results"]["failed_checks"]:
        ids[f["resource"].split(".")[0]][f["check_id"]] += 1
    kinds = sorted(set(scanned) | set(passed) | set(failed))
    rows = [
        {"kind": k, "objects": scanned.get(k, 0), "passed": passed.get(k, 0), "failed": failed.get(k, 0), "failed_checks": dict(sorted(ids[k].items()))}
        for k in kinds
    ]
    if args.output == "json":
        print(json.dumps({"by_kind": rows, "failed": sum(failed.values()), "passed": sum(passed.values())}, indent=2))
        return 0
    print(f"{'kind':<34} {'objects':>7} {'passed':>7} {'failed':>7}  failed checks")
    for r in rows:
        checks = " ".join(f"{c}x{n}" if n > 1 else c for c, n in r["failed_checks"].items())
        print(f"{r['kind']:<34} {r['objects']:>7} {r['passed']:>7} {r['failed']:>7}  {checks}")
    print(f"{'total':<34} {sum(scanned.values()):>7} {sum(passed.values()):>7} {sum(failed.values()):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
