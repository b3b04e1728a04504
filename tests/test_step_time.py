"""The step-time estimate against every step time tpu-recipes publishes, fitted and held out.

Not a timed test: the published step times (workloads/recipes/_published_step_times.yaml,
each with its source and the day it was read) are data, and the estimate is a pure function
of the model preset, batch, sequence, slice and the run's MaxText keys.
scripts/bench_step_time.py prints the full table.
"""

from __future__ import annotations

import statistics
from functools import lru_cache

import pytest

from infra import catalog
from workloads.planning import step_calibration as sc
from workloads.planning import step_time
from workloads.planning.import_recipe import model_presets
from workloads.planning.recipe_model import ModelDims


@lru_cache(maxsize=1)
def _checked() -> list[sc.Checked]:
    return sc.leave_one_out(sc.figures(), step_time.SHIPPED)


def _model(name: str) -> ModelDims:
    return ModelDims.model_validate(model_presets()[name])


def test_published_figures_carry_their_source_and_date() -> None:
    figs = sc.figures()
    assert len(figs) >= 46 and sc.read_date() == "2026-11-27"
    assert {f.generation for f in figs} == {"tpu7x", "v6e", "v5p"}
    for f in figs:
        assert f.source.startswith("https://github.com/AI-Hypercomputer/tpu-recipes/blob/"), f
        assert f.preset in model_presets(), f
    # The refreshed Ironwood rows (the gpt-oss-120b re-measure, gemma4-26b on 64 chips).
    gpt = {(f.shape.chips, f.step_seconds, f.tflops) for f in figs if f.model == "gpt-oss-120b"}
    assert gpt == {(64, 14.93, 378.9), (256, 15.16, 373.22)}
    assert any(f.model == "gemma4-26b" and f.shape.chips == 64 and f.step_seconds == 5.53 for f in figs)


def test_model_structure_counts_what_maxtext_builds() -> None:
    """Parameters of the larger presets as their publishers state them (latent attention, dense layers, experts)."""
    for name, total, active in (
        ("deepseek3-671b", 671e9, 37e9),
        ("llama4-17b-128e", 400e9, 17e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("gpt-oss-120b", 117e9, 5.1e9),
    ):
        m = _model(name)
        assert m.params() == pytest.approx(total, rel=0.02), name
        assert m.active_params() == pytest.approx(active, rel=0.13), name  # the publishers count embeddings differently
    dense = _model("llama3.1-70b")
    assert dense.active_params() == dense.params()


def test_estimate_is_within_30_percent_at_the_median_and_never_2x_off_held_out() -> None:
    checked = _checked()
    ratios = [c.ratio for c in checked]
    assert 0.7 <= statistics.median(ratios) <= 1.3
    assert all(0.5 < r < 2 for r in ratios), [(c.figure.name, round(c.ratio, 2)) for c in checked if not 0.5 < c.ratio < 2]


def test_shipped_efficiencies_are_the_fit_and_the_error_is_what_was_measured() -> None:
    """A refreshed data file changes the fit: the shipped constants and the printed error must follow."""
    fitted = sc.fit(sc.figures())
    for gen, eff in fitted.dense.items():
        assert step_time.DENSE_EFFICIENCY[gen] == pytest.approx(eff, rel=0.005), gen
    for prec, ratio in fitted.quantized.items():
        assert step_time.QUANTIZED_EFFICIENCY[prec] == pytest.approx(ratio, rel=0.005), prec
    assert step_time.EXPERT_EFFICIENCY == pytest.approx(fitted.experts, rel=0.005)
    assert step_time.ATTENTION_EFFICIENCY == pytest.approx(fitted.attention, rel=0.005)
    assert step_time.STEP_ERROR == sc.error_by_kind(_checked())


def test_fp8_runs_its_dense_matmuls_at_the_fp8_peak() -> None:
    m, gen = _model("llama3.1-70b"), catalog.GENERATIONS["tpu7x"]
    bf16 = step_time.step_parts(m, 16384, 8192, gen, {"remat_policy": "full"})
    fp8 = step_time.step_parts(m, 16384, 8192, gen, {"remat_policy": "full", "quantization": "fp8_full"})
    assert (bf16.quantized, fp8.quantized) == ("bf16", "fp8")
    assert fp8.dense == pytest.approx(bf16.dense * 2307 / 4614)  # the catalog's bf16 and fp8 peaks
    assert fp8.attention == bf16.attention  # attention stays in bf16
    # v6e has no faster fp8 path (the catalog gives none): fp8 there is priced like bf16; int8 at its peak.
    v6e = catalog.GENERATIONS["v6e"]
    assert step_time.step_parts(m, 4096, 8192, v6e, {"quantization": "fp8_full"}).quantized == "bf16"
    int8 = step_time.step_parts(m, 4096, 8192, v6e, {"quantization": "int8"})
    assert int8.dense == pytest.approx(step_time.step_parts(m, 4096, 8192, v6e, {}).dense * 918 / 1836)


def test_mixture_of_experts_runs_its_active_experts_and_pays_for_all_to_alls() -> None:
    m, gen = _model("mixtral-8x7b"), catalog.GENERATIONS["v6e"]
    one = step_time.step_parts(m, 32768, 4096, gen, {})
    every = m.model_copy(update={"num_experts_per_tok": m.num_experts})
    assert step_time.step_parts(every, 32768, 4096, gen, {}).experts == pytest.approx(one.experts * 8 / 2)
    assert one.all_to_all == 0
    four = step_time.step_parts(m, 32768, 4096, gen, {}, expert_parallelism=4)
    # dispatch and combine, forward and backward: 4 x tokens x 2 experts x emb x 2 bytes x 3/4 off-device, per layer, over 800 GB/s
    assert four.all_to_all == pytest.approx(32 * 4 * 32768 * 2 * 4096 * 2 * 3 / 4 / 800e9)


def test_remat_policy_decides_what_is_computed_again() -> None:
    m, gen = _model("llama3.1-8b"), catalog.GENERATIONS["v6e"]
    full = step_time.step_parts(m, 8192, 8192, gen, {"remat_policy": "full"})
    minimal = step_time.step_parts(m, 8192, 8192, gen, {"remat_policy": "minimal_with_context"})
    custom = step_time.step_parts(
        m, 8192, 8192, gen, {"remat_policy": "custom", "context": "device", "query_proj": "offload", "key_proj": "device", "value_proj": "device"}
    )
    assert minimal.dense < custom.dense < full.dense
    assert minimal.attention == custom.attention < full.attention  # the attention output kept: not recomputed
