"""Team quotas in whole slices: the rule the Kueue ClusterQueues are rendered by, and the spec's check of it. Pure.

A TPU run is admitted a whole slice at a time (every pod of a slice, or none), so a quota
is worth only the whole slices it holds. Quotas used to be ``floor(share x chips)``:
shares 0.34/0.33/0.33 over four 16-chip slices gave 21 + 21 + 21 = 63 chips, one slice
each and 15 chips no run could ever be admitted on; in the cohort the free chips (5 + 5 +
5) never add up to a fourth slice either, so that slice was paid for and never used.

The rule, per ResourceFlavor (a TPU shape, or one capacity option of a pool with a
capacity list) of ``S`` slices:

* each owner's (team's, and xpk's when enabled) nominal quota is ``quota_share x S``,
  which must be a whole number of slices;
* the owners' slices add up to ``S``: capacity nobody owns is admitted to nobody
  (Kueue lends only what some queue owns);
* ``borrowing_limit`` and ``lending_limit`` are whole slices too (a limit of 1.2
  slices behaves as 1 for one borrower, but partial lends from two teams add up to a
  slice that both teams' own runs then cannot get back whole);
* vCPU and memory quotas follow the slices: whole slices x nodes x the VM's size.

A spec that breaks the rule is refused with shares that keep it. Why refuse rather
than round silently (e.g. a largest-remainder apportionment of whole slices)? A
share is what a team is told it owns; rounding 0.33 of four slices to one slice for
two teams and two for the third changes who owns what, differently for every shape,
and only ``queues apply`` would show it. The suggestion *is* that apportionment
(largest remainder over the slices every shape can split into), so taking it is one edit, and the spec then says what Kueue enforces. With
more teams than the smallest shape has slices, some team can own none of it: a share
of 0 is allowed, and such a team runs on idle slices it borrows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from toolkit.errors import SpecError

# A share is "whole" when share x slices is this close to an integer: decimal YAML cannot
# write 1/3 exactly, so 0.333333 of 3 slices counts as one.
TOLERANCE = 1e-3


@dataclass(frozen=True)
class QuotaOwner:
    """A ClusterQueue that owns a share of every flavor: a team (``teams[i]``) or xpk's queue (``xpk``)."""

    field: str
    label: str
    share: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None


def whole(x: float) -> int | None:
    """``x`` as an integer when it is one within TOLERANCE, else None."""
    n = round(x)
    return n if abs(x - n) <= TOLERANCE else None


def owned_slices(share: float, slices: int) -> int:
    """The whole slices ``share`` of ``slices`` is (a validated spec's shares are whole; never rounds up past one)."""
    return math.floor(share * slices + TOLERANCE)


def apportion(weights: list[float], units: int) -> list[int]:
    """``units`` split in proportion to ``weights`` in whole units: largest remainder (Hamilton's method)."""
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(weights), float(len(weights))
    exact = [w * units / total for w in weights]
    out = [math.floor(e + 1e-12) for e in exact]
    # Ties go to the owner with fewer units so far (0.75/0.25 of 2 makes 1/1, not 2/0), then to the earlier.
    order = sorted(range(len(weights)), key=lambda i: (-round(exact[i] - out[i], 9), out[i], i))
    for i in order[: units - sum(out)]:
        out[i] += 1
    return out


def _fmt(x: Fraction, slice_counts: list[int]) -> str:
    """``x`` as a short decimal that still makes whole slices of every count (1/3 -> 0.3333)."""
    if x.denominator == 1:
        return str(x.numerator)
    for d in range(1, 10):
        r = round(float(x), d)
        if all(abs(r * s - float(x * s)) <= TOLERANCE / 10 for s in slice_counts):
            return f"{r:.{d}f}".rstrip("0").rstrip(".")
    return f"{float(x):.9f}"


def suggested_shares(owners: list[QuotaOwner], flavor_slices: dict[str, int]) -> str:
    """Shares close to the given ones that make whole slices of every flavor and add up to all of them, as 'a/b/c (names)'."""
    counts = list(flavor_slices.values())
    g = math.gcd(*counts)
    units = apportion([o.share for o in owners], g)
    shares = "/".join(_fmt(Fraction(u, g), counts) for u in units)
    names = "/".join(o.label for o in owners)
    zero = "; a team with 0 only borrows idle slices" if 0 in units else ""
    return f"{shares} ({names}{zero})"


def _limit_fix(value: float, ceiling: float, flavor_slices: dict[str, int]) -> str:
    counts = list(flavor_slices.values())
    g = math.gcd(*counts)
    low = Fraction(math.floor(value * g + TOLERANCE), g)
    high = min(Fraction(math.ceil(value * g - TOLERANCE), g), Fraction(ceiling).limit_denominator(10**6))
    picks = dict.fromkeys(_fmt(v, counts) for v in (low, high) if 0 <= v <= 1)
    return " or ".join(picks)


def _describe(flavor: str, slices: int) -> str:
    return f"the {slices} slice{'s' if slices != 1 else ''} of flavor {flavor}"


def check(owners: list[QuotaOwner], flavor_slices: dict[str, int]) -> None:
    """Refuse quotas that are not whole slices of every flavor, or that leave slices to no owner (SpecError)."""
    if not owners or not flavor_slices:
        return
    for o in owners:
        for flavor, slices in flavor_slices.items():
            if whole(o.share * slices) is None:
                raise SpecError(
                    f"{o.field}.quota_share",
                    f"{o.share:g} of {_describe(flavor, slices)} is {o.share * slices:.3g} slices; Kueue admits runs a whole slice at a time, "
                    "so a part-slice quota strands chips no run can use",
                    f"give shares that make whole slices of every TPU shape: {suggested_shares(owners, flavor_slices)}",
                )
    for flavor, slices in flavor_slices.items():
        owned = sum(owned_slices(o.share, slices) for o in owners)
        if owned != slices:
            raise SpecError(
                "teams",
                f"quota shares give {owned} of {_describe(flavor, slices)} to a queue, and Kueue admits no run on the other {slices - owned}",
                f"give shares that add up to 1 in whole slices: {suggested_shares(owners, flavor_slices)}",
            )
    for o in owners:
        for key, value, ceiling in (("borrowing_limit", o.borrowing_limit, 1.0), ("lending_limit", o.lending_limit, o.share)):
            if value is None:
                continue
            for flavor, slices in flavor_slices.items():
                if whole(value * slices) is None:
                    raise SpecError(
                        f"{o.field}.{key}",
                        f"{value:g} of {_describe(flavor, slices)} is {value * slices:.3g} slices; a limit Kueue applies in chips must be whole slices",
                        f"use {_limit_fix(value, ceiling, flavor_slices)} (whole slices of every TPU shape)",
                    )
