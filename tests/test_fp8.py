"""fp8 and int8 recipe variants for tpu7x, and MFU against the fp8 peak for fp8 runs.

MaxText 0.2.5 trains in fp8 on TPUs with Qwix (use_qwix_quantization) and
quantization=fp8_full; base.yml's plain `fp8` is its GPU path. A run's log carries its
resolved config (`Config param quantization: fp8_full`), which is what decides the peak:
tpu7x's fp8 figure (catalog: 4614 TFLOP/s per chip, 2 devices per chip) for an fp8 run,
bf16 (2307) otherwise, and bf16 wherever the catalog has no fp8 figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import catalog
from infra.spec import load_spec
from tests.support import EXAMPLES, cli
from tests.test_metrics import ABSL, HAND
from workloads.observe import metrics as m
from workloads.planning import recipes as r
from workloads.planning.maxtext_keys import maxtext_keys
from workloads.planning.planner import Overrides, plan_run

TPU7X = catalog.shape("tpu7x", "4x4x8")


def _log(quantization: str | None) -> str:
    head = [ABSL + f"Config param quantization: {quantization}"] if quantization is not None else []
    return "\n".join([*head, HAND])


# ---------------------------------------------------------------- the peak


def test_catalog_fp8_peak_is_what_the_summary_divides_by() -> None:
    gen = catalog.GENERATIONS["tpu7x"]
    assert (gen.peak_bf16_tflops_per_chip, gen.peak_fp8_tflops_per_chip, gen.devices_per_chip) == (2307, 4614, 2)


@pytest.mark.parametrize(
    "quantization, fp8, peak_per_device",
    [
        ("fp8_full", True, 4614 / 2),
        ("'fp8'", True, 4614 / 2),  # MaxText logs strings quoted in some versions
        ("int8", False, 2307 / 2),  # int8 is compared with the bf16 run it replaces
        ("", False, 2307 / 2),
        (None, False, 2307 / 2),  # no config lines at all (a metrics file alone)
    ],
)
def test_mfu_uses_the_fp8_peak_only_for_fp8_runs(quantization, fp8, peak_per_device) -> None:
    run = m.parse_log(_log(quantization))
    assert m.is_fp8(run.config) is fp8
    hw = m.Hardware.from_shape(TPU7X, 1, fp8=m.is_fp8(run.config))
    assert hw.precision == ("fp8" if fp8 else "bf16")
    s = m.summarize(run.steps, hardware=hw)
    # HAND: 4 steady steps x 40 TFLOP per device in 5.0 s = 32 TFLOP/s per device.
    assert s.tflops_per_device == pytest.approx(32.0)
    assert s.mfu == pytest.approx(32.0 / peak_per_device)


def test_fp8_on_a_generation_without_an_fp8_figure_stays_on_bf16() -> None:
    v6e = catalog.resolve("v6e-16")
    hw = m.Hardware.from_shape(v6e, 1, fp8=True)
    assert hw.precision == "bf16" and hw.peak_tflops_per_device == pytest.approx(918)


def test_metrics_cli_names_the_peak(tmp_path: Path) -> None:
    log = tmp_path / "fp8.log"
    log.write_text(_log("fp8_full") + "\n")
    res = cli("workloads", "metrics", str(log), "--shape", "tpu7x-4x4x8")
    assert res.returncode == 0, res.stderr
    mfu = next(line for line in res.stdout.splitlines() if line.startswith("  MFU"))
    assert mfu == f"  MFU            {100 * 32.0 / 2307:.2f}% of 2307 TFLOP/s per device (tpu7x-256, fp8 peak)"
    log.write_text(_log(None) + "\n")
    res = cli("workloads", "metrics", str(log), "--shape", "tpu7x-4x4x8")
    mfu = next(line for line in res.stdout.splitlines() if line.startswith("  MFU"))
    assert mfu == f"  MFU            {100 * 32.0 / 1153.5:.2f}% of 1153.5 TFLOP/s per device (tpu7x-256, bf16 peak)"


# ------------------------------------------------------------- the recipes


@pytest.mark.parametrize("name, quantization", [("llama3-8b-fp8", "fp8_full"), ("llama3-8b-int8", "int8")])
def test_quantized_recipes_plan_on_the_tpu7x_example(name: str, quantization: str) -> None:
    recipe = r.load_recipe(name)
    assert recipe.generations == ["tpu7x"]
    args = recipe.maxtext.args  # type: ignore[union-attr]
    assert args["quantization"] == quantization and args["use_qwix_quantization"] is True
    assert {"quantization", "use_qwix_quantization"} <= maxtext_keys()
    plan = plan_run(name, load_spec(EXAMPLES / "tpu7x.yaml"), Overrides())
    rendered = dict(a.split("=", 1) for a in plan.program.args[1:])
    assert rendered["quantization"] == quantization and rendered["use_qwix_quantization"] == "true"
    assert rendered["model_name"] == "llama3-8b" and rendered["ici_fsdp_parallelism"] == "256"
    if quantization.startswith("fp8"):
        assert rendered["weight_quantization_calibration_method"] == "fixed,-224,224"
