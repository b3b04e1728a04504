"""Capacity options: ordered fallback lists and DWS flex-start (queued provisioning).

What the spec turns a capacity list into, everywhere it goes: node pools (stack
props and node labels), local kwok nodes, Kueue ResourceFlavors in the list's order,
and the one zone they all share. Bad lists get one line naming ``capacity[k]...``.
The real CDK synth of examples/fallback.yaml is in the ``synth`` tier below.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.spec import EXAMPLES_DIR, FlexStart, OnDemand, Reservation, Spot, load_spec, parse_spec
from tests.support import cli, spec_from
from toolkit.errors import SpecError
from toolkit.names import GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL, K8S_ZONE_LABEL, TGK_CAPACITY_LABEL, TGK_LOCAL_MANAGED_LABEL, TGK_POOL_LABEL, TGK_RESERVATION_LABEL
from workloads.local import nodes
from workloads.render import kueue

BASE: dict[str, Any] = {
    "project": "my-tpu-project",
    "region": "us-east5",
    "zones": ["us-east5-b", "us-east5-a"],
    "cluster": {"name": "fallback"},
    "tpu_pools": [
        {
            "name": "v6e-16",
            "type": "v6e-16",
            "slices": 2,
            "zone": "us-east5-b",
            "capacity": [{"mode": "reservation", "name": "res-b", "zone": "us-east5-b"}, "on-demand", "spot"],
        }
    ],
}


def spec_with(capacity: Any = None, **pool_changes: Any):
    """BASE with its one pool's capacity and other keys changed."""
    pool = {**BASE["tpu_pools"][0], **({"capacity": capacity} if capacity is not None else {}), **pool_changes}
    return spec_from(BASE, tpu_pools=[pool])


# ------------------------------------------------------------------ parsing


def test_list_keeps_its_order_and_kinds():
    pool = spec_with().tpu_pools[0]
    caps = pool.capacities
    assert [type(c) for c in caps] == [Reservation, OnDemand, Spot]
    assert caps[0].name == "res-b" and pool.capacity is caps[0]  # single-option readers see the first
    assert pool.has_fallback
    assert [o.tag for o in pool.capacity_options()] == ["res", "od", "spot"]
    # planned for the most interruption-prone option it may land on
    assert pool.run_mode == "spot"


def test_a_one_item_list_is_the_plain_form():
    listed = spec_with(capacity=["spot"]).tpu_pools[0]
    plain = spec_with(capacity="spot").tpu_pools[0]
    assert not listed.has_fallback
    assert listed.node_pool_names() == plain.node_pool_names() == ["v6e-16-0", "v6e-16-1"]


def test_two_reservations_are_one_option_tried_in_order():
    """Reservations are tried at pool creation, not held side by side: one set of node pools, one flavor."""
    spec = spec_with(
        capacity=[
            {"mode": "reservation", "name": "r1", "zone": "us-east5-b"},
            {"mode": "reservation", "name": "r2", "zone": "us-east5-b"},
            "flex-start",
        ]
    )
    pool = spec.tpu_pools[0]
    options = pool.capacity_options()
    assert [o.tag for o in options] == ["res", "flex"]
    assert [c.name for c in options[0].choices] == ["r1", "r2"] and options[1].alternates == ()
    assert pool.node_pool_names() == ["v6e-16-res-0", "v6e-16-res-1", "v6e-16-flex-0", "v6e-16-flex-1"]
    assert spec.tpu_nodes == 2 * 4 * 2  # two options' slices, not three
    assert pool.node_labels(options[0], 0)[TGK_RESERVATION_LABEL] == "r1"
    assert pool.node_labels(options[0], 0, "r2")[TGK_RESERVATION_LABEL] == "r2"  # what deploy's fallback chose
    assert pool.run_mode == "flex-start"
    assert isinstance(pool.capacities[2], FlexStart)


def test_a_reservation_named_in_two_pools_is_refused():
    d = copy.deepcopy(BASE)
    d["tpu_pools"].append({"name": "other", "type": "v6e-8", "zone": "us-east5-b", "capacity": copy.deepcopy(d["tpu_pools"][0]["capacity"][0])})
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert e.value.field == "tpu_pools[1].capacity.name"
    assert "tpu_pools[0].capacity[0]" in e.value.problem and "one pool" in e.value.fix


@pytest.mark.parametrize(
    "capacity, field, words",
    [
        (
            [{"mode": "reservation", "name": "res-b", "zone": "us-east5-b"}, {"mode": "reservation", "name": "res-a", "zone": "us-east5-a"}],
            "tpu_pools[0].capacity[1].zone",
            "us-east5-a",
        ),
        ([], "tpu_pools[0].capacity", "empty"),
        (["spot", "spot"], "tpu_pools[0].capacity[1]", "repeats capacity[0]"),
        (["spot", {"mode": "bogus"}], "tpu_pools[0].capacity[1]", "not a capacity mode"),
        (["spot", {"mode": "reservation", "name": "r"}], "tpu_pools[0].capacity[1].zone", "required"),
        (["spot", {"mode": "spot", "zone": "us-east5-b"}], "tpu_pools[0].capacity[1].zone", "not a key"),
    ],
)
def test_bad_lists_name_the_item(capacity, field, words):
    with pytest.raises(SpecError) as e:
        spec_with(capacity=capacity)
    assert e.value.field == field, str(e.value)
    assert words in str(e.value)


def test_a_list_whose_node_pool_names_are_too_long():
    with pytest.raises(SpecError) as e:
        spec_with(name="a" * 34)  # a...-spot-1 is 41 characters
    assert e.value.field == "tpu_pools[0].name" and "40" in str(e.value)


def test_a_list_needs_its_shape_to_itself():
    d = copy.deepcopy(BASE)
    d["tpu_pools"].append({"name": "other", "type": "v6e-16", "capacity": "spot"})
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert e.value.field == "tpu_pools[0].capacity"


def test_cli_refuses_a_reservation_in_another_zone(tmp_path: Path):
    d = copy.deepcopy(BASE)
    d["tpu_pools"][0]["capacity"][0]["zone"] = "us-east5-a"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", str(bad), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tpu_pools[0].capacity[0].zone: "), proc.stderr
    assert "us-east5-b" in lines[0] and " — " in lines[0]
    assert not out.exists()


# ------------------------------------------------------- node pools and nodes


def test_node_pools_per_option_and_slice():
    spec = spec_with()
    pool = spec.tpu_pools[0]
    assert pool.node_pool_names() == ["v6e-16-res-0", "v6e-16-res-1", "v6e-16-od-0", "v6e-16-od-1", "v6e-16-spot-0", "v6e-16-spot-1"]
    # every option's node pools can exist at once: addresses are sized for all of them
    assert spec.tpu_nodes == 3 * 2 * pool.shape.nodes


def test_local_nodes_carry_their_options_labels():
    spec = spec_with()
    pool = spec.tpu_pools[0]
    got = nodes.tpu_nodes(spec, pool)
    assert len(got) == spec.tpu_nodes
    by_pool: dict[str, list[dict[str, str]]] = {}
    for n in got:
        labels = n["metadata"]["labels"]
        by_pool.setdefault(labels[GKE_NODEPOOL_LABEL], []).append(labels)
        assert labels[K8S_ZONE_LABEL] == "us-east5-b"
    assert sorted(by_pool) == sorted(pool.node_pool_names())
    for name, labels in by_pool.items():
        mode = {"res": "reservation", "od": "on-demand", "spot": "spot"}[name.split("-")[2]]
        assert {ln[TGK_CAPACITY_LABEL] for ln in labels} == {mode}
        assert all((GKE_SPOT_LABEL in ln) == (mode == "spot") for ln in labels)
        assert all((ln.get(TGK_RESERVATION_LABEL) == "res-b") == (mode == "reservation") for ln in labels)


# ------------------------------------------------------------------- Kueue


def test_flavors_follow_the_list_and_select_only_their_option():
    spec = spec_with()
    pool = spec.tpu_pools[0]
    rfs = kueue.resource_flavors(spec)
    assert [f["metadata"]["name"] for f in rfs] == ["v6e-16-res", "v6e-16-od", "v6e-16-spot"]
    (cq,) = kueue.cluster_queues(spec)
    (group,) = cq["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == ["v6e-16-res", "v6e-16-od", "v6e-16-spot"]
    # each flavor's nodeLabels match exactly one option's nodes
    all_nodes = nodes.tpu_nodes(spec, pool)
    for rf, option in zip(rfs, pool.capacity_options(), strict=True):
        sel = rf["spec"]["nodeLabels"]
        assert sel[K8S_ZONE_LABEL] == spec.pool_zone(pool)
        assert sel[TGK_POOL_LABEL] == pool.name
        matched = {n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in all_nodes if sel.items() <= n["metadata"]["labels"].items()}
        assert matched == set(pool.option_node_pool_names(option))
    # every option holds the pool's chips: a full first option leaves the next one whole
    for f in group["flavors"]:
        tpu = next(r for r in f["resources"] if r["name"] == "google.com/tpu")
        assert tpu["nominalQuota"] == pool.total_chips


def test_the_fallback_example_loads_and_is_consistent():
    spec = load_spec(EXAMPLES_DIR / "fallback.yaml")
    (pool,) = spec.tpu_pools
    assert pool.has_fallback and isinstance(pool.capacities[0], Reservation)
    zone = spec.pool_zone(pool)
    assert pool.capacities[0].zone == zone
    assert {rf["spec"]["nodeLabels"][K8S_ZONE_LABEL] for rf in kueue.resource_flavors(spec)} == {zone}


# ------------------------------------------------- the real synth (synth tier)


@pytest.fixture(scope="module")
def fallback_stack(tmp_path_factory) -> tuple[Any, dict[str, Any]]:
    from infra.stack import synth

    spec = load_spec(EXAMPLES_DIR / "fallback.yaml")
    path = synth(spec, tmp_path_factory.mktemp("fallback"))
    return spec, json.loads(path.read_text())


@pytest.mark.synth
def test_synth_has_every_options_node_pools(fallback_stack):
    spec, doc = fallback_stack
    (pool,) = spec.tpu_pools
    pools = {p["name"]: p for p in doc["resource"]["google_container_node_pool"].values()}
    assert set(pool.node_pool_names()) <= set(pools)
    zone = spec.pool_zone(pool)
    for option in pool.capacity_options():
        for index, name in enumerate(pool.option_node_pool_names(option)):
            np_ = pools[name]
            cfg = np_["node_config"]
            assert np_["node_locations"] == [zone]
            assert cfg["labels"][TGK_CAPACITY_LABEL] == option.mode
            assert cfg["labels"]["tpu-gke-toolkit.io/slice-index"] == str(index)
            affinity = cfg.get("reservation_affinity")
            if option.mode == "reservation":
                assert affinity["consume_reservation_type"] == "SPECIFIC_RESERVATION"
                assert affinity["values"] == [option.capacity.name]
                assert option.capacity.zone == zone
            else:
                assert affinity is None
            assert bool(cfg.get("spot")) == (option.mode == "spot")
            # the first option is the pool's standing capacity; the ones after it scale from zero
            if option.index == 0:
                assert np_["node_count"] == pool.shape.nodes and "autoscaling" not in np_
            else:
                assert np_["initial_node_count"] == 0
                assert np_["autoscaling"] == {"min_node_count": 0, "max_node_count": pool.shape.nodes}


# ------------------------------------------------- DWS flex-start, queued provisioning

QUEUED = {"mode": "flex-start", "queued": True, "max_run_seconds": 7200, "retry": {"limit": 2, "base_seconds": 5, "max_seconds": 40}}


def queued_spec(capacity: Any = None, **changes: Any):
    d = copy.deepcopy(BASE)
    d["tpu_pools"][0]["capacity"] = copy.deepcopy(QUEUED) if capacity is None else capacity
    d.update(changes)
    return parse_spec(d)


def test_queued_flex_start_parses():
    pool = queued_spec().tpu_pools[0]
    cap = pool.capacity
    assert isinstance(cap, FlexStart) and cap.queued and cap.max_run_seconds == 7200
    assert (cap.retry.limit, cap.retry.base_seconds, cap.retry.max_seconds) == (2, 5, 40)
    assert pool.queued and pool.flex_start and not pool.has_fallback
    plain = spec_with(capacity="flex-start").tpu_pools[0]
    assert not plain.queued and plain.flex_start and plain.capacity.max_run_seconds is None


def test_flex_start_raises_the_gke_floor():
    assert queued_spec().gke_version_floor == "1.33.0-gke.1712000"
    assert spec_with(capacity="spot").gke_version_floor != "1.33.0-gke.1712000"


def _v4(capacity: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d["tpu_pools"] = [{"name": "v4", "type": "v4-16", "capacity": capacity}]
    return d


@pytest.mark.parametrize(
    "build, field, words",
    [
        (lambda: _v4(QUEUED), "tpu_pools[0].capacity.queued", "not offered for TPU v4"),
        (lambda: _v4("flex-start"), "tpu_pools[0].capacity.mode", "not offered for TPU v4"),
        (
            lambda: {
                **copy.deepcopy(BASE),
                "tpu_pools": [{"name": "q", "type": "v6e-16", "capacity": QUEUED}],
                "cluster": {"name": "fallback", "min_version": "1.32.3-gke.1000"},
            },
            "cluster.min_version",
            "1.33.0-gke.1712000",
        ),
        (
            lambda: {**copy.deepcopy(BASE), "tpu_pools": [{"name": "q", "type": "v6e-16", "capacity": {"mode": "flex-start", "retry": {"limit": 1}}}]},
            "tpu_pools[0].capacity.retry",
            "only applies to queued",
        ),
        (
            lambda: {
                **copy.deepcopy(BASE),
                "tpu_pools": [{"name": "q", "type": "v6e-16", "capacity": {"mode": "flex-start", "queued": True, "max_run_seconds": 10}}],
            },
            "tpu_pools[0].capacity.max_run_seconds",
            "out of range",
        ),
        (
            lambda: {
                **copy.deepcopy(BASE),
                "tpu_pools": [
                    {"name": "q", "type": "v6e-16", "capacity": {"mode": "flex-start", "queued": True, "retry": {"base_seconds": 60, "max_seconds": 10}}}
                ],
            },
            "tpu_pools[0].capacity.retry.max_seconds",
            "below base_seconds",
        ),
        (
            lambda: {
                **copy.deepcopy(BASE),
                "tpu_pools": [{"name": "q", "type": "v6e-16", "capacity": QUEUED}, {"name": "s", "type": "v6e-16", "capacity": "spot"}],
            },
            "tpu_pools[0].capacity.queued",
            "shape to itself",
        ),
        (
            lambda: {**copy.deepcopy(BASE), "tpu_pools": [{"name": "q", "type": "v6e-16", "capacity": {"mode": "flex-start", "name": "x"}}]},
            "tpu_pools[0].capacity.name",
            "not a key of capacity mode flex-start",
        ),
    ],
)
def test_bad_flex_start_names_the_field(build, field, words):
    with pytest.raises(SpecError) as e:
        parse_spec(build())
    assert e.value.field == field, str(e.value)
    assert words in str(e.value)


def test_cli_refuses_queued_provisioning_on_v4(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_v4(QUEUED)))
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", str(bad), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: tpu_pools[0].capacity.queued: ") and " — " in line and "v6e" in line
    assert not out.exists()


def test_queued_flavor_selects_and_tolerates_queued_nodes():
    spec = queued_spec()
    (rf,) = kueue.resource_flavors(spec)
    assert rf["spec"]["nodeLabels"][kueue.GKE_QUEUED_LABEL] == "true"
    assert kueue.QUEUED_TOLERATION in rf["spec"]["tolerations"]
    # flavors of other capacity never ask for queued nodes
    (plain,) = kueue.resource_flavors(spec_with(capacity="flex-start"))
    assert kueue.GKE_QUEUED_LABEL not in plain["spec"]["nodeLabels"] and kueue.QUEUED_TOLERATION not in plain["spec"]["tolerations"]


def test_provisioning_config_and_check_scoped_to_the_flex_flavor():
    spec = queued_spec(
        capacity=[{"mode": "reservation", "name": "res-b", "zone": "us-east5-b"}, copy.deepcopy(QUEUED)],
    )
    pool = spec.tpu_pools[0]
    objs = kueue.queue_objects(spec)
    kinds = [o["kind"] for o in objs]
    # the config and the check exist before the ClusterQueue that names them
    assert kinds.index("ProvisioningRequestConfig") < kinds.index("AdmissionCheck") < kinds.index("ClusterQueue")
    (prc,) = [o for o in objs if o["kind"] == "ProvisioningRequestConfig"]
    (ac,) = [o for o in objs if o["kind"] == "AdmissionCheck"]
    assert prc["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert prc["spec"]["managedResources"] == ["google.com/tpu"]
    assert prc["spec"]["parameters"] == {"tpu-topology": pool.shape.topology, "maxRunDurationSeconds": "7200"}
    assert prc["spec"]["retryStrategy"] == {"backoffLimitCount": 2, "backoffBaseSeconds": 5, "backoffMaxSeconds": 40}
    assert ac["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert ac["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": prc["metadata"]["name"]}
    (cq,) = kueue.cluster_queues(spec)
    rules = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
    flavors = [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
    assert flavors == ["v6e-16-res", "v6e-16-flex"]
    assert rules == [{"name": ac["metadata"]["name"], "onFlavors": ["v6e-16-flex"]}]  # the reservation does not wait for DWS


def test_no_provisioning_objects_without_a_queued_pool():
    spec = spec_with()
    assert kueue.provisioning_objects(spec) == []
    (cq,) = kueue.cluster_queues(spec)
    assert "admissionChecksStrategy" not in cq["spec"]


def test_default_max_run_is_gkes_seven_days():
    (prc, _) = kueue.provisioning_objects(queued_spec(capacity={"mode": "flex-start", "queued": True}))
    assert prc["spec"]["parameters"]["maxRunDurationSeconds"] == str(7 * 24 * 3600)


def test_queued_node_pools_have_no_local_nodes_until_provisioned():
    spec = queued_spec(capacity=[{"mode": "reservation", "name": "res-b", "zone": "us-east5-b"}, copy.deepcopy(QUEUED)])
    pool = spec.tpu_pools[0]
    res, flex = pool.capacity_options()
    standing = nodes.tpu_nodes(spec, pool)
    assert {n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in standing} == set(pool.option_node_pool_names(res))
    made = nodes.provisioned_nodes(spec, pool, flex, pool.option_node_pool_names(flex)[:1], "dws-abc")
    assert len(made) == pool.shape.nodes
    (rf,) = [f for f in kueue.resource_flavors(spec) if f["metadata"]["name"] == "v6e-16-flex"]
    for n in made:
        labels = n["metadata"]["labels"]
        assert rf["spec"]["nodeLabels"].items() <= labels.items()  # the admitted pods' selector matches them
        assert labels[kueue.GKE_PROVISIONING_REQUEST_LABEL] == "dws-abc"
        assert labels[GKE_NODEPOOL_LABEL] == pool.option_node_pool_names(flex)[0]
        assert {"key": kueue.GKE_QUEUED_LABEL, "value": "true", "effect": "NoSchedule"} in n["spec"]["taints"]
        # the API server refuses a Node with two taints of one key and effect
        assert len({(t["key"], t["effect"]) for t in n["spec"]["taints"]}) == len(n["spec"]["taints"]) == 2
        assert TGK_LOCAL_MANAGED_LABEL not in labels  # `local up` leaves them to the provisioner


@pytest.mark.synth
def test_synth_queued_node_pools():
    from infra.stack import synth

    spec = load_spec(EXAMPLES_DIR / "flex-start.yaml")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        doc = json.loads(synth(spec, Path(d)).read_text())
    pools = {p["name"]: p for p in doc["resource"]["google_container_node_pool"].values()}
    for pool in spec.tpu_pools:
        for name in pool.node_pool_names():
            np_ = pools[name]
            cfg = np_["node_config"]
            assert cfg["flex_start"] is True and "spot" not in cfg
            assert np_["management"]["auto_repair"] is False
            assert np_["autoscaling"]["total_min_node_count"] == 0 and np_["autoscaling"]["total_max_node_count"] == pool.shape.nodes
            assert cfg["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
            if pool.queued:
                assert np_["queued_provisioning"] == {"enabled": True}
                assert cfg["max_run_duration"] == f"{pool.capacity.max_run_seconds}s"
            else:
                assert "queued_provisioning" not in np_ and "max_run_duration" not in cfg
    assert doc["resource"]["google_container_cluster"] and any(
        c.get("min_master_version") == "1.33.0-gke.1712000" for c in doc["resource"]["google_container_cluster"].values()
    )


# ------------------------------------------- the simulated DWS provisioner (unit)


class _Info:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        return f"{self.kind}|{namespace or ''}|{name or ''}"


class _Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.ok, self.status, self._body = True, 200, body

    def json(self) -> dict[str, Any]:
        return self._body


class FakeKube:
    """The few API calls the provisioner makes, over in-memory objects (kind, namespace, name)."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.transport = self

    def resource(self, _api: str, kind: str) -> _Info:
        return _Info(kind)

    def kueue(self, kind: str) -> _Info:
        return _Info(kind)

    def put(self, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        self.objs[(obj["kind"], m.get("namespace", ""), m["name"])] = obj

    def list(self, info: _Info, namespace: str | None = None, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        want = dict(kv.split("=") for kv in label_selector.split(",")) if label_selector else {}
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in self.objs.items()
            if k == info.kind and (namespace is None or ns == namespace) and want.items() <= (o["metadata"].get("labels") or {}).items()
        ]

    def get(self, info: _Info, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        o = self.objs.get((info.kind, namespace or "", name))
        return copy.deepcopy(o) if o else None

    def create(self, obj: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj.setdefault("kind", "Node")
        self.put(obj)
        return obj

    def delete(self, info: _Info, name: str, namespace: str | None = None, **_kw: Any) -> None:
        self.objs.pop((info.kind, namespace or "", name), None)

    def request(self, method: str, path: str, *, body: dict[str, Any], content_type: str, **_kw: Any) -> _Resp:
        assert method == "PATCH" and path.endswith("/status")
        kind, ns, name = path.removesuffix("/status").split("|")
        self.objs[(kind, ns, name)]["status"] = body["status"]
        return _Resp(self.objs[(kind, ns, name)])


def _request_for(kube: FakeKube, spec, ns: str = "research", name: str = "wl-1-check-1", slices: int = 1) -> None:
    (flavor,) = [f for f in kueue.resource_flavors(spec) if kueue.GKE_QUEUED_LABEL in f["spec"]["nodeLabels"]]
    pool = spec.tpu_pools[0]
    kube.put({"kind": "Workload", "metadata": {"name": "wl-1", "namespace": ns}, "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}})
    kube.put(
        {
            "kind": "PodTemplate",
            "metadata": {"name": f"ppt-{name}-main", "namespace": ns},
            "template": {"spec": {"nodeSelector": dict(flavor["spec"]["nodeLabels"])}},
        }
    )
    kube.put(
        {
            "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [{"kind": "Workload", "name": "wl-1"}]},
            "spec": {
                "provisioningClassName": kueue.PROVISIONING_CLASS,
                "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-main"}, "count": slices * pool.shape.nodes}],
            },
        }
    )


def _pr(kube: FakeKube, name: str = "wl-1-check-1") -> dict[str, Any]:
    return kube.objs[("ProvisioningRequest", "research", name)]


def _prov(tmp_path: Path, spec) -> tuple[Any, FakeKube]:
    from workloads.local import provisioner

    kube = FakeKube()
    p = provisioner.Provisioner(tmp_path, kube)
    p.spec = lambda: spec  # type: ignore[method-assign]
    return p, kube


def test_provisioner_accepts_then_provisions_after_the_delay(tmp_path: Path):
    from workloads.local import provisioner

    spec = queued_spec()
    pool = spec.tpu_pools[0]
    prov, kube = _prov(tmp_path, spec)
    provisioner.configure(tmp_path, delay_seconds=5)
    _request_for(kube, spec)
    prov.tick(100.0)
    assert provisioner.is_true(_pr(kube), "Accepted") and not provisioner.is_true(_pr(kube), "Provisioned")
    prov.tick(104.0)  # still inside the delay
    assert not provisioner.is_true(_pr(kube), "Provisioned") and not kube.list(_Info("Node"))
    prov.tick(105.5)
    pr = _pr(kube)
    assert provisioner.is_true(pr, "Provisioned")
    resize = pr["status"]["provisioningClassDetails"]["ResizeRequestName"]
    made = kube.list(_Info("Node"))
    assert len(made) == pool.shape.nodes
    assert {n["metadata"]["labels"][kueue.GKE_PROVISIONING_REQUEST_LABEL] for n in made} == {resize}
    assert {n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in made} == {pool.node_pool_names()[0]}

    # the run finishes: the autoscaler's part, the nodes go
    kube.objs[("Workload", "research", "wl-1")]["status"]["conditions"].append({"type": "Finished", "status": "True"})
    prov.tick(200.0)
    assert kube.list(_Info("Node")) == []


def test_provisioner_refuses_while_told_to(tmp_path: Path):
    from workloads.local import provisioner

    spec = queued_spec()
    prov, kube = _prov(tmp_path, spec)
    provisioner.configure(tmp_path, delay_seconds=0, refuse=1)
    _request_for(kube, spec)
    prov.tick(1.0)
    prov.tick(2.0)
    assert provisioner.is_true(_pr(kube), "Failed") and not kube.list(_Info("Node"))
    assert provisioner.load_behaviour(tmp_path).refuse == 0
    # Kueue's retry is a new request (attempt 2): this one is answered
    _request_for(kube, spec, name="wl-1-check-2")
    prov.tick(3.0)
    prov.tick(4.0)
    assert provisioner.is_true(_pr(kube, "wl-1-check-2"), "Provisioned")


def test_provisioner_waits_for_free_node_pools_and_releases_evicted_runs(tmp_path: Path):
    from workloads.local import provisioner

    spec = queued_spec()  # 2 queued node pools of one slice each
    pool = spec.tpu_pools[0]
    prov, kube = _prov(tmp_path, spec)
    provisioner.configure(tmp_path, delay_seconds=0)
    _request_for(kube, spec, slices=3)
    prov.tick(1.0)
    prov.tick(2.0)
    assert not provisioner.is_true(_pr(kube), "Provisioned") and not provisioner.is_true(_pr(kube), "Failed")  # queued, not refused
    del kube.objs[("ProvisioningRequest", "research", "wl-1-check-1")]
    _request_for(kube, spec, name="wl-1-check-2", slices=2)
    prov.tick(3.0)
    prov.tick(4.0)
    assert len(kube.list(_Info("Node"))) == 2 * pool.shape.nodes
    # Kueue evicts the run (quota released): the capacity goes back
    kube.objs[("Workload", "research", "wl-1")]["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False"}]
    prov.tick(5.0)
    assert kube.list(_Info("Node")) == []


def test_provisioner_pure_parts():
    from workloads.local import provisioner

    assert provisioner.slices_needed(8, 4) == 2 and provisioner.slices_needed(1, 4) == 1
    assert provisioner.free_node_pools(["a-0", "a-1", "a-2"], {"a-1"}) == ["a-0", "a-2"]
    name = provisioner.resize_name("research", "x" * 200)
    assert len(name) <= 63 and name == provisioner.resize_name("research", "x" * 200) != provisioner.resize_name("other", "x" * 200)
    spec = queued_spec()
    pool = spec.tpu_pools[0]
    sel = {"cloud.google.com/gke-tpu-accelerator": pool.shape.accelerator_label, "cloud.google.com/gke-tpu-topology": pool.shape.topology}
    assert provisioner.match_option(spec, sel)[0] is pool
    assert provisioner.match_option(spec, {**sel, "cloud.google.com/gke-tpu-topology": "8x8"}) is None
    assert provisioner.match_option(spec_with(capacity="spot"), sel) is None  # not a queued pool


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml")))
def test_the_spec_counts_the_flavors_the_renderer_makes(example: str) -> None:
    """The loader's Kueue flavor cap (KUEUE_MAX_FLAVORS_PER_GROUP) counts exactly the flavors render/flavors.py writes."""
    from workloads.render.flavors import flavors

    spec = load_spec(EXAMPLES_DIR / example)
    assert spec.flavor_names() == [f.name for f in flavors(spec)]
    assert [f["name"] for f in kueue.cluster_queues(spec)[0]["spec"]["resourceGroups"][0]["flavors"]] == spec.flavor_names()
