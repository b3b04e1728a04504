"""The step-time estimate counts active parameters, checked against the published Ironwood figures.

Not a timed test: the published step times (workloads/recipes/_published_ironwood.yaml, with
their source and date) are data, and the estimate is a pure function of the model preset,
batch, sequence and slice. scripts/bench_step_time.py prints the full table.
"""

from __future__ import annotations

import math
import statistics

import pytest

from infra import catalog
from toolkit.yamlfile import load_yaml
from workloads.planning.import_recipe import model_presets
from workloads.planning.recipe_model import ModelDims
from workloads.planning.recipes import RECIPES_DIR
from workloads.planning.sizing import step_seconds

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


# ------------------------------------------------------------------ HBM: what published recipes use


def _hbm(args: dict[str, str], **kw: float):
    from workloads.planning.planner import estimate_hbm

    model = ModelDims.model_validate(model_presets()[kw.pop("preset", "llama3.1-405b")])
    totals = {"data": 1, "fsdp": 512, "fsdp_transpose": 1, "tensor": 1, "sequence": 1, "context": 1, "expert": 1, "pipeline": 1}
    return estimate_hbm(model, model.params(), kw.get("pdb", 3), int(kw.get("seq", 8192)), totals, 96 * 2**30, args)


def test_host_offload_keeps_two_layers_of_inputs_on_the_device() -> None:
    plain = _hbm({"remat_policy": "full"})
    offload = _hbm({"remat_policy": "custom", "decoder_layer_input": "offload", "mlpwo": "offload"})
    assert plain.state_bytes == offload.state_bytes
    assert offload.activation_bytes * 126 == plain.activation_bytes * 2  # 126 decoder layers -> 2 on the device
    # Offload only means something under the custom policy (MaxText ignores it otherwise).
    assert _hbm({"remat_policy": "full", "decoder_layer_input": "offload"}).activation_bytes == plain.activation_bytes


def test_vocab_tiling_divides_the_logits_and_bad_values_are_ignored() -> None:
    base = _hbm({}, preset="gpt-oss-120b", pdb=10)
    assert _hbm({"num_vocab_tiling": "4"}, preset="gpt-oss-120b", pdb=10).logits_bytes == base.logits_bytes // 4
    assert _hbm({"num_vocab_tiling": "x"}, preset="gpt-oss-120b", pdb=10).logits_bytes == base.logits_bytes


def test_over_budget_inside_the_error_band_plans_with_a_warning_beyond_it_is_refused() -> None:
    from tests.support import spec_from
    from toolkit.errors import FieldError
    from workloads.planning.planner import HBM_ERROR_BAND, Overrides, plan_run

    spec = spec_from("tpu7x", tpu_pools=[{"name": "iw", "generation": "tpu7x", "topology": "2x2x4", "slices": 1, "capacity": "on-demand"}])
    base = plan_run("llama3-8b", spec, Overrides()).program.sizing
    fits = base.hbm
    unit = (fits.activation_bytes + fits.logits_bytes) / base.per_device_batch_size  # bytes per unit of batch
    # The first whole batch over the budget (inside the band), and the first beyond the band.
    inside = math.ceil((fits.available_bytes - fits.state_bytes) / unit)
    beyond = math.ceil(((1 + HBM_ERROR_BAND) * fits.available_bytes - fits.state_bytes) / unit) + 1
    assert fits.state_bytes + inside * unit <= (1 + HBM_ERROR_BAND) * fits.available_bytes  # the test's own premise
    plan = plan_run("llama3-8b", spec, Overrides(sets=(f"per_device_batch_size={inside}",)))
    assert not plan.program.sizing.hbm.fits
    (warning,) = [w for w in plan.program.warnings if "inside the estimate's 30% error band" in w]
    assert "preflight <recipe> --compile" in warning
    with pytest.raises(FieldError, match="more than the estimate's 30% error band over"):
        plan_run("llama3-8b", spec, Overrides(sets=(f"per_device_batch_size={beyond}",)))
