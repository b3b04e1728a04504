"""The planner's HBM estimate against MaxText's own ahead-of-time compile: error per configuration.

    python scripts/bench_hbm_calibration.py [--only NAME ...] [--list] [-o json]

Each configuration is planned by the real planner (its per-device HBM estimate, what the
plan refuses or warns on) and compiled by real MaxText 0.2.5 for the plan's TPU topology on
this CPU (``workloads.maxtext.aot.compile_plan``, what ``preflight --compile`` runs): XLA's
memory analysis per device is the truth. Prints, per configuration, the estimate, the
compiled total (or the bytes XLA said it needed when the compile ran out of HBM), and the
error (estimate / compiled - 1), then the largest error: the figure ``HBM_ERROR_BAND`` in
``workloads/planning/sizing.py`` has to cover.

The matrix holds what the published recipes use to fit — remat policies including host
offload (``decoder_layer_input=offload``), vocabulary tiling, larger batches — on the
shipped recipes and shapes, with layers cut down where a full model takes too long to
compile here (the estimate and the compile see the same cut model). Compiles take one to
several minutes each on a 2-core machine; CI compiles one configuration
(tests/maxtext/test_aot.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.catalog import GIB  # noqa: E402
from infra.spec import EXAMPLES_DIR, load_spec  # noqa: E402
from toolkit.errors import ToolkitError  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402


@dataclass(frozen=True)
class Config:
    name: str
    recipe: str
    spec: str  # an examples/ file
    sets: tuple[str, ...] = ()
    pool: str | None = None


OFFLOAD = ("remat_policy=custom", "decoder_layer_input=offload")
MATRIX = (
    Config("6b-v5e-b4-full", "maxtext-6b", "default.yaml"),
    Config("6b-v5e-b2-full", "maxtext-6b", "default.yaml", ("per_device_batch_size=2",)),
    Config("6b-v5e-b8-full", "maxtext-6b", "default.yaml", ("per_device_batch_size=8",)),
    Config("6b-v5e-b4-offload", "maxtext-6b", "default.yaml", OFFLOAD),
    Config("6b-v5e-b8-offload", "maxtext-6b", "default.yaml", ("per_device_batch_size=8", *OFFLOAD)),
    Config("6b-v5e-b4-vocab4", "maxtext-6b", "default.yaml", ("num_vocab_tiling=4",)),
    Config("llama3-8b-v6e-b1", "llama3-8b", "v6e-reservation.yaml"),
    Config(
        "llama3-8b-v6e-b2-offload-8l",
        "llama3-8b",
        "v6e-reservation.yaml",
        ("per_device_batch_size=2", "override_model_config=true", "base_num_decoder_layers=8", *OFFLOAD),
    ),
    Config("gpt3-6b-v5p-b4", "gpt3-6b", "v5p.yaml"),
)


def measure(c: Config, venv: Path) -> dict:
    from workloads.maxtext.aot import compile_plan

    spec = load_spec(EXAMPLES_DIR / c.spec)
    try:
        plan = plan_run(c.recipe, spec, Overrides(name="hbm-cal", sets=c.sets, pool=c.pool, slices=1))
    except ToolkitError as e:
        return {"name": c.name, "planned": False, "refused": str(e)}
    est = plan.program.sizing.hbm
    t0 = time.monotonic()
    r = compile_plan(plan, venv)
    seconds = time.monotonic() - t0
    compiled = r.memory.total if r.memory else (r.oom.needed_bytes if r.oom else None)
    out = {
        "name": c.name,
        "planned": True,
        "shape": plan.target.shape.key,
        "estimate_gib": round(est.total_bytes / GIB, 2),
        "compiled_gib": None if compiled is None else round(compiled / GIB, 2),
        "compiled_is": "total" if r.memory else ("oom-needed (a part: XLA names the buffers that did not fit)" if r.oom else "none"),
        "hbm_gib": round(r.hbm_bytes_per_device / GIB, 2),
        "fits": r.fits,
        "compile_seconds": round(seconds, 1),
    }
    if compiled:
        out["error"] = round(est.total_bytes / compiled - 1, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="configuration names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    if a.list:
        for c in MATRIX:
            print(f"{c.name:<32} {c.recipe} on {c.spec} {' '.join(c.sets)}")
        return
    chosen = [c for c in MATRIX if a.only is None or c.name in a.only]
    if a.only and len(chosen) != len(a.only):
        raise SystemExit(f"--only: unknown configuration(s) {sorted(set(a.only) - {c.name for c in MATRIX})}; see --list")
    from workloads.maxtext import env as maxtext_env

    venv = maxtext_env.locate(log=lambda m: sys.stderr.write(f"{m}\n"))
    rows = []
    for c in chosen:
        rows.append(measure(c, venv))
        sys.stderr.write(json.dumps(rows[-1]) + "\n")
    errors = [abs(r["error"]) for r in rows if "error" in r and r["compiled_is"] == "total"]
    summary = {"max_abs_error": max(errors) if errors else None, "configs": len(rows), "measured": len(errors)}
    if a.output == "json":
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return
    print(f"{'config':<32}{'shape':>14}{'estimate':>10}{'compiled':>10}{'HBM':>7}{'error':>8}  compile")
    for r in rows:
        if not r["planned"]:
            print(f"{r['name']:<32}  refused by the planner: {r['refused']}")
            continue
        err = f"{r['error'] * 100:+.0f}%" if "error" in r else "–"
        comp = "–" if r["compiled_gib"] is None else f"{r['compiled_gib']:.2f}" + ("*" if r["compiled_is"] != "total" else "")
        print(f"{r['name']:<32}{r['shape']:>14}{r['estimate_gib']:>10.2f}{comp:>10}{r['hbm_gib']:>7.1f}{err:>8}  {r['compile_seconds']:.0f} s")
    print(
        f"max |error| over compiled totals: {summary['max_abs_error']} ({summary['measured']} of {summary['configs']}); * = bytes XLA needed when it ran out of HBM"
    )


if __name__ == "__main__":
    main()
