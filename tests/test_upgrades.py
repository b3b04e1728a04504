"""No upgrade under a run: maintenance exclusions in the spec (GKE's limits at load), in the cluster's policy, the TPU
pools' upgrade settings, and ``infra exclude-upgrades`` against a loopback server answering as GKE's API does."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.gcp_api import TOKEN_ENV_VAR
from infra.gke_features import MAX_EXCLUSION_DAYS, MAX_EXCLUSIONS
from infra.spec import parse_spec
from tests.support import cli, example_doc
from tests.support.fake_google import FakeGoogle
from toolkit.errors import SpecError

RFC = "%Y-%m-%dT%H:%M:%SZ"
CLUSTER_PATH = "/v1/projects/my-tpu-project/locations/us-west4/clusters/tpu-dev"


def _at(days: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).strftime(RFC)


def _with_exclusions(*exclusions: dict[str, str], base: str = "default") -> dict[str, Any]:
    doc = example_doc(base)
    doc["cluster"]["maintenance_exclusions"] = list(exclusions)
    return doc


def _refusal(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    return e.value


# ------------------------------------------------------------------ the spec


def test_a_campaign_exclusion_in_the_future_loads():
    spec = parse_spec(_with_exclusions({"name": "campaign-a", "start_time": _at(0), "end_time": _at(7)}))
    (e,) = spec.cluster.maintenance_exclusions
    assert e.scope == "no_minor_or_node_upgrades"


def test_an_exclusion_that_has_ended_is_refused_naming_its_end():
    e = _refusal(_with_exclusions({"name": "old", "start_time": _at(-10), "end_time": _at(-3)}))
    assert e.field == "cluster.maintenance_exclusions[0].end_time"
    assert "has passed" in e.problem and "remove it" in e.fix


def test_an_exclusion_longer_than_the_bound_is_refused_with_the_latest_end():
    start = _at(1)
    e = _refusal(_with_exclusions({"name": "long", "start_time": start, "end_time": _at(1 + MAX_EXCLUSION_DAYS + 1)}))
    assert e.field == "cluster.maintenance_exclusions[0].end_time"
    latest = (dt.datetime.strptime(start, RFC).replace(tzinfo=dt.UTC) + dt.timedelta(days=MAX_EXCLUSION_DAYS)).strftime(RFC)
    assert f"to {MAX_EXCLUSION_DAYS}" in e.problem and latest in e.fix


def test_the_longest_exclusion_gke_allows_loads():
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=1)
    end = start + dt.timedelta(days=MAX_EXCLUSION_DAYS)
    parse_spec(_with_exclusions({"name": "longest", "start_time": start.strftime(RFC), "end_time": end.strftime(RFC)}))


def test_an_exclusion_ending_before_it_starts_is_refused():
    e = _refusal(_with_exclusions({"name": "backwards", "start_time": _at(5), "end_time": _at(4)}))
    assert e.field == "cluster.maintenance_exclusions[0].end_time" and "not after" in e.problem


def test_more_exclusions_than_gke_holds_are_refused():
    many = [{"name": f"c-{i}", "start_time": _at(1), "end_time": _at(2)} for i in range(MAX_EXCLUSIONS + 1)]
    e = _refusal(_with_exclusions(*many))
    assert e.field == "cluster.maintenance_exclusions" and str(MAX_EXCLUSIONS) in e.problem


def test_two_exclusions_of_one_name_are_refused():
    e = _refusal(_with_exclusions({"name": "a", "start_time": _at(1), "end_time": _at(2)}, {"name": "a", "start_time": _at(3), "end_time": _at(4)}))
    assert e.field == "cluster.maintenance_exclusions[1].name"


def test_another_scope_is_refused_listing_the_one_there_is():
    e = _refusal(_with_exclusions({"name": "a", "start_time": _at(1), "end_time": _at(2), "scope": "no_upgrades"}))
    assert e.field == "cluster.maintenance_exclusions[0].scope" and "no_minor_or_node_upgrades" in e.fix


def test_a_bad_time_is_refused_showing_the_format():
    e = _refusal(_with_exclusions({"name": "a", "start_time": "tomorrow", "end_time": _at(2)}))
    assert e.field == "cluster.maintenance_exclusions[0].start_time" and "2026-12-01T00:00:00Z" in e.fix


def test_synth_refuses_an_ended_exclusion_in_one_line_and_writes_nothing(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_with_exclusions({"name": "old", "start_time": _at(-10), "end_time": _at(-3)})))
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", spec, "--out", out)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: cluster.maintenance_exclusions[0].end_time: ")
    assert not out.exists()


# ------------------------------------------------------------------ the stack


@pytest.mark.synth
def test_the_cluster_policy_carries_the_exclusions_and_tpu_pools_surge_without_a_surge_slice(tmp_path: Path):
    from infra.stack import synth

    start, end = _at(1), _at(8)
    doc = json.loads(synth(parse_spec(_with_exclusions({"name": "campaign-a", "start_time": start, "end_time": end}, base="flex-start")), tmp_path).read_text())
    (cluster,) = doc["resource"]["google_container_cluster"].values()
    policy = cluster["maintenance_policy"]
    assert policy["recurring_window"]["recurrence"] == "FREQ=WEEKLY;BYDAY=SA,SU"
    assert policy["maintenance_exclusion"] == [
        {"exclusion_name": "campaign-a", "start_time": start, "end_time": end, "exclusion_options": {"scope": "NO_MINOR_OR_NODE_UPGRADES"}}
    ]
    pools = [p for p in doc["resource"]["google_container_node_pool"].values() if "tpu" in json.dumps(p.get("node_config", {}).get("taint", []))]
    assert pools
    for p in pools:
        assert p["management"]["auto_upgrade"] is True  # GKE requires it on a release channel
        if p["node_config"].get("flex_start"):
            assert "upgrade_settings" not in p  # GKE's short-lived upgrades
        else:
            assert p["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


@pytest.mark.synth
def test_without_exclusions_the_policy_is_the_window_alone(tmp_path: Path):
    from infra.stack import synth

    doc = json.loads(synth(parse_spec(example_doc("default")), tmp_path).read_text())
    (cluster,) = doc["resource"]["google_container_cluster"].values()
    assert set(cluster["maintenance_policy"]) == {"recurring_window"}


# ------------------------------------------------------------------ infra exclude-upgrades


# A cluster as clusters.get returns it: a window, an exclusion someone else set, the policy's version.
LIVE_POLICY = {
    "window": {
        "recurringWindow": {"window": {"startTime": "2025-01-01T03:00:00Z", "endTime": "2025-01-01T11:00:00Z"}, "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"},
        "maintenanceExclusions": {"holidays": {"startTime": "2026-12-20T00:00:00Z", "endTime": "2027-01-03T00:00:00Z"}},
    },
    "resourceVersion": "a1b2c3",
}


@pytest.fixture
def gke() -> Iterator[FakeGoogle]:
    # setMaintenancePolicy answers an operation, as GKE does.
    fake = FakeGoogle(
        {CLUSTER_PATH: {"name": "tpu-dev", "maintenancePolicy": LIVE_POLICY}},
        post_answer={"name": "operation-1234", "operationType": "SET_MAINTENANCE_POLICY", "status": "RUNNING"},
    )
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV_VAR, "test-token")


def test_dry_run_prints_the_read_and_the_write_and_calls_nothing(gke: FakeGoogle):
    proc = cli("infra", "exclude-upgrades", "--spec", "examples/default.yaml", "--for", "72h", "--name", "campaign-a", "--dry-run", "--endpoint", gke.url)
    assert proc.returncode == 0, proc.stderr
    assert gke.seen == []
    lines = proc.stdout.splitlines()
    assert lines[0] == f"GET {gke.url}{CLUSTER_PATH}  # cluster tpu-dev's maintenance policy and its resourceVersion"
    assert lines[1].startswith(f"POST {gke.url}{CLUSTER_PATH}:setMaintenancePolicy  # ")
    body = json.loads("\n".join(lines[2:]))
    window = body["maintenancePolicy"]["window"]
    ex = window["maintenanceExclusions"]["campaign-a"]
    assert ex["maintenanceExclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES"}
    length = dt.datetime.strptime(ex["endTime"], RFC) - dt.datetime.strptime(ex["startTime"], RFC)
    assert length == dt.timedelta(hours=72)
    assert window["recurringWindow"]["recurrence"] == "FREQ=WEEKLY;BYDAY=SA,SU"  # the spec's window, kept
    # Not in the spec: the next deploy would remove it, and the command says how to keep it.
    assert "cluster.maintenance_exclusions does not list it" in proc.stderr and "  - name: campaign-a" in proc.stderr


def test_a_real_run_reads_the_policy_and_writes_it_back_with_the_exclusion_only_added(gke: FakeGoogle):
    proc = cli("infra", "exclude-upgrades", "--spec", "examples/default.yaml", "--for", "7d", "--name", "campaign-b", "--yes", "--endpoint", gke.url)
    assert proc.returncode == 0, proc.stderr
    assert [(m, path) for m, path, _ in gke.seen] == [("GET", CLUSTER_PATH), ("POST", f"{CLUSTER_PATH}:setMaintenancePolicy")]
    assert {auth for _, _, auth in gke.seen} == {"Bearer test-token"}
    ((_, body, ctype),) = gke.posts
    assert ctype == "application/json"
    sent = body["maintenancePolicy"]
    assert sent["resourceVersion"] == "a1b2c3"  # GKE refuses a write over a policy changed since the read
    assert sent["window"]["recurringWindow"] == LIVE_POLICY["window"]["recurringWindow"]
    assert set(sent["window"]["maintenanceExclusions"]) == {"holidays", "campaign-b"}  # someone else's kept
    assert proc.stdout.strip() == "tpu-dev: operation-1234"


def test_a_fleet_gets_the_exclusion_on_every_cluster(gke: FakeGoogle):
    proc = cli("infra", "exclude-upgrades", "--spec", "examples/fleet/fleet.yaml", "--for", "7d", "--dry-run", "--endpoint", gke.url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    posts = [ln for ln in lines if ln.startswith("POST ")]
    from infra.fleet import load_spec_or_fleet, members

    listed = members(load_spec_or_fleet("examples/fleet/fleet.yaml", want="fleet"))
    assert len(posts) == len(listed) == 3
    assert [ln for ln in lines if ln.startswith("== ")] == [f"== {m.label}" for m in listed]  # each member's part, as every fleet command shows it
    for m, post in zip(listed, posts, strict=True):
        assert f"/clusters/{m.cluster}:setMaintenancePolicy" in post


def test_gke_refusing_the_write_is_one_line_exit_3(gke: FakeGoogle):
    gke.refuse = (400, "The maintenance exclusion end time is after the end of support of the cluster's minor version.")
    proc = cli("infra", "exclude-upgrades", "--spec", "examples/default.yaml", "--for", "7d", "--yes", "--endpoint", gke.url)
    assert proc.returncode == 3, proc.stderr
    (line,) = proc.stderr.splitlines()[:1]
    assert line.startswith("error: GKE API (POST ") and "end of support" in line


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--for", "200d"], "--for", f"use --for {MAX_EXCLUSION_DAYS}d or less"),
        (["--for", "3d", "--start", "2020-01-01T00:00:00Z"], "--start", "has passed"),
        (["--for", "soon"], "--for", "like 72h or 7d"),
        (["--for", "0h"], "--for", "like 72h or 7d"),
        ([], "--for", "is required"),
        (["--for", "3d", "--start", "monday"], "--start", "RFC 3339"),
        (["--for", "3d", "--name", "Not_A_Name"], "--name", "lowercase"),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_nothing_is_asked(gke: FakeGoogle, args: list[str], field: str, words: str):
    proc = cli("infra", "exclude-upgrades", "--spec", "examples/default.yaml", *args, "--yes", "--endpoint", gke.url)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {field}: ") and words in line, line
    assert gke.seen == []


def test_unquoted_yaml_times_load_as_the_times_they_are(tmp_path: Path):
    """YAML reads 2030-01-01T00:00:00Z as a timestamp, not text: the spec takes it as written."""
    from infra.spec import load_spec

    text = (Path(__file__).resolve().parents[1] / "examples/default.yaml").read_text()
    start, end = _at(1), _at(3)
    text = text.replace("cluster:\n", f"cluster:\n  maintenance_exclusions:\n    - name: campaign-a\n      start_time: {start}\n      end_time: {end}\n", 1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    (e,) = load_spec(spec).cluster.maintenance_exclusions
    assert (e.start_time, e.end_time) == (start, end)
