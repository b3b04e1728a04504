"""Fine-tuning with real MaxText 0.2.5: a recipe of kind sft, planned and rendered like pre-training, run tiny on CPU.

The whole path a team takes: a tiny Llama in Hugging Face's layout (written here), converted by
MaxText's converter; a conversation dataset (parquet written by pyarrow, the `messages` column
of {role, content} lists) uploaded with `data upload` to a real GCS-compatible server; then
`run-local llama3.1-8b-sft --tiny --dataset chat --load-parameters ...`: the dataset read through
a gcsfuse mount by MaxText's SFT trainer (train_sft_native), each conversation rendered with the
spec's chat template by the Hugging Face tokenizer MaxText ships, starting from the converted
weights — and the loss falls.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import yaml

from tests.support.cli import cli, run_module
from tests.support.gcs_emulator import running_emulator
from tests.support.hf_weights import write_hf
from tests.support.specs import example_doc, spec_from
from workloads.data import tokenizer
from workloads.local import bucket as local_bucket
from workloads.maxtext import env as maxtext_env
from workloads.maxtext.run_local import tiny_vocab

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
CONVERSATIONS = """
import random, sys, pathlib
import pyarrow as pa, pyarrow.parquet as pq
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
colors = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple"]
rows = []
for _ in range(3000):
    a, b = rng.sample(colors, 2)
    rows.append([{"role": "user", "content": f"mix {a} and {b}"}, {"role": "assistant", "content": f"{a} {b} {a} {b}"}])
pq.write_table(pa.table({"messages": rows}), out / "chat-00000.parquet")
"""


def _doc(suffix: str) -> dict:
    doc = example_doc("default")
    doc["buckets"] = [{"name": f"tgk-sft-data-{suffix}", "purpose": "data"}, {"name": f"tgk-sft-ckpt-{suffix}", "purpose": "checkpoints"}]
    doc["datasets"] = [
        {
            "name": "chat",
            "bucket": f"tgk-sft-data-{suffix}",
            "path": "chat/v1",
            "format": "parquet",
            "tokenizer": "assets/tokenizers/qwen3-tokenizer",
            "tokenizer_type": "huggingface",
            "column": "messages",
            "chat_template": CHAT_TEMPLATE,
        }
    ]
    return doc


def test_a_tiny_fine_tuning_run_from_converted_weights_learns_the_conversations(maxtext_venv, tmp_path) -> None:
    doc = _doc(uuid.uuid4().hex[:8])
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(doc))
    spec = spec_from(doc)
    # The tiny model's vocabulary is the tokenizer's id count, rounded up (run-local --dataset sizes it so): the weights must match.
    vocab = tiny_vocab(tokenizer.check(None, spec, spec.datasets[0], venv=maxtext_venv).ids)
    hf = write_hf(maxtext_venv, tmp_path / "hf", vocab=vocab, scale=0.5)
    conv = run_module(
        "workloads", "convert", "llama3.1-8b-sft", "--from", str(hf), "--local", "--tiny", "--out", str(tmp_path / "base"),
        "--set", "scan_layers=false", "--set", f"vocab_size={vocab}", "--spec", str(sp), "-o", "json", timeout=1800,
    )  # fmt: skip
    assert conv.returncode == 0, conv.stderr[-3000:]
    ckpt = json.loads(conv.stdout)["conversion"]["checkpoint"]
    data = tmp_path / "chat"
    made = subprocess.run([str(maxtext_env.python(maxtext_venv)), "-c", CONVERSATIONS, str(data)], capture_output=True, text=True, timeout=300, check=False)
    assert made.returncode == 0, made.stderr[-2000:]
    out = tmp_path / "out"
    with running_emulator() as url:
        env = {"STORAGE_EMULATOR_HOST": url, "KUBECONFIG": "", "HOME": str(tmp_path)}
        local_bucket.ensure_buckets(url, spec)
        local_bucket.grant_buckets(url, spec)
        up = cli("workloads", "data", "upload", data, "--dataset", "chat", "--spec", sp, "-o", "json", env=env)
        assert up.returncode == 0, up.stderr
        done = cli(
            "workloads", "run-local", "llama3.1-8b-sft", "--tiny", "--steps", "12", "--out", out, "--spec", sp, "--dataset", "chat",
            "--load-parameters", ckpt, "--set", "scan_layers=false", "--set", "learning_rate=0.003", "-o", "json",
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    argv = json.loads(done.stdout)["local_run"]["argv"]
    assert argv[1:3] == ["-m", "maxtext.trainers.post_train.sft.train_sft_native"]
    assert f"load_parameters_path={ckpt}" in argv and f"vocab_size={vocab}" in argv and "train_data_columns=messages" in argv
    assert f"chat_template={json.dumps(CHAT_TEMPLATE)}" in argv  # the spec's template, as MaxText reads it back
    log = (out / "maxtext.log").read_text(errors="replace")
    assert "Config param use_sft: True" in log and "Config param sft_train_on_completion_only: True" in log
    assert f"restoring params from {Path(ckpt).parent}" in log
    losses = [json.loads(line)["learning/loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 12  # packed 3000 conversations last ~48 steps of 32 sequences: the data does not run out
    assert losses[-1] < 0.75 * losses[0], losses  # it learned the conversations' answers
    print(f"\n[maxtext tier] tiny SFT from converted weights: loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps")


def test_an_sft_recipe_without_a_conversation_dataset_is_refused(tmp_path) -> None:
    done = cli("workloads", "run-local", "llama3.1-8b-sft", "--tiny", "--out", tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--dataset" in done.stderr, done.stderr
