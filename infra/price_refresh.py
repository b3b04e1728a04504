"""Refresh the price table from the Cloud Billing Catalog API (``services/{id}/skus``).

Pure parts: ``tpu_prices`` reads SKU pages (the API's documented JSON: ``skus[]`` with
``description``, ``category.resourceGroup`` / ``usageType``, ``serviceRegions`` and
``pricingInfo[].pricingExpression``) into per-chip-hour figures, and ``merge`` lays
them over the current table: a figure the API gave replaces the old one (and cites the
API with the refresh date); every other row keeps its own source and date, so nothing
silently disappears and no old figure is shown with a new date. The network call
(``fetch_pages``) is the thin edge.

What is matched: TPU SKUs of the Compute Engine service (GKE TPU nodes are Compute
Engine VMs; per gpuhunt's GCP provider the v5e, v5p and v6e SKUs there are priced per
chip-hour), ``OnDemand`` as on-demand, ``Preemptible`` as spot and ``Commit1Yr`` as the
reservation rate (TPU reservations come with a committed use discount); a SKU whose
description names Dynamic Workload Scheduler or flex-start (``DWS``, ``Flex start``) is the
flex-start rate, whatever its usage type. The generation is read from the description.
SKUs this cannot place (no generation, another unit, calendar-mode or sole-tenant wording,
a zero price) are skipped and counted, never guessed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.gcp_api import ApiError
from infra.price_table import MAX_USD_PER_CHIP_HOUR, MODES, PriceTable, parse_table
from toolkit.errors import ToolkitError
from toolkit.names import CapacityMode

COMPUTE_SERVICE = "6F81-5844-456A"
ENDPOINT = "https://cloudbilling.googleapis.com"
SOURCE_KEY = "billing-catalog"

_USAGE_TYPES = {"OnDemand": CapacityMode.ON_DEMAND.value, "Preemptible": CapacityMode.SPOT.value, "Commit1Yr": CapacityMode.RESERVATION.value}
# Most specific first: "v5p" must not be read as v5e, "7x" not as anything older.
_GENERATIONS: tuple[tuple[str, str], ...] = (
    ("tpu7x", r"\b(tpu ?7x|ironwood|v7x?)\b"),
    ("v6e", r"\b(v6e|trillium)\b"),
    ("v5p", r"\bv5p\b"),
    ("v5e", r"\b(v5e|v5 ?lite(pod)?)\b"),
    ("v4", r"\bv4\b"),
)
# Flex-start capacity (Dynamic Workload Scheduler), whatever the SKU's usage type.
_FLEX_WORDS = re.compile(r"\b(dws|flex[- ]?start|dynamic workload)", re.IGNORECASE | re.ASCII)
# Capacity this table has no column for: skipped.
_SKIP_WORDS = re.compile(r"\b(calendar|sole tenan)", re.IGNORECASE | re.ASCII)


class RefreshError(ValueError):
    """The response cannot be used (not a skus response, no TPU SKU in it)."""


@dataclass
class Found:
    """Per-chip-hour prices read from the SKUs, and what was skipped and why."""

    prices: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (generation, region, mode) -> USD
    skus: int = 0
    tpu_skus: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    conflicts: dict[tuple[str, str, str], str] = field(default_factory=dict)  # key -> the prices that disagreed

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _generation(description: str) -> str | None:
    text = description.lower()
    if "tpu" not in text:
        return None
    for name, pattern in _GENERATIONS:
        if re.search(pattern, text):
            return name
    return None


def parse_json(raw: bytes) -> Any:
    """A saved or fetched response: UTF-8 JSON within the client's depth and number bounds (``infra.gcp_api.decode_json``); ValueError otherwise."""
    from infra.gcp_api import decode_json

    return decode_json(raw)


def _amount(value: Any) -> float | None:
    """A JSON number or decimal string as a finite float; None for anything else (the SKU is then skipped)."""
    if isinstance(value, bool):
        return None
    try:
        x = float(str(value)) if isinstance(value, str) and len(value) <= 32 else float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _money(money: dict[str, Any]) -> float | None:
    """google.type.Money: units (an int64, as a decimal string) + nanos (|nanos| < 1e9); None when it is not one."""
    units, nanos = _amount(money.get("units") or 0), _amount(money.get("nanos") or 0)
    if units is None or nanos is None or not units.is_integer() or not nanos.is_integer() or abs(units) >= 2**63 or abs(nanos) >= 1e9:
        return None
    return units + nanos / 1e9


def _unit_price(sku: dict[str, Any]) -> tuple[float, str] | None:
    """The SKU's current first-tier price and its usage unit (pricingInfo is chronological: the last is current)."""
    infos = sku.get("pricingInfo") or []
    if not infos or not isinstance(infos, list) or not isinstance(infos[-1], dict):
        return None
    expr = infos[-1].get("pricingExpression") or {}
    rates = expr.get("tieredRates") if isinstance(expr, dict) else None
    tiers = [(start, t) for t in rates or [] if isinstance(t, dict) and (start := _amount(t.get("startUsageAmount") or 0)) is not None]
    if not tiers:
        return None
    money = min(tiers, key=lambda st: st[0])[1].get("unitPrice") or {}
    if not isinstance(money, dict) or money.get("currencyCode", "USD") != "USD":
        return None
    usd = _money(money)
    return None if usd is None else (usd, str(expr.get("usageUnit", "")))


def tpu_prices(pages: Iterable[dict[str, Any]]) -> Found:
    """Per-chip-hour TPU prices by (generation, region, mode) from ``services/…/skus`` pages."""
    found = Found()
    seen_any_page = False
    for page in pages:
        if not isinstance(page, dict) or not isinstance(page.get("skus", []), list):
            raise RefreshError("is not a services/…/skus response (a JSON object with a skus list)")
        seen_any_page = True
        for sku in page.get("skus", []):
            found.skus += 1
            cat = sku.get("category") if isinstance(sku, dict) else None
            if not isinstance(cat, dict) or cat.get("resourceGroup") != "TPU":
                continue
            found.tpu_skus += 1
            desc = str(sku.get("description", ""))
            if _SKIP_WORDS.search(desc):
                found.skip("calendar-mode / sole-tenant wording")
                continue
            mode = CapacityMode.FLEX_START.value if _FLEX_WORDS.search(desc) else _USAGE_TYPES.get(str(cat.get("usageType")))
            if mode is None:
                found.skip(f"usage type {cat.get('usageType')}")
                continue
            gen = _generation(desc)
            if gen is None:
                found.skip("no TPU generation in the description")
                continue
            price = _unit_price(sku)
            if price is None or price[1] != "h":
                found.skip("not priced per hour in USD")
                continue
            usd = price[0]
            if not usd > 0:
                found.skip("zero price")
                continue
            if usd > MAX_USD_PER_CHIP_HOUR:
                found.skip(f"a price above {MAX_USD_PER_CHIP_HOUR:g} USD per chip-hour, beyond any TPU's")
                continue
            regions = sku.get("serviceRegions") or []
            for region in regions if isinstance(regions, list) else []:
                key = (gen, str(region), mode)
                old = found.prices.get(key)
                if old is not None and abs(old - usd) > 1e-9:
                    found.conflicts[key] = f"{gen} {region} {mode}: {old:g} and {usd:g}"
                    continue
                found.prices[key] = usd
    if not seen_any_page:
        raise RefreshError("holds no page")
    if found.tpu_skus == 0:
        raise RefreshError(f"holds {found.skus} SKUs but none with category.resourceGroup TPU")
    # Two SKUs disagreeing on one figure: neither is trusted.
    for key in found.conflicts:
        found.prices.pop(key, None)
    return found


@dataclass(frozen=True)
class Change:
    generation: str
    region: str
    mode: str
    old: float | None
    new: float

    def line(self) -> str:
        was = "new" if self.old is None else f"{self.old:g} ->"
        return f"{self.generation} {self.region} {self.mode}: {was} {self.new:g}"


def merge(table: PriceTable, found: Found, *, as_of: str, url: str) -> tuple[dict[str, Any], list[Change], int]:
    """The refreshed table document, what changed, and how many figures the API confirmed unchanged."""
    cells: dict[tuple[str, str, str], tuple[float, str]] = {}
    for r in table.rows:
        for m, v in r.given().items():
            cells[(r.generation, r.region, m)] = (v, r.source)
    changes, same = [], 0
    for key, usd in sorted(found.prices.items()):
        old = cells.get(key)
        if old is not None and abs(old[0] - usd) < 1e-9:
            same += 1
        else:
            changes.append(Change(*key, old=None if old is None else old[0], new=usd))
        cells[key] = (usd, SOURCE_KEY)
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (gen, region, mode), (v, src) in cells.items():
        rows.setdefault((gen, region, src), {"generation": gen, "region": region})[mode] = v
    order = {m: i for i, m in enumerate(MODES)}
    ordered = []
    for (gen, region, src), row in sorted(rows.items()):
        ordered.append({"generation": gen, "region": region, **{m: row[m] for m in sorted(row, key=lambda k: order.get(k, 99)) if m in order}, "source": src})
    priced = {gen for gen, _, _ in found.prices}
    discounts = [d.model_dump() for d in table.discounts]
    unpublished = [u.model_dump() for u in table.unpublished if u.generation not in priced]  # the account now sees a price
    cited = {r["source"] for r in ordered} | {d["source"] for d in discounts} | {u["source"] for u in unpublished}
    sources = {k: s.model_dump() for k, s in table.sources.items() if k in cited}
    if SOURCE_KEY in cited:
        sources[SOURCE_KEY] = {
            "url": url,
            "date": as_of,
            "note": (
                "Cloud Billing Catalog API, Compute Engine TPU SKUs: OnDemand as on-demand, Preemptible as spot, "
                "Commit1Yr as reservation, DWS / flex-start wording as flex-start; read by `python -m infra prices refresh` on the date given."
            ),
        }
    doc = {"currency": table.currency, "unit": table.unit, "sources": sources, "discounts": discounts, "unpublished": unpublished, "rows": ordered}
    parse_table(doc, "refreshed table")  # what is written must load
    return doc, changes, same


def dump_table(doc: dict[str, Any], header: str) -> str:
    """YAML in the shipped file's layout: the comment header, sources, one flow mapping per row."""
    import yaml

    head = yaml.safe_dump({k: doc[k] for k in ("currency", "unit", "sources")}, sort_keys=False, width=100)
    for section in ("discounts", "unpublished"):  # one flow mapping per entry, as the shipped file has them
        if doc.get(section):
            head += f"{section}:\n" + "".join("  - " + yaml.safe_dump(e, default_flow_style=True, width=1000).strip() + "\n" for e in doc[section])
    rows = "".join(
        "  - {" + ", ".join(f"{k}: {json.dumps(v) if isinstance(v, str) and not re.fullmatch(r'[-a-z0-9]+', v) else v}" for k, v in r.items()) + "}\n"
        for r in doc["rows"]
    )
    return header + head + "rows:\n" + rows


def header_of(text: str) -> str:
    """The leading comment block of the current table file (kept across refreshes)."""
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


# ------------------------------------------------------------------ the edge


def skus_url(endpoint: str = ENDPOINT, service: str = COMPUTE_SERVICE) -> str:
    return f"{endpoint.rstrip('/')}/v1/services/{service}/skus"


class FetchError(ApiError):
    """The catalog could not be fetched (no answer, a refusal, an answer past its bounds): exit 3, as every Google API failure."""


PAGE_DEADLINE_S = 120.0  # one page of up to 5000 SKUs, from connecting to its last byte
API = "Cloud Billing Catalog API"


def _get(url: str, headers: dict[str, str], timeout: float) -> bytes:
    """One GET's body (``infra.gcp_api.http_get``): within ``timeout`` per read and PAGE_DEADLINE_S in all, at most PRICE_RESPONSE's cap."""
    from infra import gcp_api
    from toolkit.inputfile import PRICE_RESPONSE, human_bytes

    bounds = gcp_api.Bounds(read_timeout_s=min(timeout, PAGE_DEADLINE_S), deadline_s=PAGE_DEADLINE_S, max_bytes=PRICE_RESPONSE.limit)
    here = f"{API} ({gcp_api.where(url)})"
    try:
        answer = gcp_api.http_get(url, headers, bounds)
    except gcp_api.GetFailed as e:
        raise FetchError(f"{here}: {e.reason(bounds)} — check the network and try again, or refresh --from-file a saved response") from None
    if answer.over:
        raise FetchError(f"{here}: one page is over {human_bytes(PRICE_RESPONSE.limit)}, more than a skus page ever is — refresh --from-file a saved response")
    if answer.status != 200:
        raise FetchError(f"{here}: HTTP {answer.status} — check $TGK_BILLING_API_KEY or your gcloud login")
    return answer.body


def fetch_pages(url: str, *, api_key: str | None, token: Callable[[], str] | None, timeout: float = 60.0) -> list[dict[str, Any]]:
    """GET every page of ``url`` (``infra.gcp_api.each_page``: pageToken / nextPageToken), with an API key or a bearer token."""
    import urllib.parse

    from infra import gcp_api

    headers = {"Accept": "application/json"}
    if api_key is None and token is not None:
        headers["Authorization"] = f"Bearer {token()}"
    here = f"{API} ({gcp_api.where(url)})"

    def page(page_token: str) -> dict[str, Any]:
        query = {"currencyCode": "USD", "pageSize": "5000"}
        if api_key:
            query["key"] = api_key
        if page_token:
            query["pageToken"] = page_token
        try:
            doc = parse_json(_get(f"{url}?{urllib.parse.urlencode(query)}", headers, timeout))
        except ValueError as e:
            raise FetchError(f"{here}: the answer cannot be used: {e} — try again, or refresh --from-file a saved response") from None
        if not isinstance(doc, dict):
            raise FetchError(f"{here}: the answer is not a skus page (a JSON object) — try again, or refresh --from-file a saved response")
        return doc

    return gcp_api.each_page(page, what=here, max_pages=MAX_PAGES)


MAX_PAGES = 100  # the Compute Engine service's SKUs fit in a few pages of 5000


def gcloud_token() -> str:
    """The bearer token a refresh without $TGK_BILLING_API_KEY sends: gcloud's (``infra.gcp_api.gcloud_token``)."""
    from infra.gcp_api import gcloud_token as token

    return token("set $TGK_BILLING_API_KEY to an API key, or refresh --from-file a saved response")


# ------------------------------------------------------------------ the flow of `infra prices refresh`


@dataclass(frozen=True)
class Refreshed:
    """What a refresh read and did: the figures found, what changed, and where they came from."""

    table: Path
    written: bool
    as_of: str
    found: Found
    changes: list[Change]
    unchanged: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": str(self.table),
            "written": self.written,
            "as_of": self.as_of,
            "skus": self.found.skus,
            "tpu_skus": self.found.tpu_skus,
            "figures": len(self.found.prices),
            "unchanged": self.unchanged,
            "changed": [c.line() for c in self.changes],
            "skipped": self.found.skipped,
            "conflicting": sorted(self.found.conflicts.values()),
        }


def check_options(*, from_file: Path | None, as_of: str) -> None:
    """--as-of is a date, and required with --from-file (a saved response has no fetch date)."""
    from infra.price_table import DATE
    from toolkit.errors import FieldError

    if as_of and not re.fullmatch(DATE, as_of):
        raise FieldError("--as-of", f"{as_of!r} is not a date", "write it as YYYY-MM-DD")
    if from_file is not None and not as_of:
        raise FieldError(
            "--as-of", "is required with --from-file (a saved response has no fetch date)", "give the day the file was fetched, e.g. --as-of 2026-11-20"
        )


def plan_lines(url: str, path: Path, *, api_key: str | None) -> list[str]:
    """What a live refresh would do, as ``--dry-run`` prints it (no request is made)."""
    auth = "API key from $TGK_BILLING_API_KEY" if api_key else "bearer token from `gcloud auth print-access-token`"
    return [
        f"GET {url}?currencyCode=USD&pageSize=5000[&pageToken=…] ({auth}), every page",
        f"then update {path}: TPU SKUs' per-chip-hour prices (on-demand, spot, 1-year commitment as reservation)",
    ]


def read_saved(from_file: Path) -> list[dict[str, Any]]:
    """The pages of a saved ``services/<id>/skus`` response (one page, or a list of pages); FieldError naming --from-file."""
    from toolkit.errors import FieldError
    from toolkit.inputfile import PRICE_RESPONSE, NotReadable, read_bounded

    try:
        raw = parse_json(read_bounded(from_file, PRICE_RESPONSE))  # a regular file of at most 64 MiB
    except NotReadable as e:
        raise FieldError("--from-file", e.problem, e.fix) from None
    except FileNotFoundError:
        raise FieldError("--from-file", f"{from_file} does not exist", "pass a saved services/<id>/skus JSON response") from None
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise FieldError("--from-file", f"cannot read {from_file} as JSON: {why}", "pass a saved services/<id>/skus JSON response") from None
    return raw if isinstance(raw, list) else [raw]


def refresh(current: PriceTable, path: Path, pages: list[dict[str, Any]], *, as_of: str, source_url: str, where: str, write: bool) -> Refreshed:
    """Merge the TPU prices of ``pages`` into ``current`` (the table at ``path``); with ``write``, replace the file (atomically).

    ``where`` names the pages' origin in a refusal (--from-file, or the URL). What is written
    is what was merged: the text is read back as the loader reads it before it replaces the
    table, and a difference leaves the table as it was.
    """
    from infra.price_table import load_table
    from toolkit.errors import FieldError
    from toolkit.owned import write_atomic
    from toolkit.yamlfile import load_yaml, read_capped

    try:
        found = tpu_prices(pages)
    except RefreshError as e:
        raise FieldError(where, str(e), f"use the response of services/{COMPUTE_SERVICE}/skus (Compute Engine)") from None
    doc, changes, same = merge(current, found, as_of=as_of, url=source_url)
    if write:
        text = dump_table(doc, header_of(read_capped(path).decode("utf-8", errors="replace")))
        if parse_table(load_yaml(text.encode()), str(path)) != parse_table(doc, str(path)):
            raise ToolkitError(f"internal: the refreshed table would read back differently; {path} left as it was — please report this")
        write_atomic(path, text, mode=0o644)
        load_table.cache_clear()
    return Refreshed(path, write, as_of, found, changes, same)
