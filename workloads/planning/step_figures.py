"""The step time a recipe's publisher measured, read from the READMEs beside its script. Pure.

tpu-recipes publishes its figures two ways, and an imported recipe carries the one that
belongs to it (``Recipe.published``), so planning can set its own estimate beside it:

- a sample log line in the recipe's own README (Trillium, v5p): MaxText's
  ``completed step: N, seconds: S, TFLOP/s/device: T, Tokens/s/device: K, ...`` (some
  READMEs drop ``completed``). The README nearest the script that has one wins; of several
  lines, the last (the furthest into the run). See ``Readme`` for which READMEs are the recipe's own.
- a summary table in a generation's README (Ironwood): one row per recipe, with ``Model
  ID``, ``Number of chips``, ``GBS``, ``Sequence length``, ``Precision``, ``Step time
  (seconds)``, ``TFLOPs/sec/chip``, ``Tokens/sec/chip``. The table names no directory, so a
  row belongs to the recipe when its chips, sequence length and precision are the recipe's
  and its model is the recipe's: the Model ID equals the MaxText ``model_name`` or a
  directory of the script's path (``gemma4-26b``), else shares its family (``deepseek`` in
  ``deepseek-v3`` and ``deepseek3-671b``) with exactly one such row left; the global batch
  breaks a tie. No row, or several: no figure (never a guess).

Per-device figures stay per device and per-chip ones per chip (``per``): tpu7x has two
devices per chip. A README holds no date, so ``date`` is the day it was read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SAMPLE = re.compile(
    r"(?:completed\s+)?step:\s*(?P<step>\d+),\s*seconds:\s*(?P<seconds>\d+(?:\.\d+)?),\s*TFLOP/s/device:\s*(?P<tflops>\d+(?:\.\d+)?)"
    r"(?:,\s*Tokens/s/device:\s*(?P<tokens>\d+(?:\.\d+)?))?",
    re.ASCII,
)
MAX_README_CHARS = 1024 * 1024  # a README is a few KiB; a bigger file is not read past this


@dataclass(frozen=True)
class RecipeFacts:
    """What a table row is matched against."""

    model_name: str
    path_parts: tuple[str, ...]  # the script's directories, nearest last
    chips: int  # chips per slice x slices
    seq: int
    quantization: str  # "" for bf16
    global_batch: int | None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def from_sample_line(text: str) -> dict[str, Any] | None:
    """The last MaxText step line in ``text`` as a figure, or None."""
    found = list(_SAMPLE.finditer(text[:MAX_README_CHARS]))
    if not found:
        return None
    m = found[-1]
    out: dict[str, Any] = {"step_seconds": float(m.group("seconds")), "tflops": float(m.group("tflops")), "per": "device", "step": int(m.group("step"))}
    if m.group("tokens"):
        out["tokens_per_second"] = float(m.group("tokens"))
    out["basis"] = "sample log line"
    return out


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Markdown tables: (header cells, rows of cells)."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = text[:MAX_README_CHARS].splitlines()
    i = 0
    while i + 1 < len(lines):
        head, rule = lines[i].strip(), lines[i + 1].strip()
        if head.startswith("|") and re.fullmatch(r"\|[\s:|-]+\|?", rule, re.ASCII):
            cells = [re.sub(r"<[^>]+>", "", c).strip() for c in head.strip("|").split("|")]
            rows: list[list[str]] = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            out.append((cells, rows))
        else:
            i += 1
    return out


def _column(header: list[str], *words: str) -> int | None:
    for n, cell in enumerate(header):
        low = cell.lower()
        if all(w in low for w in words):
            return n
    return None


def _family(name: str) -> str:
    return re.match(r"[a-z]*", name.lower()).group(0)  # type: ignore[union-attr]


def _precision_matches(cell: str, quantization: str) -> bool:
    cell = cell.lower()
    if not quantization:
        return cell in ("bf16", "bfloat16")
    return cell == quantization.lower() or (quantization.lower().startswith("fp8") and cell.startswith("fp8"))


def from_table(text: str, facts: RecipeFacts) -> dict[str, Any] | None:
    """The summary-table row that belongs to the recipe (see the module docstring), or None."""
    for header, rows in _tables(text):
        col = {
            "model": _column(header, "model"),
            "chips": _column(header, "chips"),
            "gbs": _column(header, "gbs"),
            "seq": _column(header, "sequence"),
            "precision": _column(header, "precision"),
            "step": _column(header, "step time"),
            "tflops": _column(header, "tflop"),
            "tokens": _column(header, "tokens"),
        }
        if any(col[k] is None for k in ("model", "chips", "seq", "precision", "step")):
            continue

        def cell(row: list[str], key: str, col: dict[str, int | None] = col) -> str:
            n = col[key]
            return row[n] if n is not None and n < len(row) else ""

        fitting = [
            r
            for r in rows
            if _number(cell(r, "chips")) == facts.chips
            and _number(cell(r, "seq")) == facts.seq
            and _precision_matches(cell(r, "precision"), facts.quantization)
        ]
        names = {facts.model_name.lower(), *(p.lower() for p in facts.path_parts)}
        exact = [r for r in fitting if cell(r, "model").lower() in names]
        family = [r for r in fitting if _family(cell(r, "model")) and _family(cell(r, "model")) == _family(facts.model_name)]
        chosen = exact or family
        if len(chosen) > 1 and facts.global_batch is not None:
            chosen = [r for r in chosen if _number(cell(r, "gbs")) == facts.global_batch]
        if len(chosen) != 1:
            continue
        row = chosen[0]
        seconds = _number(cell(row, "step"))
        if seconds is None:
            continue
        out: dict[str, Any] = {"step_seconds": seconds, "per": "chip"}
        tflops, tokens = _number(cell(row, "tflops")), _number(cell(row, "tokens"))
        if tflops is not None:
            out["tflops"] = tflops
        if tokens is not None:
            out["tokens_per_second"] = tokens
        out["basis"] = f"summary table row {cell(row, 'model')}, {cell(row, 'chips')} chips, {cell(row, 'precision')}"
        return out
    return None


@dataclass(frozen=True)
class Readme:
    """A README beside a script: its path as shown, its text, and whether it is the recipe's own.

    A sample log line belongs to the run its README describes, so it is read only from the
    recipe's own READMEs (the script's directory and, for a script in a launcher directory
    such as ``cluster_toolkit/``, the one above it); a README higher up covers several
    recipes, and only a table row that names this one's model, chips and precision is taken from it.
    """

    path: str
    text: str
    recipe_level: bool


def published_figure(readmes: list[Readme], facts: RecipeFacts, *, date: str) -> dict[str, Any] | None:
    """The figure for the recipe from its READMEs (nearest first), with its source and date."""
    for readme in readmes:
        figure = from_sample_line(readme.text) if readme.recipe_level else None
        if figure is not None:
            return {**figure, "source": readme.path, "date": date}
    for readme in readmes:
        figure = from_table(readme.text, facts)
        if figure is not None:
            return {**figure, "source": readme.path, "date": date}
    return None
