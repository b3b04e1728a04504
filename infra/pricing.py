"""TPU prices, and what pools and runs cost at them.

The price table (``infra/prices.yaml``) holds public list prices in USD per chip-hour
by (TPU generation, region, capacity mode), each row citing a source with the date its
figures were taken. A spec may override rows in its ``prices:`` section (which carries
its own date). A price is never shown as current: every ``Rate`` carries the date and
the source it came from, and every display prints them beside the cost.

Everything here is pure except ``load_table`` (reads the package's table once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal

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


def _known_generation(v: str) -> str:
    if v not in catalog.GENERATIONS:
        raise ValueError(f"unknown TPU generation {v!r}; use one of {', '.join(catalog.GENERATIONS)}")
    return v


class Rates(_Model):
    """USD per chip-hour by capacity mode; a mode left out has no price (never zero)."""

    on_demand: float | None = Field(None, alias="on-demand", gt=0)
    spot: float | None = Field(None, gt=0)
    flex_start: float | None = Field(None, alias="flex-start", gt=0)
    reservation: float | None = Field(None, gt=0, description="with the committed use discount TPU reservations need")

    def get(self, mode: str) -> float | None:
        return getattr(self, mode.replace("-", "_"))

    def given(self) -> dict[str, float]:
        return {m: v for m in MODES if (v := self.get(m)) is not None}


class PriceSource(_Model):
    url: str
    date: str = Field(..., pattern=_DATE, description="the day the figures were taken")
    note: str = ""


class _Located(Rates):
    generation: str
    region: str = Field(..., pattern=_REGION)

    @field_validator("generation")
    @classmethod
    def _generation(cls, v: str) -> str:
        return _known_generation(v)


class PriceRow(_Located):
    source: str


class PriceTable(_Model):
    currency: Literal["USD"] = "USD"
    unit: Literal["chip-hour"] = "chip-hour"
    sources: dict[str, PriceSource]
    rows: list[PriceRow]

    @model_validator(mode="after")
    def _cited(self) -> "PriceTable":
        for i, r in enumerate(self.rows):
            if r.source not in self.sources:
                raise ValueError(f"rows[{i}] cites source {r.source!r}, which is not under sources")
        return self


class OverrideRow(_Located):
    """One spec-side price row: a generation in a region, with one or more modes' rates."""

    @model_validator(mode="after")
    def _some_rate(self) -> "OverrideRow":
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
        return f"spec override as of {self.as_of}" if self.override else f"list price as of {self.as_of} ({self.source})"


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


@lru_cache(maxsize=4)
def load_table(path: Path = TABLE_PATH) -> PriceTable:
    """The price table file, validated (``--table``-style errors name the file)."""
    from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

    try:
        return PriceTable.model_validate(load_yaml(read_capped(path)))
    except (OSError, YamlFileError) as e:
        raise FieldError(str(path), f"cannot read the price table: {getattr(e, 'strerror', None) or e}", "restore it from git or run `python -m infra prices refresh`") from None
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise FieldError(f"{path.name}: {where}", str(first["msg"]), "fix the row or run `python -m infra prices refresh`") from None


def prices_for(spec: "EnvSpec") -> Prices:
    return Prices(load_table(), spec.prices)


def pool_mode(pool: "TpuPoolSpec") -> str:
    return pool.capacity.mode


def scales_from_zero(pool: "TpuPoolSpec") -> bool:
    """Mirrors modules.tpu_pool: autoscaled and flex-start pools hold no nodes while idle."""
    return pool.autoscaling or pool_mode(pool) == "flex-start"


def check_overrides(spec: "EnvSpec") -> None:
    """A spec with a ``prices:`` section owns its pricing: every pool must get a price.

    Without the section, a pool the public table has no figure for just shows "no price"
    (a valid spec must not fail on a missing public figure). With it, a gap is a
    mistake in the section, and is refused.
    """
    if spec.prices is None:
        return
    prices = prices_for(spec)
    for i, pool in enumerate(spec.tpu_pools):
        gen, mode = pool.shape.generation.name, pool_mode(pool)
        if prices.rate(gen, spec.region, mode) is None:
            raise SpecError(
                "prices.chip_hour",
                f"has no {mode} rate for {gen} in {spec.region}, and neither has the shipped table; tpu_pools[{i}] ({pool.name}) needs one",
                f"add a row with generation: {gen}, region: {spec.region} and {mode}: <USD per chip-hour>",
            )


# ------------------------------------------------------------------- costs


@dataclass(frozen=True)
class PoolCost:
    pool: str
    generation: str
    region: str
    mode: str
    chips: int
    scales_from_zero: bool
    rate: Rate | None

    @property
    def per_hour(self) -> float | None:
        return None if self.rate is None else self.chips * self.rate.usd_per_chip_hour

    @property
    def idle_per_day(self) -> float | None:
        """What the pool costs a day with nothing running: all of it, unless it scales to zero."""
        if self.scales_from_zero:
            return 0.0
        return None if self.per_hour is None else self.per_hour * HOURS_PER_DAY

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "chips": self.chips, "scales_from_zero": self.scales_from_zero,
            "usd_per_chip_hour": None if self.rate is None else self.rate.usd_per_chip_hour,
            "usd_per_hour": _round(self.per_hour), "idle_usd_per_day": _round(self.idle_per_day),
            "price_as_of": None if self.rate is None else self.rate.as_of,
            "price_source": None if self.rate is None else self.rate.source,
        }


def pool_costs(spec: "EnvSpec", prices: Prices | None = None) -> list[PoolCost]:
    prices = prices or prices_for(spec)
    return [
        PoolCost(
            pool=p.name, generation=p.shape.generation.name, region=spec.region, mode=pool_mode(p),
            chips=p.total_chips, scales_from_zero=scales_from_zero(p),
            rate=prices.rate(p.shape.generation.name, spec.region, pool_mode(p)),
        )
        for p in spec.tpu_pools
    ]


@dataclass(frozen=True)
class ModeCost:
    mode: str
    rate: Rate | None
    usd: float | None


@dataclass(frozen=True)
class RunCost:
    """A run's cost in every capacity mode: chips x hours x rate."""

    basis: str  # what the hours are: "estimated" (steps x step time) or "measured" (wall time)
    generation: str
    region: str
    chips: int
    seconds: float
    mode: str | None  # the run's own capacity mode, when known
    costs: tuple[ModeCost, ...]

    @property
    def own(self) -> ModeCost | None:
        return next((c for c in self.costs if c.mode == self.mode), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis, "generation": self.generation, "region": self.region, "chips": self.chips,
            "hours": round(self.seconds / 3600, 4), "capacity": self.mode, "currency": "USD",
            "by_mode": {
                c.mode: None if c.rate is None else {
                    "usd": _round(c.usd), "usd_per_chip_hour": c.rate.usd_per_chip_hour,
                    "price_as_of": c.rate.as_of, "price_source": c.rate.source,
                }
                for c in self.costs
            },
        }

    def lines(self) -> list[str]:
        """Human lines: the modes side by side, the run's own marked, each with its price date."""
        head = f"{self.basis} cost: {self.chips} {self.generation} chips x {self.seconds / 3600:,.2f} h in {self.region}"
        out = [head]
        for c in self.costs:
            mark = " <- this run" if c.mode == self.mode else ""
            if c.rate is None:
                out.append(f"  {c.mode:<12} no price (add it under the spec's prices:){mark}")
            else:
                out.append(f"  {c.mode:<12} {usd(c.usd)}  at ${c.rate.usd_per_chip_hour:g}/chip-h, {c.rate.label()}{mark}")
        return out


def run_cost(
    prices: Prices, generation: str, region: str, chips: int, seconds: float, *, mode: str | None, basis: str
) -> RunCost:
    costs = []
    for m in MODES:
        rate = prices.rate(generation, region, m)
        costs.append(ModeCost(m, rate, None if rate is None else chips * seconds / 3600 * rate.usd_per_chip_hour))
    return RunCost(basis, generation, region, chips, seconds, mode, tuple(costs))


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
