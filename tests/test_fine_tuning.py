"""Fine-tuning as a recipe kind: `kind: sft` planned and rendered like pre-training, with MaxText's SFT trainer and the
spec dataset's conversations and chat template. (Run for real on CPU: tests/maxtext/test_sft.py.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.cli import cli
from tests.support.specs import example_doc, spec_from
from toolkit.errors import SpecError
from workloads import runs
from workloads.planning.planner import Overrides

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m[\"content\"] }}\n{% endfor %}"


def _doc(**dataset) -> dict:
    doc = example_doc("default")
    doc["datasets"] = [
        {
            "name": "chat",
            "bucket": "my-tpu-project-tpu-dev-data",
            "path": "chat/v1",
            "format": "parquet",
            "tokenizer": "assets/tokenizers/qwen3-tokenizer",
            "tokenizer_type": "huggingface",
            "column": "messages",
            "chat_template": TEMPLATE,
            **dataset,
        }
    ]
    return doc


def test_an_sft_run_is_maxtexts_sft_trainer_on_the_datasets_conversations() -> None:
    plan = runs.plan("llama3.1-8b-sft", spec_from(_doc()), Overrides(dataset="chat", name="ft", load_parameters="gs://b-ckpt/_base/l/0/items"))
    assert plan.program.kind == "sft" and plan.program.is_maxtext
    assert plan.program.command == ("python3", "-m", "maxtext.trainers.post_train.sft.train_sft_native")
    args = dict(a.split("=", 1) for a in plan.program.args if "=" in a)
    assert args["dataset_type"] == "grain" and args["train_data_columns"] == "messages" and args["grain_train_files"] == "/data/chat/*.parquet"
    assert json.loads(args["chat_template"]) == TEMPLATE  # JSON is YAML's double-quoted string: OmegaConf reads it back exactly
    assert "use_sft" not in args  # the module adds it itself; MaxText refuses a key given twice
    assert args["load_parameters_path"] == "gs://b-ckpt/_base/l/0/items" and args["sft_train_on_completion_only"] == "true"
    (jobset,) = runs.manifests(plan)
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert "maxtext.trainers.post_train.sft.train_sft_native" in container["args"]


def test_without_a_chat_template_the_tokenizers_own_is_used() -> None:
    doc = _doc()
    del doc["datasets"][0]["chat_template"]
    plan = runs.plan("llama3.1-8b-sft", spec_from(doc), Overrides(dataset="chat", name="ft"))
    assert not any(a.startswith("chat_template=") for a in plan.program.args)


@pytest.mark.parametrize(
    ("dataset", "args", "field", "said"),
    [
        ({}, [], "--dataset", "names no dataset"),
        ({"column": "text"}, ["--dataset", "chat"], "--dataset", "MaxText's SFT trainer reads a conversation column"),
        ({"tokenizer": "assets/tokenizers/tokenizer.llama2", "tokenizer_type": "sentencepiece"}, ["--dataset", "chat"], "--dataset", "Hugging Face tokenizer"),
        ({}, ["--dataset", "chat", "--set", "chat_template=x"], "--set", "chat_template is set by the dataset"),
    ],
)
def test_bad_fine_tuning_runs_are_one_line_exit_2(tmp_path, dataset: dict, args: list[str], field: str, said: str) -> None:
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(_doc(**dataset)))
    done = cli("workloads", "submit", "llama3.1-8b-sft", "--dry-run", "--spec", sp, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {field}:") and said in done.stderr


def test_an_empty_chat_template_is_refused_in_the_spec() -> None:
    with pytest.raises(SpecError) as e:
        spec_from(_doc(chat_template="  "))
    assert "datasets[0].chat_template" in str(e.value)
