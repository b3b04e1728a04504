"""The planner's step-time estimate against every step time tpu-recipes publishes.

    .venv/bin/python scripts/bench_step_time.py [--json out.json]

For each figure of workloads/recipes/_published_step_times.yaml (the Ironwood table; the
Trillium and v5p README log lines, each with its source, commit and the day it was read):
the estimate of workloads/planning/step_time.py for that run (the MaxText preset's work,
what the recipe's remat policy recomputes, fp8/int8 at their peaks, experts at their active
count, all-to-alls over an expert axis) with the shipped efficiencies, the same estimate
with efficiencies fitted without that figure (leave-one-out: the error a plan can expect on
a run nobody fitted), and estimated / published. Then the efficiencies fitted to all the
figures beside the shipped ones, the median and worst ratios, and the error per kind of run
(``STEP_ERROR``, what a plan prints beside its estimate).

A ratio above 1 is an estimate slower than the published run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workloads.planning import step_calibration as sc  # noqa: E402
from workloads.planning import step_time  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    figs = sc.figures()
    fitted = sc.fit(figs)
    checked = sc.leave_one_out(figs, step_time.SHIPPED)
    print(f"published step times: {len(figs)} figures (workloads/recipes/_published_step_times.yaml, read {sc.read_date()})")
    print(f"{'run':<58} {'kind':<19} {'published':>10} {'estimate':>9} {'ratio':>6} {'held out':>9} {'ratio':>6}")
    rows = []
    for c in checked:
        f = c.figure
        print(
            f"{f.name[:58]:<58} {c.parts.kind:<19} {f.step_seconds:>9.2f}s {c.estimate:>8.2f}s {c.estimate / f.step_seconds:>6.2f}"
            f" {c.held_out:>8.2f}s {c.ratio:>6.2f}"
        )
        rows.append(
            {
                "run": f.name,
                "kind": c.parts.kind,
                "published_s": f.step_seconds,
                "estimated_s": round(c.estimate, 3),
                "ratio": round(c.estimate / f.step_seconds, 3),
                "held_out_s": round(c.held_out, 3),
                "held_out_ratio": round(c.ratio, 3),
                "source": f.source,
            }
        )
    s = sc.summary(checked)
    shipped = step_time.SHIPPED
    print(
        f"\nleave-one-out estimated/published: median {s['median_ratio']}, least {s['min_ratio']}, most {s['max_ratio']};"
        f" {s['within_30_percent']} of {s['figures']} within 30%, {s['beyond_2x']} beyond 2x"
    )
    print(f"fitted to all:  dense {fitted.dense}, quantized x{fitted.quantized}, experts {fitted.experts}, attention {fitted.attention}")
    print(f"shipped:        dense {dict(shipped.dense)}, quantized x{dict(shipped.quantized)}, experts {shipped.experts}, attention {shipped.attention}")
    by_kind = sc.error_by_kind(checked)
    print(f"published / estimated by kind (leave-one-out): {by_kind}   shipped STEP_ERROR: {step_time.STEP_ERROR}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": s, "fitted": fitted.__dict__, "error_by_kind": by_kind}, indent=2, default=dict))


if __name__ == "__main__":
    main()
