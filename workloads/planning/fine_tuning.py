"""Supervised fine-tuning (a recipe of ``kind: sft``): MaxText's SFT trainer on a conversation dataset of the spec. Pure.

The program is MaxText 0.2.5's ``maxtext.trainers.post_train.sft.train_sft_native``: the
pre-training loop with ``use_sft=True`` (the module adds that key itself, so the toolkit never
does: MaxText refuses a key given twice). Its input is the same Grain pipeline a pre-training
run reads its dataset with (``workloads.planning.dataset.maxtext_data_args``: the bucket's
prefix mounted read-only at ``/data/<dataset>``), in its SFT mode: every row's conversation is
rendered with the chat template, tokenized, and the loss is taken on the assistant's turns
only unless the recipe says otherwise (``sft_train_on_completion_only``).

From the dataset (the spec's ``datasets:`` entry, ``infra.datasets.DatasetSpec``):

- ``column``: the conversation, a list of ``{role, content}`` — MaxText's ``messages`` form
  (``train_data_columns``);
- ``tokenizer`` of ``tokenizer_type: huggingface``: chat templates are applied by a Hugging
  Face tokenizer (MaxText's SFT pipeline calls its ``apply_chat_template``);
- ``chat_template`` (optional): the Jinja template, given to MaxText as ``chat_template``; a
  YAML double-quoted (JSON) string, so MaxText's config loader (OmegaConf) reads it back
  character for character, newlines and quotes included. Without it, the tokenizer's own.

Refused here, before anything is applied: an SFT run without a dataset, a dataset whose column
is not ``messages``, a tokenizer that is not a Hugging Face one, and a ``--set`` of a key the
dataset sets.
"""

from __future__ import annotations

import json

from infra.spec import DatasetSpec
from workloads.planning.errors import PlanError

SFT_COLUMN = "messages"
SFT_KEYS = ("chat_template", "train_data_columns")  # what the dataset sets for an SFT run


def sft_args(d: DatasetSpec | None, *, recipe: str, where: str, sets: dict[str, str]) -> dict[str, str]:
    """The MaxText arguments an SFT run reads its conversations with, beyond the dataset's Grain flags."""
    if d is None:
        raise PlanError(
            "--dataset",
            f"recipe {recipe} fine-tunes on conversations, and the run names no dataset",
            "pass --dataset NAME: one of the spec's datasets with column: messages and a Hugging Face tokenizer",
        )
    if d.column != SFT_COLUMN:
        raise PlanError(
            where,
            f"dataset {d.name}'s column is {d.column!r}; MaxText's SFT trainer reads a conversation column, {SFT_COLUMN!r} (a list of {{role, content}})",
            f"set column: {SFT_COLUMN} on the dataset (its rows holding the conversations)",
        )
    if d.tokenizer_type.value != "huggingface":
        raise PlanError(
            where,
            f"dataset {d.name}'s tokenizer is a {d.tokenizer_type.value} one; a chat template is applied by a Hugging Face tokenizer",
            "name a Hugging Face tokenizer (tokenizer_type: huggingface), e.g. assets/tokenizers/qwen3-tokenizer",
        )
    clash = next((k for k in SFT_KEYS if k in sets), None)
    if clash:
        raise PlanError("--set", f"{clash} is set by the dataset ({d.name})", f"drop --set {clash}=..., and change the dataset in the spec instead")
    args = {"train_data_columns": SFT_COLUMN}
    if d.chat_template is not None:
        args["chat_template"] = json.dumps(d.chat_template, ensure_ascii=False)
    return args
