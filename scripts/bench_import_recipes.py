"""Import every training script of a tpu-recipes checkout, and plan what imports.

    .venv/bin/python scripts/bench_import_recipes.py TPU_RECIPES_DIR --maxtext-repo MAXTEXT_DIR [--json out.json]

For each ``*.sh`` under ``training/`` (``archive/`` included: older PyTorch layouts): its
layout (xpk / gcluster / benchmark_runner / other), the import outcome (the recipe name, or
the one-line refusal), and for imported tpu7x recipes the plan on a pool of the recipe's own
shape (the HBM estimate and step time, or the refusal). Nothing is written; the scripts and
the MaxText checkout are read, never run. The figures go into the issue's closing note.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def layout(text: str) -> str:
    if "benchmark_runner" in text:
        return "benchmark_runner"
    if "gcluster job submit" in text:
        return "gcluster"
    if "workload create" in text:
        return "xpk"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipes", type=Path)
    ap.add_argument("--maxtext-repo", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["TGK_RECIPES"] = tempfile.mkdtemp(prefix="tgk-bench-import-")

    import yaml

    from tests.conftest import spec_from
    from toolkit.errors import ToolkitError
    from workloads.planning import recipes
    from workloads.planning.import_recipe import import_recipe
    from workloads.planning.planner import Overrides, plan_run

    rows = []
    for n, path in enumerate(sorted((args.recipes / "training").rglob("*.sh"))):
        text = path.read_text(errors="replace")
        row = {"script": str(path.relative_to(args.recipes)), "layout": layout(text)}
        try:
            imp = import_recipe(text, source=path.name, maxtext_repo=args.maxtext_repo)
            row["import"] = f"imported as {imp.name} ({imp.device_type} x {imp.slices})"
        except ToolkitError as e:
            row["import"] = f"refused: {str(e).removeprefix('import-recipe: ')}"
            rows.append(row)
            continue
        gen, _, topology = imp.recipe["shapes"][0].partition("-")
        if gen == "tpu7x":
            name = f"bench-{n}"
            (Path(os.environ["TGK_RECIPES"]) / f"{name}.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": name}))
            recipes.load_recipe.cache_clear()
            spec = spec_from("tpu7x", tpu_pools=[{"name": "p", "generation": gen, "topology": topology, "slices": imp.slices, "capacity": "on-demand"}])
            try:
                plan = plan_run(name, spec, Overrides())
                hbm = plan.program.sizing.hbm.as_dict()
                row["plan"] = f"plans: HBM ~{hbm['estimate_gib']:g}/{hbm['available_gib']:g} GiB, {plan.program.estimated_step_seconds:.1f} s/step"
                row["warnings"] = list(plan.program.warnings)
            except ToolkitError as e:
                row["plan"] = f"refused: {e}"
        rows.append(row)
    for row in rows:
        print(f"{row['layout']:<17} {row['script']}\n    {row['import'][:200]}" + (f"\n    {row['plan'][:200]}" if "plan" in row else ""))
    counts = collections.Counter((r["layout"], r["import"].split(" ", 1)[0]) for r in rows)
    print("\nby layout:", ", ".join(f"{lay} {outcome} {n}" for (lay, outcome), n in sorted(counts.items())))
    planned = [r for r in rows if "plan" in r]
    print(f"tpu7x recipes planned: {sum(r['plan'].startswith('plans') for r in planned)} of {len(planned)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
