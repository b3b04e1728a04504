"""Import every training script of a tpu-recipes checkout, and plan every recipe that imports.

    .venv/bin/python scripts/bench_import_recipes.py TPU_RECIPES_DIR --maxtext-repo MAXTEXT_DIR [--json out.json] [--toolkit DIR]

For each ``*.sh`` and ``k8s_manifest.yaml`` under ``training/``: its layout, read from its
path (``cluster_toolkit``, ``cluster-toolkit``, ``xpk``, ``k8s``, ``scripts``, ``archive``,
``flat`` for a script beside the recipe's README), the import outcome (the recipe, or the
one-line refusal), the published step time the README beside it gives, and, for every
recipe that imports, the plan on a pool of the recipe's own shape and slice count (a spec
of its generation from ``examples/``): the HBM estimate and step time, or the refusal. A
plan refused for a path no volume mounts is planned again with the fix the refusal names
(``--dataset`` of a dataset declared for it, ``--checkpoint-storage lustre``).

Nothing is written outside a temporary directory; the scripts and the MaxText checkout are
read, never run. ``--toolkit DIR`` imports the toolkit from another checkout (e.g. an
export of main), so the same table can be made before and after a change; what that
checkout's importer does not have (READMEs, manifests) it is not given.
"""

from __future__ import annotations

import argparse
import collections
import copy
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

LAYOUTS = ("cluster_toolkit", "cluster-toolkit", "xpk", "k8s", "scripts", "archive", "flat")
# A spec of each generation to plan on (examples/), with its pools replaced by the recipe's own shape.
EXAMPLE_OF = {"tpu7x": "tpu7x-multislice", "v6e": "v6e-reservation", "v5p": "v5p", "v5e": "default", "v4": "v4"}


def layout(rel: Path) -> str:
    parts = rel.parts
    if "archive" in parts:
        return "archive"
    for name in ("cluster_toolkit", "cluster-toolkit", "xpk", "k8s", "scripts"):
        if name in parts[:-1]:
            return name
    return "flat"


def scripts(root: Path) -> list[Path]:
    training = root / "training"
    found = [*training.rglob("*.sh"), *training.rglob("k8s_manifest.yaml")]
    return sorted(p for p in found if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipes", type=Path)
    ap.add_argument("--maxtext-repo", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--toolkit", type=Path, default=Path(__file__).resolve().parent.parent, help="the checkout whose importer and planner are run")
    args = ap.parse_args()
    sys.path.insert(0, str(args.toolkit.resolve()))
    user = Path(tempfile.mkdtemp(prefix="tgk-bench-import-"))
    os.environ["TGK_RECIPES"] = str(user)

    import yaml

    from tests.support import example_doc
    from toolkit.errors import ToolkitError
    from workloads.planning import import_recipe as ir
    from workloads.planning import recipes
    from workloads.planning.planner import Overrides, plan_run

    has = set(inspect.signature(ir.import_recipe).parameters)
    rows: list[dict[str, Any]] = []
    for n, path in enumerate(scripts(args.recipes)):
        rel = path.relative_to(args.recipes)
        row: dict[str, Any] = {"script": str(rel), "layout": layout(rel)}
        rows.append(row)
        text = path.read_text(errors="replace")
        kwargs: dict[str, Any] = {"source": str(rel) if "readmes" in has else path.name, "maxtext_repo": args.maxtext_repo}
        if "readmes" in has:
            kwargs["readmes"] = ir.readmes_near(path)
        try:
            imp = ir.import_recipe(text, **kwargs)
        except ToolkitError as e:
            row["outcome"] = "refused"
            row["reason"] = str(e).removeprefix("import-recipe: ")
            continue
        except Exception as e:  # noqa: BLE001 — an importer crash is a finding, not the end of the table
            row["outcome"] = "crashed"
            row["reason"] = f"{type(e).__name__}: {e}"
            continue
        row["outcome"] = "imported"
        row["recipe"] = f"{imp.recipe['shapes'][0]} x {imp.slices}, {imp.recipe['maxtext']['model_name']}"
        row["not_carried"] = len(imp.unmapped)
        row["published"] = imp.recipe.get("published")
        name = f"bench-{n}"
        (user / f"{name}.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": name}, sort_keys=False))
        recipes.load_recipe.cache_clear()
        row.update(_plan(name, imp.recipe, imp.slices, example_doc, Overrides, plan_run, ToolkitError))
    _print(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def _spec(recipe: dict[str, Any], slices: int, example_doc: Any) -> Any:
    from infra.spec import parse_spec

    gen, _, topology = recipe["shapes"][0].partition("-")
    doc = copy.deepcopy(example_doc(EXAMPLE_OF.get(gen, "default")))
    doc["tpu_pools"] = [{"name": "p", "generation": gen, "topology": topology, "slices": slices, "capacity": "on-demand"}]
    # One team holding the one pool (quota shares of several teams would split its single slice).
    if doc.get("teams"):
        team = {k: v for k, v in doc["teams"][0].items() if k != "quota_share"}
        doc["teams"] = [team]
        doc["buckets"] = [b for b in doc.get("buckets", []) if b.get("team") in (None, team["name"])]
    doc["datasets"] = [d for d in doc.get("datasets", []) if d["bucket"] in {b["name"] for b in doc["buckets"]}]
    data = next((b["name"] for b in doc.get("buckets", []) if b.get("purpose") == "data"), None)
    if data is not None:
        # A dataset for the fix a refusal names (--dataset): the published data, declared in the team's data bucket.
        doc["datasets"] = [*doc.get("datasets", []), {"name": "published-data", "bucket": data, "path": "datasets", "format": "arrayrecord"}]
    return parse_spec(doc)


def _plan(name: str, recipe: dict[str, Any], slices: int, example_doc: Any, Overrides: Any, plan_run: Any, ToolkitError: Any) -> dict[str, Any]:
    try:
        spec = _spec(recipe, slices, example_doc)
    except ToolkitError as e:
        return {"plan": "no spec", "plan_reason": str(e)}
    out: dict[str, Any] = {}
    tries = [Overrides()]
    try:
        plan = plan_run(name, spec, tries[0])
    except ToolkitError as e:
        out.update(plan="refused", plan_reason=str(e))
        if "no volume of this run mounts" not in str(e) and "declares no lustre" not in str(e):
            return out
        fixes = [Overrides(dataset="published-data")] if "--dataset" in str(e) else []
        fixes += [Overrides(checkpoint_storage="lustre"), Overrides(checkpoint_storage="lustre", dataset="published-data")]
        for fix in fixes:
            try:
                plan = plan_run(name, spec, fix)
            except ToolkitError as e2:
                out["with_fix"] = f"refused: {e2}"
                continue
            out["with_fix"] = f"plans with {_flags(fix)}"
            break
        else:
            return out
    else:
        out["plan"] = "plans"
    hbm = plan.program.sizing.hbm.as_dict()
    out["estimate"] = {"hbm_gib": hbm["estimate_gib"], "available_gib": hbm["available_gib"], "step_seconds": round(plan.program.estimated_step_seconds, 2)}
    out["warnings"] = list(plan.program.warnings)
    return out


def _flags(o: Any) -> str:
    parts = [f"--dataset {o.dataset}"] if o.dataset else []
    parts += [f"--checkpoint-storage {o.checkpoint_storage}"] if o.checkpoint_storage else []
    return " ".join(parts)


def _print(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(f"{row['layout']:<16} {row['script']}")
        if row["outcome"] != "imported":
            print(f"    {row['outcome']}: {row['reason'][:220]}")
            continue
        pub = row.get("published")
        pub_text = f"; published {pub['step_seconds']:g} s/step ({pub['source']})" if pub else ""
        print(f"    imported: {row['recipe']}, {row['not_carried']} lines not carried{pub_text}")
        est = row.get("estimate")
        if row.get("plan") == "plans":
            print(f"    plans: HBM ~{est['hbm_gib']:g}/{est['available_gib']:g} GiB, estimate {est['step_seconds']:g} s/step")
        else:
            print(f"    plan {row.get('plan')}: {row.get('plan_reason', '')[:220]}")
            if "with_fix" in row:
                print(f"    {row['with_fix'][:220]}" + (f" (estimate {est['step_seconds']:g} s/step)" if est else ""))
    print("\nby layout (scripts: imported / refused [/ crashed]; imported recipes that plan, as they are / with the fix named):")
    by = collections.defaultdict(list)
    for row in rows:
        by[row["layout"]].append(row)
    for lay in LAYOUTS:
        group = by.get(lay, [])
        if not group:
            continue
        outcomes = collections.Counter(r["outcome"] for r in group)
        imported = [r for r in group if r["outcome"] == "imported"]
        plans = sum(r.get("plan") == "plans" for r in imported)
        fixed = sum(str(r.get("with_fix", "")).startswith("plans") for r in imported)
        published = sum(bool(r.get("published")) for r in imported)
        crashed = f" / {outcomes['crashed']} crashed" if outcomes["crashed"] else ""
        print(
            f"  {lay:<16} {len(group):>3} scripts: {outcomes['imported']:>3} imported / {outcomes['refused']:>3} refused{crashed};"
            f" plan {plans} (+{fixed} with the fix); published step time {published}"
        )
    print("\nrefusals:")
    reasons = collections.Counter((r["layout"], r["reason"].split(" — ")[0][:150]) for r in rows if r["outcome"] != "imported")
    for (lay, reason), count in sorted(reasons.items()):
        print(f"  {lay:<16} {count:>2} x {reason}")


if __name__ == "__main__":
    main()
