"""Ironwood's pool and cluster settings: the ultranet VM, gVNIC, the slice controller add-on, dynamic slicing's pools.

Each is checked where it is decided: the catalog's machine choice, the spec's defaults and floors,
the synthesized Terraform (typed by the pinned provider's bindings), and ``infra check`` against a
loopback server answering in Compute Engine's documented shapes (a zone without the ultranet VM,
a missing PROVISION_ONLY workload policy).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from infra import catalog
from infra.gke_features import DYNAMIC_SLICING_MIN_GKE_VERSION, SLICE_CONTROLLER_MIN_GKE_VERSION
from infra.spec import ironwood, load_spec, parse_spec
from tests.support import cli, example_doc
from tests.test_cloud_checks import COMPUTE, FakeGoogle, machine_type, token  # noqa: F401  (token: the fixture)
from toolkit.errors import CatalogError, SpecError


def test_tpu7x_offers_the_ultranet_vm_for_multi_host_slices_only():
    assert catalog.machine_choices("tpu7x") == ("tpu7x-standard-4t", "tpu7x-ultranet-4t")
    s = catalog.with_machine(catalog.shape("tpu7x", "4x4x8"), "tpu7x-ultranet-4t")
    assert (s.machine_type, s.nodes, s.chips, s.key) == ("tpu7x-ultranet-4t", 32, 128, "tpu7x-4x4x8")
    with pytest.raises(CatalogError, match="single host"):
        catalog.with_machine(catalog.shape("tpu7x", "2x2x1"), "tpu7x-ultranet-4t")
    with pytest.raises(CatalogError, match="v6e multi-host slices run on ct6e-standard-4t"):
        catalog.with_machine(catalog.shape("v6e", "4x4"), "tpu7x-ultranet-4t")
    assert catalog.machine_size("tpu7x-ultranet-4t").vcpu == catalog.machine_size("tpu7x-standard-4t").vcpu


def test_defaults_gvnic_on_tpu7x_and_the_slice_controller_on_multislice_tpu7x():
    ms, single, v6e = load_spec("examples/tpu7x-multislice.yaml"), load_spec("examples/tpu7x.yaml"), load_spec("examples/v6e-reservation.yaml")
    assert ms.tpu_pools[0].gvnic_on and single.tpu_pools[0].gvnic_on and not v6e.tpu_pools[0].gvnic_on
    assert ironwood.slice_controller_on(ms) and not ironwood.slice_controller_on(single) and not ironwood.slice_controller_on(v6e)
    # The add-on's floor joins the spec's: the cluster's min_master_version follows it.
    assert ms.min_master_version == SLICE_CONTROLLER_MIN_GKE_VERSION
    assert single.min_master_version == catalog.GENERATIONS["tpu7x"].min_gke_version


def test_a_min_version_below_the_slice_controller_floor_is_refused():
    doc = copy.deepcopy(example_doc("tpu7x-multislice"))
    doc["cluster"]["min_version"] = "1.34.1-gke.1000"
    with pytest.raises(SpecError, match=r"cluster\.min_version.*slice controller"):
        parse_spec(doc)
    doc["cluster"]["slice_controller"] = False  # off on purpose: no floor, no add-on
    spec = parse_spec(doc)
    assert not ironwood.slice_controller_on(spec)


def test_dynamic_slicing_example_resolves_sub_blocks_and_its_floor():
    spec = load_spec("examples/tpu7x-dynamic-slicing.yaml")
    pool = spec.tpu_pools[0]
    assert pool.dynamic_slicing and pool.shape.topology == "4x4x4" and pool.shape.machine_type == "tpu7x-ultranet-4t"
    assert (DYNAMIC_SLICING_MIN_GKE_VERSION, "the first GKE version with dynamic slicing (tpu_pools[0].dynamic_slicing)") in spec.gke_floors()
    assert spec.workload_policy_name(pool) == ironwood.provision_only_policy("ironwood-ds") == "ironwood-ds-tpu7x-4x4x4-po"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"capacity": "on-demand"}, "tpu_pools[0].capacity.mode"),
        ({"capacity": {"mode": "flex-start"}}, "tpu_pools[0].capacity.mode"),
        ({"generation": "v5p", "topology": "4x4x4"}, "tpu_pools[0].dynamic_slicing"),
        ({"autoscaling": True}, "tpu_pools[0].autoscaling"),
    ],
)
def test_dynamic_slicing_refuses_what_the_capacity_or_shape_cannot_do(change: dict, field: str):
    doc = copy.deepcopy(example_doc("tpu7x-dynamic-slicing"))
    doc["tpu_pools"][0] |= change
    doc["tpu_pools"][0].pop("machine_type") if change.get("generation") == "v5p" else None
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.field == field, str(e.value)


def test_dynamic_slicing_needs_the_rapid_channel():
    doc = copy.deepcopy(example_doc("tpu7x-dynamic-slicing"))
    doc["cluster"]["release_channel"] = "REGULAR"
    with pytest.raises(SpecError, match=r"Rapid channel"):
        parse_spec(doc)


def _synth(tmp_path: Path, spec: str) -> dict:
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", spec, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(next(out.glob("stacks/*/cdk.tf.json")).read_text())


def test_synth_writes_gvnic_the_ultranet_vm_the_add_on_and_no_provision_only_policy(tmp_path: Path):
    doc = _synth(tmp_path, "examples/tpu7x-dynamic-slicing.yaml")
    cluster = next(iter(doc["resource"]["google_container_cluster"].values()))
    assert cluster["addons_config"]["slice_controller_config"] == {"enabled": True}
    assert cluster["min_master_version"] == DYNAMIC_SLICING_MIN_GKE_VERSION
    tpu = [np for np in doc["resource"]["google_container_node_pool"].values() if np["name"].startswith("tpu7x-cubes-")]
    assert len(tpu) == 4
    for np in tpu:
        assert np["node_config"]["machine_type"] == "tpu7x-ultranet-4t" and np["node_config"]["gvnic"] == {"enabled": True}
        assert np["placement_policy"]["policy_name"] == "ironwood-ds-tpu7x-4x4x4-po"
        assert np["node_config"]["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"
    # The pinned provider has no accelerator_topology_mode: the stack makes no policy it cannot make right.
    assert "google_compute_resource_policy" not in doc["resource"]


def test_synth_leaves_gvnic_and_the_add_on_out_where_they_are_off(tmp_path: Path):
    doc = _synth(tmp_path, "examples/v6e-reservation.yaml")
    cluster = next(iter(doc["resource"]["google_container_cluster"].values()))
    assert "slice_controller_config" not in cluster["addons_config"]
    assert all("gvnic" not in np["node_config"] for np in doc["resource"]["google_container_node_pool"].values())


# ------------------------------------------------------------------ infra check


def _spec_file(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def _ultranet_spec(tmp_path: Path) -> str:
    doc = copy.deepcopy(example_doc("tpu7x"))
    doc["tpu_pools"][0]["machine_type"] = "tpu7x-ultranet-4t"
    return _spec_file(tmp_path, doc)


@pytest.fixture
def google():
    fake = FakeGoogle({})
    yield fake
    fake.close()


def test_ultranet_in_a_zone_that_lacks_it_is_refused_naming_machine_type(google: FakeGoogle, tmp_path: Path):
    # The zone has tpu7x (standard-4t) but not the ultranet VM.
    google.routes[f"{COMPUTE}/zones/us-central1-c/machineTypes/tpu7x-standard-4t"] = machine_type("us-central1-c", "tpu7x-standard-4t")
    out = tmp_path / "out"
    proc = cli("infra", "deploy", "--spec", _ultranet_spec(tmp_path), "--out", str(out), "--yes", "--endpoint", google.url)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = proc.stderr.strip()
    assert line.startswith("error: tpu_pools[0].machine_type: tpu7x-ultranet-4t (tpu7x) in us-central1-c: us-central1-c does not offer tpu7x-ultranet-4t")
    assert "remove machine_type" in line and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()  # refused before the synth: nothing written


def test_ultranet_in_a_zone_that_has_it_is_ok(google: FakeGoogle, tmp_path: Path):
    google.routes[f"{COMPUTE}/zones/us-central1-c/machineTypes/tpu7x-ultranet-4t"] = machine_type("us-central1-c", "tpu7x-ultranet-4t")
    proc = cli("infra", "check", "--spec", _ultranet_spec(tmp_path), "--endpoint", google.url, "-o", "json")
    found = {(f["check"], f["subject"]): f for f in json.loads(proc.stdout)["findings"]}
    assert found[("machine-type", "tpu7x-ultranet-4t (tpu7x) in us-central1-c")]["ok"]


def test_a_missing_provision_only_policy_is_refused_with_the_command_that_makes_it(google: FakeGoogle):
    google.routes[f"{COMPUTE}/zones/us-central1-c/machineTypes/tpu7x-ultranet-4t"] = machine_type("us-central1-c", "tpu7x-ultranet-4t")
    google.routes[f"{COMPUTE}/zones/us-central1-c/reservations/ironwood-all-capacity"] = {
        "name": "ironwood-all-capacity",
        "zone": "https://www.googleapis.com/compute/v1/projects/my-tpu-project/zones/us-central1-c",
        "aggregateReservation": {"hostCount": "64", "inUseHostCount": "0"},
        "status": "READY",
    }
    proc = cli("infra", "check", "--spec", "examples/tpu7x-dynamic-slicing.yaml", "--endpoint", google.url)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: tpu_pools[0].dynamic_slicing: workload policy ironwood-ds-tpu7x-4x4x4-po: does not exist")
    assert "--accelerator-topology-mode=PROVISION_ONLY" in proc.stderr
    policy = f"{COMPUTE}/regions/us-central1/resourcePolicies/ironwood-ds-tpu7x-4x4x4-po"
    google.routes[policy] = {"name": "ironwood-ds-tpu7x-4x4x4-po", "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopologyMode": "AUTO_CONNECT"}}
    proc = cli("infra", "check", "--spec", "examples/tpu7x-dynamic-slicing.yaml", "--endpoint", google.url)
    assert proc.returncode == 2 and "not PROVISION_ONLY" in proc.stderr
    google.routes[policy]["workloadPolicy"]["acceleratorTopologyMode"] = "PROVISION_ONLY"
    proc = cli("infra", "check", "--spec", "examples/tpu7x-dynamic-slicing.yaml", "--endpoint", google.url)
    assert "PROVISION_ONLY" in proc.stdout, proc.stderr
