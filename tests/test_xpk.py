"""xpk interop objects (workloads/render/xpk.py): what `xpk workload create` reads, from the spec.

The expected names and values below are xpk v1.13.1's (core/resources.py,
core/kueue_manager.py, templates/kueue_config.yaml.j2, core/scheduling.py), written out
here as the independent reference; tests/integration/test_xpk.py runs xpk itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.spec import PRIORITY_CLASSES, load_spec, parse_spec
from tests.support import EXAMPLES, REPO, cli, example_doc, spec_from
from toolkit.errors import SpecError
from workloads.render import kueue, xpk


def _spec(name: str = "tpu7x.yaml", **xpk_section):
    return spec_from(name, xpk={"enabled": True, **xpk_section})


def _parse_like_xpk(data: dict[str, str]) -> dict[str, str]:
    """What xpk's get_cluster_configmap makes of `kubectl get configmap -o=custom-columns=ConfigData:data`."""
    text = "map[" + " ".join(f"{k}:{v}" for k, v in sorted(data.items())) + "]"
    out = {}
    for item in text[4:-1].split(" "):
        parts = item.strip().split(":")
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def test_off_by_default_renders_nothing() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        spec = load_spec(path)
        if spec.xpk.enabled:
            continue
        assert xpk.xpk_objects(spec) == []
        names = {o["metadata"]["name"] for o in kueue.queue_objects(spec)}
        assert xpk.LOCAL_QUEUE not in names and xpk.CLUSTER_QUEUE not in names


def test_resources_configmap_counts_vms_per_device_type() -> None:
    spec = _spec("tpu7x.yaml")
    res, meta = xpk.configmaps(spec)
    assert res["metadata"] == {"name": "ironwood-resources-configmap", "namespace": "default"}
    # tpu7x 4x4x8: 128 chips = 256 TensorCores, 4 chips per VM -> 32 VMs.
    assert res["data"] == {"tpu7x-256": "32"}
    assert meta["metadata"]["name"] == "ironwood-metadata-configmap"
    assert meta["data"] == {"xpk_version": xpk.XPK_VERSION, "capacity_type": "ON_DEMAND"}


def test_every_example_survives_xpks_configmap_parser() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data["xpk"] = {"enabled": True, "namespace": "xpk"}
        spec = parse_spec(data)
        for cm in xpk.configmaps(spec):
            assert _parse_like_xpk(cm["data"]) == cm["data"], path.name
        res = xpk.configmaps(spec)[0]["data"]
        want: dict[str, int] = {}
        for p in spec.tpu_pools:
            want[p.shape.accelerator_type] = want.get(p.shape.accelerator_type, 0) + p.slices * p.shape.nodes
        assert {k: int(v) for k, v in res.items()} == want


def test_reservation_is_recorded() -> None:
    spec = _spec("v6e-reservation.yaml", namespace="xpk")
    meta = xpk.configmaps(spec)[1]["data"]
    assert meta["capacity_type"] == "RESERVATION"
    assert meta["reservation_id"] == spec.tpu_pools[0].capacity.name


def test_queues_have_xpks_names_and_the_specs_flavors() -> None:
    spec = _spec("default.yaml", namespace="xpk")
    objs = kueue.queue_objects(spec)
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    lq = by[("LocalQueue", "multislice-queue")]
    assert lq["metadata"]["namespace"] == "xpk" and lq["spec"]["clusterQueue"] == "cluster-queue"
    cq = by[("ClusterQueue", "cluster-queue")]["spec"]
    assert cq["cohortName"] == spec.cluster.name
    assert cq["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "xpk"}}
    flavors = [f["name"] for f in cq["resourceGroups"][0]["flavors"]]
    assert flavors == [o["metadata"]["name"] for o in objs if o["kind"] == "ResourceFlavor"]
    # Borrow-only by default: no chips of its own.
    assert all(r["nominalQuota"] in (0, "0", "0Gi") for f in cq["resourceGroups"][0]["flavors"] for r in f["resources"])
    # Its own namespace admits xpk's hostNetwork pods.
    ns = by[("Namespace", "xpk")]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # Applied after what they refer to.
    kinds = [o["kind"] for o in objs]
    assert kinds.index("ClusterQueue") > kinds.index("ResourceFlavor")
    lq_at = next(i for i, o in enumerate(objs) if o["metadata"]["name"] == "multislice-queue")
    assert max(i for i, o in enumerate(objs) if o["kind"] == "Namespace") < lq_at


def test_quota_share_splits_with_the_teams() -> None:
    data = example_doc("default")
    data["teams"] = [{"name": "a", "namespace": "a", "quota_share": 0.75}]
    data["xpk"] = {"enabled": True, "namespace": "xpk", "quota_share": 0.25}
    data["tpu_pools"][0]["slices"] = 4  # a quarter of them is one whole slice (infra.quotas)
    spec = parse_spec(data)
    cq = xpk.cluster_queue(spec)["spec"]["resourceGroups"][0]["flavors"][0]
    chips = sum(p.total_chips for p in spec.tpu_pools)
    assert cq["resources"][0] == {"name": "google.com/tpu", "nominalQuota": chips // 4}


def test_priority_classes_are_xpks() -> None:
    # templates/kueue_config.yaml.j2 in xpk v1.13.1
    assert PRIORITY_CLASSES == {"very-low": 100, "low": 250, "medium": 500, "high": 750, "very-high": 1000}


def test_tpu7x_workload_policy_takes_xpks_name() -> None:
    plain = load_spec(EXAMPLES / "tpu7x.yaml")
    assert plain.workload_policy_name(plain.tpu_pools[0]) != "tpu7x-256-4x4x8-placement-policy"
    spec = _spec("tpu7x.yaml")
    # core/scheduling.py get_placement_policy_name: <device type>-<topology>-placement-policy
    assert spec.workload_policy_name(spec.tpu_pools[0]) == "tpu7x-256-4x4x8-placement-policy"


def test_xpk_in_a_team_namespace_needs_host_network() -> None:
    data = example_doc("default")
    data["teams"] = [{"name": "a", "namespace": "default"}]
    data["xpk"] = {"enabled": True}
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert e.value.field == "xpk.namespace"
    data["teams"][0]["host_network"] = True
    assert xpk.namespace(parse_spec(data)) == []  # the team's own Namespace is the one applied


def test_bad_xpk_quota_share_is_one_line_exit_2(tmp_path: Path) -> None:
    data = example_doc("default")
    data["xpk"] = {"enabled": True, "namespace": "xpk", "quota_share": 0.5}  # the default team owns 1.0
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    r = cli("workloads", "queues", "apply", "--dry-run", "--spec", str(f))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "xpk.quota_share" in lines[0], r.stderr
    assert not out.exists()


def test_queues_apply_dry_run_prints_xpks_objects(tmp_path: Path) -> None:
    data = example_doc("tpu7x")
    data["xpk"] = {"enabled": True}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    r = cli("workloads", "queues", "apply", "--dry-run", "--output", "json", "--spec", str(f))
    assert r.returncode == 0, r.stderr
    assert "multislice-queue" in r.stdout and "ironwood-resources-configmap" in r.stdout


def test_setup_script_pins_the_version_the_renderer_follows() -> None:
    text = (REPO / "scripts" / "setup-xpk.sh").read_text()
    assert f'version="{xpk.XPK_VERSION}"' in text
