"""The step-time estimate counts active parameters, checked against the published Ironwood figures.

Not a timed test: the published step times (workloads/recipes/_published_ironwood.yaml, with
their source and date) are data, and the estimate is a pure function of the model preset,
batch, sequence and slice. scripts/bench_step_time.py prints the full table.
"""

from __future__ import annotations

import statistics

import pytest

from infra import catalog
from toolkit.yamlfile import load_yaml
from workloads.planning.import_recipe import model_presets
from workloads.planning.planner import step_seconds
from workloads.planning.recipes import RECIPES_DIR, ModelDims

PUBLISHED = load_yaml((RECIPES_DIR / "_published_ironwood.yaml").read_text())


def _ratio(row: dict) -> float:
    model = ModelDims.model_validate(model_presets()[row["preset"]])
    shape = catalog.shape("tpu7x", row["topology"])
    return step_seconds(model, row["global_batch"] * row["seq"], row["seq"], shape.chips, shape.peak_tflops_per_chip) / row["step_seconds"]


def test_published_figures_carry_their_source_and_date() -> None:
    assert PUBLISHED["source"].startswith("https://github.com/AI-Hypercomputer/tpu-recipes/blob/")
    assert PUBLISHED["source_date"] == "2026-08-06" and len(PUBLISHED["recipes"]) == 21
    for row in PUBLISHED["recipes"]:
        assert row["preset"] in model_presets(), row
        assert catalog.shape("tpu7x", row["topology"]).chips == row["chips"], row


def test_mixture_of_experts_counts_the_experts_a_token_runs_through() -> None:
    ds = ModelDims.model_validate(model_presets()["deepseek3-671b"])
    assert (ds.num_experts, ds.num_experts_per_tok, ds.shared_experts) == (256, 8, 1)
    assert ds.active_params() < ds.params() / 8  # 9 of 256 experts' MLPs, all of the attention
    dense = ModelDims.model_validate(model_presets()["llama3.1-70b"])
    assert dense.active_params() == dense.params()


@pytest.mark.parametrize("row", PUBLISHED["recipes"], ids=lambda r: f"{r['model']}-{r['precision']}-{r['topology']}-{r['seq']}")
def test_estimate_is_within_a_factor_of_the_published_step_time(row: dict) -> None:
    # deepseek3 was estimated at ~14x its published step (every expert counted); the band
    # is what the assumed MFU (0.35, bf16 peak for fp8 too) and per-model MFU spread allow.
    assert 0.4 <= _ratio(row) <= 2.5, _ratio(row)


def test_median_ratio_is_pessimistic_but_close() -> None:
    median = statistics.median(_ratio(r) for r in PUBLISHED["recipes"])
    assert 1.0 <= median <= 1.6, median
