"""The dated TPU price table and a spec's overrides of it: models, loading, lookup.

The table (``infra/prices.yaml``) holds public list prices in USD per chip-hour by
(TPU generation, region, capacity mode), each row citing a source with the day its
figures were taken. A spec may override rows in its ``prices:`` section (which carries
its own date). Every ``Rate`` carries the date and the source it came from, so no price
is ever shown as current; a figure that is missing is "no price" (``None``), never zero.

Pure except ``load_table`` (reads the shipped table once). ``infra.spec`` reads the
overrides model from here and ``infra.pricing`` the lookup, so neither imports the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infra import catalog
from infra.naming import REGION
from toolkit.errors import FieldError
from toolkit.names import CapacityMode

TABLE_PATH = Path(__file__).with_name("prices.yaml")
MODES: tuple[str, ...] = tuple(m.value for m in CapacityMode)  # the order displays list them in
DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"  # YYYY-MM-DD, the day a price was taken


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# The most a chip-hour may cost: the dearest TPU lists at a few tens of USD, so a larger
# figure is a typo or a unit mix-up, and unbounded ones would make every cost built on them inf.
MAX_USD_PER_CHIP_HOUR = 1000.0


class Rates(_Model):
    """USD per chip-hour by capacity mode; a mode left out has no price (never zero)."""

    on_demand: float | None = Field(None, alias=CapacityMode.ON_DEMAND.value)
    spot: float | None = None
    flex_start: float | None = Field(None, alias=CapacityMode.FLEX_START.value)
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
    date: str = Field(..., pattern=DATE, description="the day the figures were taken (YYYY-MM-DD)")
    note: str = ""


class _Located(Rates):
    generation: str
    region: str = Field(..., pattern=REGION)

    @field_validator("generation")
    @classmethod
    def _generation(cls, v: str) -> str:
        if v not in catalog.GENERATIONS:
            raise ValueError(f"{v!r} is not a TPU generation; use one of {', '.join(catalog.GENERATIONS)}")
        return v


class PriceRow(_Located):
    source: str


class Discount(_Model):
    """A mode priced only as a documented discount off the on-demand rate ("up to N% off"): a range, not a figure."""

    mode: str
    up_to: float = Field(..., gt=0, lt=1, description="the largest discount the source documents, as a fraction")
    generations: list[str] = Field(..., min_length=1)
    source: str


class Unpublished(_Model):
    """A generation with no public list price in any mode: displays say so, with where that was checked."""

    generation: str
    source: str


class PriceTable(_Model):
    currency: Literal["USD"] = "USD"
    unit: Literal["chip-hour"] = "chip-hour"
    sources: dict[str, PriceSource]
    rows: list[PriceRow]
    discounts: list[Discount] = Field(default_factory=list)
    unpublished: list[Unpublished] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cited(self) -> PriceTable:
        seen: dict[tuple[str, str, str], int] = {}
        for where, cited in [
            *((f"discounts[{i}]", d.source) for i, d in enumerate(self.discounts)),
            *((f"unpublished[{i}]", u.source) for i, u in enumerate(self.unpublished)),
        ]:
            if cited not in self.sources:
                raise ValueError(f"{where} cites source {cited!r}, which is not under sources")
        for i, d in enumerate(self.discounts):
            if d.mode not in MODES or d.mode == CapacityMode.ON_DEMAND.value:
                raise ValueError(
                    f"discounts[{i}].mode {d.mode!r}: a discount is off the on-demand rate; use one of {', '.join(m for m in MODES if m != 'on-demand')}"
                )
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
            raise ValueError(f"gives no rate; add at least one of {', '.join(MODES)} (USD per chip-hour)")
        return self


class PriceOverrides(_Model):
    """The spec's ``prices:`` section: rates that win over the shipped table."""

    as_of: str = Field(..., pattern=DATE, description="the day these figures were agreed or taken (YYYY-MM-DD)")
    note: str = Field("", description="where they come from, e.g. a contract")
    chip_hour: list[OverrideRow] = Field(..., min_length=1)


@dataclass(frozen=True)
class Rate:
    """One price with its provenance: never a bare number."""

    usd_per_chip_hour: float  # with ``low``: the most it can be (the on-demand rate)
    as_of: str
    source: str  # a table source key, or "spec override"
    override: bool = False
    low: float | None = None  # a documented discount's floor: the rate is somewhere in [low, usd_per_chip_hour]
    discount_note: str = ""  # what the range rests on, with its own date

    def label(self) -> str:
        if self.override:
            return f"spec prices as of {self.as_of}"
        return f"list price as of {self.as_of} ({self.source})" + (f"; {self.discount_note}" if self.discount_note else "")

    def text(self, sign: str = "$") -> str:
        """``$2.7`` or ``$1.269-$2.7`` per chip-hour."""
        return f"{sign}{self.usd_per_chip_hour:g}" if self.low is None else f"{sign}{self.low:.4g}-{sign}{self.usd_per_chip_hour:g}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"usd_per_chip_hour": self.usd_per_chip_hour, "price_as_of": self.as_of, "price_source": self.source}
        if self.low is not None:
            out |= {"usd_per_chip_hour_low": round(self.low, 5), "price_note": self.discount_note}
        return out


@dataclass(frozen=True)
class Prices:
    """The shipped table with the spec's overrides laid over it."""

    table: PriceTable
    overrides: PriceOverrides | None = None

    def rate(self, generation: str, region: str, mode: str) -> Rate | None:
        """The mode's figure (the spec's, else the table's); else, for a mode the table prices as a documented
        discount off on-demand (flex-start), the range down to that discount; else None ("no price")."""
        if self.overrides:
            for o in self.overrides.chip_hour:
                if (o.generation, o.region) == (generation, region) and (v := o.get(mode)) is not None:
                    return Rate(v, self.overrides.as_of, "spec override", override=True)
        for r in self.table.rows:
            if (r.generation, r.region) == (generation, region) and (v := r.get(mode)) is not None:
                return Rate(v, self.table.sources[r.source].date, r.source)
        discount = next((d for d in self.table.discounts if d.mode == mode and generation in d.generations), None)
        if discount is not None and mode != CapacityMode.ON_DEMAND.value:
            base = self.rate(generation, region, CapacityMode.ON_DEMAND.value)
            if base is not None:
                src = self.table.sources[discount.source]
                note = f"{mode}: up to {discount.up_to:.0%} off on-demand, no figure published ({discount.source}, {src.date})"
                return Rate(
                    base.usd_per_chip_hour, base.as_of, base.source, base.override, low=base.usd_per_chip_hour * (1 - discount.up_to), discount_note=note
                )
        return None

    def why_none(self, generation: str) -> str:
        """Why a generation has no price, for a display: a public source that says so, else the table's fix."""
        u = next((u for u in self.table.unpublished if u.generation == generation), None)
        if u is None:
            return "no price (add it under the spec's prices:)"
        src = self.table.sources[u.source]
        return f"no public list price ({src.url}, checked {src.date}): add it under the spec's prices:, or `python -m infra prices refresh`"


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
