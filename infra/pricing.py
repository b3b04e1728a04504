"""TPU prices, and what pools and runs cost at them.

The price table (``infra/prices.yaml``) holds public list prices in USD per chip-hour
by (TPU generation, region, capacity mode), each row citing a source with the day its
figures were taken. A spec may override rows in its ``prices:`` section (which carries
its own date). A price is never shown as current: every ``Rate`` carries the date and
the source it came from, and every display prints them beside the cost. A figure that
is missing is "no price" (``None``), never zero.

Everything here is pure except ``load_table`` (reads the shipped table once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infra import catalog
from toolkit.errors import FieldError, SpecError

if TYPE_CHECKING:
    from infra.spec import EnvSpec, TpuPoolSpec

TABLE_PATH = Path(__file__).with_name("prices.yaml")
MODES: tuple[str, ...] = ("on-demand", "spot", "flex-start", "reservation")
HOURS_PER_DAY = 24
_DATE = r"^\d{4}-\d{2}-\d{2}$"
_REGION = r"^[a-z]+-[a-z]+\d+$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# The most a chip-hour may cost: the dearest TPU lists at a few tens of USD, so a larger
# figure is a typo or a unit mix-up, and unbounded ones would make every cost built on them inf.
MAX_USD_PER_CHIP_HOUR = 1000.0


class Rates(_Model):
    """USD per chip-hour by capacity mode; a mode left out has no price (never zero)."""

    on_demand: float | None = Field(None, alias="on-demand")
    spot: float | None = None
    flex_start: float | None = Field(None, alias="flex-start")
    reservation: float | None = Field(None, description="with the committed use discount TPU reservations need")

    @field_validator("on_demand", "spot", "flex_start", "reservation")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        # A zero would make every cost built on it look free; a mode without a figure is left out.
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ValueError(f"{v!r} USD per chip-hour is not a price; give a price above 0, or leave this mode out (it then shows 'no price')")
        if v is not None and v > MAX_USD_PER_CHIP_HOUR:
            raise ValueError(f"{v:g} USD per chip-hour is above {MAX_USD_PER_CHIP_HOUR:g}, beyond any TPU's price; give the price per chip-hour in USD")
        return v

    def get(self, mode: str) -> float | None:
        return getattr(self, mode.replace("-", "_"))

    def given(self) -> dict[str, float]:
        return {m: v for m in MODES if (v := self.get(m)) is not None}


class PriceSource(_Model):
    url: str
    date: str = Field(..., pattern=_DATE, description="the day the figures were taken (YYYY-MM-DD)")
    note: str = ""


class _Located(Rates):
    generation: str
    region: str = Field(..., pattern=_REGION)

    @field_validator("generation")
    @classmethod
    def _generation(cls, v: str) -> str:
        if v not in catalog.GENERATIONS:
            raise ValueError(f"{v!r} is not a TPU generation; use one of {', '.join(catalog.GENERATIONS)}")
        return v


class PriceRow(_Located):
    source: str


class PriceTable(_Model):
    currency: Literal["USD"] = "USD"
    unit: Literal["chip-hour"] = "chip-hour"
    sources: dict[str, PriceSource]
    rows: list[PriceRow]

    @model_validator(mode="after")
    def _cited(self) -> PriceTable:
        seen: dict[tuple[str, str, str], int] = {}
        for i, r in enumerate(self.rows):
            if r.source not in self.sources:
                raise ValueError(f"rows[{i}] cites source {r.source!r}, which is not under sources")
            for m in r.given():
                key = (r.generation, r.region, m)
                if key in seen:
                    raise ValueError(f"rows[{i}] repeats the {m} price of {r.generation} in {r.region} (rows[{seen[key]}])")
                seen[key] = i
        return self

    @property
    def dates(self) -> list[str]:
        return sorted({s.date for s in self.sources.values()})


class OverrideRow(_Located):
    """One spec-side price row: a generation in the spec's region, with one or more modes' rates."""

    @model_validator(mode="after")
    def _some_rate(self) -> OverrideRow:
        if not self.given():
            raise ValueError("gives no rate; add at least one of on-demand, spot, flex-start, reservation (USD per chip-hour)")
        return self


class PriceOverrides(_Model):
    """The spec's ``prices:`` section: rates that win over the shipped table."""

    as_of: str = Field(..., pattern=_DATE, description="the day these figures were agreed or taken (YYYY-MM-DD)")
    note: str = Field("", description="where they come from, e.g. a contract")
    chip_hour: list[OverrideRow] = Field(..., min_length=1)


# ------------------------------------------------------------------ lookup


@dataclass(frozen=True)
class Rate:
    """One price with its provenance: never a bare number."""

    usd_per_chip_hour: float
    as_of: str
    source: str  # a table source key, or "spec override"
    override: bool = False

    def label(self) -> str:
        return f"spec prices as of {self.as_of}" if self.override else f"list price as of {self.as_of} ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"usd_per_chip_hour": self.usd_per_chip_hour, "price_as_of": self.as_of, "price_source": self.source}


@dataclass(frozen=True)
class Prices:
    """The shipped table with the spec's overrides laid over it."""

    table: PriceTable
    overrides: PriceOverrides | None = None

    def rate(self, generation: str, region: str, mode: str) -> Rate | None:
        if self.overrides:
            for o in self.overrides.chip_hour:
                if (o.generation, o.region) == (generation, region) and (v := o.get(mode)) is not None:
                    return Rate(v, self.overrides.as_of, "spec override", override=True)
        for r in self.table.rows:
            if (r.generation, r.region) == (generation, region) and (v := r.get(mode)) is not None:
                return Rate(v, self.table.sources[r.source].date, r.source)
        return None


def parse_table(data: Any, where: str) -> PriceTable:
    """A price table document, validated; errors name ``where`` and the row."""
    try:
        return PriceTable.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise FieldError(f"{where}: {loc}" if loc else where, msg, "fix that row, or restore the file from git") from None


@lru_cache(maxsize=4)
def load_table(path: Path = TABLE_PATH) -> PriceTable:
    """The price table file, validated (errors name the file and the row)."""
    from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

    try:
        data = load_yaml(read_capped(path))
    except (OSError, YamlFileError) as e:
        raise FieldError(str(path), f"cannot read the price table: {getattr(e, 'strerror', None) or e}", "restore it from git") from None
    return parse_table(data, path.name)


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
        label = f"reservation {o.capacity.name}" if mode == "reservation" else mode
        scales = pool.autoscaling or o.index > 0 or mode == "flex-start"
        out.append(OptionCapacity(o.index, mode, label, fixed_size=not scales))
    return out


def check_overrides(spec: EnvSpec) -> None:
    """A spec with a ``prices:`` section owns its pricing: it must price every pool it runs.

    Without the section, a pool the public table has no figure for shows "no price"
    (a missing public figure never blocks provisioning). With it, a row for another
    region, a repeated row, or a pool option left without any price is a mistake in
    the section, and is refused.
    """
    if spec.prices is None:
        return
    seen: dict[tuple[str, str], int] = {}
    for i, row in enumerate(spec.prices.chip_hour):
        if row.region != spec.region:
            raise SpecError(
                f"prices.chip_hour[{i}].region",
                f"{row.region!r} is not the spec's region ({spec.region}), so this row would never apply",
                f"set region: {spec.region}",
            )
        for m in row.given():
            if (row.generation, m) in seen:
                raise SpecError(
                    f"prices.chip_hour[{i}]",
                    f"repeats the {m} rate of {row.generation} given in prices.chip_hour[{seen[(row.generation, m)]}]",
                    "give each generation's rate for a mode once",
                )
            seen[(row.generation, m)] = i
    prices = prices_for(spec)
    for i, pool in enumerate(spec.tpu_pools):
        gen = pool.shape.generation.name
        for o in pool_options(pool):
            if prices.rate(gen, spec.region, o.mode) is None:
                where = f"tpu_pools[{i}].capacity[{o.index}]" if pool.has_fallback else f"tpu_pools[{i}].capacity"
                raise SpecError(
                    "prices.chip_hour",
                    f"has no {o.mode} rate for {gen} in {spec.region}, and neither has the shipped table, but {where} ({pool.name}) needs one",
                    f"add a row with generation: {gen}, region: {spec.region} and {o.mode}: <USD per chip-hour>",
                )


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

    @property
    def per_hour(self) -> float | None:
        return None if self.rate is None else self.chips * self.rate.usd_per_chip_hour

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
        }


def pool_costs(spec: EnvSpec, prices: Prices | None = None) -> list[PoolCost]:
    prices = prices or prices_for(spec)
    out = []
    for p in spec.tpu_pools:
        gen = p.shape.generation.name
        for o in pool_options(p):
            out.append(PoolCost(p.name, o, gen, spec.region, p.total_chips, prices.rate(gen, spec.region, o.mode)))
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
            out.append(f"  {p['pool']} [{p['capacity']}]: {p['chips']} chips, no price for {p['mode']} (add it under the spec's prices:)")
            continue
        idle = f"idle {usd(p['idle_usd_per_hour'])}/h = {usd(p['idle_usd_per_day'])}/day (fixed size)" if p["fixed_size"] else "idle $0 (scales from zero)"
        out.append(f"  {p['pool']} [{p['capacity']}]: {p['chips']} chips x ${p['usd_per_chip_hour']:g} = {usd(p['usd_per_hour'])}/h while running; {idle}")
    unknown = f" (+ unknown for {', '.join(doc['idle_unknown_for'])})" if doc["idle_unknown_for"] else ""
    out.append(f"  idle total: {usd(doc['idle_usd_per_hour'])}/h = {usd(doc['idle_usd_per_day'])}/day{unknown}")
    out.append(f"  {doc['prices']}")
    return out


@dataclass(frozen=True)
class ModeCost:
    mode: str
    rate: Rate | None
    usd: float | None


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
            "by_mode": {c.mode: None if c.rate is None else {"usd": _round(c.usd), **c.rate.to_dict()} for c in self.costs},
        }

    def lines(self) -> list[str]:
        """Human lines: the modes side by side, the pool's own marked, each with its price's date."""
        out = [f"{self.basis} cost: {self.chips} {self.generation} chips x {self.seconds / 3600:,.2f} h in {self.region}"]
        for c in self.costs:
            mark = "  <- the pool's" if c.mode in self.pool_modes else ""
            if c.rate is None:
                out.append(f"  {c.mode:<12} no price{mark}")
            else:
                out.append(f"  {c.mode:<12} {usd(c.usd):>12}  at ${c.rate.usd_per_chip_hour:g}/chip-h, {c.rate.label()}{mark}")
        return out


def run_cost(prices: Prices, generation: str, region: str, chips: int, seconds: float, *, pool_modes: Iterable[str] = (), basis: str) -> RunCost:
    costs = []
    for m in MODES:
        rate = prices.rate(generation, region, m)
        costs.append(ModeCost(m, rate, None if rate is None else chips * seconds / 3600 * rate.usd_per_chip_hour))
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
        f"estimated cost: {p.steps} steps x {p.estimated_step_seconds:.3g} s/step (at {100 * (p.assumed_mfu or 0):.0f}% MFU) "
        f"x {cost.chips} {cost.generation} chips = {cost.seconds / 3600:,.2f} h in {cost.region}; compile and restarts not included"
    )
    return [head, *cost.lines()[1:]]
