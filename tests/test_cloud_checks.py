"""Checks before a cloud call and `pools status`, against a loopback server playing Google's APIs.

The server answers on 127.0.0.1 in the documented response shapes: Compute Engine
``machineTypes.get``, ``regions.get`` (``quotas[]``: metric, limit, usage) and
``reservations.get`` (int64 fields as JSON strings, ``zone`` as a URL), Cloud Quotas
``quotaInfos.get`` (``metric``, ``dimensionsInfos[].details.value``), Cloud Monitoring
``timeSeries.list`` (``metric.labels.quota_metric``, points newest first, ``int64Value`` as
a string), GKE ``nodePools.list`` (``status``, ``statusMessage``), and Google's error body
on a 404. The CLI runs as a user runs it, with ``--endpoint`` pointing every API at the server.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import cloud_checks
from infra.gcp_api import TOKEN_ENV_VAR
from infra.spec import load_spec
from tests.support import cli, example_doc

PROJECT = "my-tpu-project"
COMPUTE = f"/compute/v1/projects/{PROJECT}"
QUOTAS = f"/v1/projects/{PROJECT}/locations/global/services/compute.googleapis.com/quotaInfos"


def machine_type(zone: str, name: str) -> dict[str, Any]:
    return {"kind": "compute#machineType", "name": name, "zone": zone, "guestCpus": 180, "memoryMb": 737280}


FAMILY_METRIC = "compute.googleapis.com/tpus_per_tpu_family"
V6E_SPOT_METRIC = "compute.googleapis.com/preemptible_tpu_v6e"
MONITORING = f"/v3/projects/{PROJECT}/timeSeries"
NODE_POOLS = f"/v1/projects/{PROJECT}/locations/us-east5/clusters/fallback/nodePools"


def quota_info(quota_id: str, entries: list[tuple[dict[str, str], int]], metric: str = FAMILY_METRIC) -> dict[str, Any]:
    return {
        "name": f"projects/{PROJECT}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        "quotaId": quota_id,
        "metric": metric,
        "service": "compute.googleapis.com",
        "dimensions": ["region"],
        "dimensionsInfos": [{"dimensions": dims, "details": {"value": str(v)}, "applicableLocations": [dims.get("region", "global")]} for dims, v in entries],
    }


def series(quota_metric: str, *values: int, region: str = "us-east5", **labels: str) -> dict[str, Any]:
    """One consumer_quota allocation-usage time series, points newest first."""
    return {
        "metric": {"type": "serviceruntime.googleapis.com/quota/allocation/usage", "labels": {"quota_metric": quota_metric, **labels}},
        "resource": {"type": "consumer_quota", "labels": {"resource_container": PROJECT, "location": region, "service": "compute.googleapis.com"}},
        "metricKind": "GAUGE",
        "valueType": "INT64",
        "points": [
            {"interval": {"startTime": f"2026-11-27T0{k}:00:00Z", "endTime": f"2026-11-27T0{k}:00:00Z"}, "value": {"int64Value": str(v)}}
            for k, v in enumerate(values)
        ],
    }


def reservation(name: str, zone: str, *, machine: str = "ct6e-standard-4t", count: int = 8, in_use: int = 0, status: str = "READY") -> dict[str, Any]:
    return {
        "kind": "compute#reservation",
        "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}",
        "specificReservationRequired": True,
        "specificReservation": {"count": str(count), "inUseCount": str(in_use), "instanceProperties": {"machineType": machine}},
        "status": status,
    }


def healthy_fallback_project() -> dict[str, Any]:
    """Answers for examples/fallback.yaml (2 x v6e-16 = 32 chips per option, in us-east5-b) where everything fits."""
    return {
        f"{COMPUTE}/zones/us-east5-b/machineTypes/ct6e-standard-4t": machine_type("us-east5-b", "ct6e-standard-4t"),
        f"{QUOTAS}/TPUS-PER-TPU-FAMILY-per-project-region": quota_info(
            "TPUS-PER-TPU-FAMILY-per-project-region", [({"region": "us-east5", "tpu_family": "CT6E"}, 64), ({}, 0)]
        ),
        f"{QUOTAS}/PREEMPTIBLE-TPU-V6E-per-project-region": quota_info(
            "PREEMPTIBLE-TPU-V6E-per-project-region", [({"region": "us-east5"}, 64)], metric=V6E_SPOT_METRIC
        ),
        # 16 on-demand v6e chips in use elsewhere in the project (newest point first), none preemptible
        MONITORING: {"timeSeries": [series(FAMILY_METRIC, 16, 8, tpu_family="CT6E"), series(FAMILY_METRIC, 500, tpu_family="CT5P")]},
        NODE_POOLS: {"nodePools": []},
        f"{COMPUTE}/zones/us-east5-b/reservations/trillium-res-1": reservation("trillium-res-1", "us-east5-b"),
        f"{COMPUTE}/zones/us-east5-b/reservations/trillium-res-2": reservation("trillium-res-2", "us-east5-b", count=8, in_use=6, status="DEGRADED"),
    }


class FakeGoogle:
    """A loopback HTTP server: path -> JSON body (404 with Google's error body otherwise); it records each request."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes, self.seen = routes, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                fake.seen.append((path, self.headers.get("Authorization")))
                body, status = fake.routes.get(path), 200
                if body is None:
                    body, status = {"error": {"code": 404, "message": f"The resource '{path}' was not found", "status": "NOT_FOUND"}}, 404
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def google() -> Iterator[FakeGoogle]:
    fake = FakeGoogle(healthy_fallback_project())
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV_VAR, "test-token")


def infra(*args: str) -> Any:
    return cli("infra", *args)


def spec_file(tmp_path: Path, doc: dict[str, Any]) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


# ------------------------------------------------------------------ requests


def test_dry_run_prints_every_request_and_calls_nothing(google: FakeGoogle):
    proc = infra("check", "--spec", "examples/fallback.yaml", "--dry-run", "--endpoint", google.url)
    assert proc.returncode == 0, proc.stderr
    expected = [r.render(google.url) for r in cloud_checks.requests(load_spec("examples/fallback.yaml"))]
    got = proc.stdout.splitlines()
    # the usage window ends at the current minute: the same GET, up to its interval
    assert [_no_interval(ln) for ln in got] == [_no_interval(ln) for ln in expected]
    assert {line.split()[1].removeprefix(google.url).split("?")[0] for line in expected} == set(healthy_fallback_project())
    usage = next(ln for ln in got if "/timeSeries?" in ln)
    assert "serviceruntime.googleapis.com%2Fquota%2Fallocation%2Fusage" in usage and "interval.startTime=" in usage and "interval.endTime=" in usage
    assert google.seen == []


def _no_interval(line: str) -> str:
    import re

    return re.sub(r"interval\.(start|end)Time=[^&\s]+", "interval", line)


# -------------------------------------------------------------------- checks


def test_a_project_where_the_pools_fit(google: FakeGoogle):
    proc = infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    found = {(f["check"], f["subject"]): f for f in json.loads(proc.stdout)["findings"]}
    assert found[("machine-type", "ct6e-standard-4t (v6e) in us-east5-b")]["ok"]
    family = found[("quota", "TPUS-PER-TPU-FAMILY-per-project-region (tpu_family=CT6E) in us-east5")]
    assert family["ok"] and "64" in family["detail"] and "32" in family["detail"]  # the region's entry, not the default 0
    assert "16 in use, 48 free" in family["detail"]  # CT6E's latest point, not CT5P's, not an older one
    spot = found[("quota", "PREEMPTIBLE-TPU-V6E-per-project-region in us-east5")]
    assert spot["ok"] and "0 in use, 64 free" in spot["detail"] and "field reports" in spot["detail"]  # unverified id: said so
    res1, res2 = found[("reservation", "reservation trillium-res-1")], found[("reservation", "reservation trillium-res-2")]
    assert res1["ok"] and "8 VMs free" in res1["detail"]
    # The fallback reservation is reported with its health and free count (DEGRADED: a reservation under maintenance may not allocate, even with hosts free), not refused: deploy may not need it.
    assert not res2["ok"] and not res2["refuses"] and "DEGRADED" in res2["detail"] and "2 VMs free" in res2["detail"]
    assert {auth for _, auth in google.seen} == {"Bearer test-token"}


def _refused(proc: Any, field: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and " — " in lines[0], proc.stderr
    return lines[0]


def test_a_zone_without_the_generation_is_refused(google: FakeGoogle, tmp_path: Path):
    doc = copy.deepcopy(example_doc("fallback"))
    doc |= {"region": "europe-west1", "zones": ["europe-west1-b"]}
    doc["tpu_pools"][0] |= {"zone": "europe-west1-b", "capacity": "on-demand"}
    line = _refused(infra("check", "--spec", spec_file(tmp_path, doc), "--endpoint", google.url), "tpu_pools[0].zone")
    assert "europe-west1-b does not offer ct6e-standard-4t" in line and "v6e" in line


def test_a_quota_that_does_not_cover_the_pools_is_refused_and_nothing_applied(google: FakeGoogle, tmp_path: Path):
    google.routes[f"{QUOTAS}/PREEMPTIBLE-TPU-V6E-per-project-region"] = quota_info("PREEMPTIBLE-TPU-V6E-per-project-region", [({"region": "us-east5"}, 16)])
    out = tmp_path / "out"
    proc = infra("deploy", "--spec", "examples/fallback.yaml", "--out", str(out), "--yes", "--endpoint", google.url)
    line = _refused(proc, "tpu_pools[0].slices")
    assert "limit is 16 chips" in line and "32" in line and "PREEMPTIBLE-TPU-V6E-per-project-region" in line
    assert not out.exists()  # refused before the synth: nothing written, terraform never run


def test_a_missing_reservation_is_refused(google: FakeGoogle):
    del google.routes[f"{COMPUTE}/zones/us-east5-b/reservations/trillium-res-2"]
    line = _refused(infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url), "tpu_pools[0].capacity[1].name")
    assert "trillium-res-2" in line and "does not exist" in line


def test_a_reservation_of_another_shape_or_zone_is_refused(google: FakeGoogle):
    google.routes[f"{COMPUTE}/zones/us-east5-b/reservations/trillium-res-1"] = reservation("trillium-res-1", "us-east5-b", machine="ct5lp-hightpu-4t")
    line = _refused(infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url), "tpu_pools[0].capacity[0].name")
    assert "ct5lp-hightpu-4t" in line and "ct6e-standard-4t" in line
    google.routes[f"{COMPUTE}/zones/us-east5-b/reservations/trillium-res-1"] = reservation("trillium-res-1", "us-east5-a")
    line = _refused(infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url), "tpu_pools[0].capacity[0].zone")
    assert "us-east5-a" in line


def test_a_tpu_reservation_counts_hosts():
    spec = load_spec("examples/v6e-reservation.yaml")  # 2 x v6e 4x4: 8 VMs
    agg = {"name": "trillium-res-1", "zone": "us-east5-b", "status": "READY", "aggregateReservation": {"hostCount": "10", "inUseHostCount": "4"}}
    (f,) = cloud_checks.check_reservations(spec, lambda req: agg)
    assert not f.ok and "6 VMs free" in f.detail and "need 8" in f.detail  # reported: the node pool create would fail
    chips = {"name": "trillium-res-1", "zone": "us-east5-b", "status": "READY", "aggregateReservation": {
        "reservedResources": [{"accelerator": {"acceleratorCount": 64, "acceleratorType": "ct6e"}}],
        "inUseResources": [{"accelerator": {"acceleratorCount": 16, "acceleratorType": "ct6e"}}],
    }}  # fmt: skip
    (f,) = cloud_checks.check_reservations(spec, lambda req: chips)
    assert f.ok and "12 VMs free" in f.detail  # (64 - 16) chips / 4 per VM


def test_an_unknown_quota_id_is_reported_not_refused():
    spec = load_spec("examples/fallback.yaml")
    findings = [f for f in cloud_checks.check_quotas(spec, lambda req: None) if "reservation" not in f.subject]
    assert findings and all(not f.ok and not f.refuses and "not checked" in f.detail for f in findings)


# ------------------------------------------------------------ quota by usage


def test_a_project_at_its_quota_is_refused_naming_the_pool_and_the_fix(google: FakeGoogle, tmp_path: Path):
    # The preemptible limit covers the pools (64 >= 32), but 48 chips are in use elsewhere: 16 free.
    google.routes[MONITORING] = {"timeSeries": [series(V6E_SPOT_METRIC, 48)]}
    out = tmp_path / "out"
    line = _refused(infra("deploy", "--spec", "examples/fallback.yaml", "--out", str(out), "--yes", "--endpoint", google.url), "tpu_pools[0].slices")
    assert "PREEMPTIBLE-TPU-V6E-per-project-region" in line and "limit 64 chips, 48 in use, 16 free" in line and "v6e-16 (32 chips)" in line
    assert "free 16 chips" in line and "request 80" in line
    assert not out.exists()


def test_v5e_usage_comes_from_the_regions_quotas(google: FakeGoogle):
    spec = load_spec("examples/default.yaml")  # v5litepod-16 x 2 on spot: 32 chips
    quota = "PREEMPTIBLE-TPU-LITE-PODSLICE-V5-per-project-region"
    region = {"kind": "compute#region", "name": spec.region, "quotas": [
        {"metric": "PREEMPTIBLE_TPU_LITE_PODSLICE_V5", "limit": 64.0, "usage": 40.0},
        {"metric": "TPU_LITE_PODSLICE_V5", "limit": 512.0, "usage": 0.0},
    ]}  # fmt: skip
    answers = {
        cloud_checks.tq.quota_info_request(spec.project, quota): quota_info(quota, [({"region": spec.region}, 64)], metric="compute.googleapis.com/x"),
        cloud_checks.tq.region_request(spec.project, spec.region): region,
    }
    (f,) = cloud_checks.check_quotas(spec, answers.get)
    assert f.refuses and "64 chips, 40 in use, 24 free" in f.detail and f.field == "tpu_pools[0].slices" and "field reports" not in f.detail
    region["quotas"][0]["usage"] = 8.0
    (f,) = cloud_checks.check_quotas(spec, answers.get)
    assert f.ok and "56 free" in f.detail
    # No Monitoring read for a quota Compute Engine lists itself
    assert not any(r.api == "monitoring" for r in cloud_checks.requests(spec))


def test_usage_that_cannot_be_read_is_one_warning_line(google: FakeGoogle):
    # The family quota's series do not say which family they count: CT6E's use cannot be told from the others'.
    google.routes[MONITORING] = {"timeSeries": [series(FAMILY_METRIC, 500)]}
    proc = infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stdout.splitlines() if ln.startswith("warning") and "TPUS-PER-TPU-FAMILY" in ln]
    assert len(warned) == 1 and "usage cannot be read" in warned[0] and "do not say which tpu_family" in warned[0]


def test_node_pools_that_exist_are_not_counted_twice(google: FakeGoogle):
    """A deployed environment's own nodes are in the usage: only node pools still to create must fit in what is free."""
    spec = load_spec("examples/fallback.yaml")
    google.routes[MONITORING] = {"timeSeries": [series(V6E_SPOT_METRIC, 48)]}  # 48 in use: the pool's own 32 and 16 elsewhere
    google.routes[NODE_POOLS] = {"nodePools": [{"name": n, "status": "RUNNING"} for n in spec.tpu_pools[0].node_pool_names()]}
    proc = infra("check", "--spec", "examples/fallback.yaml", "--endpoint", google.url, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    spot = next(f for f in json.loads(proc.stdout)["findings"] if f["subject"].startswith("PREEMPTIBLE-TPU-V6E"))
    assert spot["ok"] and "48 in use" in spot["detail"] and "32 of them in node pools that exist already" in spot["detail"]


def test_every_generation_and_mode_has_a_quota_or_says_it_has_none():
    from infra.catalog import GENERATIONS
    from infra.tpu_quotas import MODES, QUOTAS, Quota
    from toolkit.names import CapacityMode

    assert set(MODES) == {m.value for m in CapacityMode}
    assert set(QUOTAS) == set(GENERATIONS)
    for gen, modes in QUOTAS.items():
        assert set(modes) == set(MODES), gen
        assert modes["reservation"] == "reservation"
        assert all(q is None or isinstance(q, Quota) for m, q in modes.items() if m != "reservation"), gen


@pytest.mark.parametrize("mode", ["spot", "flex-start"])
def test_a_mode_without_a_known_quota_id_says_so(tmp_path: Path, mode: str):
    doc = copy.deepcopy(example_doc("tpu7x"))
    doc["tpu_pools"][0]["capacity"] = mode
    spec_path = spec_file(tmp_path, doc)
    proc = infra("check", "--spec", spec_path, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    findings = cloud_checks.check_quotas(load_spec(spec_path), lambda req: None)
    line = next(f.line() for f in findings if "tpu7x" in f.subject)
    assert line.startswith("warning") and f"no Cloud Quotas id is known for tpu7x {mode}" in line and "by hand" in line


def test_a_reservation_option_says_what_is_checked_instead():
    spec = load_spec("examples/v6e-reservation.yaml")
    (f,) = cloud_checks.check_quotas(spec, lambda req: None)
    assert f.ok and "free count is checked" in f.detail and "trillium-res-1" in f.subject


# ----------------------------------------------------------------- pools status


def node_pools(statuses: dict[str, tuple[str, str]]) -> dict[str, Any]:
    return {"nodePools": [{"name": n, "status": s, "statusMessage": m, "config": {"machineType": "ct6e-standard-4t"}} for n, (s, m) in statuses.items()]}


def test_pools_status_reports_provisioning_and_error_with_the_way_back(google: FakeGoogle):
    spec = load_spec("examples/fallback.yaml")
    names = spec.tpu_pools[0].node_pool_names()  # res-0, res-1, od-0, od-1, spot-0, spot-1
    answers = dict.fromkeys(names[2:], ("RUNNING", ""))
    answers[names[0]] = ("PROVISIONING", "")
    answers[names[1]] = ("ERROR", "Insufficient capacity: RESOURCE_EXHAUSTED")
    google.routes[f"/v1/projects/{PROJECT}/locations/us-east5/clusters/fallback/nodePools"] = node_pools(answers)
    proc = infra("pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url)
    assert proc.returncode == 1, proc.stderr  # not every pool is RUNNING
    lines = {ln.split()[0]: ln for ln in proc.stdout.splitlines()}
    assert set(lines) == set(names)
    assert "PROVISIONING" in lines[names[0]] and "cannot be cancelled" in lines[names[0]]
    assert "ERROR" in lines[names[1]] and "RESOURCE_EXHAUSTED" in lines[names[1]]
    assert "pools delete-tpu --pool v6e-16" in lines[names[1]] and "infra deploy" in lines[names[1]]
    assert all(" — " not in lines[n] for n in names[2:])


def test_pools_status_names_a_node_pool_the_cluster_lacks_and_exits_0_when_all_run(google: FakeGoogle):
    spec = load_spec("examples/fallback.yaml")
    names = spec.tpu_pools[0].node_pool_names()
    path = f"/v1/projects/{PROJECT}/locations/us-east5/clusters/fallback/nodePools"
    google.routes[path] = node_pools(dict.fromkeys(names[1:], ("RUNNING", "")))
    proc = infra("pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url, "-o", "json")
    rows = {r["node_pool"]: r for r in json.loads(proc.stdout)["node_pools"]}
    assert proc.returncode == 1 and rows[names[0]]["status"] == "MISSING" and "infra deploy" in rows[names[0]]["recovery"]
    google.routes[path] = node_pools(dict.fromkeys(names, ("RUNNING", "")))
    assert infra("pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url).returncode == 0


def test_pools_status_dry_run_and_a_missing_cluster(google: FakeGoogle):
    proc = infra("pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url, "--dry-run")
    assert proc.stdout.strip().startswith(f"GET {google.url}/v1/projects/{PROJECT}/locations/us-east5/clusters/fallback/nodePools")
    assert google.seen == []
    del google.routes[NODE_POOLS]  # not deployed yet
    line = _refused(infra("pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url), "cluster.name")
    assert "python -m infra deploy" in line
