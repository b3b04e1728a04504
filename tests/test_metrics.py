"""MaxText metrics parsing and steady-state summary.

The main data is REAL: tests/data/maxtext/* came from MaxText 0.2.5 training the tiny model on
CPU (scripts/gen_maxtext_log.sh). Expected values are recomputed here from the raw JSON with
the json module, not with the parser under test. Hand-written lines appear only for the
variants a CPU run does not print (rampup, MoE fields, hidden profiler steps, eval), and are
marked SYNTHETIC.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as stg

from infra import catalog
from workloads.observe import metrics as m

DATA = Path(__file__).parent / "data" / "maxtext"


def _raw(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def prof_log() -> m.RunLog:
    return m.parse_log((DATA / "tiny_cpu.log").read_text())


@pytest.fixture(scope="module")
def noprof_log() -> m.RunLog:
    return m.parse_log((DATA / "tiny_cpu_noprof.log").read_text())


# ------------------------------------------------------------------ real log


def test_real_log_has_every_step_with_all_fields(prof_log: m.RunLog) -> None:
    raw = _raw("tiny_cpu.metrics.jsonl")
    assert [s.step for s in prof_log.steps] == [int(r["step"]) for r in raw]
    for s in prof_log.steps:
        assert s.seconds is not None and s.seconds > 0
        assert s.tokens_per_device is not None and s.tokens_per_device > 0
        assert s.tflops_per_device is not None
        assert s.total_weights == 128  # per_device_batch_size 2 x 64 tokens, one device
        assert s.loss is not None and 0 < s.loss < 10
        assert set(s.extra) >= {"lm_loss", "perplexity"}
        assert not s.rampup and not s.profiler_boundary


def test_real_log_config_and_system(prof_log: m.RunLog, noprof_log: m.RunLog) -> None:
    assert prof_log.config["run_name"] == "tiny_cpu"
    assert prof_log.profiler_window() == m.ProfilerWindow(first=5, steps=2)
    assert noprof_log.profiler_window() is None
    assert prof_log.system["jax_backend"] == "cpu"
    assert prof_log.num_devices == 1


@pytest.mark.parametrize("name", ["tiny_cpu", "tiny_cpu_noprof"])
def test_log_and_metrics_file_agree_within_rounding(name: str) -> None:
    log = m.parse_log((DATA / f"{name}.log").read_text())
    raw = {int(r["step"]): r for r in _raw(f"{name}.metrics.jsonl")}
    assert {s.step for s in log.steps} == set(raw)
    for s in log.steps:
        r = raw[s.step]
        # The log prints 3 decimals; allow half a unit of the last digit plus float noise.
        assert s.seconds == pytest.approx(r["perf/step_time_seconds"], abs=5.1e-4)
        assert s.loss == pytest.approx(r["learning/loss"], abs=5.1e-4)
        assert s.tflops_per_device == pytest.approx(r["perf/per_device_tflops_per_sec"], abs=5.1e-4)
        assert s.tokens_per_device == pytest.approx(r["perf/per_device_tokens_per_sec"], abs=5.1e-4)
        assert s.total_weights == r["learning/total_weights"]


def test_metrics_file_parses_to_full_precision() -> None:
    steps = m.parse_metrics_file((DATA / "tiny_cpu.metrics.jsonl").read_text())
    raw = _raw("tiny_cpu.metrics.jsonl")
    assert len(steps) == len(raw)
    for s, r in zip(steps, raw, strict=True):
        assert s.step == int(r["step"])
        assert s.seconds == r["perf/step_time_seconds"]
        assert s.loss == r["learning/loss"]
        assert s.extra["perplexity"] == r["learning/perplexity"]
        assert "run_name" not in s.extra  # strings are not metrics


def test_merge_takes_file_numbers_and_log_flags(prof_log: m.RunLog) -> None:
    merged = m.load((DATA / "tiny_cpu.log").read_text(), (DATA / "tiny_cpu.metrics.jsonl").read_text())
    raw = {int(r["step"]): r for r in _raw("tiny_cpu.metrics.jsonl")}
    assert len(merged.steps) == len(prof_log.steps)
    for s in merged.steps:
        assert s.seconds == raw[s.step]["perf/step_time_seconds"]
    assert merged.config["run_name"] == "tiny_cpu"  # the log's config survives the merge


# ------------------------------------------------------------------ summary


def test_steady_state_excludes_compile_and_profiler_window(prof_log: m.RunLog) -> None:
    raw = {int(r["step"]): r for r in _raw("tiny_cpu.metrics.jsonl")}
    steps = m.parse_metrics_file((DATA / "tiny_cpu.metrics.jsonl").read_text())
    s = m.summarize(steps, profiler=prof_log.profiler_window())
    # profiler_steps=2 from step 5: 5, 6 profiled, 7 and 8 are MaxText's own boundary steps.
    assert s.steady_steps == (2, 3, 4, 9)
    assert s.excluded == {0: "compilation", 1: "compilation", 5: "profiler", 6: "profiler", 7: "profiler", 8: "profiler"}
    want = [raw[i]["perf/step_time_seconds"] for i in s.steady_steps]
    assert s.step_seconds_mean == pytest.approx(statistics.fmean(want))
    assert s.step_seconds_median == pytest.approx(statistics.median(want))
    # Throughput is total work / total time (the file says each step's work), not a mean of rates.
    tokens = sum(raw[i]["perf/per_device_tokens"] for i in s.steady_steps)
    assert s.tokens_per_device == pytest.approx(tokens / sum(want))
    rates = [raw[i]["perf/per_device_tokens_per_sec"] for i in s.steady_steps]
    assert s.tokens_per_device < statistics.fmean(rates)  # the short steps' big rates no longer dominate
    assert s.tokens_per_device_spread == m.Spread(statistics.median(rates), min(rates), max(rates))
    # The profiler window really is slower on this data: the exclusion matters.
    worst = max(raw[i]["perf/step_time_seconds"] for i in (5, 6, 7, 8))
    assert worst > 3 * s.step_seconds_median


def test_no_profiler_means_everything_after_compile_is_steady(noprof_log: m.RunLog) -> None:
    s = m.summarize(noprof_log.steps, profiler=noprof_log.profiler_window())
    assert s.steady_steps == tuple(range(2, 12))
    assert set(s.excluded.values()) == {"compilation"}


def test_loss_trend_from_real_run(noprof_log: m.RunLog) -> None:
    s = m.summarize(noprof_log.steps)
    losses = [st.loss for st in noprof_log.steps]
    assert s.loss_first == losses[0] and s.loss_last == losses[-1] and s.loss_min == min(losses)
    assert s.loss_slope_per_step is not None and s.loss_slope_per_step < 0  # it trains
    assert s.loss_drop_pct == pytest.approx(100 * (losses[0] - losses[-1]) / losses[0])


@pytest.mark.parametrize("type_name", ["tpu7x-8", "tpu7x-256", "v5litepod-16", "v6e-16", "v5p-16"])
def test_per_chip_and_mfu_follow_the_catalog(prof_log: m.RunLog, type_name: str) -> None:
    shape = catalog.resolve(type_name)
    hw = m.Hardware.from_shape(shape, slices=2)
    s = m.summarize(prof_log.steps, hardware=hw, profiler=prof_log.profiler_window())
    per = shape.generation.devices_per_chip
    assert per == (2 if shape.generation.name == "tpu7x" else 1)
    assert s.tflops_per_chip == pytest.approx(s.tflops_per_device * per)
    assert s.tokens_per_chip == pytest.approx(s.tokens_per_device * per)
    peak_dev = shape.generation.peak_bf16_tflops_per_chip / per
    assert s.mfu == pytest.approx(s.tflops_per_device / peak_dev)
    assert hw.chips == 2 * shape.chips


def test_tpu7x_per_chip_is_double_per_device() -> None:
    steps = [m.StepMetrics(step=i, seconds=1.0, tflops_per_device=500.0, tokens_per_device=1000.0, total_weights=0, loss=1.0) for i in range(5)]
    s = m.summarize(steps, hardware=m.Hardware.from_shape(catalog.resolve("tpu7x-128")))
    assert (s.tflops_per_chip, s.tokens_per_chip) == (1000.0, 2000.0)
    assert s.mfu == pytest.approx(500.0 / (2307 / 2))


def test_tokens_cross_check_matches_reported_throughput() -> None:
    # One CPU device = one "chip": total_weights / seconds is exactly MaxText's tokens/s here.
    steps = m.parse_metrics_file((DATA / "tiny_cpu_noprof.metrics.jsonl").read_text())
    s = m.summarize(steps, hardware=m.Hardware(name="cpu", devices_per_chip=1, peak_tflops_per_device=1.0, chips=1))
    assert s.tokens_per_chip_from_weights == pytest.approx(s.tokens_per_chip, rel=1e-6)


def test_summary_to_dict_is_json() -> None:
    s = m.summarize(m.parse_metrics_file((DATA / "tiny_cpu.metrics.jsonl").read_text()))
    d = json.loads(json.dumps(s.to_dict()))
    assert d["excluded"]["0"] == "compilation" and d["steps_seen"] == 10


def test_too_few_steps_give_an_empty_steady_state() -> None:
    s = m.summarize([m.StepMetrics(step=0, seconds=9.0), m.StepMetrics(step=1, seconds=3.0)])
    assert s.steady_steps == () and s.step_seconds_mean is None and s.tflops_per_device is None


# ------------------------------------------- SYNTHETIC variants (not printed on CPU)

ABSL = "I1122 02:24:18.660960 140444037340032 metric_logger.py:265] "

SYNTHETIC = "\n".join(
    [
        # SYNTHETIC: batch-size ramp-up (rampup_end_step > step): no throughput fields.
        ABSL + "[Rampup Batch Size Phase], completed step: 0, seconds: 9.500, total_weights: 64, loss: 10.900, lm_loss: 10.900, perplexity: 54176.000",
        ABSL + "[Rampup Batch Size Phase], completed step: 1, seconds: 0.800, total_weights: 64, loss: 10.700, lm_loss: 10.700, perplexity: 44355.000",
        ABSL + "[Rampup Batch Size Phase], completed step: 2, seconds: 0.800, total_weights: 96, loss: 10.500, lm_loss: 10.500, perplexity: 36315.000",
        # SYNTHETIC: MoE + MTP trailing fields.
        ABSL
        + "completed step: 3, seconds: 1.000, TFLOP/s/device: 400.000, Tokens/s/device: 4000.000, total_weights: 128, loss: 10.000, lm_loss: 9.900, perplexity: 22026.000, moe_lb_loss: 0.012345, moe_max_load_ratio: 1.2500, moe_max_load_ratio_mean: 1.1000, main_model_loss: 9.800, mtp_loss: 0.200",
        # SYNTHETIC: hide_profiler_step_metric=true hides a boundary step's timing.
        ABSL + "completed profiler activation/deactivation step: 4, total_weights: 128, loss: 9.900, lm_loss: 9.900, perplexity: 19930.000",
        ABSL
        + "completed step: 5, seconds: 1.200, TFLOP/s/device: 300.000, Tokens/s/device: 3000.000, total_weights: 128, loss: 9.800, lm_loss: 9.800, perplexity: 18034.000",
        # SYNTHETIC: eval lines must not become training steps.
        ABSL + "Completed eval step: 0, seconds: 0.500, running loss=9.700, running perplexity=16318.000, running total_weights=128",
        ABSL + "Completed eval after train step 5, loss=9.650, perplexity=15522.000, total_weights=512, avg_z_loss=0.000",
        # SYNTHETIC: a restart replays step 5; the later line wins.
        ABSL
        + "completed step: 5, seconds: 1.000, TFLOP/s/device: 350.000, Tokens/s/device: 3500.000, total_weights: 128, loss: 9.750, lm_loss: 9.750, perplexity: 17154.000",
    ]
)


def test_synthetic_variants() -> None:
    log = m.parse_log(SYNTHETIC)
    by = {s.step: s for s in log.steps}
    assert sorted(by) == [0, 1, 2, 3, 4, 5]
    assert by[0].rampup and by[0].tokens_per_device is None and by[0].seconds == 9.5 and by[0].loss == 10.9
    assert by[3].extra["moe_lb_loss"] == 0.012345 and by[3].extra["mtp_loss"] == 0.2 and by[3].tflops_per_device == 400.0
    assert by[4].profiler_boundary and by[4].seconds is None and by[4].loss == 9.9
    assert by[5].tflops_per_device == 350.0  # the replayed step
    assert len(log.evals) == 1 and log.evals[0].after_step == 5 and log.evals[0].loss == 9.65
    assert log.evals[0].extra["perplexity"] == 15522.0

    s = m.summarize(log.steps)
    assert s.steady_steps == (3, 5)
    assert s.excluded[2] == "rampup" and s.excluded[4] == "profiler"
    assert s.tflops_per_device == pytest.approx(375.0)


# ------------------------------------------- throughput worked out by hand

# SYNTHETIC, with round numbers so every figure below can be checked on paper. Each step does
# 40 TFLOP and 1,000 tokens per device; a v5litepod-16 slice has 16 chips of one device each,
# so total_weights (tokens over the whole run) is 16 x 1,000 = 16,000 per step.
HAND = "\n".join(
    ABSL + f"completed step: {n}, seconds: {sec}, TFLOP/s/device: {tf}, Tokens/s/device: {tok}, "
    f"total_weights: 16000, loss: {loss}, lm_loss: {loss}, perplexity: 100.000"
    for n, sec, tf, tok, loss in [
        (0, "30.000", "1.333", "33.333", "8.000"),  # compilation: excluded
        (1, "5.000", "8.000", "200.000", "7.900"),  # compilation: excluded
        (2, "1.600", "25.000", "625.000", "7.800"),  # 40 / 1.6 = 25; 1000 / 1.6 = 625
        (3, "1.600", "25.000", "625.000", "7.700"),
        (4, "1.600", "25.000", "625.000", "7.600"),
        (5, "0.200", "200.000", "5000.000", "7.500"),  # one fast step: 40 / 0.2, 1000 / 0.2
    ]
)


def test_throughput_is_total_work_over_total_time_by_hand() -> None:
    s = m.summarize(m.parse_log(HAND).steps, hardware=m.Hardware.from_shape(catalog.resolve("v5litepod-16"), slices=1))
    assert s.steady_steps == (2, 3, 4, 5)
    # Steady steps 2-5: 4 x 1,000 tokens in 1.6 + 1.6 + 1.6 + 0.2 = 5.0 s.
    assert s.tokens_per_device == pytest.approx(800.0)  # 4,000 / 5.0 (the mean of rates said 1,718.75)
    assert s.tflops_per_device == pytest.approx(32.0)  # 4 x 40 / 5.0 (the mean of rates said 68.75)
    assert s.tokens_per_chip == pytest.approx(800.0) and s.tflops_per_chip == pytest.approx(32.0)  # v5e: 1 device/chip
    assert s.mfu == pytest.approx(32.0 / 197)  # v5e peak: 197 TFLOP/s per chip = per device
    assert s.tokens_per_chip_from_weights == pytest.approx(800.0)  # 4 x 16,000 / 5.0 / 16 chips
    assert (s.step_seconds_mean, s.step_seconds_median) == (pytest.approx(1.25), pytest.approx(1.6))
    assert s.step_seconds_spread == m.Spread(median=1.6, low=0.2, high=1.6)
    assert s.tokens_per_device_spread == m.Spread(median=625.0, low=625.0, high=5000.0)
    assert s.tflops_per_device_spread == m.Spread(median=25.0, low=25.0, high=200.0)
    assert s.tokens_per_chip_spread == m.Spread(median=625.0, low=625.0, high=5000.0)


def test_throughput_by_hand_on_two_devices_per_chip() -> None:
    s = m.summarize(m.parse_log(HAND).steps, hardware=m.Hardware.from_shape(catalog.resolve("tpu7x-8")))
    assert s.tokens_per_chip == pytest.approx(1600.0) and s.tflops_per_chip == pytest.approx(64.0)
    assert s.mfu == pytest.approx(32.0 / (2307 / 2))  # per device: half a chip's 2,307
    assert s.tflops_per_chip_spread == m.Spread(median=50.0, low=50.0, high=400.0)


def test_throughput_uses_the_metrics_files_work_when_it_has_it() -> None:
    # SYNTHETIC metrics-file lines: the step's own work wins over rate x rounded seconds.
    lines = [
        {
            "step": 2,
            "perf/step_time_seconds": 2.0,
            "perf/per_device_tokens": 1000.0,
            "perf/per_device_tokens_per_sec": 500.0,
            "perf/per_device_tflops": 10.0,
            "perf/per_device_tflops_per_sec": 5.0,
        },
        {
            "step": 3,
            "perf/step_time_seconds": 0.5,
            "perf/per_device_tokens": 1000.0,
            "perf/per_device_tokens_per_sec": 2000.0,
            "perf/per_device_tflops": 10.0,
            "perf/per_device_tflops_per_sec": 20.0,
        },
    ]
    s = m.summarize(m.parse_metrics_file("\n".join(json.dumps(x) for x in lines)))
    assert s.tokens_per_device == pytest.approx(2000 / 2.5) and s.tflops_per_device == pytest.approx(20 / 2.5)
    assert s.tokens_per_device_spread == m.Spread(median=1250.0, low=500.0, high=2000.0)


def test_a_step_without_a_rate_adds_no_time_to_that_rate() -> None:
    steps = [
        m.StepMetrics(step=2, seconds=1.0, tokens_per_device=100.0),
        m.StepMetrics(step=3, seconds=3.0),  # timed, but no tokens figure: not part of tokens/s
        m.StepMetrics(step=4, seconds=1.0, tokens_per_device=300.0),
    ]
    s = m.summarize(steps)
    assert s.tokens_per_device == pytest.approx(400 / 2.0) and s.tflops_per_device is None
    assert s.step_seconds_mean == pytest.approx(5 / 3)


@given(
    step=stg.integers(min_value=0, max_value=10**7),
    seconds=stg.floats(min_value=0.0005, max_value=1e4),
    tflops=stg.floats(min_value=0, max_value=5000),
    tokens=stg.floats(min_value=0, max_value=1e7),
    weights=stg.integers(min_value=0, max_value=10**9),
    loss=stg.floats(min_value=0, max_value=20),
)
def test_round_trip_of_the_maxtext_format(step, seconds, tflops, tokens, weights, loss) -> None:
    # The f-string layout of metric_logger._log_training_metrics in MaxText 0.2.5.
    line = (
        f"{ABSL}completed step: {step}, seconds: {seconds:.3f}, TFLOP/s/device: {tflops:.3f}, "
        f"Tokens/s/device: {tokens:.3f}, total_weights: {weights}, loss: {loss:.3f}, lm_loss: {loss:.3f}, perplexity: {math.exp(loss):.3f}"
    )
    (rec,) = m.parse_log(line).steps
    assert rec.step == step and rec.total_weights == weights
    assert rec.seconds == pytest.approx(seconds, abs=5.1e-4)
    assert rec.tflops_per_device == pytest.approx(tflops, abs=5.1e-4)
    assert rec.tokens_per_device == pytest.approx(tokens, abs=5.1e-4)
    assert rec.loss == pytest.approx(loss, abs=5.1e-4)


def test_not_a_maxtext_log() -> None:
    with pytest.raises(m.MetricsError, match="no MaxText step metrics"):
        m.load("hello\nworld\n")
    with pytest.raises(m.MetricsError, match="line 2 is not JSON"):
        m.parse_metrics_file('{"step": 0, "learning/loss": 1}\nnot json\n')
