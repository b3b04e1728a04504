"""What pools and runs cost at the prices of ``infra.price_table``.

A price is never shown as current: every cost carries the date and source of its rate,
and every display prints them beside it. A figure that is missing is "no price"
(``None``), never zero. Pure (the shipped table is read once, by ``price_table``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.price_table import MODES, Prices, Rate, load_table
from toolkit.names import CapacityMode

if TYPE_CHECKING:
    from infra.spec import EnvSpec, TpuPoolSpec

HOURS_PER_DAY = 24


def prices_for(spec: EnvSpec) -> Prices:
    return Prices(load_table(), spec.prices)


@dataclass(frozen=True)
class OptionCapacity:
    """One capacity option of a pool as billing sees it."""

    index: int
    mode: str
    label: str  # the mode, or "reservation <name>"
    fixed_size: bool  # holds its nodes (and is billed) while idle


def pool_options(pool: TpuPoolSpec) -> list[OptionCapacity]:
    """The pool's capacity options, each with whether its node pools are fixed-size.

    Mirrors infra.stack and modules.tpu_pool: an autoscaled pool, every fallback option
    after the first, and flex-start capacity scale from zero, so they cost nothing idle.
    """
    out = []
    for o in pool.capacity_options():
        mode = o.mode
        label = f"reservation {o.capacity.name}" if mode == CapacityMode.RESERVATION else mode
        out.append(OptionCapacity(o.index, mode, label, fixed_size=not pool.scales_from_zero(o)))
    return out


# ------------------------------------------------------------------- costs


@dataclass(frozen=True)
class PoolCost:
    """What one capacity option of one pool costs: while its slices run, and idle."""

    pool: str
    option: OptionCapacity
    generation: str
    region: str
    chips: int  # all slices of this option
    rate: Rate | None
    why_none: str = "no price (add it under the spec's prices:)"  # what a display says without a rate

    @property
    def per_hour(self) -> float | None:
        """USD per hour while the slices run (the most it can be, for a mode priced as a range)."""
        return None if self.rate is None else self.chips * self.rate.usd_per_chip_hour

    @property
    def per_hour_low(self) -> float | None:
        """The least it can be, for a mode priced as a range (flex-start); None otherwise."""
        return None if self.rate is None or self.rate.low is None else self.chips * self.rate.low

    @property
    def idle_per_hour(self) -> float | None:
        """A fixed-size option is billed with nothing running; one that scales from zero is not."""
        if not self.option.fixed_size:
            return 0.0
        return self.per_hour

    def to_dict(self) -> dict[str, Any]:
        idle = self.idle_per_hour
        return {
            "pool": self.pool,
            "option": self.option.index,
            "capacity": self.option.label,
            "mode": self.option.mode,
            "chips": self.chips,
            "fixed_size": self.option.fixed_size,
            "usd_per_chip_hour": None if self.rate is None else self.rate.usd_per_chip_hour,
            "usd_per_hour": _round(self.per_hour),
            "idle_usd_per_hour": _round(idle),
            "idle_usd_per_day": _round(None if idle is None else idle * HOURS_PER_DAY),
            "price_as_of": None if self.rate is None else self.rate.as_of,
            "price_source": None if self.rate is None else self.rate.source,
            **({"usd_per_hour_low": _round(self.per_hour_low), "price_note": self.rate.discount_note} if self.per_hour_low is not None and self.rate else {}),
            **({"no_price": self.why_none} if self.rate is None else {}),
        }


def pool_costs(spec: EnvSpec, prices: Prices | None = None) -> list[PoolCost]:
    prices = prices or prices_for(spec)
    out = []
    for p in spec.tpu_pools:
        gen = p.shape.generation.name
        for o in pool_options(p):
            out.append(PoolCost(p.name, o, gen, spec.region, p.total_chips, prices.rate(gen, spec.region, o.mode), why_none=prices.why_none(gen)))
    return out


def idle_total(costs: Iterable[PoolCost]) -> tuple[float, list[str]]:
    """USD per hour the environment costs with nothing running, and the pools whose idle cost is unknown."""
    total, unknown = 0.0, []
    for c in costs:
        idle = c.idle_per_hour
        if idle is None:
            unknown.append(c.pool)
        else:
            total += idle
    return total, unknown


def costs_document(spec: EnvSpec, prices: Prices | None = None) -> dict[str, Any]:
    """The ``cost`` block of ``infra spec`` and ``synth --summary`` (JSON and text both read it)."""
    costs = pool_costs(spec, prices)
    idle, unknown = idle_total(costs)
    return {
        "currency": "USD",
        "pools": [c.to_dict() for c in costs],
        "idle_usd_per_hour": _round(idle),
        "idle_usd_per_day": _round(idle * HOURS_PER_DAY),
        "idle_unknown_for": sorted(set(unknown)),
        "prices": provenance(c.rate for c in costs),
    }


def cost_lines(doc: dict[str, Any]) -> list[str]:
    """Human lines for a ``costs_document``: one per pool option, the idle total, the prices' date."""
    out = []
    for p in doc["pools"]:
        if p["usd_per_hour"] is None:
            out.append(f"  {p['pool']} [{p['capacity']}]: {p['chips']} chips, {p['mode']}: {p.get('no_price', 'no price')}")
            continue
        idle = f"idle {usd(p['idle_usd_per_hour'])}/h = {usd(p['idle_usd_per_day'])}/day (fixed size)" if p["fixed_size"] else "idle $0 (scales from zero)"
        if "usd_per_hour_low" in p:  # a documented discount, no figure: the range
            out.append(
                f"  {p['pool']} [{p['capacity']}]: {p['chips']} chips = {usd(p['usd_per_hour_low'])}-{usd(p['usd_per_hour'])}/h while running"
                f" ({p['price_note']}); {idle}"
            )
            continue
        out.append(f"  {p['pool']} [{p['capacity']}]: {p['chips']} chips x ${p['usd_per_chip_hour']:g} = {usd(p['usd_per_hour'])}/h while running; {idle}")
    unknown = f" (+ unknown for {', '.join(doc['idle_unknown_for'])})" if doc["idle_unknown_for"] else ""
    out.append(f"  idle total: {usd(doc['idle_usd_per_hour'])}/h = {usd(doc['idle_usd_per_day'])}/day{unknown}")
    out.append(f"  {doc['prices']}")
    return out


@dataclass(frozen=True)
class ModeCost:
    mode: str
    rate: Rate | None
    usd: float | None  # the most it can be, for a mode priced as a range
    usd_low: float | None = None  # the least, for a mode priced as a range (flex-start); else None
    why_none: str = "no price"

    def text(self) -> str:
        return usd(self.usd) if self.usd_low is None else f"{usd(self.usd_low)}-{usd(self.usd)}"


@dataclass(frozen=True)
class RunCost:
    """A run's cost in every capacity mode: chips x hours x rate."""

    basis: str  # what the hours are: "estimated" (steps x step time) or "measured"
    generation: str
    region: str
    chips: int
    seconds: float
    pool_modes: tuple[str, ...]  # the capacity modes the run's pool offers (marked in displays)
    costs: tuple[ModeCost, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "generation": self.generation,
            "region": self.region,
            "chips": self.chips,
            "hours": round(self.seconds / 3600, 4),
            "pool_capacity": list(self.pool_modes),
            "currency": "USD",
            "by_mode": {
                c.mode: None
                if c.rate is None
                else {"usd": _round(c.usd), **({"usd_low": _round(c.usd_low)} if c.usd_low is not None else {}), **c.rate.to_dict()}
                for c in self.costs
            },
        }

    def lines(self) -> list[str]:
        """Human lines: the modes side by side, the pool's own marked, each with its price's date."""
        out = [f"{self.basis} cost: {self.chips} {self.generation} chips x {self.seconds / 3600:,.2f} h in {self.region}"]
        reasons = {c.why_none for c in self.costs if c.rate is None}
        if all(c.rate is None for c in self.costs) and len(reasons) == 1:  # one reason for every mode: said once
            return [*out, f"  every mode: {reasons.pop()}"]
        for c in self.costs:
            mark = "  <- the pool's" if c.mode in self.pool_modes else ""
            if c.rate is None:
                out.append(f"  {c.mode:<12} {c.why_none}{mark}")
            else:
                out.append(f"  {c.mode:<12} {c.text():>12}  at {c.rate.text()}/chip-h, {c.rate.label()}{mark}")
        return out


def run_cost(prices: Prices, generation: str, region: str, chips: int, seconds: float, *, pool_modes: Iterable[str] = (), basis: str) -> RunCost:
    costs = []
    hours = seconds / 3600
    for m in MODES:
        rate = prices.rate(generation, region, m)
        if rate is None:
            costs.append(ModeCost(m, None, None, why_none=prices.why_none(generation)))
        else:
            costs.append(ModeCost(m, rate, chips * hours * rate.usd_per_chip_hour, None if rate.low is None else chips * hours * rate.low))
    return RunCost(basis, generation, region, chips, seconds, tuple(pool_modes), tuple(costs))


def pool_modes(pool: TpuPoolSpec) -> tuple[str, ...]:
    return tuple(dict.fromkeys(o.mode for o in pool.capacity_options()))


# ---------------------------------------------------------------- display


def usd(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"${v:,.2f}" if v >= 0.01 or v == 0 else f"${v:.4f}"


def provenance(rates: Iterable[Rate | None]) -> str:
    """One line saying how old the prices behind a display are (never 'current')."""
    seen = sorted({r.label() for r in rates if r is not None})
    if not seen:
        return "prices: none found for these pools (see infra/prices.yaml, or add a prices: section to the spec)"
    return "prices (USD per chip-hour, not live): " + "; ".join(seen)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def plan_cost(plan: Any, spec: EnvSpec, prices: Prices | None = None) -> RunCost | None:
    """A run plan's estimated cost: steps x estimated step time x chips x rate (None without a step-time estimate)."""
    seconds = plan.program.estimated_run_seconds
    if seconds is None:
        return None
    pool = next(p for p in spec.tpu_pools if p.name == plan.target.pool)
    return run_cost(
        prices or prices_for(spec),
        plan.target.shape.generation.name,
        spec.region,
        plan.target.chips,
        seconds,
        pool_modes=pool_modes(pool),
        basis="estimated",
    )


def plan_cost_lines(plan: Any, cost: RunCost | None) -> list[str]:
    if cost is None:
        return [f"estimated cost: none — {plan.program.recipe} is a plain command, so the plan has no step-time estimate"]
    p = plan.program
    head = (
        f"estimated cost: {p.steps} steps x {p.estimated_step_seconds:.3g} s/step ({100 * (p.estimated_mfu or 0):.0f}% MFU) "
        f"x {cost.chips} {cost.generation} chips = {cost.seconds / 3600:,.2f} h in {cost.region}; compile and restarts not included"
    )
    return [head, *cost.lines()[1:]]
