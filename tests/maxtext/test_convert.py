"""Starting from weights, with real MaxText 0.2.5: Hugging Face files this test writes (no hub download) converted by
MaxText's own converter (`convert --local --tiny`), then a tiny training run that loads them (`run-local --load-parameters`).

What cannot run here: nothing the path needs. MaxText's conversion imports torch only for its eager
loader (``lazy_load_tensors=false``); the default lazy loader reads safetensors with numpy, and torch
is not in the pinned venv, so this is also the proof the conversion needs none.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_module
from tests.support.hf_weights import write_hf
from tests.support.paths import REPO
from workloads.maxtext import env as maxtext_env
from workloads.planning import checkpoint_shapes as cs

TINY_VOCAB = 256  # run_local.TINY_MODEL's
FIXTURE = REPO / "tests" / "data" / "checkpoints" / "converted-tiny-llama"


@pytest.fixture(scope="module")
def converted(maxtext_venv, tmp_path_factory) -> tuple[Path, dict]:
    """A tiny Llama (run-local's tiny shapes, weights of standard deviation 1) converted by MaxText's converter."""
    tmp = tmp_path_factory.mktemp("convert")
    hf = write_hf(maxtext_venv, tmp / "hf", vocab=TINY_VOCAB)
    done = run_module(
        "workloads", "convert", "llama3.1-8b", "--from", str(hf), "--local", "--tiny", "--out", str(tmp / "out"),
        "--set", "scan_layers=false", "-o", "json", timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    doc = json.loads(done.stdout)
    print(f"\n[maxtext tier] tiny llama3.1-8b conversion: {doc['seconds']} s, peak RSS {doc['peak_rss_bytes'] / 2**30:.2f} GiB")
    return Path(doc["conversion"]["checkpoint"]), doc


def test_the_conversion_is_maxtexts_own_command_and_is_recorded(converted) -> None:
    ckpt, doc = converted
    argv = doc["argv"]
    assert argv[1:3] == ["-m", "maxtext.checkpoint_conversion.to_maxtext"]
    for arg in ("model_name=llama3.1-8b", "scan_layers=false", "lazy_load_tensors=true", "simulated_cpu_devices_count=16", "override_model_config=true"):
        assert arg in argv, arg
    assert ckpt.name == "items" and (ckpt / cs.METADATA).is_file()
    record = json.loads((ckpt.parent.parent / "tgk-base.json").read_text())
    assert record["kind"] == "converted-base-checkpoint" and record["model_name"] == "llama3.1-8b" and record["checkpoint"] == str(ckpt)
    # The metadata Orbax wrote reads back as the tiny model's shapes (the whole arrays, not the 16 shards).
    names = cs.saved_names((ckpt / cs.METADATA).read_bytes())
    shapes = cs.global_shapes((ckpt / cs.ARRAY_METADATA).read_bytes(), (ckpt / cs.SHARDING).read_bytes())
    assert shapes["token_embedder.embedding"] == ((TINY_VOCAB, 64),) and shapes["decoder.layers_1.self_attention.query.kernel"] == ((64, 4, 16),)
    assert cs.scan_layers_of((ckpt.parent / cs.CHECKPOINT_METADATA).read_bytes(), names) is False


def test_the_unit_tiers_fixture_is_what_this_maxtext_writes(converted) -> None:
    """tests/data/checkpoints/converted-tiny-llama holds the metadata of such a conversion: it must still be what MaxText writes."""
    ckpt, _ = converted
    for rel in (cs.METADATA, cs.ARRAY_METADATA, cs.SHARDING):
        assert json.loads((FIXTURE / "0" / "items" / rel).read_text()).keys() == json.loads((ckpt / rel).read_text()).keys(), rel
    mine = cs.global_shapes((FIXTURE / "0" / "items" / cs.ARRAY_METADATA).read_bytes(), (FIXTURE / "0" / "items" / cs.SHARDING).read_bytes())
    assert mine == cs.global_shapes((ckpt / cs.ARRAY_METADATA).read_bytes(), (ckpt / cs.SHARDING).read_bytes())


def test_a_tiny_run_starts_from_the_converted_weights(converted, tmp_path) -> None:
    ckpt, _ = converted
    out = tmp_path / "run"
    done = run_module(
        "workloads", "run-local", "llama3.1-8b", "--tiny", "--steps", "6", "--out", str(out),
        "--load-parameters", str(ckpt), "--set", "scan_layers=false", "-o", "json", timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert f"load_parameters_path={ckpt}" in json.loads(done.stdout)["local_run"]["argv"]
    log = (out / "maxtext.log").read_text(errors="replace")
    assert f"restoring params from {ckpt.parent}" in log  # MaxText's own line: it read them
    losses = [json.loads(line)["learning/loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    # Weights of standard deviation 1 make confident, wrong predictions: the first loss is far above the
    # ln(vocab) a freshly initialised MaxText model starts at (its initialisers are small). Only loaded weights do that.
    assert losses[0] > 3 * math.log(TINY_VOCAB), losses
    print(f"\n[maxtext tier] run from converted weights: loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps")


def test_a_checkpoint_of_another_shape_is_refused_before_maxtext_starts(converted, maxtext_venv, tmp_path) -> None:
    ckpt, _ = converted
    # The same checkpoint, another layout: scanned layers (the default) cannot take unscanned ones.
    done = run_module("workloads", "run-local", "llama3.1-8b", "--tiny", "--out", str(tmp_path / "a"), "--load-parameters", str(ckpt))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--load-parameters" in done.stderr and "scan_layers=false" in done.stderr
    # A larger vocabulary, converted for real, is not the tiny model's.
    hf = write_hf(maxtext_venv, tmp_path / "hf512", vocab=512)
    conv = run_module(
        "workloads", "convert", "llama3.1-8b", "--from", str(hf), "--local", "--tiny", "--out", str(tmp_path / "c"),
        "--set", "scan_layers=false", "--set", "vocab_size=512", "--name", "wide-vocab", "-o", "json", timeout=1800,
    )  # fmt: skip
    assert conv.returncode == 0, conv.stderr[-3000:]
    other = json.loads(conv.stdout)["conversion"]["checkpoint"]
    bad = run_module("workloads", "run-local", "llama3.1-8b", "--tiny", "--out", str(tmp_path / "b"), "--load-parameters", other, "--set", "scan_layers=false")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "token_embedder.embedding is 512x64, the model's is 256x64" in bad.stderr
    assert not (tmp_path / "b" / "maxtext.log").exists()  # refused before MaxText ran


def test_the_table_of_converted_models_is_the_pinned_maxtexts(maxtext_venv) -> None:
    code = f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); import json, gen_maxtext_conversions as g; print(json.dumps(g.supported()))"
    done = subprocess.run(
        [str(maxtext_env.python(maxtext_venv)), "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = yaml.safe_load((REPO / "workloads" / "recipes" / "_maxtext_conversions.yaml").read_text())["models"]
    assert json.loads(done.stdout.splitlines()[-1]) == table
