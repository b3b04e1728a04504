"""Does the dataset's tokenizer load, and does it fit the model? Asked of MaxText's own loader.

A tokenizer that does not parse fails a run only when its input pipeline starts, after
the slices were provisioned and the step compiled; one with more ids than the model's
``vocab_size`` does not fail at all: the embedding lookup of an id past the table is
clamped on TPU, and the run trains on garbage. Both are checked here, on this machine,
with the pinned MaxText (``driver.py tokenizer``). A tokenizer kept beside the data is
downloaded first (tokenizers are small: a few MB).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.spec import DatasetSpec, EnvSpec
from toolkit.errors import SpecError
from workloads.data import checks

MAX_TOKENIZER_BYTES = 64 * 2**20


@dataclass(frozen=True)
class TokenizerFacts:
    path: str
    vocab_size: int | None
    sample_ids: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "vocab_size": self.vocab_size, "sample_ids": list(self.sample_ids)}

    @property
    def ids(self) -> int:
        """The id space a model's embedding must hold (at least past every id the sample encoded to)."""
        return id_space(self.vocab_size, self.sample_ids)


def id_space(tokenizer_ids: int | None, sample_ids: tuple[int, ...]) -> int:
    return max([tokenizer_ids or 0, *(i + 1 for i in sample_ids)])


def fit_problem(tokenizer_ids: int | None, sample_ids: tuple[int, ...], vocab_size: int) -> str | None:
    """Why a model of ``vocab_size`` cannot take this tokenizer's ids, or None."""
    top = id_space(tokenizer_ids, sample_ids)
    if top > vocab_size:
        return f"the tokenizer has {top} ids and the model's vocab_size is {vocab_size}: ids past the table would be clamped, and the run would train on the wrong tokens"
    return None


def check(client: Any, spec: EnvSpec, d: DatasetSpec, *, vocab_size: int | None = None, venv: Path | None = None) -> TokenizerFacts:
    from workloads.maxtext import env as mx

    venv = venv or mx.locate()
    with tempfile.TemporaryDirectory(prefix="tgk-tokenizer-") as tmp:
        work = Path(tmp)
        if d.bundled_tokenizer:
            path = d.tokenizer
        else:
            blob = client.bucket(d.bucket).get_blob(d.object_prefix() + d.tokenizer)
            if blob is None:
                raise SpecError(
                    checks.field_of(spec, d, "tokenizer"), f"gs://{d.bucket}/{d.object_prefix()}{d.tokenizer} does not exist", "upload it beside the data"
                )
            if int(blob.size or 0) > MAX_TOKENIZER_BYTES:
                raise SpecError(
                    checks.field_of(spec, d, "tokenizer"),
                    f"gs://{d.bucket}/{blob.name} is {blob.size} bytes, more than a tokenizer holds ({MAX_TOKENIZER_BYTES // 2**20} MiB)",
                    "name the tokenizer file, not a data file",
                )
            local = work / Path(d.tokenizer).name
            blob.download_to_filename(str(local))
            path = str(local)
        got = mx.describe_tokenizer(path, d.tokenizer_type.value, venv, work / "probe")
    if not got.get("ok"):
        raise SpecError(
            checks.field_of(spec, d, "tokenizer"),
            f"{d.tokenizer} does not load as a {d.tokenizer_type.value} tokenizer with MaxText's loader: {got.get('error') or 'no reason given'}",
            "name a tokenizer file MaxText reads, or set tokenizer_type to the kind it is",
        )
    facts = TokenizerFacts(d.tokenizer, got.get("vocab_size"), tuple(int(i) for i in got.get("sample_ids") or ()))
    if vocab_size is not None:
        bad = fit_problem(facts.vocab_size, facts.sample_ids, vocab_size)
        if bad is not None:
            raise SpecError(checks.field_of(spec, d, "tokenizer"), bad, f"use a tokenizer with at most {vocab_size} ids, or a model whose vocab_size covers it")
    return facts


def recipe_vocab(recipe: str) -> int | None:
    """The vocab_size of the recipe's model (MaxText presets resolved by the recipe loader), a tokenizer is held to; None for a plain command."""
    from workloads.planning.recipes import load_recipe

    mt = load_recipe(recipe).maxtext
    return mt.model.vocab_size if mt is not None else None
