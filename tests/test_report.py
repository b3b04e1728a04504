"""Run reports rendered from the real tiny MaxText run."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from infra import catalog
from workloads.observe import metrics as m
from workloads.observe import report as rp

DATA = Path(__file__).parent / "data" / "maxtext"


@pytest.fixture(scope="module")
def run() -> tuple[m.RunLog, m.Summary, m.ProfilerWindow | None]:
    log = m.load((DATA / "tiny_cpu.log").read_text(), (DATA / "tiny_cpu.metrics.jsonl").read_text())
    prof = log.profiler_window()
    hw = m.Hardware.from_shape(catalog.resolve("tpu7x-8"), slices=1)
    return log, m.summarize(log.steps, hardware=hw, profiler=prof), prof


def _table_rows(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_markdown_has_facts_steady_state_and_per_step_tables(run) -> None:
    log, summ, prof = run
    md = rp.render_markdown(rp.RunFacts.from_log("tiny_cpu", "tests/data/maxtext/tiny_cpu.log", log), log, summ, profiler=prof)
    assert md.startswith("# Run report: tiny_cpu")
    assert "tpu7x-8 (2 JAX devices per chip" in md
    facts = dict((r[0], r[1]) for r in _table_rows(md, "| fact |"))
    assert facts["model_name"] == "`default`" and facts["per_device_batch_size"] == "`2`"
    assert facts["profiler"] == "`xplane`" and facts["dataset_type"] == "`synthetic`"
    assert "steps 5–8 are the profiler window" in md

    steady = dict((r[0], r[1]) for r in _table_rows(md, "| metric |"))
    assert steady["step time, mean (s)"] == f"{summ.step_seconds_mean:,.4f}"
    assert steady["MFU"] == f"{100 * summ.mfu:.2f}%"
    sec = summ.step_seconds_spread
    assert steady["step time, range (s)"] == f"{sec.low:,.4f}–{sec.high:,.4f}"
    tp = {r[0]: r[1:] for r in _table_rows(md, "| throughput |")}
    assert tp["TFLOP/s per chip"][0] == f"{summ.tflops_per_chip:,.3f}"
    sp = summ.tokens_per_chip_spread
    assert tp["tokens/s per chip"] == [f"{summ.tokens_per_chip:,.1f}", f"{sp.median:,.1f}", f"{sp.low:,.1f}–{sp.high:,.1f}"]
    assert "total work divided by their total time" in md

    rows = _table_rows(md, "| step |")
    assert [int(r[0]) for r in rows] == [s.step for s in log.steps]
    by_step = {int(r[0]): r for r in rows}
    s3 = next(s for s in log.steps if s.step == 3)
    assert by_step[3][1] == f"{s3.seconds:,.4f}"
    assert by_step[3][4] == f"{s3.tokens_per_device * 2:,.1f}"  # tokens/s/chip on tpu7x
    assert by_step[0][7] == "compilation" and by_step[6][7] == "profiler" and by_step[3][7] == ""
    assert f"]({rp.PLOT_NAME})" in md


def test_markdown_without_hardware_leaves_per_chip_blank() -> None:
    log = m.parse_log((DATA / "tiny_cpu_noprof.log").read_text())
    md = rp.render_markdown(rp.RunFacts("x", "f"), log, m.summarize(log.steps))
    steady = dict((r[0], r[1]) for r in _table_rows(md, "| metric |"))
    tp = {r[0]: r[1:] for r in _table_rows(md, "| throughput |")}
    assert tp["TFLOP/s per chip"] == ["–", "–", "–"] and steady["MFU"] == "–"
    assert tp["tokens/s per device"][0] != "–"
    assert "profiler window" not in md
    assert "steady-state steps | 2–11 |" in md


def test_eval_section_only_when_there_are_evals() -> None:
    # SYNTHETIC eval line (CPU runs here do not evaluate).
    text = (
        DATA / "tiny_cpu_noprof.log"
    ).read_text() + "\nI1122 metric_logger.py:300] Completed eval after train step 11, loss=5.900, perplexity=365.037, total_weights=512, avg_z_loss=0.000\n"
    log = m.parse_log(text)
    md = rp.render_markdown(rp.RunFacts("x", "f"), log, m.summarize(log.steps))
    assert "## Eval" in md and "| 11 | 5.9000 |" in md


def test_markdown_figures_on_a_log_worked_out_by_hand() -> None:
    from tests.test_metrics import HAND

    log = m.parse_log(HAND)
    summ = m.summarize(log.steps, hardware=m.Hardware.from_shape(catalog.resolve("v5litepod-16"), slices=1))
    md = rp.render_markdown(rp.RunFacts("hand", "f"), log, summ)
    tp = {r[0]: r[1:] for r in _table_rows(md, "| throughput |")}
    # 4 steady steps x 1,000 tokens (40 TFLOP) per device in 5.0 s; one device per v5e chip.
    assert tp["tokens/s per device"] == ["800.0", "625.0", "625.0–5,000.0"]
    assert tp["TFLOP/s per chip"] == ["32.000", "25.000", "25.000–200.000"]
    assert tp["tokens/s per chip from total_weights (cross-check)"][0] == "800.0"
    steady = dict((r[0], r[1]) for r in _table_rows(md, "| metric |"))
    assert steady["MFU"] == "16.24%" and steady["step time, range (s)"] == "0.2000–1.6000"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_write_report_makes_markdown_png_and_json(run, tmp_path: Path) -> None:
    log, summ, prof = run
    files = rp.write_report(tmp_path / "rep", rp.RunFacts.from_log("tiny_cpu", "local", log), log, summ, profiler=prof)
    assert files.markdown.read_text().startswith("# Run report")
    data = files.plot.read_bytes()
    w, h = _png_size(data)
    assert (w, h) == (880, 660) and len(data) > 20_000  # two real panels, not an empty canvas
    doc = json.loads(files.summary_json.read_text())
    assert doc["run"] == "tiny_cpu" and len(doc["steps"]) == 10
    assert doc["summary"]["steady_steps"] == [2, 3, 4, 9]
    assert doc["summary"]["hardware"]["devices_per_chip"] == 2
