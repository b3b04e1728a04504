"""The HBM estimate: the parts XLA allocates, against every configuration MaxText compiled for it.

Not a timed test and no compile here: scripts/bench_hbm_calibration.py compiled the matrix
(MaxText 0.2.5's own ahead-of-time compile for each TPU topology) and recorded what XLA
allocated with the MaxText command it came from (scripts/hbm_calibration_results.json); the
estimate is a pure function of the plan. tests/maxtext/test_aot.py compiles a sample live.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tests.support import EXAMPLES, spec_from
from workloads.planning import hbm, hbm_fit
from workloads.planning.import_recipe import model_presets
from workloads.planning.recipe_model import ModelDims

GIB = 2**30
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@lru_cache(maxsize=1)
def _bench():
    spec = importlib.util.spec_from_file_location("bench_hbm_calibration", SCRIPTS / "bench_hbm_calibration.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> list[tuple[object, dict, object]]:
    """(configuration, recorded compile, the planner's sizing of it) for every recorded configuration."""
    import os

    b = _bench()
    recipes_dir = tmp_path_factory.mktemp("cal-recipes")
    old = os.environ.get("TGK_RECIPES")
    os.environ["TGK_RECIPES"] = str(recipes_dir)
    try:
        recorded = json.loads(b.RESULTS.read_text())["configs"]
        out = []
        for c in b.MATRIX:
            rec = recorded.get(c.name)
            if rec is None or rec["compiled_is"] != "total":
                continue  # not compiled yet (test_every_configuration_is_compiled says which)
            p = b.plan(c, recipes_dir)
            assert b.plan_key(p) == rec["command"], f"{c.name}: the rendered command changed since it was compiled; compile it again"
            out.append((c, rec, b.sizing(c, recipes_dir)))
        return out
    finally:
        if old is None:
            os.environ.pop("TGK_RECIPES", None)
        else:
            os.environ["TGK_RECIPES"] = old
        from workloads.planning import recipes

        recipes.load_recipe.cache_clear()


def _rows(compiled) -> list[hbm_fit.Compiled]:
    return [
        hbm_fit.Compiled(c.name, s.hbm.kind, hbm.features(s.model, s.per_device_batch, s.seq, s.mesh.totals, dict(s.args)), rec["compiled_gib"] * GIB)
        for c, rec, s in compiled
        if rec["compiled_is"] == "total"
    ]


def _covers(shapes: list[str], sized: list) -> None:
    """Dense and MoE, v5e/v5p/v6e/tpu7x, remat policies, host offload, vocab tiling, long context, fp8."""
    kinds = {s.hbm.kind for s in sized}
    assert {"dense", "mixture of experts"} <= {k.split(",")[0] for k in kinds} and any("host offload" in k for k in kinds)
    assert {shape.split("-")[0] for shape in shapes} >= {"v5e", "v5p", "v6e", "tpu7x"}
    args = [dict(s.args) for s in sized]
    assert {a.get("remat_policy", "full") for a in args} >= {"full", "minimal", "save_qkv_proj", "custom"}
    assert any(a.get("num_vocab_tiling", "1") != "1" for a in args)
    assert any(a.get("quantization", "").startswith("fp8") for a in args)
    assert any(a.get("optimizer_memory_host_offload") == "true" for a in args)
    assert any(s.mesh.totals["context"] > 1 and s.seq >= 32768 for s in sized)


def test_the_matrix_covers_what_runs_differ_by(tmp_path, monkeypatch) -> None:
    """At least 15 configurations, planned as the benchmark plans them."""
    b = _bench()
    monkeypatch.setenv("TGK_RECIPES", str(tmp_path))
    try:
        assert len(b.MATRIX) >= 15
        _covers([c.shape for c in b.MATRIX], [b.sizing(c, tmp_path) for c in b.MATRIX])
    finally:
        from workloads.planning import recipes

        recipes.load_recipe.cache_clear()


def test_every_configuration_is_compiled(compiled) -> None:
    """The fit and its error stand on MaxText's compiles of the whole matrix, not a part of it."""
    b = _bench()
    missing = [c.name for c in b.MATRIX if c.name not in {c.name for c, _, _ in compiled}]
    assert not missing, f"not compiled yet: {missing}; run scripts/bench_hbm_calibration.py --record scripts/hbm_calibration_results.json --only ..."
    _covers([c.shape for c, _, _ in compiled], [s for _, _, s in compiled])


# Per-device fp32 arrays of MaxText 0.2.5's abstract train state and the bytes XLA (libtpu 0.0.52) gives
# each as a jit argument on the slice: gpt-oss-20b on tpu7x-2x2x2 (fsdp 16), gpt3-6b on v5p-4x4x4
# (fsdp 64), gemma3-4b on v5e-4x4 (fsdp 16). Shape -> bytes; the layer axis of a scanned stack included.
XLA_ARRAY_BYTES = {
    (180, 2, 64, 64): 8388608,  # gpt-oss query kernel: 180 pads to 256
    (180, 2, 8, 64): 1048576,
    (64, 2, 64, 180): 8388608,
    (180, 2, 32): 65536,
    (32, 2, 180, 2880): 135659520,  # experts: 2880 pads to 2944, the layer axis of 2 takes 2-row tiles
    (32, 2, 2880): 753664,
    (180, 201088): 148000768,
    (201088, 180): 148000768,
    (8, 2, 64): 8192,
    (64, 2): 1024,
    (32, 2): 1024,
    (180, 2): 2048,
    (2880, 2): 23552,
    (2880,): 12288,
    (48, 48, 12288): 113246208,  # gpt3: a dimension of 128s, no padding
    (12288, 48, 48): 113246208,
    (48, 48, 3, 12, 256): 84934656,
    (12, 48, 256, 48): 28311552,
    (3, 48, 12, 256): 1769472,
    (16384, 48): 3145728,
    (48, 48): 24576,
    (3072,): 12288,
    (2560, 5): 81920,  # gemma3: a stack of 5 layers takes 8-row tiles
    (256, 5): 8192,
    (2560,): 12288,
    (256,): 1024,
    (160, 5, 8, 256): 6553600,
}


def test_the_tiled_layout_pads_each_array_as_xla_does() -> None:
    for shape, xla in XLA_ARRAY_BYTES.items():
        assert hbm.tpu_elements(shape) * 4 == xla, shape


def test_the_train_state_is_exactly_the_compiled_arguments(compiled) -> None:
    """Weights and Adam's moments, each split by its own mesh axes: what the compile takes as arguments."""
    for c, rec, s in compiled:
        state = s.hbm.parts()["state"]
        args_gib = rec["memory_gib"]["arguments"]
        assert state / GIB == pytest.approx(args_gib, rel=0.01, abs=0.01), c.name


# The one configuration outside ±15 % with the fitted coefficients, and what it missed by: XLA
# stages Adam's moments from the host differently by generation for the same configuration
# (llama3-8b at batch 1: 8.75 GiB of temporaries on a v6e, 6.67 on a v5e; 6.12 without the
# offload), which one coefficient cannot follow. Named here and in docs/runs.md, not banded away.
KNOWN_MISSES = {"llama3-8b-v6e-b1-optimizer-host": 0.16}


def test_estimate_within_15_percent_of_every_compile(compiled) -> None:
    errors = {c.name: s.hbm.total_bytes / (rec["compiled_gib"] * GIB) - 1 for c, rec, s in compiled}
    inside = {k: v for k, v in errors.items() if k not in KNOWN_MISSES}
    assert len(inside) >= 15 and max(map(abs, inside.values())) <= 0.15, errors
    assert all(abs(errors[k]) <= bound for k, bound in KNOWN_MISSES.items()), errors


def test_held_out_error_is_what_the_plans_print(compiled) -> None:
    """Each configuration estimated by coefficients fitted without it: that residual, per kind, is HBM_ERROR."""
    rows = _rows(compiled)
    held = hbm_fit.leave_one_out(rows, hbm.FITTED)
    assert hbm.HBM_ERROR == hbm_fit.error_by_kind(held)
    assert statistics.median(abs(h.ratio - 1) for h in held) <= 0.15


def test_shipped_coefficients_are_the_fit(compiled) -> None:
    fitted = hbm_fit.fit(_rows(compiled))
    for name in hbm_fit.NAMES:
        assert getattr(hbm.FITTED, name) == pytest.approx(getattr(fitted, name), rel=0.01, abs=0.005), name


# ------------------------------------------------------------------ the parts, by what a run changes


def _model(name: str) -> ModelDims:
    return ModelDims.model_validate(model_presets()[name])


FSDP16 = {"data": 1, "fsdp": 16, "fsdp_transpose": 1, "tensor": 1, "sequence": 1, "context": 1, "expert": 1, "pipeline": 1}


def _parts(model: str = "llama3.1-8b", args: dict | None = None, **kw) -> dict[str, int]:
    m = _model(model)
    return hbm.estimate_hbm(m, kw.get("pdb", 2), kw.get("seq", 8192), kw.get("totals", FSDP16), 95 * GIB, args or {}).parts()


def test_host_offload_moves_what_the_policy_offloads_off_the_device() -> None:
    full = _parts(args={"remat_policy": "full"})
    offload = _parts(args={"remat_policy": "custom", "decoder_layer_input": "offload"})
    assert offload["saved"] < full["saved"] / 8  # one layer's input in flight instead of all 32
    assert offload["state"] == full["state"]


def test_optimizer_on_the_host_leaves_the_weights() -> None:
    on_device = _parts()["state"]
    assert _parts(args={"optimizer_memory_host_offload": "true"})["state"] == pytest.approx(on_device / 3, rel=1e-6)  # 4 of 12 B


def test_vocab_tiling_divides_the_logits() -> None:
    base = hbm.features(_model("llama3.1-8b"), 2, 8192, FSDP16, {})
    tiled = hbm.features(_model("llama3.1-8b"), 2, 8192, FSDP16, {"num_vocab_tiling": "4"})
    assert tiled["logits"] == pytest.approx(base["logits"] / 4) and tiled["working_weights"] == base["working_weights"]


def test_remat_policy_decides_what_is_kept() -> None:
    full, minimal = _parts(args={"remat_policy": "full"}), _parts(args={"remat_policy": "minimal"})
    # minimal keeps every projection's output: query, key, value, output, both MLP inputs and its output.
    m = _model("llama3.1-8b")
    per_token = m.base_emb_dim + (m.base_num_query_heads + 2 * m.base_num_kv_heads) * m.head_dim + 2 * m.base_emb_dim + 2 * m.base_mlp_dim
    assert minimal["saved"] - full["saved"] == pytest.approx(2 * 2 * 8192 * 32 * (per_token - m.base_emb_dim), rel=1e-6)


def test_experts_hold_all_their_weights_but_work_on_the_routed_tokens() -> None:
    moe = _model("mixtral-8x7b")
    f = hbm.features(moe, 2, 4096, FSDP16, {})
    assert f["state"] == pytest.approx(12 * moe.params() / 16, rel=0.01)
    # the layer in flight: each token's routed experts (2 of 8), not all of them
    assert f["working_mlp"] == pytest.approx(2 * 2 * 4096 * 2 * moe.base_mlp_dim)


def test_a_block_scanned_as_one_unit_keeps_one_input_and_works_on_all_its_layers() -> None:
    # gemma3 scans its 34 layers as 5 blocks of 6 (5 local + 1 global) and one of the 4 left over
    # (MaxText's nnx_decoders): each block is rematerialized whole, so its 6 layers' activations are
    # in flight together, and only each unit's input is kept.
    g = _model("gemma3-4b")
    assert (g.scan_block, g.scan_units()) == (6, (6, 6))
    one = g.model_copy(update={"scan_block": 1})
    blocked, layered = hbm.features(g, 1, 4096, FSDP16, {}), hbm.features(one, 1, 4096, FSDP16, {})
    assert blocked["working_mlp"] == pytest.approx(6 * layered["working_mlp"])
    assert blocked["saved"] == pytest.approx(layered["saved"] * 6 / 34)
    assert _model("gpt-oss-20b").scan_units() == (12, 2) and _model("llama3.1-8b").scan_units() == (32, 1)


# ------------------------------------------------------------------ what a plan does with it


def test_refused_only_when_the_floor_would_not_fit_warned_when_the_measured_range_reaches_over() -> None:
    from toolkit.errors import FieldError
    from workloads.planning.planner import Overrides, plan_run

    spec = spec_from("tpu7x", tpu_pools=[{"name": "iw", "generation": "tpu7x", "topology": "2x2x4", "slices": 1, "capacity": "on-demand"}])

    def verdict(batch: float) -> str:
        try:
            plan = plan_run("llama3-8b", spec, Overrides(sets=(f"per_device_batch_size={batch:g}",)))
        except FieldError as e:
            assert "per_device_batch_size" in str(e) and "more than a tpu7x device's" in str(e)
            return "refused"
        h, said = plan.program.sizing.hbm, plan.program.warnings
        # the floor: the exact parts and one copy of the logits, below the estimate and all of it in it
        assert 0 < h.floor_bytes <= h.total_bytes and h.floor_bytes <= h.available_bytes
        p = h.parts()
        assert h.floor_bytes >= p["state"] + p["gradients"] + p["saved"]
        if h.total_bytes * hi > h.available_bytes:
            assert any("it may not fit" in w and "preflight <recipe> --compile" in w for w in said), said
            return "warned"
        assert not any("GiB per device" in w for w in said)
        return "fine"

    lo, hi = hbm.HBM_ERROR["dense"]
    seen = {}
    for batch in range(1, 64):
        seen[batch] = verdict(batch)
        if seen[batch] == "refused":
            break
    # Between the last batch that plans without a word and the first refused one, halve (in steps
    # the 32 devices' global batch allows) to find a warned one.
    fine, refused = max(b for b, v in seen.items() if v == "fine"), min(b for b, v in seen.items() if v == "refused")
    while "warned" not in seen.values() and refused - fine > 1 / 32:
        mid = round((fine + refused) / 2 * 32) / 32
        seen[mid] = verdict(mid)
        fine, refused = (mid, refused) if seen[mid] == "fine" else (fine, mid) if seen[mid] == "refused" else (fine, refused)
    assert set(seen.values()) == {"fine", "warned", "refused"}, seen


def test_the_default_recipe_fits_its_pool_without_a_warning() -> None:
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, plan_run

    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides())
    assert not [w for w in plan.program.warnings if "GiB per device" in w]
    assert plan.program.sizing.hbm.measured and math.isfinite(plan.program.sizing.hbm.total_bytes)


def test_the_docs_table_is_the_recorded_compiles(compiled) -> None:
    """docs/runs.md shows each compiled configuration with what XLA allocated for it."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "runs.md").read_text()
    rows = {cells[0]: cells for line in docs.splitlines() if line.startswith("| ") for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    for c, rec, s in compiled:
        assert c.name in rows, (
            f"docs/runs.md has no row for {c.name}: python scripts/bench_hbm_calibration.py --from-results scripts/hbm_calibration_results.json -o markdown"
        )
        assert float(rows[c.name][4]) == pytest.approx(rec["compiled_gib"], abs=0.006), c.name
        assert float(rows[c.name][3]) == pytest.approx(s.hbm.total_bytes / GIB, abs=0.006), c.name
