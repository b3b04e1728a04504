"""The spec's Ray switch (``cluster.ray``): GKE's Ray operator add-on and the GCS FUSE CSI driver.

Spec level (fast), the synthesized Terraform JSON (``synth``: the add-on with its logging and
monitoring options when on, nothing when off), and the one warning line ``submit --runtime ray``
gives on a spec that leaves the add-on off. checkov scans the add-on's JSON in tests/test_checkov.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from infra.spec import EXAMPLES_DIR, SpecError, parse_spec
from tests.support import cli, example_doc


def _spec_data(**ray) -> dict:
    data = example_doc("v6e-reservation")
    if ray:
        data.setdefault("cluster", {})["ray"] = ray
    return data


def test_off_by_default() -> None:
    spec = parse_spec(_spec_data())
    assert spec.cluster.ray.enabled is False
    assert spec.cluster.gcs_fuse_csi is True


def test_on_with_its_options() -> None:
    spec = parse_spec(_spec_data(enabled=True, monitoring=False))
    assert (spec.cluster.ray.enabled, spec.cluster.ray.logging, spec.cluster.ray.monitoring) == (True, True, False)


def test_ray_without_gcs_fuse_is_one_line() -> None:
    data = _spec_data(enabled=True)
    data["cluster"]["gcs_fuse_csi"] = False
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    msg = str(e.value)
    assert "cluster.gcs_fuse_csi" in msg and "\n" not in msg and "true" in msg


def test_unknown_ray_key_is_refused() -> None:
    with pytest.raises(SpecError, match="cluster.ray"):
        parse_spec(_spec_data(enabled=True, dashboard=True))


# ------------------------------------------------------------------ synth


def _synth(data: dict, out: Path) -> dict:
    from infra.stack import synth

    return json.loads(synth(parse_spec(data), out).read_text())


def _cluster(doc: dict) -> dict:
    (c,) = doc["resource"]["google_container_cluster"].values()
    return c


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    root = tmp_path_factory.mktemp("ray-synth")
    out = {}
    for label, data in (("off", _spec_data()), ("on", _spec_data(enabled=True, logging=True, monitoring=False))):
        doc = _synth(data, root / label)
        out[label] = (doc, root / label)
    return out


@pytest.mark.synth
def test_synth_writes_the_ray_operator_only_when_on(synthesized) -> None:
    off = _cluster(synthesized["off"][0])["addons_config"]
    assert "ray_operator_config" not in off
    assert off["gcs_fuse_csi_driver_config"] == {"enabled": True}
    on = _cluster(synthesized["on"][0])["addons_config"]
    assert on["ray_operator_config"] == [
        {
            "enabled": True,
            "ray_cluster_logging_config": {"enabled": True},
            "ray_cluster_monitoring_config": {"enabled": False},
        }
    ]
    assert on["gcs_fuse_csi_driver_config"] == {"enabled": True}


# ------------------------------------------------------------------ submit --runtime ray


def test_ray_run_on_a_spec_without_the_add_on_warns_once(tmp_path: Path) -> None:
    args = ["submit", "llama3-8b", "--runtime", "ray", "--team", "research", "--name", "rw", "--dry-run", "-o", "json"]
    off = cli("workloads", *args, "--spec", str(EXAMPLES_DIR / "v6e-reservation.yaml"))
    assert off.returncode == 0, off.stderr
    warnings = [ln for ln in off.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "--runtime" in warnings[0] and "cluster.ray.enabled: true" in warnings[0], off.stderr
    assert json.loads(off.stdout)[0]["kind"] == "RayJob"  # a warning, not a refusal: KubeRay may be installed by hand

    on = tmp_path / "ray-on.yaml"
    on.write_text(yaml.safe_dump(_spec_data(enabled=True)))
    quiet = cli("workloads", *args, "--spec", str(on))
    assert quiet.returncode == 0 and "warning:" not in quiet.stderr, quiet.stderr


def _v5e_data(**cluster) -> dict:
    data = example_doc("default")
    data["tpu_pools"] = [{"name": "v5e-16", "type": "v5litepod-16", "slices": 1, "capacity": "spot"}]
    data["cluster"].update(cluster)
    return data


def test_ray_raises_the_gke_floor_to_what_match_label_keys_needs() -> None:
    from infra import catalog
    from infra.spec import RAY_MIN_GKE_VERSION

    off = parse_spec(_v5e_data())
    on = parse_spec(_v5e_data(ray={"enabled": True}))
    assert off.gke_version_floor is None  # a single-slice v5e pool needs no particular version
    assert on.gke_version_floor == on.min_master_version == RAY_MIN_GKE_VERSION
    assert catalog.gke_version_tuple(RAY_MIN_GKE_VERSION)[:2] == (1, 31)


def test_ray_with_an_older_min_version_is_one_line_naming_ray() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(_v5e_data(ray={"enabled": True}, min_version="1.30.5-gke.1014000"))
    msg = str(e.value)
    assert "cluster.min_version" in msg and "Ray" in msg and "matchLabelKeys" in msg and "\n" not in msg
    parse_spec(_v5e_data(min_version="1.30.5-gke.1014000"))  # without Ray the same version is fine
