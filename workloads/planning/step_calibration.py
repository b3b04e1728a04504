"""The step-time model against the published step times: the efficiencies fitted to them, and the error left. Pure but for reading the data file.

Each published figure (``workloads/recipes/_published_step_times.yaml``) is one run: a MaxText
preset on a slice shape with a global batch, sequence length and the keys that change the step
(remat, quantization, the MoE kernel). ``step_time.step_parts`` turns it into seconds of work
per kind at efficiency 1; the step is ``sum(part / efficiency)``, linear in the inverse
efficiencies, so they are fitted by relative least squares (each figure weighs by its
relative error) with one unknown per generation's bf16 dense matmuls, one per quantized
precision, one for routed experts and one for attention. ``leave_one_out`` estimates each
figure with the efficiencies fitted to all the others: the error a plan can expect on a run
nobody fitted, which is what ``step_time.STEP_ERROR`` carries.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from infra import catalog
from toolkit.yamlfile import load_yaml
from workloads.planning.recipe_model import ModelDims
from workloads.planning.step_time import Efficiency, StepParts, step_parts

PUBLISHED_FILE = Path(__file__).resolve().parent.parent / "recipes" / "_published_step_times.yaml"


@dataclass(frozen=True)
class Figure:
    """One published step time and the run it measured."""

    model: str
    preset: str
    shape: catalog.SliceShape
    slices: int
    global_batch: int
    seq: int
    args: dict[str, str]
    step_seconds: float
    tflops: float | None
    per: str
    source: str
    basis: str
    expert_parallelism: int = 1

    @property
    def name(self) -> str:
        prec = self.args.get("quantization") or "bf16"
        return f"{self.model} {self.shape.key} x{self.slices} {prec} seq {self.seq}"

    @property
    def generation(self) -> str:
        return self.shape.generation.name

    def parts(self) -> StepParts:
        from workloads.planning.import_recipe import model_presets

        devices = self.shape.devices * self.slices
        tokens = self.global_batch * self.seq / devices
        return step_parts(ModelDims.model_validate(model_presets()[self.preset]), tokens, self.seq, self.shape.generation, self.args, self.expert_parallelism)


@lru_cache(maxsize=2)
def _data(path: Path) -> dict[str, Any]:
    return load_yaml(path.read_text())


def figures(path: Path = PUBLISHED_FILE) -> list[Figure]:
    out = []
    for row in _data(path)["figures"]:
        gen, _, topology = row["shape"].partition("-")
        out.append(
            Figure(
                model=row["model"],
                preset=row["preset"],
                shape=catalog.shape(gen, topology),
                slices=int(row["slices"]),
                global_batch=int(row["global_batch"]),
                seq=int(row["seq"]),
                args={k: str(v) for k, v in (row.get("args") or {}).items()},
                step_seconds=float(row["step_seconds"]),
                tflops=row.get("tflops"),
                per=row["per"],
                source=row["source"],
                basis=row["basis"],
                expert_parallelism=int(row.get("expert_parallelism", 1)),
            )
        )
    return out


def read_date(path: Path = PUBLISHED_FILE) -> str:
    return str(_data(path)["read"])


# ------------------------------------------------------------------ fitting


def _columns(parts: StepParts, generation: str, gens: Sequence[str], ratio: dict[str, float]) -> list[float]:
    """The row of the least-squares system: seconds of each kind at efficiency 1, in ``fit``'s order.

    A quantized run's dense matmuls reach the generation's dense efficiency times its
    precision's ratio: with the ratios fixed, that is the generation's column scaled by 1 / ratio.
    """
    dense = parts.dense / ratio[parts.quantized] if parts.quantized != "bf16" else parts.dense
    return [*(dense if generation == g else 0.0 for g in gens), parts.experts, parts.attention]


def solve_least_squares(a: list[list[float]], b: list[float]) -> list[float]:
    """Least squares min |a x - b| through the normal equations (a handful of unknowns); unknowns no row touches stay 0."""
    n = len(a[0])
    used = [j for j in range(n) if any(row[j] for row in a)]
    m = [[sum(row[i] * row[j] for row in a) for j in used] + [sum(row[i] * y for row, y in zip(a, b, strict=True))] for i in used]
    k = len(used)
    for c in range(k):  # Gauss-Jordan with partial pivoting
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c and m[c][c]:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    x = [0.0] * n
    scale = max((abs(m[c][c]) for c in range(k)), default=0.0)
    for c, j in enumerate(used):
        # An unknown the rows cannot tell apart from the others (more unknowns than rows) stays 0.
        x[j] = m[c][k] / m[c][c] if abs(m[c][c]) > 1e-12 * scale else 0.0
    return x


def _fit_inverse(figs: Sequence[Figure], parts: Sequence[StepParts], gens: Sequence[str], ratio: dict[str, float]) -> tuple[list[float], float]:
    """(inverse efficiencies, relative squared error) for fixed quantized ratios."""
    rows = [[c / (f.step_seconds - p.all_to_all) for c in _columns(p, f.generation, gens, ratio)] for f, p in zip(figs, parts, strict=True)]
    inv = solve_least_squares(rows, [1.0] * len(rows))
    return inv, sum((sum(c * x for c, x in zip(row, inv, strict=True)) - 1) ** 2 for row in rows)


def _golden(f, lo: float, hi: float, steps: int = 28) -> float:
    g = (5**0.5 - 1) / 2
    a, b = lo, hi
    for _ in range(steps):
        c, d = b - g * (b - a), a + g * (b - a)
        if f(c) < f(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def fit(figs: Sequence[Figure], parts: Sequence[StepParts] | None = None) -> Efficiency:
    """The efficiencies that minimise the figures' relative squared error.

    Linear least squares in the inverse efficiencies, inside a one-dimensional search for each
    quantized precision's ratio (a precision no figure uses keeps ratio 1).
    """
    parts = list(parts or [f.parts() for f in figs])
    gens = sorted({f.generation for f in figs})
    ratio = {"bf16": 1.0, "fp8": 1.0, "int8": 1.0}
    present = sorted({p.quantized for p in parts} - {"bf16"})
    for _ in range(3):
        for q in present:
            ratio[q] = _golden(lambda r, q=q: _fit_inverse(figs, parts, gens, {**ratio, q: r})[1], 0.05, 2.0)
    inv, _ = _fit_inverse(figs, parts, gens, ratio)
    n = len(gens)
    dense = {g: round(1 / inv[i], 3) for i, g in enumerate(gens) if inv[i] > 0}
    return Efficiency(
        dense=dense,
        quantized={q: round(ratio[q], 3) for q in present},
        experts=round(1 / inv[n], 3) if inv[n] > 0 else 1.0,
        attention=round(1 / inv[n + 1], 3) if inv[n + 1] > 0 else 1.0,
    )


@dataclass(frozen=True)
class Checked:
    figure: Figure
    parts: StepParts
    estimate: float  # with the efficiencies given
    held_out: float  # with the efficiencies fitted without this figure

    @property
    def ratio(self) -> float:
        """estimate / published, leave-one-out."""
        return self.held_out / self.figure.step_seconds


def leave_one_out(figs: Sequence[Figure], eff: Efficiency) -> list[Checked]:
    parts = [f.parts() for f in figs]
    out = []
    for i, (f, p) in enumerate(zip(figs, parts, strict=True)):
        others = [*figs[:i], *figs[i + 1 :]]
        held = fit(others, [*parts[:i], *parts[i + 1 :]])  # a generation or precision only this figure has: the fallbacks a plan gets
        out.append(Checked(f, p, p.seconds(eff, f.generation), p.seconds(held, f.generation)))
    return out


def error_by_kind(checked: Sequence[Checked]) -> dict[str, tuple[float, float]]:
    """published / estimated, least and most, per kind of run (leave-one-out)."""
    kinds: dict[str, list[float]] = {}
    for c in checked:
        kinds.setdefault(c.parts.kind, []).append(1 / c.ratio)
    return {k: (round(min(v), 2), round(max(v), 2)) for k, v in sorted(kinds.items())}


def summary(checked: Sequence[Checked]) -> dict[str, Any]:
    ratios = [c.ratio for c in checked]
    return {
        "figures": len(ratios),
        "median_ratio": round(statistics.median(ratios), 3),
        "min_ratio": round(min(ratios), 3),
        "max_ratio": round(max(ratios), 3),
        "within_30_percent": sum(0.7 <= r <= 1.3 for r in ratios),
        "beyond_2x": sum(r < 0.5 or r > 2 for r in ratios),
    }
