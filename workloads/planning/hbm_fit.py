"""The HBM estimate's coefficients fitted to compiled configurations, and the error left. Pure.

Each compiled configuration (``scripts/bench_hbm_calibration.py``: MaxText's own ahead-of-time
compile, XLA's memory analysis per device) gives its parts at coefficient 1
(``hbm.features``) and the bytes XLA allocated. The train state is exact (it is the compile's
arguments); the rest is ``sum(coefficient x feature)``, so the coefficients are fitted by
non-negative relative least squares (each configuration weighs by its relative error, a
coefficient that would come out negative is left at 0). ``leave_one_out`` estimates each
configuration with the coefficients fitted to all the others: the error a plan can expect on a
configuration nobody compiled, which ``hbm.HBM_ERROR`` carries per kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from workloads.planning.hbm import EXACT, Coefficients
from workloads.planning.step_calibration import solve_least_squares

NAMES = tuple(f.name for f in fields(Coefficients))


@dataclass(frozen=True)
class Compiled:
    """One compiled configuration: its features (``hbm.features``), kind and what XLA allocated."""

    name: str
    kind: str
    features: dict[str, float]
    compiled_bytes: float

    @property
    def exact(self) -> float:
        """The parts that are not fitted: the train state, gradients and what the remat policy keeps."""
        return sum(c * self.features[n] for n, c in EXACT.items())

    def estimate(self, coef: Coefficients) -> float:
        return self.exact + sum(getattr(coef, n) * self.features[n] for n in NAMES)


def fit(rows: Sequence[Compiled]) -> Coefficients:
    """Non-negative coefficients minimising the configurations' relative squared error."""
    active = list(NAMES)
    while True:
        a = [[r.features[n] / r.compiled_bytes for n in active] for r in rows]
        b = [1 - r.exact / r.compiled_bytes for r in rows]
        x = solve_least_squares(a, b)
        if all(v >= 0 for v in x) or not active:
            break
        active = [n for n, v in zip(active, x, strict=True) if v >= 0]
    values = dict.fromkeys(NAMES, 0.0) | {n: round(v, 3) for n, v in zip(active, x, strict=True)}
    return Coefficients(**values)


@dataclass(frozen=True)
class Held:
    row: Compiled
    estimate: float  # with the coefficients given
    held_out: float  # with the coefficients fitted without this configuration

    @property
    def ratio(self) -> float:
        """compiled / estimated, leave-one-out."""
        return self.row.compiled_bytes / self.held_out


def leave_one_out(rows: Sequence[Compiled], coef: Coefficients) -> list[Held]:
    out = []
    for i, r in enumerate(rows):
        held = fit([*rows[:i], *rows[i + 1 :]])
        out.append(Held(r, r.estimate(coef), r.estimate(held)))
    return out


def error_by_kind(held: Sequence[Held]) -> dict[str, tuple[float, float]]:
    """compiled / estimated, least and most, per kind of configuration (leave-one-out)."""
    kinds: dict[str, list[float]] = {}
    for h in held:
        kinds.setdefault(h.row.kind, []).append(h.ratio)
    return {k: (round(min(v), 3), round(max(v), 3)) for k, v in sorted(kinds.items())}
