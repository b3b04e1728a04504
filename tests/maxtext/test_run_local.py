"""`run-local <recipe> --tiny`: the rendered command runs for real on CPU and its output
goes through the cluster path's metrics and report code."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.support import EXAMPLES, run_module
from workloads.observe import metrics as m
from workloads.planning.recipe_model import Kind
from workloads.planning.recipes import all_recipes

MAXTEXT_RECIPES = [r.name for r in all_recipes() if r.kind is Kind.MAXTEXT]


def _spec_for(recipe: str, tmp_path: Path) -> list[str]:
    """The default spec when the recipe runs on it; else (the tpu7x-only fp8/int8 variants) the
    tpu7x example shrunk to a 2x2x4 slice, the recipe's smaller preferred shape: a 4x4x8 slice
    is 256 devices, and the tiny model (emb 64) cannot be sharded 256 ways on CPU."""
    from infra.spec import load_spec
    from workloads.planning.recipes import load_recipe

    wanted = set(load_recipe(recipe).generations)
    if any(p.shape.generation.name in wanted for p in load_spec(EXAMPLES / "default.yaml").tpu_pools):
        return []
    assert "tpu7x" in wanted, f"recipe {recipe}: give the test a spec it can run on"
    small = tmp_path / "tpu7x-small.yaml"
    small.write_text((EXAMPLES / "tpu7x.yaml").read_text().replace("4x4x8", "2x2x4").replace("tpu7x-256", "tpu7x-32"))
    return ["--spec", str(small)]


@pytest.mark.parametrize("recipe", MAXTEXT_RECIPES)
def test_tiny_cpu_run_completes_and_reports(maxtext_venv, tmp_path, recipe):
    out = tmp_path / "report"
    r = run_module("workloads", "run-local", recipe, "--tiny", *_spec_for(recipe, tmp_path), "--out", str(out), "-o", "json", timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    doc = json.loads(r.stdout)

    # The command that ran is the rendered one: the train module and the recipe's model name.
    cmd = (out / "command.txt").read_text()
    assert "-m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml" in cmd
    assert "JAX_PLATFORMS=cpu" in cmd and "metrics_file=" in cmd

    # Both sources parse on their own, with the cluster path's parsers.
    log_only = m.load((out / "maxtext.log").read_text(), None)
    file_only = m.load(None, (out / "metrics.jsonl").read_text())
    assert [s.step for s in log_only.steps] == list(range(10))
    assert [s.step for s in file_only.steps] == list(range(10))
    assert all(s.loss is not None and s.loss > 0 for s in file_only.steps)

    # The report: loss curve plot, markdown and the summary `metrics -o json` prints.
    png = out / "metrics.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "loss" in (out / "report.md").read_text().lower()
    summary = doc["summary"] if "summary" in doc else doc
    assert json.loads((out / "summary.json").read_text())["summary"]["steps_seen"] == 10
    assert summary["steps_seen"] == 10 and summary["loss_first"] is not None and summary["loss_last"] is not None
    print(f"\n[maxtext tier] run-local {recipe}: {doc['local_run']['seconds']} s, peak RSS {doc['local_run']['peak_rss_bytes'] / 2**30:.2f} GiB")


def test_text_output_is_the_metrics_summary(maxtext_venv, tmp_path):
    r = run_module("workloads", "run-local", "maxtext-6b", "--tiny", "--steps", "6", "--out", str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert "6 steps, steady state over 4 (steps 2–5)" in lines[0]
    for label in ("step time", "TFLOP/s", "tokens/s", "loss"):
        assert any(ln.strip().startswith(label) for ln in lines), (label, r.stdout)
    # Same lines `metrics` prints for the files the run wrote.
    again = run_module("workloads", "metrics", str(tmp_path / "maxtext.log"), "--metrics-file", str(tmp_path / "metrics.jsonl"))
    assert again.returncode == 0, again.stderr
    # The indented summary block; run-local then adds its own (unindented) resume and timing lines.
    summary = list(itertools.takewhile(lambda ln: ln.startswith("  "), lines[1:]))
    assert summary and again.stdout.splitlines()[1 : 1 + len(summary)] == summary  # `metrics` adds goodput after
