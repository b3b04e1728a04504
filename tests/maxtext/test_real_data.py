"""The real data path on this machine: files written by each format's own library, uploaded with
`data upload` to a real GCS-compatible server, mounted with the real gcsfuse, read by real
MaxText's Grain pipeline with a tokenizer MaxText ships — and the loss falls.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from infra.datasets import DatasetFormat
from tests.support import REPO, cli, example_doc, spec_from
from tests.support.gcs_emulator import running_emulator
from toolkit.errors import SpecError
from workloads.data import formats, tokenizer
from workloads.local import bucket as local_bucket
from workloads.maxtext import env as maxtext_env

MAKE = REPO / "scripts" / "make_text_dataset.py"
# The grammar of scripts/make_text_dataset.py picks 4 of 8 words per clause of ~17 tokens:
# 12 bits a clause, ~0.5 nats a token, a floor no model of this text goes under. A run that
# trained on something else (synthetic data) would not be held up by it.
TEXT_ENTROPY_FLOOR_NATS = 0.4


def _make(venv: Path, out: Path, fmt: str, **kw: int) -> list[Path]:
    args = [str(maxtext_env.python(venv)), str(MAKE), str(out), "--format", fmt, *(f"--{k}={v}" for k, v in kw.items())]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [Path(p) for p in done.stdout.split()]


@pytest.mark.parametrize("fmt", list(DatasetFormat), ids=lambda f: f.value)
def test_files_the_format_libraries_write_are_recognised(maxtext_venv, tmp_path, fmt: DatasetFormat) -> None:
    for p in _make(maxtext_venv, tmp_path, fmt.value, shards=2, records=50):
        data = p.read_bytes()
        assert formats.problem(fmt, data[:64], data[-4:], len(data)) is None, p
        assert formats.detect(data[:64], data[-4:], len(data)) is fmt


def test_the_tokenizer_check_loads_with_maxtexts_loader(maxtext_venv, tmp_path) -> None:
    spec = spec_from(_doc("x", "assets/tokenizers/tokenizer.default"))
    facts = tokenizer.check(None, spec, spec.datasets[0], vocab_size=32768, venv=maxtext_venv)
    assert facts.vocab_size == 32768 and facts.sample_ids[0] == 1  # BOS first: the loader's own encode
    with pytest.raises(SpecError) as e:
        tokenizer.check(None, spec, spec.datasets[0], vocab_size=256, venv=maxtext_venv)
    assert e.value.field == "datasets[0].tokenizer" and "32768 ids" in e.value.problem


def test_a_tokenizer_file_that_does_not_parse_is_refused(maxtext_venv, tmp_path) -> None:
    with running_emulator() as url:
        spec = spec_from(_doc("tok", "tokenizer.model"))
        local_bucket.ensure_buckets(url, spec)
        c = local_bucket.SERVICE.client(url)
        d = spec.datasets[0]
        c.bucket(d.bucket).blob(d.object_prefix() + "tokenizer.model").upload_from_string(b"this is not a sentencepiece model")
        with pytest.raises(SpecError) as e:
            tokenizer.check(c, spec, d, venv=maxtext_venv)
    assert e.value.field == "datasets[0].tokenizer" and "does not load as a sentencepiece tokenizer" in e.value.problem


def _doc(suffix: str, tok: str = "assets/tokenizers/tokenizer.default") -> dict:
    doc = example_doc("default")
    doc["buckets"] = [{"name": f"tgk-rd-data-{suffix}", "purpose": "data"}, {"name": f"tgk-rd-ckpt-{suffix}", "purpose": "checkpoints"}]
    doc["datasets"] = [{"name": "tiny-text", "bucket": f"tgk-rd-data-{suffix}", "path": "text/v1", "format": "arrayrecord", "tokenizer": tok}]
    return doc


def test_run_local_trains_on_the_dataset_through_a_gcsfuse_mount(maxtext_venv, tmp_path) -> None:
    src = tmp_path / "src"
    _make(maxtext_venv, src, "arrayrecord", shards=2, records=1500)
    doc = _doc(uuid.uuid4().hex[:8])
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(doc))
    spec = spec_from(doc)
    with running_emulator() as url:
        env = {"STORAGE_EMULATOR_HOST": url, "KUBECONFIG": "", "HOME": str(tmp_path)}
        local_bucket.ensure_buckets(url, spec)
        local_bucket.grant_buckets(url, spec)  # what infra deploy grants (the local cluster does the same)
        up = cli("workloads", "data", "upload", src, "--dataset", "tiny-text", "--spec", sp, "-o", "json", env=env)
        assert up.returncode == 0, up.stderr
        assert len(json.loads(up.stdout)["files"]) == 2
        out = tmp_path / "out"
        done = cli(
            "workloads", "run-local", "maxtext-6b", "--tiny", "--steps", "20", "--out", out, "--spec", sp, "--dataset", "tiny-text",
            "--set", "learning_rate=0.01", "--set", "warmup_steps_fraction=0", "-o", "json",
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc_out = json.loads(done.stdout)
    argv = doc_out["local_run"]["argv"]
    files = next(a.split("=", 1)[1] for a in argv if a.startswith("grain_train_files="))
    assert files.endswith("/data/tiny-text/*.array_record*") and "dataset_type=grain" in argv and "vocab_size=32768" in argv
    assert not Path(files).parent.exists()  # the mount's directory went with the mount: nothing was copied there
    losses = [json.loads(line)["learning/loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 20
    assert losses[-1] < 0.3 * losses[0], losses  # it learned...
    assert min(losses) > TEXT_ENTROPY_FLOOR_NATS, losses  # ...this text, which cannot be predicted past its own entropy
    log = (out / "maxtext.log").read_text(errors="replace")
    assert "Config param dataset_type: DatasetType.GRAIN" in log
    assert os.path.basename(files) in log or "grain_train_files" in log
