"""The planner's step-time estimate against the step times tpu-recipes publishes for Ironwood.

    .venv/bin/python scripts/bench_step_time.py [--json out.json]

For every recipe of workloads/recipes/_published_ironwood.yaml: the planner's estimate
(model FLOPs from the MaxText 0.2.5 preset's *active* parameters at the assumed MFU over
the slice's chips, bf16 peak) for the published global batch and sequence length, the
published step time, and estimated / published. Then the median ratio, and the same for
the old count (every expert of a mixture of experts), to show what active parameters fix.

A ratio above 1 is a pessimistic estimate (the planner's side: checkpoints come more often
in time, never less); the assumed MFU is deliberately below what tuned recipes reach.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra import catalog  # noqa: E402
from toolkit.yamlfile import load_yaml  # noqa: E402
from workloads.planning.import_recipe import model_presets  # noqa: E402
from workloads.planning.model import ASSUMED_MFU  # noqa: E402
from workloads.planning.recipe_model import ModelDims  # noqa: E402
from workloads.planning.recipes import RECIPES_DIR  # noqa: E402
from workloads.planning.sizing import step_seconds  # noqa: E402

PUBLISHED = RECIPES_DIR / "_published_ironwood.yaml"


def rows() -> list[dict]:
    data = load_yaml(PUBLISHED.read_text())
    out = []
    for r in data["recipes"]:
        model = ModelDims.model_validate(model_presets()[r["preset"]])
        shape = catalog.shape("tpu7x", r["topology"])
        assert shape.chips == r["chips"], r
        tokens = r["global_batch"] * r["seq"]
        est = step_seconds(model, tokens, r["seq"], shape.chips, shape.peak_tflops_per_chip)
        # The old estimate counted every expert: the same model with every expert active.
        every = model.model_copy(update={"num_experts_per_tok": model.num_experts, "shared_experts": 0})
        old = step_seconds(every, tokens, r["seq"], shape.chips, shape.peak_tflops_per_chip)
        out.append(
            {
                "recipe": f"{r['model']} {r['precision']} {r['topology']} seq {r['seq']}",
                "published_s": r["step_seconds"],
                "estimated_s": round(est, 2),
                "ratio": round(est / r["step_seconds"], 2),
                "ratio_all_experts": round(old / r["step_seconds"], 2),
                "active_params_b": round(model.active_params() / 1e9, 1),
                "params_b": round(model.params() / 1e9, 1),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    table = rows()
    data = load_yaml(PUBLISHED.read_text())
    print(f"published: {data['source']} ({data['source_date']}); assumed MFU {ASSUMED_MFU}")
    print(f"{'recipe':<44} {'params B':>9} {'active B':>9} {'published s':>12} {'estimated s':>12} {'ratio':>6} {'all-experts':>12}")
    for r in table:
        print(
            f"{r['recipe']:<44} {r['params_b']:>9} {r['active_params_b']:>9} {r['published_s']:>12} {r['estimated_s']:>12} {r['ratio']:>6} {r['ratio_all_experts']:>12}"
        )
    median = statistics.median(r["ratio"] for r in table)
    median_old = statistics.median(r["ratio_all_experts"] for r in table)
    print(f"median estimated/published: {median:.2f} (counting every expert: {median_old:.2f})")
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "median_ratio": median, "median_ratio_all_experts": median_old}, indent=2))


if __name__ == "__main__":
    main()
