"""Derivations in infra.spec: CIDR sizing, GKE version floor, team defaults, capacity shorthand."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.spec import FlexStart, OnDemand, Reservation, Spot, load_spec, pods_block_per_node
from tests.support import EXAMPLES, spec_from
from toolkit.errors import SpecError

BASE = {
    "project": "my-tpu-project",
    "region": "us-west4",
    "zones": ["us-west4-a"],
    "cluster": {"name": "tpu-dev"},
    "tpu_pools": [{"name": "v5e-16", "type": "v5litepod-16", "slices": 2, "capacity": "spot"}],
}


def spec_with(**changes):
    return spec_from(BASE, **changes)


@pytest.mark.parametrize("path", sorted((EXAMPLES).glob("*.yaml")), ids=lambda p: p.stem)
def test_examples_load(path):
    spec = load_spec(path)
    # One set of node pools per capacity option; a list's reservations share one (deploy tries them in turn).
    # A ComputeClass pool's slices count once: GKE makes them from one of the class's priorities at a time.
    assert spec.tpu_nodes == sum(p.slices * p.shape.nodes * (1 if p.compute_class else len(p.capacity_options())) for p in spec.tpu_pools)
    assert all(len(p.capacity_options()) == len(p.capacities) - max(0, len(p.reservation_choices) - 1) for p in spec.tpu_pools)


# ------------------------------------------------------------------ CIDRs


def test_pod_block_per_node():
    assert pods_block_per_node(15) == 32
    assert pods_block_per_node(110) == 256
    assert pods_block_per_node(16) == 32
    assert pods_block_per_node(17) == 64


def _pools(slices: int, type_: str = "v5litepod-256"):
    return [{"name": "big", "type": type_, "slices": slices}]


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=20))
def test_derived_ranges_fit_the_nodes(slices, cpu_max):
    spec = spec_with(tpu_pools=_pools(slices), cpu_pool={"max_nodes": cpu_max})
    c = spec.cidrs
    nodes = ipaddress.ip_network(c.nodes)
    pods = ipaddress.ip_network(c.pods)
    services = ipaddress.ip_network(c.services)
    assert spec.tpu_nodes == slices * 64
    assert nodes.num_addresses >= spec.total_nodes + 4
    assert pods.num_addresses >= spec.tpu_nodes * 32 + spec.cpu_nodes * 256
    # headroom 2x is honoured, and small clusters keep the floor sizes
    assert pods.num_addresses >= 2 * (spec.tpu_nodes * 32 + spec.cpu_nodes * 256)
    assert pods.prefixlen <= 18 and nodes.prefixlen <= 22 and services.prefixlen <= 20
    assert not (nodes.overlaps(pods) or nodes.overlaps(services) or pods.overlaps(services))


def test_reference_sandbox_range_is_refused_when_too_small():
    # the reference /20 pod range at 110 pods/node: 16 nodes is the cap
    net = {"pods_cidr": "192.168.64.0/20", "tpu_max_pods_per_node": 110}
    ok = spec_with(network=net, tpu_pools=_pools(1, "v5litepod-32"), cpu_pool={"min_nodes": 1, "max_nodes": 8})
    assert ok.total_nodes == 16
    with pytest.raises(SpecError) as ei:
        spec_with(network=net, tpu_pools=_pools(1, "v5litepod-32"), cpu_pool={"min_nodes": 1, "max_nodes": 9})
    assert ei.value.field == "network.pods_cidr"
    assert "/19" in ei.value.fix


def test_larger_cluster_gets_larger_pod_range():
    small = spec_with(tpu_pools=_pools(1, "v5litepod-16"))
    big = spec_with(tpu_pools=_pools(32))
    assert ipaddress.ip_network(big.cidrs.pods).num_addresses > ipaddress.ip_network(small.cidrs.pods).num_addresses


def test_given_ranges_are_kept():
    spec = spec_with(network={"nodes_cidr": "10.10.0.0/24", "pods_cidr": "10.20.0.0/16", "services_cidr": "10.30.0.0/20"})
    assert spec.cidrs.model_dump() == {"nodes": "10.10.0.0/24", "pods": "10.20.0.0/16", "services": "10.30.0.0/20"}


def test_master_range_overlap():
    with pytest.raises(SpecError) as ei:
        spec_with(cluster={"name": "c", "private_nodes": True, "master_cidr": "10.0.0.0/28"})
    assert ei.value.field == "cluster.master_cidr"


# ------------------------------------------------------------------ GKE version floor


@pytest.mark.parametrize(
    "pools,floor",
    [
        ([{"name": "a", "type": "v5litepod-16"}], None),
        ([{"name": "a", "type": "v5litepod-16", "slices": 2}], "1.27.4-gke.900"),
        ([{"name": "a", "type": "v4-16"}], None),
        ([{"name": "a", "type": "v4-16", "slices": 4}], "1.27.4-gke.900"),
        ([{"name": "a", "type": "v6e-8"}], "1.31.2-gke.1115000"),
        ([{"name": "a", "type": "v6e-16", "slices": 2}], "1.31.2-gke.1115000"),
        ([{"name": "a", "type": "tpu7x-8"}], "1.34.0-gke.2201000"),
        ([{"name": "a", "type": "v5litepod-16", "slices": 2}, {"name": "b", "type": "tpu7x-16"}], "1.34.0-gke.2201000"),
    ],
)
def test_version_floor(pools, floor):
    spec = spec_with(tpu_pools=pools)
    assert spec.gke_version_floor == floor
    assert spec.min_master_version == floor


def test_min_version_at_or_above_floor_is_kept():
    spec = spec_with(tpu_pools=[{"name": "a", "type": "tpu7x-8"}], cluster={"name": "c", "min_version": "1.35.1-gke.100"})
    assert spec.min_master_version == "1.35.1-gke.100"
    with pytest.raises(SpecError) as ei:
        spec_with(tpu_pools=[{"name": "a", "type": "v6e-16", "slices": 2}], cluster={"name": "c", "min_version": "1.31.2-gke.1114999"})
    assert ei.value.field == "cluster.min_version" and "1.31.2-gke.1115000" in ei.value.fix


# ------------------------------------------------------------------ teams


def test_team_defaults():
    spec = spec_with()
    (t,) = spec.teams
    assert (t.name, t.ns, t.queue, t.priority, t.quota_share) == ("default", "default", "default-queue", "medium", 1.0)
    spec = spec_with(teams=[{"name": "research", "quota_share": 0.5}, {"name": "prod", "namespace": "ml-prod", "local_queue": "q", "quota_share": 0.5}])
    r, p = spec.teams
    assert (r.ns, r.queue, r.ksa) == ("research", "research-queue", "tpu-training")
    assert (p.ns, p.queue) == ("ml-prod", "q")
    assert spec.team("ml-prod") is p and spec.team(None) is r
    with pytest.raises(SpecError):
        spec.team("nobody")


def test_quota_shares_may_sum_to_exactly_one():
    spec_with(tpu_pools=[{"name": "a", "type": "v5litepod-16", "slices": 10}], teams=[{"name": "a", "quota_share": 0.3}, {"name": "b", "quota_share": 0.7}])


# ------------------------------------------------------------------ capacity


@pytest.mark.parametrize("short,cls", [("spot", Spot), ("on-demand", OnDemand), ("flex-start", FlexStart)])
def test_capacity_shorthand(short, cls):
    a = spec_with(tpu_pools=[{"name": "a", "type": "v6e-16", "capacity": short}])
    b = spec_with(tpu_pools=[{"name": "a", "type": "v6e-16", "capacity": {"mode": short}}])
    assert isinstance(a.tpu_pools[0].capacity, cls)
    assert a.tpu_pools[0].capacity == b.tpu_pools[0].capacity


def test_capacity_default_and_reservation():
    assert isinstance(spec_with(tpu_pools=[{"name": "a", "type": "v6e-16"}]).tpu_pools[0].capacity, OnDemand)
    r = spec_with(tpu_pools=[{"name": "a", "type": "v6e-16", "capacity": {"mode": "reservation", "name": "r1", "zone": "us-west4-a"}}])
    assert isinstance(r.tpu_pools[0].capacity, Reservation)
    with pytest.raises(SpecError) as ei:
        spec_with(tpu_pools=[{"name": "a", "type": "v6e-16", "capacity": "reservation"}])
    assert ei.value.field == "tpu_pools[0].capacity.name"


# ------------------------------------------------------------------ misc derivations


def test_state_defaults_and_versions():
    spec = spec_with()
    assert spec.state_bucket == "my-tpu-project-tf-state"
    assert spec.state_prefix == "tpu-gke-toolkit/tpu-dev"
    assert spec.versions.kueue.startswith("v") and spec.versions.jobset.startswith("v")
    custom = spec_with(state={"bucket": "b-state", "prefix": "x/y"}, versions={"kueue": "v0.14.2", "jobset": "v0.9.0"})
    assert (custom.state_bucket, custom.state_prefix, custom.versions.kueue) == ("b-state", "x/y", "v0.14.2")


def test_tensorboard_region_defaults_to_a_vertex_ai_region_near_the_cluster():
    from infra import vertex_ai

    assert spec_with().tensorboard_region == "us-west4"  # Vertex AI is offered in the cluster's region: kept
    v4 = spec_from("v4")
    assert (v4.region, v4.tensorboard_region) == ("us-central2", "us-central1")  # us-central2 has no Vertex AI
    assert not vertex_ai.offered("us-central2") and vertex_ai.nearest("europe-west99") == "europe-west4"
    chosen = spec_from("v4", tensorboard={"region": "us-east5"})
    assert chosen.tensorboard_region == "us-east5"
    # A region Vertex AI added after the table: refused, unless the spec says it knows better.
    with pytest.raises(SpecError) as ei:
        spec_from("v4", tensorboard={"region": "us-east7"})
    assert ei.value.field == "tensorboard.region" and "region_unlisted" in ei.value.fix and "us-central1" in ei.value.fix
    assert spec_from("v4", tensorboard={"region": "us-east7", "region_unlisted": True}).tensorboard_region == "us-east7"


def test_node_pool_names_and_chips():
    spec = spec_with()
    p = spec.tpu_pools[0]
    assert p.node_pool_names() == ["v5e-16-0", "v5e-16-1"]
    assert p.total_chips == 32 and spec.flavor_names() == ["v5e-4x4"]
    assert spec.multislice


# ------------------------------------------------------- bad input, by class


def _refused(field: str, **changes) -> SpecError:
    with pytest.raises(SpecError) as ei:
        spec_with(**changes)
    assert ei.value.field == field, str(ei.value)
    assert "\n" not in str(ei.value)
    return ei.value


@pytest.mark.parametrize(
    "pool",
    [
        {"type": "v5litepod-16", "generation": "v6e", "topology": "4x4"},
        {"type": "v5litepod-16", "generation": "v6e"},
        {"type": "v6e-16", "generation": "v5e", "topology": "4x4"},
        {"type": "v4-16", "generation": "v5p", "topology": "2x2x2"},
    ],
)
def test_type_contradicting_generation_is_refused(pool):
    err = _refused("tpu_pools[0].generation", tpu_pools=[{"name": "p", **pool}])
    assert "contradicts type" in err.problem and pool["type"] in err.problem


def test_type_agreeing_with_generation_and_topology_is_kept():
    spec = spec_with(tpu_pools=[{"name": "p", "type": "v5litepod-16", "generation": "v5e", "topology": "4x4"}])
    assert spec.tpu_pools[0].shape.key == "v5e-4x4"


def test_catalog_resolve_refuses_a_contradiction():
    from infra.catalog import resolve
    from toolkit.errors import CatalogError

    with pytest.raises(CatalogError, match="contradicts"):
        resolve("v5litepod-16", generation="v6e", topology="4x4")
    assert resolve("v6e-16", generation="v6e", topology="4x4").generation.name == "v6e"


def test_type_with_topology_but_no_generation_names_topology():
    err = _refused("tpu_pools[0].topology", tpu_pools=[{"name": "p", "type": "v5litepod-16", "topology": "4x4"}])
    assert "without generation" in err.problem


@pytest.mark.parametrize("field", ["teams", "tpu_pools", "zones"])
def test_empty_lists_are_refused(field):
    err = _refused(field, **{field: []})
    assert err.problem == "is an empty list"


def test_derived_local_queue_name_must_fit_a_label():
    _refused("teams[0].namespace", teams=[{"name": "t", "namespace": "n" * 58}])
    _refused("teams[0].namespace", teams=[{"name": "t", "namespace": "n" * 60}])
    assert spec_with(teams=[{"name": "t", "namespace": "n" * 57}]).teams[0].queue == "n" * 57 + "-queue"
    # an explicit local_queue needs no suffix
    assert spec_with(teams=[{"name": "t", "namespace": "n" * 63, "local_queue": "q"}]).teams[0].queue == "q"


def test_router_and_nat_names_must_fit():
    _refused("network.name", network={"name": "n" * 57}, cluster={"name": "c1", "private_nodes": True})
    # No NAT without private nodes (on by default, so the opt-out is explicit here)
    assert spec_with(network={"name": "n" * 57}, cluster={"name": "c1", "private_nodes": False}).network_name == "n" * 57
    spec_with(network={"name": "n" * 56}, cluster={"name": "c1", "private_nodes": True})


def test_service_account_ids_must_be_long_enough():
    ci = {"enabled": True, "github_owner": "o", "github_repo": "r"}
    _refused("cluster.name", cluster={"name": "ab"}, cloud_build=ci)
    spec_with(cluster={"name": "abc"}, cloud_build=ci)
    spec_with(cluster={"name": "a"})  # a-nodes, a-workload: long enough without CI


def test_state_bucket_name_is_checked():
    _refused("state.bucket", state={"bucket": "Not_A_Bucket"})


@pytest.mark.parametrize(
    "capacity, field, needles",
    [
        ({"mode": "flex-start", "spot": True}, "tpu_pools[0].capacity.spot", ["'spot'", "flex-start", "mode of its own"]),
        ({"mode": "spot", "spot": True}, "tpu_pools[0].capacity.spot", ["'spot'"]),
        ({"mode": "spot", "name": "r1"}, "tpu_pools[0].capacity.name", ["'name'", "capacity mode spot"]),
        ({"mode": "reservation", "name": "r1", "zone": "us-west4-a", "spot": True}, "tpu_pools[0].capacity.spot", ["mode, name, zone and project"]),
    ],
)
def test_unknown_capacity_keys_are_named(capacity, field, needles):
    err = _refused(field, tpu_pools=[{"name": "p", "type": "v5litepod-16", "capacity": capacity}])
    for n in needles:
        assert n in str(err), str(err)


def test_unknown_key_is_named_in_the_problem():
    err = _refused("cluster.relase_channel", cluster={"name": "c1", "relase_channel": "STABLE"})
    assert "'relase_channel'" in err.problem


# ----------------------------------------------------------- the YAML reader


def test_load_yaml_refuses_duplicate_keys_with_their_path():
    from infra.spec import YamlFileError, load_yaml

    with pytest.raises(YamlFileError) as ei:
        load_yaml("a: 1\nb:\n  - {x: 1}\n  - x: 1\n    y: 2\n    x: 3\n")
    assert ei.value.key_path == "b[1].x" and "lines 4 and 6" in ei.value.problem
    with pytest.raises(YamlFileError):
        load_yaml("a: 1\na: 1\n")  # the same value twice is still a key given twice


def test_load_yaml_allows_merge_keys_and_aliases():
    from infra.spec import load_yaml

    data = load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 5\ne: *b\n")
    assert data["d"] == {"x": 5, "y": 2} and data["e"] == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b"\x1f\x8b\x08\x00", "gzip"),
        ("a: 1\n".encode("utf-16"), "UTF-16"),
        ("a: 1\n".encode("utf-32"), "UTF-32"),
        (b"a: caf\xe9\n", "byte 0xe9 on line 1"),
        (b"a: 1\x00\x01\x02", "binary"),
        (b"a: [1,\n", "not valid YAML at line 2"),
        (b"a: 1\n---\nb: 2\n", "not valid YAML"),
    ],
)
def test_load_yaml_says_what_the_bytes_are(raw, needle):
    from infra.spec import YamlFileError, load_yaml

    with pytest.raises(YamlFileError) as ei:
        load_yaml(raw)
    assert needle in ei.value.problem and "\n" not in str(ei.value)


def test_spec_larger_than_the_cap_is_refused(tmp_path, monkeypatch):
    import toolkit.yamlfile as yamlfile

    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2048)
    monkeypatch.setattr(yamlfile, "MAX_YAML_BYTES", 1024)
    with pytest.raises(SpecError, match="over 1 KiB"):
        load_spec(big)


def test_the_capacity_union_has_one_model_per_mode():
    from typing import get_args

    from infra.spec import Capacity
    from toolkit.names import CapacityMode

    union = get_args(get_args(Capacity)[0])
    assert [get_args(m.model_fields["mode"].annotation)[0] for m in union] == list(CapacityMode)
    assert all(type(get_args(m.model_fields["mode"].annotation)[0]) is str for m in union), "models keep plain strings (YAML/JSON output)"
