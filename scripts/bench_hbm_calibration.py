"""The planner's HBM estimate against MaxText's own ahead-of-time compile: error per configuration.

    python scripts/bench_hbm_calibration.py [--only NAME ...] [--list] [-o json]
                                            [--record FILE] [--from-results FILE] [--dump-dir DIR]

Each configuration is planned by the real planner (its per-device HBM estimate, what the
plan refuses or warns on) and compiled by real MaxText 0.2.5 for the plan's TPU topology on
this CPU (``workloads.maxtext.aot.compile_plan``, what ``preflight --compile`` runs): XLA's
memory analysis per device is the truth. Prints, per configuration, the estimate and its
parts, the compiled total (or the bytes XLA said it needed when the compile ran out of HBM),
and the error (estimate / compiled - 1); then the largest and median error per kind of
configuration, the figures ``HBM_ERROR`` in ``workloads/planning/hbm.py`` carries.

The matrix covers what runs differ by: dense and mixture-of-experts models (routed experts,
latent attention, sliding windows), v5e, v5p, v6e and tpu7x slices, remat policies (full,
minimal, save_qkv_proj, custom with device and host offload), optimizer state on the host,
vocabulary tiling, a long context split over the context axis, fp8 and two slices. Models
that would take long to compile here keep their dimensions and lose layers (the estimate and
the compile see the same cut model: ``override_model_config``). Presets without a shipped
recipe get one written for the run (a temporary ``$TGK_RECIPES``).

``--record FILE`` keeps each configuration's compiled figures with the MaxText command they
came from; ``--from-results FILE`` estimates again without compiling, refusing a configuration
whose command has changed since (it has to be compiled again). A compile takes minutes and GBs
of RAM: one at a time, niced. CI compiles one configuration (tests/maxtext/test_aot.py) and
checks the estimate against every recorded one (tests/test_hbm.py).
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = Path(__file__).with_name("hbm_calibration_results.json")

OFFLOAD = ("remat_policy=custom", "decoder_layer_input=offload")
# A generation's example spec (examples/), its pools replaced by the configuration's shape.
EXAMPLE_OF = {"tpu7x": "tpu7x.yaml", "v6e": "v6e-reservation.yaml", "v5p": "v5p.yaml", "v5e": "default.yaml", "v4": "v4.yaml"}


@dataclass(frozen=True)
class Config:
    name: str
    recipe: str  # a shipped recipe, or "preset:<MaxText model>" for a recipe written for the run
    shape: str  # catalog key, e.g. v5e-4x4
    sets: tuple[str, ...] = ()
    slices: int = 1
    batch: float = 1  # per_device_batch_size of a preset's recipe
    seq: int = 4096  # max_target_length of a preset's recipe
    layers: int | None = None  # cut the model to this many layers (dimensions kept)
    args: dict[str, Any] = field(default_factory=dict)  # a preset's recipe args


def _cut(layers: int | None) -> tuple[str, ...]:
    return () if layers is None else ("override_model_config=true", f"base_num_decoder_layers={layers}")


# In the order they were compiled: what the matrix must cover first (generations, MoE), then the rest.
MATRIX = (
    Config("6b-v5e-b4-full", "maxtext-6b", "v5e-4x4"),
    Config("6b-v5e-b2-full", "maxtext-6b", "v5e-4x4", ("per_device_batch_size=2",)),
    Config("6b-v5e-b4-offload", "maxtext-6b", "v5e-4x4", OFFLOAD),
    Config("6b-v5e-b4-vocab4", "maxtext-6b", "v5e-4x4", ("num_vocab_tiling=4",)),
    Config("mixtral-8x7b-v5p-b2-4l", "preset:mixtral-8x7b", "v5p-2x2x4", batch=2, seq=4096, layers=4),
    Config("qwen3-30b-a3b-7x-b4-8l", "preset:qwen3-30b-a3b", "tpu7x-2x2x2", batch=4, seq=4096, layers=8),
    Config("llama3-8b-v6e-b1", "llama3-8b", "v6e-4x4"),
    Config("gpt3-6b-v5p-b4", "gpt3-6b", "v5p-4x4x4"),
    Config("llama3-8b-fp8-7x-8l", "llama3-8b-fp8", "tpu7x-2x2x4", _cut(8)),
    Config(
        "llama3-8b-7x-32k-context4-8l",
        "llama3-8b",
        "tpu7x-2x2x4",
        ("max_target_length=32768", "per_device_batch_size=0.25", "ici_tensor_parallelism=1", "ici_context_parallelism=4", *_cut(8)),
    ),
    Config("llama3-8b-v6e-b1-optimizer-host", "llama3-8b", "v6e-4x4", ("optimizer_memory_host_offload=true",)),
    # 32 layers at remat minimal need 16.09 GiB (XLA's out-of-memory figure): 16 layers fit and still calibrate the policy.
    Config("6b-v5e-b1-minimal-16l", "maxtext-6b", "v5e-4x4", ("per_device_batch_size=1", "remat_policy=minimal", *_cut(16))),
    Config("6b-v5e-b2-saveqkv", "maxtext-6b", "v5e-4x4", ("per_device_batch_size=2", "remat_policy=save_qkv_proj")),
    Config("deepseek2-16b-7x-b4-4l", "preset:deepseek2-16b", "tpu7x-2x2x2", batch=4, seq=4096, layers=4),
    Config(
        "gpt-oss-20b-7x-b4-4l",
        "preset:gpt-oss-20b",
        "tpu7x-2x2x2",
        batch=4,
        seq=4096,
        layers=4,
        args={"remat_policy": "custom", "decoder_layer_input": "offload"},
    ),
    Config("gemma3-4b-v5e-b1", "preset:gemma3-4b", "v5e-4x4", batch=1, seq=4096),
    Config("llama3-8b-v6e-b2-offload-8l", "llama3-8b", "v6e-4x4", ("per_device_batch_size=2", *_cut(8), *OFFLOAD)),
    Config("6b-v5e-b4-2slices", "maxtext-6b", "v5e-4x4", slices=2),
)


def _preset_recipe(c: Config) -> dict[str, Any]:
    """A recipe for a MaxText preset no shipped recipe runs: its dimensions, the configuration's batch and args."""
    from workloads.planning.import_recipe import model_presets

    preset = c.recipe.removeprefix("preset:")
    args = {"max_target_length": c.seq, "remat_policy": "full", "dataset_type": "synthetic", "enable_goodput_recording": False, "monitor_goodput": False}
    args.update(c.args)
    return {
        "name": f"cal-{c.name}"[:30].rstrip("-."),
        "description": f"HBM calibration: MaxText preset {preset}",
        "kind": "maxtext",
        "image": {"registry": "maxtext:0.2.5"},
        "steps": 10,
        "shapes": [c.shape],
        "env": {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"},
        "maxtext": {
            "model_name": preset,
            "model": model_presets()[preset],
            "args": args,
            "per_device_batch": [{"min_hbm_gib_per_device": 0, "per_device_batch_size": c.batch}],
            "parallelism": {"ici": {"fsdp": -1}, "dcn": {"data": -1}},
        },
    }


def _spec(c: Config) -> Any:
    import yaml

    from infra.spec import EXAMPLES_DIR, parse_spec

    gen, _, topology = c.shape.partition("-")
    doc = yaml.safe_load((EXAMPLES_DIR / EXAMPLE_OF[gen]).read_text())
    doc["tpu_pools"] = [{"name": "cal", "generation": gen, "topology": topology, "slices": c.slices, "capacity": "on-demand"}]
    if doc.get("teams"):
        team = {k: v for k, v in doc["teams"][0].items() if k != "quota_share"}
        doc["teams"] = [team]
        doc["buckets"] = [b for b in doc.get("buckets", []) if b.get("team") in (None, team["name"])]
    doc["datasets"] = [d for d in doc.get("datasets", []) if d["bucket"] in {b["name"] for b in doc.get("buckets", [])}]
    return parse_spec(doc)


def _recipe_and_sets(c: Config, recipes_dir: Path) -> tuple[str, tuple[str, ...]]:
    import yaml

    from workloads.planning import recipes

    if not c.recipe.startswith("preset:"):
        return c.recipe, c.sets
    r = _preset_recipe(c)
    (recipes_dir / f"{r['name']}.yaml").write_text(yaml.safe_dump(r, sort_keys=False))
    recipes.load_recipe.cache_clear()
    return r["name"], (*_cut(c.layers), *c.sets)


def plan(c: Config, recipes_dir: Path) -> Any:
    """The configuration's RunPlan (a ToolkitError if the planner refuses it)."""
    from workloads.planning.planner import Overrides, plan_run

    name, sets = _recipe_and_sets(c, recipes_dir)
    # The matrix crosses the line on purpose: the compiler, not the estimate, decides here.
    return plan_run(name, _spec(c), Overrides(name="hbm-cal", sets=sets, slices=c.slices), hbm_verdict=False)


def sizing(c: Config, recipes_dir: Path) -> Any:
    """The planner's sizing stage for the configuration: the model, mesh, batch and args the HBM estimate reads."""
    from datetime import datetime

    from workloads.planning.overrides import Overrides
    from workloads.planning.recipes import load_recipe
    from workloads.planning.sizing import size_run
    from workloads.planning.target import place_run

    name, sets = _recipe_and_sets(c, recipes_dir)
    o = Overrides(name="hbm-cal", sets=sets, slices=c.slices)
    return size_run(place_run(load_recipe(name), _spec(c), o, now=datetime(2000, 1, 1), rand="x0x"), o, hbm_verdict=False)


# Args that name or schedule the run but do not change the compiled step (the checkpoint period follows
# the step-time estimate, the run's name and paths its identity).
_NOT_COMPILED = frozenset(["run_name", "base_output_directory", "steps", "checkpoint_period", "max_num_checkpoints_to_keep", "log_period", "gcs_metrics"])


def command_key(args: tuple[str, ...] | list[str], env: Any, shape: str, slices: int) -> str:
    """What the compile depends on: the rendered MaxText args (less ``_NOT_COMPILED``) and env, the topology."""
    kept = [a for a in args if a.partition("=")[0] not in _NOT_COMPILED]
    text = json.dumps([kept, sorted(map(list, env)), shape, slices])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_key(p: Any) -> str:
    return command_key(p.program.args, p.program.env, p.target.shape.key, p.target.slices)


def estimate_row(c: Config, p: Any, recipes_dir: Path) -> dict[str, Any]:
    from infra.catalog import GIB
    from workloads.planning import hbm

    h = p.program.sizing.hbm
    s = sizing(c, recipes_dir)
    return {
        "name": c.name,
        "planned": True,
        "shape": p.target.shape.key,
        "slices": p.target.slices,
        "kind": h.kind,
        "estimate_gib": round(h.total_bytes / GIB, 3),
        "parts_gib": {k: round(v / GIB, 3) for k, v in h.parts().items()},
        "command": plan_key(p),
        "features": hbm.features(s.model, s.per_device_batch, s.seq, s.mesh.totals, dict(s.args)),
    }


def compile_row(p: Any, venv: Path, dump_dir: Path | None) -> dict[str, Any]:
    from dataclasses import replace

    from infra.catalog import GIB
    from workloads.maxtext.aot import compile_plan

    if dump_dir is not None:  # XLA's buffer assignment per configuration, to see what the compiler allocated
        env = dict(p.program.env)
        env["XLA_FLAGS"] = f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=NO_PASS_MATCHES"
        p = replace(p, program=replace(p.program, env=tuple(env.items())))
    t0 = time.monotonic()
    r = compile_plan(p, venv)
    compiled = r.memory.total if r.memory else (r.oom.needed_bytes if r.oom else None)
    out: dict[str, Any] = {
        "compiled_gib": None if compiled is None else round(compiled / GIB, 3),
        "compiled_is": "total" if r.memory else ("oom-needed" if r.oom else "none"),
        "hbm_gib": round(r.hbm_bytes_per_device / GIB, 2),
        "fits": r.fits,
        "compile_seconds": round(time.monotonic() - t0, 1),
    }
    if r.memory:
        m = r.memory
        out["memory_gib"] = {k: round(getattr(m, k) / GIB, 3) for k in ("arguments", "outputs", "aliased", "temporaries", "generated_code")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="configuration names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-o", "--output", choices=("text", "json", "markdown"), default="text", help="markdown: the table docs/runs.md carries")
    ap.add_argument("--record", type=Path, help="write the compiled figures here (e.g. scripts/hbm_calibration_results.json)")
    ap.add_argument("--from-results", type=Path, help="estimate against these recorded compiles instead of compiling")
    ap.add_argument("--dump-dir", type=Path, help="keep XLA's buffer assignment of each compile in DIR/<name>/")
    a = ap.parse_args()
    if a.list:
        for c in MATRIX:
            print(f"{c.name:<34} {c.recipe} on {c.shape} x{c.slices} {' '.join(c.sets)}")
        return
    chosen = [c for c in MATRIX if a.only is None or c.name in a.only]
    if a.only and len(chosen) != len(a.only):
        raise SystemExit(f"--only: unknown configuration(s) {sorted(set(a.only) - {c.name for c in MATRIX})}; see --list")
    user = Path(tempfile.mkdtemp(prefix="tgk-hbm-cal-"))
    atexit.register(shutil.rmtree, user, True)  # the recipes written for the run
    os.environ["TGK_RECIPES"] = str(user)
    from toolkit.errors import ToolkitError

    recorded = json.loads(a.from_results.read_text())["configs"] if a.from_results else {}
    venv = None
    if not a.from_results:
        from workloads.maxtext import env as maxtext_env

        venv = maxtext_env.locate(log=lambda m: sys.stderr.write(f"{m}\n"))
    rows, records = [], {}
    for c in chosen:
        try:
            p = plan(c, user)
        except ToolkitError as e:
            rows.append({"name": c.name, "planned": False, "refused": str(e)})
            continue
        row = estimate_row(c, p, user)
        if a.from_results:
            rec = recorded.get(c.name)
            if rec is None or rec["command"] != row["command"]:
                row["stale"] = "not recorded" if rec is None else "the rendered command changed since it was compiled: compile it again"
            else:
                row.update({k: v for k, v in rec.items() if k != "command"})
        else:
            assert venv is not None
            try:
                row.update(compile_row(p, venv, a.dump_dir / c.name if a.dump_dir else None))
            except ToolkitError as e:  # MaxText refused it, or the compile broke: kept as such, the matrix goes on
                row.update({"compiled_gib": None, "compiled_is": "failed", "failure": str(e).splitlines()[0][:400]})
            records[c.name] = {
                k: v for k, v in row.items() if k in ("command", "compiled_gib", "compiled_is", "failure", "hbm_gib", "fits", "memory_gib", "compile_seconds")
            }
        if row.get("compiled_gib") and row.get("compiled_is") == "total":
            row["error"] = round(row["estimate_gib"] / row["compiled_gib"] - 1, 3)
        rows.append(row)
        sys.stderr.write(json.dumps(row) + "\n")
        if a.record:  # after every compile: an interrupted matrix keeps what it measured
            from workloads.maxtext.env import MAXTEXT_VERSION

            old = json.loads(a.record.read_text())["configs"] if a.record.exists() else {}
            a.record.write_text(
                json.dumps({"maxtext": MAXTEXT_VERSION, "recorded": time.strftime("%Y-%m-%d"), "configs": {**old, **records}}, indent=1, sort_keys=True) + "\n"
            )
    summary = _summary(rows)
    fitted = _fit(rows)
    for r in rows:
        r.pop("features", None)
    if a.output == "json":
        print(json.dumps({"rows": rows, "summary": summary, "fit": fitted}, indent=2))
        return
    if a.output == "markdown":
        _print_markdown(rows, fitted)
        return
    _print(rows, summary)
    _print_fit(fitted)


def _print_markdown(rows: list[dict[str, Any]], f: dict[str, Any] | None) -> None:
    """Per configuration: the shipped estimate, the compile, and the error with the configuration held out of the fit."""
    held = f["held_out_error"] if f else {}
    print("| configuration | slice | kind | estimate (GiB) | compiled (GiB) | error | held out |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        if "error" not in r:
            continue
        slices = f" x{r['slices']}" if r["slices"] > 1 else ""
        h = f"{held[r['name']] * 100:+.1f}%" if r["name"] in held else "–"
        print(f"| {r['name']} | {r['shape']}{slices} | {r['kind']} | {r['estimate_gib']:.2f} | {r['compiled_gib']:.2f} | {r['error'] * 100:+.1f}% | {h} |")


def _fit(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The coefficients fitted to these compiles, each configuration held out, the error by kind (hbm_fit)."""
    from dataclasses import asdict

    from infra.catalog import GIB
    from workloads.planning import hbm, hbm_fit

    done = [hbm_fit.Compiled(r["name"], r["kind"], r["features"], r["compiled_gib"] * GIB) for r in rows if "error" in r]
    if len(done) < 2:
        return None
    held = hbm_fit.leave_one_out(done, hbm.FITTED)
    return {
        "fitted": asdict(hbm_fit.fit(done)),
        "shipped": asdict(hbm.FITTED),
        "held_out": {h.row.name: round(h.held_out / GIB, 3) for h in held},
        "held_out_error": {h.row.name: round(h.held_out / h.row.compiled_bytes - 1, 3) for h in held},
        "compiled_over_estimate_by_kind": hbm_fit.error_by_kind(held),
        "shipped_hbm_error": hbm.HBM_ERROR,
    }


def _print_fit(f: dict[str, Any] | None) -> None:
    if f is None:
        return
    errs = f["held_out_error"]
    print(
        f"\nheld out (each configuration estimated with coefficients fitted without it): |error| max {max(map(abs, errs.values())):.3f},"
        f" median {statistics.median(map(abs, errs.values())):.3f}"
    )
    for name, e in errs.items():
        print(f"  {name:<34}{f['held_out'][name]:>10.2f} GiB {e * 100:+.0f}%")
    print(f"fitted to all:  {f['fitted']}")
    print(f"shipped:        {f['shipped']}")
    print(f"compiled / estimated by kind (held out): {f['compiled_over_estimate_by_kind']}   shipped HBM_ERROR: {f['shipped_hbm_error']}")


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r for r in rows if "error" in r]
    kinds: dict[str, list[float]] = {}
    for r in errors:
        kinds.setdefault(r["kind"], []).append(r["error"])
    return {
        "configs": len(rows),
        "measured": len(errors),
        "max_abs_error": max((abs(r["error"]) for r in errors), default=None),
        "median_abs_error": round(statistics.median(abs(r["error"]) for r in errors), 3) if errors else None,
        "by_kind": {k: {"least": min(v), "most": max(v), "configs": len(v)} for k, v in sorted(kinds.items())},
    }


def _print(rows: list[dict[str, Any]], s: dict[str, Any]) -> None:
    print(f"{'config':<34}{'shape':>13}{'estimate':>10}{'compiled':>10}{'HBM':>7}{'error':>8}  parts (GiB)")
    for r in rows:
        if not r["planned"]:
            print(f"{r['name']:<34}  refused by the planner: {r['refused']}")
            continue
        if "stale" in r:
            print(f"{r['name']:<34}{r['shape']:>13}{r['estimate_gib']:>10.2f}  {r['stale']}")
            continue
        err = f"{r['error'] * 100:+.0f}%" if "error" in r else "–"
        comp = "–" if r.get("compiled_gib") is None else f"{r['compiled_gib']:.2f}" + ("*" if r["compiled_is"] != "total" else "")
        parts = ", ".join(f"{k} {v:g}" for k, v in r["parts_gib"].items() if v)
        print(f"{r['name']:<34}{r['shape']:>13}{r['estimate_gib']:>10.2f}{comp:>10}{r.get('hbm_gib', 0):>7.1f}{err:>8}  {parts}")
    print(
        f"\n|error| over compiled totals: max {s['max_abs_error']}, median {s['median_abs_error']} ({s['measured']} of {s['configs']});"
        " * = bytes XLA needed when it ran out of HBM"
    )
    for kind, k in s["by_kind"].items():
        print(f"  {kind:<28} {k['least']:+.3f} .. {k['most']:+.3f}  ({k['configs']} configurations)")


if __name__ == "__main__":
    main()
