"""Prices and costs (infra.pricing): the shipped table, spec overrides, pool and run costs,
and how the CLIs show them. A missing figure is "no price", never zero; every price
carries its date."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from infra import price_table, pricing
from tests.support import EXAMPLES, REPO, cli, spec_from
from toolkit.errors import FieldError, SpecError

BASE = {
    "project": "my-tpu-project",
    "region": "us-west4",
    "zones": ["us-west4-a"],
    "cluster": {"name": "tpu-dev"},
    "tpu_pools": [{"name": "v5e-16", "type": "v5litepod-16", "slices": 2, "capacity": "spot"}],
}
TABLE = price_table.load_table()


def spec_with(**changes):
    return spec_from(BASE, **changes)


def table_rate(gen: str, region: str, mode: str) -> float:
    rows = [r.get(mode) for r in TABLE.rows if (r.generation, r.region) == (gen, region) and r.get(mode) is not None]
    assert len(rows) == 1, (gen, region, mode, rows)
    return rows[0]


# ------------------------------------------------------------------ the table


def test_every_row_cites_a_dated_source_with_a_url():
    assert TABLE.rows
    for r in TABLE.rows:
        src = TABLE.sources[r.source]
        assert src.url.startswith("https://") and src.date and src.note
        assert r.given(), f"row without any price: {r}"
        assert all(v > 0 and math.isfinite(v) for v in r.given().values())


def test_the_table_leaves_unpublished_figures_out_and_says_why():
    """No flex-start or tpu7x figure was found in a public source: they are absent, not guessed.
    Flex-start is a documented discount off on-demand (a range); tpu7x says where its absence was checked."""
    assert not any(r.flex_start for r in TABLE.rows)
    assert not any(r.generation == "tpu7x" for r in TABLE.rows)
    p = price_table.Prices(TABLE)
    assert p.rate("tpu7x", "us-central1", "on-demand") is None
    why = p.why_none("tpu7x")
    assert "no public list price" in why and TABLE.sources["tpu7x-access"].url in why and TABLE.sources["tpu7x-access"].date in why
    flex = p.rate("v6e", "us-east5", "flex-start")
    on_demand = table_rate("v6e", "us-east5", "on-demand")
    assert flex.usd_per_chip_hour == on_demand and flex.low == pytest.approx(on_demand * (1 - 0.53))
    assert "up to 53% off on-demand" in flex.label() and TABLE.sources["gke-flex-start"].date in flex.label()
    assert p.rate("v4", "us-central2", "flex-start") is None  # GKE's flex-start names v5e, v5p and v6e only


def test_spot_is_cheaper_than_on_demand_in_every_row():
    # A cheap check that no column was swapped while transcribing.
    for r in TABLE.rows:
        if r.spot is not None and r.on_demand is not None:
            assert r.spot < r.on_demand, r


def test_slice_prices_divide_into_the_per_chip_rows():
    """Spot-checks against the SkyPilot catalog rows (slice prices per hour) the table cites."""
    assert table_rate("v5e", "us-central1", "on-demand") * 8 == pytest.approx(9.6)  # tpu-v5litepod-8
    assert table_rate("v5e", "us-central1", "spot") * 8 == pytest.approx(1.70383, abs=1e-4)
    assert table_rate("v5p", "europe-west4", "on-demand") * 4 == pytest.approx(17.01)  # tpu-v5p-8: 4 chips
    assert table_rate("v6e", "us-east4", "spot") * 4 == pytest.approx(3.43332, abs=1e-4)  # tpu-v6e-4
    assert table_rate("v4", "us-central2", "on-demand") * 3072 == pytest.approx(9891.84)  # tpu-v4-6144


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d["rows"][0].update(spot=0), "rows.0.spot"),
        (lambda d: d["rows"][0].update(spot=-1.0), "rows.0.spot"),
        (lambda d: d["rows"][0].update(source="nowhere"), "prices.yaml"),
        (lambda d: d["sources"]["skypilot-catalog"].update(date="last week"), "sources.skypilot-catalog.date"),
        (lambda d: d["rows"][0].update(generation="v9"), "rows.0.generation"),
        (lambda d: d["rows"].append(dict(d["rows"][0])), "prices.yaml"),
    ],
)
def test_a_bad_table_is_refused_naming_the_row(mutate, where):
    data = yaml.safe_load(price_table.TABLE_PATH.read_text())
    mutate(data)
    with pytest.raises(FieldError) as ei:
        price_table.parse_table(data, "prices.yaml")
    assert where in str(ei.value), str(ei.value)
    assert "\n" not in str(ei.value)


# ------------------------------------------------------------- spec overrides


def test_override_wins_and_carries_its_own_date():
    spec = spec_with(prices={"as_of": "2026-10-01", "note": "contract", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": 0.31}]})
    p = pricing.prices_for(spec)
    r = p.rate("v5e", "us-west4", "spot")
    assert r.usd_per_chip_hour == 0.31 and r.as_of == "2026-10-01" and r.override
    # a mode the override does not give falls back to the table, with the table's date
    od = p.rate("v5e", "us-west4", "on-demand")
    assert od.usd_per_chip_hour == table_rate("v5e", "us-west4", "on-demand")
    assert od.as_of == TABLE.sources[od.source].date and not od.override


def test_without_prices_section_a_missing_price_does_not_block():
    spec = spec_with(region="europe-west2", zones=["europe-west2-a"])
    [cost] = pricing.pool_costs(spec)
    assert cost.rate is None and cost.per_hour is None and cost.idle_per_hour is None  # unknown, not $0


@pytest.mark.parametrize(
    "prices, field, words",
    [
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": 0}]}, "prices.chip_hour[0].spot", "above 0"),
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": -2}]}, "prices.chip_hour[0].spot", "above 0"),
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": float("inf")}]}, "prices.chip_hour[0].spot", "above 0"),
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-west4"}]}, "prices.chip_hour[0]", "gives no rate"),
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-east5", "spot": 0.3}]}, "prices.chip_hour[0].region", "us-west4"),
        ({"as_of": "yesterday", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": 0.3}]}, "prices.as_of", ""),
        ({"as_of": "2026-10-01", "chip_hour": [{"generation": "v9", "region": "us-west4", "spot": 0.3}]}, "prices.chip_hour[0].generation", "v5e"),
        (
            {
                "as_of": "2026-10-01",
                "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": 0.3}, {"generation": "v5e", "region": "us-west4", "spot": 0.4}],
            },
            "prices.chip_hour[1]",
            "repeats",
        ),
    ],
)
def test_bad_prices_section(prices, field, words):
    with pytest.raises(SpecError) as ei:
        spec_with(prices=prices)
    assert ei.value.field == field, str(ei.value)
    assert words in str(ei.value) and ei.value.fix


def test_prices_section_must_cover_every_pool_option():
    """With a prices: section, a pool left without any price is refused (the spec owns its pricing)."""
    with pytest.raises(SpecError) as ei:
        spec_with(
            region="europe-west2",
            zones=["europe-west2-a"],
            prices={"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "europe-west2", "on-demand": 1.5}]},
        )
    assert ei.value.field == "prices.chip_hour" and "spot" in ei.value.problem and "tpu_pools[0].capacity" in ei.value.problem
    # the same section with the spot rate is accepted: that was the only gap
    spec = spec_with(
        region="europe-west2",
        zones=["europe-west2-a"],
        prices={"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "europe-west2", "on-demand": 1.5, "spot": 0.5}]},
    )
    assert pricing.pool_costs(spec)[0].rate.usd_per_chip_hour == 0.5


# ---------------------------------------------------------------- pool costs


def test_fixed_pool_costs_its_whole_rate_idle():
    spec = spec_with()
    [c] = pricing.pool_costs(spec)
    rate = table_rate("v5e", "us-west4", "spot")
    assert c.chips == 32 and c.option.fixed_size
    assert c.per_hour == pytest.approx(32 * rate)
    doc = pricing.costs_document(spec)
    assert doc["idle_usd_per_day"] == pytest.approx(round(32 * rate * 24, 2))
    assert doc["pools"][0]["price_as_of"] == TABLE.sources["skypilot-catalog"].date


@pytest.mark.parametrize("pool_changes", [{"autoscaling": True}, {"capacity": "flex-start"}])
def test_pools_that_scale_from_zero_cost_nothing_idle(pool_changes):
    pool = {**BASE["tpu_pools"][0], **pool_changes}
    spec = spec_with(tpu_pools=[pool])
    [c] = pricing.pool_costs(spec)
    assert not c.option.fixed_size and c.idle_per_hour == 0.0
    assert pricing.costs_document(spec)["idle_usd_per_day"] == 0.0


def test_fallback_options_each_priced_only_the_first_is_fixed():
    pool = {
        "name": "v6e-16",
        "type": "v6e-16",
        "slices": 2,
        "zone": "us-east5-b",
        "capacity": [{"mode": "reservation", "name": "res-1", "zone": "us-east5-b"}, "on-demand", "spot"],
    }
    spec = spec_with(region="us-east5", zones=["us-east5-b"], tpu_pools=[pool])
    costs = pricing.pool_costs(spec)
    assert [(c.option.label, c.option.fixed_size) for c in costs] == [("reservation res-1", True), ("on-demand", False), ("spot", False)]
    assert [c.rate.usd_per_chip_hour for c in costs] == [table_rate("v6e", "us-east5", m) for m in ("reservation", "on-demand", "spot")]
    idle, unknown = pricing.idle_total(costs)
    assert idle == pytest.approx(costs[0].per_hour) and unknown == []


# ----------------------------------------------------------------- run costs


def test_run_cost_is_chips_times_hours_times_rate_in_every_mode():
    p = price_table.Prices(TABLE)
    rc = pricing.run_cost(p, "v6e", "us-central1", 64, 5400.0, pool_modes=("spot",), basis="estimated")
    by = {c.mode: c for c in rc.costs}
    assert by["on-demand"].usd == pytest.approx(64 * 1.5 * table_rate("v6e", "us-central1", "on-demand"))
    assert by["spot"].usd == pytest.approx(64 * 1.5 * table_rate("v6e", "us-central1", "spot"))
    flex = by["flex-start"]  # no figure published: on-demand down to the documented 53% off
    assert flex.usd == pytest.approx(by["on-demand"].usd) and flex.usd_low == pytest.approx(by["on-demand"].usd * 0.47)
    assert by["reservation"].usd == pytest.approx(64 * 1.5 * table_rate("v6e", "us-central1", "reservation"))
    v5p = {c.mode: c for c in pricing.run_cost(p, "v5p", "us-east5", 64, 5400.0, basis="estimated").costs}
    assert v5p["reservation"].rate is None and v5p["reservation"].usd is None
    d = rc.to_dict()
    assert d["by_mode"]["reservation"]["usd"] > 0 and d["by_mode"]["spot"]["price_as_of"] == TABLE.sources["skypilot-catalog"].date
    assert d["by_mode"]["flex-start"]["usd_low"] == pytest.approx(flex.usd_low, abs=0.01)
    lines = rc.lines()
    assert any("spot" in ln and "<- the pool's" in ln for ln in lines)
    assert any("flex-start" in ln and f"{pricing.usd(flex.usd_low)}-{pricing.usd(flex.usd)}" in ln and "up to 53% off" in ln for ln in lines)
    assert all("as of" in ln for ln in lines[1:] if "no price" not in ln)
    tpu7x = pricing.run_cost(p, "tpu7x", "us-central1", 128, 3600.0, basis="estimated")
    assert all(c.rate is None and "no public list price" in c.why_none for c in tpu7x.costs)


def test_usd_formatting():
    assert pricing.usd(None) == "–" and pricing.usd(float("nan")) == "–"
    assert pricing.usd(0) == "$0.00" and pricing.usd(1234.5) == "$1,234.50" and pricing.usd(0.004) == "$0.0040"


# ---------------------------------------------------------------------- CLIs


def test_infra_spec_shows_pool_cost_with_the_price_date():
    proc = cli("infra", "spec")
    assert proc.returncode == 0, proc.stderr
    rate = table_rate("v5e", "us-west4", "spot")
    assert f"= {pricing.usd(32 * rate)}/h while running" in proc.stdout
    assert f"{pricing.usd(32 * rate * 24)}/day (fixed size)" in proc.stdout
    assert f"as of {TABLE.sources['skypilot-catalog'].date}" in proc.stdout and "not live" in proc.stdout


def test_infra_spec_json_cost_block(tmp_path: Path):
    data = copy.deepcopy(BASE)
    data["tpu_pools"][0]["capacity"] = "flex-start"
    f = tmp_path / "flex.yaml"
    f.write_text(yaml.safe_dump(data))
    proc = cli("infra", "spec", "--spec", str(f), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    cost = json.loads(proc.stdout)["cost"]
    [p] = cost["pools"]
    # No published flex-start figure: the range from on-demand down to the documented discount, never a guess.
    assert p["mode"] == "flex-start" and p["usd_per_hour_low"] < p["usd_per_hour"] and "up to 53% off" in p["price_note"]
    assert p["idle_usd_per_day"] == 0.0 and not p["fixed_size"]  # but idle it costs nothing: it scales from zero


def test_infra_spec_refuses_a_zero_price_in_one_line(tmp_path: Path):
    data = {**copy.deepcopy(BASE), "prices": {"as_of": "2026-10-01", "chip_hour": [{"generation": "v5e", "region": "us-west4", "spot": 0}]}}
    f = tmp_path / "spec.yaml"
    f.write_text(yaml.safe_dump(data))
    proc = cli("infra", "spec", "--spec", str(f))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: prices.chip_hour[0].spot: ")


@pytest.mark.synth
def test_fixed_size_rule_matches_the_synthesized_node_pools(tmp_path: Path):
    """pool_options' idle rule against what the stack really creates (node_count vs autoscaling)."""
    from infra.stack import synth

    pools = [
        {"name": "v6e-16", "type": "v6e-16", "slices": 2, "capacity": [{"mode": "reservation", "name": "res-1", "zone": "us-east5-b"}, "on-demand", "spot"]},
        {"name": "v5e-auto", "type": "v5litepod-16", "slices": 1, "capacity": "spot", "autoscaling": True},
        {"name": "v5e-flex", "type": "v5litepod-8", "capacity": "flex-start"},
        {"name": "v5p-8", "type": "v5p-8", "capacity": "on-demand"},
    ]
    spec = spec_with(region="us-east5", zones=["us-east5-b"], tpu_pools=pools)
    doc = json.loads(synth(spec, tmp_path).read_text())
    fixed = {r["name"]: "node_count" in r for r in doc["resource"]["google_container_node_pool"].values()}
    for pool in spec.tpu_pools:
        for o, opt in zip(pool.capacity_options(), pricing.pool_options(pool), strict=True):
            for name in pool.option_node_pool_names(o):
                assert fixed[name] == opt.fixed_size, (name, opt)


# ------------------------------------------------------------ run plan cost


def test_render_json_plan_has_the_estimated_cost(tmp_path: Path):
    proc = cli("workloads", "render", "maxtext-6b", "--slices", "2", "--out", str(tmp_path), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    cost = plan["estimated_cost"]
    hours = plan["steps"] * plan["estimated_step_seconds"] / 3600
    assert cost["basis"] == "estimated" and cost["chips"] == plan["chips"] == 32 and cost["region"] == "us-west4"
    assert cost["hours"] == pytest.approx(hours, rel=1e-3)
    for mode in ("on-demand", "spot"):
        want = plan["chips"] * hours * table_rate("v5e", "us-west4", mode)
        assert cost["by_mode"][mode]["usd"] == pytest.approx(want, abs=0.01)
        assert cost["by_mode"][mode]["price_as_of"] == TABLE.sources["skypilot-catalog"].date
    assert cost["by_mode"]["flex-start"]["usd_low"] < cost["by_mode"]["flex-start"]["usd"] and cost["pool_capacity"] == ["spot"]


def test_submit_dry_run_prints_the_cost_of_every_mode_beside_the_manifests():
    proc = cli("workloads", "submit", "maxtext-6b", "--slices", "2", "--steps", "2000", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))  # stdout stays the manifests alone
    assert docs and all(isinstance(d, dict) and "kind" in d for d in docs)
    err = proc.stderr.splitlines()
    head = next(ln for ln in err if ln.startswith("estimated cost: 2000 steps x "))
    assert "32 v5e chips" in head and "us-west4" in head
    rows = {ln.split()[0]: ln for ln in err if ln.startswith("  ")}
    assert set(rows) >= set(price_table.MODES)
    assert "up to 53% off on-demand" in rows["flex-start"] and "no price" in rows["reservation"]
    assert "<- the pool's" in rows["spot"] and "<- the pool's" not in rows["on-demand"]
    for mode in ("on-demand", "spot"):
        assert f"at ${table_rate('v5e', 'us-west4', mode):g}/chip-h, list price as of {TABLE.sources['skypilot-catalog'].date}" in rows[mode]
    # spot and on-demand costs in the ratio of their rates (the hours and chips are the same)
    spot, od = (float(rows[m].split()[1].strip("$").replace(",", "")) for m in ("spot", "on-demand"))
    assert spot / od == pytest.approx(table_rate("v5e", "us-west4", "spot") / table_rate("v5e", "us-west4", "on-demand"), rel=0.01)


def test_a_plain_command_has_no_cost_estimate_and_says_why():
    proc = cli("workloads", "submit", "hello-tpu", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "estimated cost: none — hello-tpu is a plain command" in proc.stderr


# ------------------------------------------------------------------- refresh

BILLING = REPO / "tests" / "data" / "billing"
PAGES = [json.loads((BILLING / f"compute_skus_page{i}.json").read_text()) for i in (1, 2)]


def test_sku_pages_read_into_per_chip_hour_figures():
    from infra import price_refresh as pr

    found = pr.tpu_prices(PAGES)
    assert found.skus == 14 and found.tpu_skus == 13
    assert found.prices == {
        ("v6e", "us-east5", "on-demand"): 2.7,
        ("v6e", "us-east5", "spot"): 1.05,
        ("v5e", "us-west4", "spot"): pytest.approx(0.4692),
        ("v5e", "us-west4", "reservation"): 0.84,
        ("v5p", "us-east5", "on-demand"): 4.2,
        ("tpu7x", "us-central1", "on-demand"): 5.0,
        ("v6e", "us-east5", "flex-start"): 1.6,  # DWS wording: the flex-start rate, whatever the usage type
    }
    assert found.skipped == {"usage type Commit3Yr": 1, "calendar-mode / sole-tenant wording": 1, "zero price": 1, "not priced per hour in USD": 1}
    assert list(found.conflicts) == [("v5e", "us-east1", "on-demand")]  # two SKUs disagree: neither is used


@pytest.mark.parametrize(
    "pages, words", [([{"skus": "no"}], "not a services"), ([{"skus": [PAGES[0]["skus"][0]]}], "none with category.resourceGroup TPU"), ([], "no page")]
)
def test_unusable_responses_are_refused(pages, words):
    from infra import price_refresh as pr

    with pytest.raises(pr.RefreshError, match=words):
        pr.tpu_prices(pages)


def infra_in_process(capsys, *argv: str) -> tuple[int, str, str]:
    """``python -m infra`` without the interpreter start-up (the same run() the module calls)."""
    from infra.cli import app
    from toolkit.clikit import run

    capsys.readouterr()
    rc = run(app, list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def _pages_file(tmp_path: Path) -> Path:
    f = tmp_path / "skus.json"
    f.write_text(json.dumps(PAGES))
    return f


def _table_copy(tmp_path: Path) -> Path:
    t = tmp_path / "prices.yaml"
    t.write_text(price_table.TABLE_PATH.read_text())
    return t


def _check_refreshed(table: Path, as_of: str) -> None:
    text = table.read_text()
    assert text.startswith(price_table.TABLE_PATH.read_text().split("\ncurrency:")[0])  # the comment header is kept
    new = price_table.parse_table(yaml.safe_load(text), "refreshed")
    p = price_table.Prices(new)
    # The documented flex-start discount is kept for the regions the API did not price; tpu7x, now
    # priced for this account, is no longer listed as unpublished (nor is its source kept).
    assert [d.mode for d in new.discounts] == ["flex-start"] and not new.unpublished and "tpu7x-access" not in new.sources
    changed = p.rate("v6e", "us-east5", "spot")
    assert (changed.usd_per_chip_hour, changed.as_of, changed.source) == (1.05, as_of, "billing-catalog")
    confirmed = p.rate("v6e", "us-east5", "on-demand")  # same figure, now dated by the API read
    assert (confirmed.usd_per_chip_hour, confirmed.as_of) == (2.7, as_of)
    untouched = p.rate("v6e", "us-central1", "spot")  # not in the response: keeps its own source and date
    assert untouched.source == "skypilot-catalog" and untouched.as_of == TABLE.sources["skypilot-catalog"].date
    kept = p.rate("v5e", "us-east1", "on-demand")  # the disagreeing SKUs left the old figure alone
    assert kept.usd_per_chip_hour == table_rate("v5e", "us-east1", "on-demand") and kept.source == "skypilot-catalog"
    assert p.rate("tpu7x", "us-central1", "on-demand").usd_per_chip_hour == 5.0
    assert p.rate("v5e", "us-west4", "reservation").usd_per_chip_hour == 0.84
    flex = p.rate("v6e", "us-east5", "flex-start")  # the API's DWS figure replaces the documented-discount range
    assert (flex.usd_per_chip_hour, flex.low, flex.source) == (1.6, None, "billing-catalog")
    # every row of the old table is still priced (a refresh never drops a figure)
    for r in TABLE.rows:
        for m in r.given():
            assert p.rate(r.generation, r.region, m) is not None


def test_refresh_from_a_recorded_response(tmp_path: Path):
    table = _table_copy(tmp_path)
    proc = cli("infra", "prices", "refresh", "--from-file", str(_pages_file(tmp_path)), "--as-of", "2026-11-20", "--table", str(table), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["written"] and out["figures"] == 7 and out["unchanged"] == 3
    assert sorted(out["changed"]) == [
        "tpu7x us-central1 on-demand: new 5",
        "v5e us-west4 reservation: new 0.84",
        "v6e us-east5 flex-start: new 1.6",
        "v6e us-east5 spot: 1.08 -> 1.05",
    ]
    _check_refreshed(table, "2026-11-20")


def test_refresh_dry_run_writes_nothing(tmp_path: Path, capsys):
    table = _table_copy(tmp_path)
    before = table.read_bytes()
    rc, out, err = infra_in_process(
        capsys, "prices", "refresh", "--from-file", str(_pages_file(tmp_path)), "--as-of", "2026-11-20", "--table", str(table), "--dry-run"
    )
    assert rc == 0, err
    assert out.startswith(f"would update {table}") and "v6e us-east5 spot: 1.08 -> 1.05" in out
    assert table.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prices.yaml", "skus.json"]


def test_live_refresh_dry_run_names_the_call_and_makes_none(capsys):
    rc, out, err = infra_in_process(capsys, "prices", "refresh", "--dry-run", "--endpoint", "http://127.0.0.1:9")  # port 9: nothing listens
    assert rc == 0, err
    assert out.startswith("GET http://127.0.0.1:9/v1/services/6F81-5844-456A/skus?currencyCode=USD")


@pytest.mark.parametrize(
    "args, field",
    [
        (["--as-of", "2026-11-20"], "--from-file"),  # the file does not exist (filled in below)
        ([], "--as-of"),  # a saved response needs its date
        (["--as-of", "20 Nov"], "--as-of"),
        (["--as-of", "2026-11-20", "NOTJSON"], "--from-file"),
        (["--as-of", "2026-11-20", "NOTPU"], "--from-file"),
    ],
)
def test_refresh_bad_input_one_line_exit_2_nothing_written(tmp_path: Path, capsys, args, field):
    table = _table_copy(tmp_path)
    before = table.read_bytes()
    src = _pages_file(tmp_path)
    if "NOTJSON" in args:
        args = [a for a in args if a != "NOTJSON"]
        src.write_text("skus: [")
    elif "NOTPU" in args:
        args = [a for a in args if a != "NOTPU"]
        src.write_text(json.dumps({"skus": [PAGES[0]["skus"][0]]}))
    elif field == "--from-file":
        src = tmp_path / "missing.json"
    rc, out, err = infra_in_process(capsys, "prices", "refresh", "--from-file", str(src), "--table", str(table), *args)
    assert rc == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}: ") and " — " in err
    assert table.read_bytes() == before


def test_live_refresh_against_a_loopback_catalog(tmp_path: Path):
    """The real call's code path (pagination, API key) against a local server playing the API."""
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            seen.append({"path": url.path, **q})
            page = PAGES[1] if q.get("pageToken") == "page-2" else PAGES[0]
            body = json.dumps(page).encode()
            self.send_response(200 if url.path == "/v1/services/6F81-5844-456A/skus" and q.get("key") == "test-key" else 403)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        table = _table_copy(tmp_path)
        import os
        import subprocess
        import sys

        env = {**os.environ, "TGK_BILLING_API_KEY": "test-key"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "infra",
                "prices",
                "refresh",
                "--endpoint",
                f"http://127.0.0.1:{server.server_port}",
                "--as-of",
                "2026-11-21",
                "--table",
                str(table),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert [s.get("pageToken") for s in seen] == [None, "page-2"] and all(s["currencyCode"] == "USD" and s["key"] == "test-key" for s in seen)
    _check_refreshed(table, "2026-11-21")


# ------------------------------------------------------------------- report


MAXTEXT = REPO / "tests" / "data" / "maxtext"


def test_report_shows_the_cost_of_the_measured_time(tmp_path: Path):
    from workloads.observe import goodput, metrics
    from workloads.observe.report import measured_seconds

    log_path = MAXTEXT / "tiny_cpu.log"
    text = log_path.read_text()
    seconds, how = measured_seconds(metrics.load(text, None), goodput.from_log(text))
    assert seconds > 0 and how.startswith("log span")
    proc = cli("workloads", "report", str(log_path), "--pool", "v5e-16", "--out", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "rep" / "summary.json").read_text())
    cost = doc["cost"]
    assert cost["basis"].startswith("measured") and cost["hours"] == pytest.approx(seconds / 3600, abs=1e-4)
    chips = cost["chips"]
    for mode in ("on-demand", "spot"):
        assert cost["by_mode"][mode]["usd"] == pytest.approx(round(chips * seconds / 3600 * table_rate("v5e", "us-west4", mode), 2))
    md = (tmp_path / "rep" / "report.md").read_text()
    section = md.split("## Cost", 1)[1].split("![", 1)[0]
    assert "not live" in section and f"| spot (the pool's) | {pricing.usd(cost['by_mode']['spot']['usd'])} |" in section
    assert f"{TABLE.sources['skypilot-catalog'].date} (skypilot-catalog)" in section and "| flex-start | " in section and "up to 53% off on-demand" in section
    assert "<- the pool's" in proc.stdout


def test_report_without_hardware_says_what_cost_needs(tmp_path: Path):
    proc = cli("workloads", "report", str(MAXTEXT / "tiny_cpu.log"), "--out", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    assert "cost: needs the hardware (--pool or --shape)" in proc.stdout
    assert "cost" not in json.loads((tmp_path / "rep" / "summary.json").read_text())


def test_measured_time_without_timed_lines_is_the_sum_of_step_times():
    from workloads.observe import goodput, metrics
    from workloads.observe.report import measured_seconds

    log = metrics.load(None, (MAXTEXT / "tiny_cpu.metrics.jsonl").read_text())
    seconds, how = measured_seconds(log, goodput.from_log(""))
    assert how == "sum of step times"
    assert seconds == pytest.approx(sum(s.seconds for s in log.steps if s.seconds is not None))


@pytest.mark.synth
def test_synth_summary_shows_pool_cost_with_the_price_date(tmp_path: Path):
    from infra.spec import load_spec

    proc = cli("infra", "synth", "--out", str(tmp_path / "j"), "--summary", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cost"] == json.loads(json.dumps(pricing.costs_document(load_spec(EXAMPLES / "default.yaml"))))
    text = cli("infra", "synth", "--out", str(tmp_path / "t"), "--summary")
    assert text.returncode == 0, text.stderr
    table = text.stdout.split("TPU cost (USD)", 1)[1]
    rate = table_rate("v5e", "us-west4", "spot")
    assert pricing.usd(32 * rate) in table and pricing.usd(32 * rate * 24) in table  # per hour, and idle per day
    assert f"list price as of {TABLE.sources['skypilot-catalog'].date}" in table and "not live" in table


def test_prices_show_lists_the_region_with_dates_and_refuses_a_region_without_any(capsys):
    rc, out, err = infra_in_process(capsys, "prices", "show", "--output", "json")
    assert rc == 0, err
    doc = json.loads(out)
    [v5e] = [r for r in doc["rates"] if r["generation"] == "v5e"]
    assert doc["region"] == "us-west4" and v5e["spot"]["usd_per_chip_hour"] == table_rate("v5e", "us-west4", "spot")
    assert v5e["spot"]["price_as_of"] == TABLE.sources["skypilot-catalog"].date and v5e["reservation"] is None
    assert v5e["flex-start"]["usd_per_chip_hour_low"] == pytest.approx(v5e["on-demand"]["usd_per_chip_hour"] * 0.47)
    rc, out, err = infra_in_process(capsys, "prices", "show", "--region", "europe-west2")
    assert rc == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith("error: --region: no TPU prices for 'europe-west2'")


def test_a_rate_field_per_capacity_mode():
    """The rate fields are written out (pydantic models); they must stay the capacity modes, in their order."""
    from infra.price_table import Rates
    from toolkit.names import CapacityMode

    assert [f.alias or name for name, f in Rates.model_fields.items()] == list(CapacityMode) == list(price_table.MODES)


@pytest.mark.parametrize("name", [p.stem for p in sorted(EXAMPLES.glob("*.yaml"))])
def test_every_example_spec_gets_a_cost_line_for_every_pool_option(name):
    """A figure, a documented range, or a dated public source saying there is none: never a bare gap."""
    from infra.spec import load_spec

    spec = load_spec(EXAMPLES / f"{name}.yaml")
    doc = pricing.costs_document(spec)
    lines = pricing.cost_lines(doc)
    assert len(doc["pools"]) == sum(len(p.capacity_options()) for p in spec.tpu_pools) >= 1
    for p, line in zip(doc["pools"], lines, strict=False):
        assert p["pool"] in line
        if p["usd_per_hour"] is None:
            assert "no public list price" in p["no_price"] and "checked 20" in p["no_price"], line  # tpu7x: where it was checked
        else:
            assert "/h while running" in line and p["price_as_of"]
