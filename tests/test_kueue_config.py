"""Kueue's controller settings from the spec: waitForPodsReady, scaled for the rehearsal."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import recovery
from infra.spec import load_spec
from tests.support import EXAMPLES, cli, spec_from
from toolkit.errors import SpecError
from workloads.render.kueue import manager_settings, merge_manager_config


def _spec(**wfpr):
    return spec_from("default", kueue={"wait_for_pods_ready": wfpr})


def test_defaults_are_derived_from_the_pools_and_requeue_forever() -> None:
    """The default spec (spot v5e 4x4 slices): a start may wait for a preempted slice's VMs, a recovery as well plus the Recreate restart."""
    spec = load_spec(EXAMPLES / "default.yaml")
    w = manager_settings(spec)["waitForPodsReady"]
    start = recovery.start_seconds("spot")
    back = recovery.recovery_seconds("spot", recovery.RECREATE)
    assert (start, back) == (35 * 60, 38 * 60)
    assert w == {
        "timeout": f"{start:.0f}s",
        "recoveryTimeout": f"{back:.0f}s",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }


def test_a_reserved_fixed_size_pool_needs_only_a_pods_start_to_begin() -> None:
    spec = load_spec(EXAMPLES / "v6e-reservation.yaml")
    assert all(o.mode == "reservation" and not p.scales_from_zero(o) for p in spec.tpu_pools for o in p.capacity_options())
    timeout, recovery_timeout = spec.wait_for_pods_ready
    assert timeout == recovery.POD_START.seconds
    assert recovery_timeout == recovery.recovery_seconds("reservation", spec.restart_path)


def test_the_slowest_pool_sets_the_timeouts() -> None:
    mixed = spec_from(
        "default",
        tpu_pools=[
            {"name": "a", "type": "v5litepod-16", "capacity": {"mode": "reservation", "name": "r", "zone": "us-west4-a"}},
            {"name": "b", "type": "v5litepod-16", "capacity": "on-demand", "autoscaling": True},
        ],
    )
    (start, why), (back, why_back) = mixed.wait_for_pods_ready_needs()
    assert start == recovery.start_seconds("on-demand") and "tpu_pools[1] (b, on-demand)" in why
    assert back == recovery.recovery_seconds("on-demand", mixed.restart_path) and "tpu_pools[1]" in why_back


def test_time_scale_and_limit() -> None:
    w = manager_settings(_spec(timeout_seconds=3000, recovery_timeout_seconds=2400, requeue_limit=3), time_scale=0.05)["waitForPodsReady"]
    assert (w["timeout"], w["recoveryTimeout"]) == ("150s", "120s")
    assert w["requeuingStrategy"] == {"timestamp": "Eviction", "backoffBaseSeconds": 3, "backoffMaxSeconds": 180, "backoffLimitCount": 3}


def test_disabled_turns_off_kueues_own_default() -> None:
    # Kueue v0.19 has it on without a block: off is its DisableWaitForPodsReady gate.
    off = manager_settings(_spec(enabled=False))
    assert off["featureGates"] == {"DisableWaitForPodsReady": True} and "waitForPodsReady" not in off
    older = spec_from("default", kueue={"wait_for_pods_ready": {"enabled": False}}, versions={"kueue": "v0.17.1"})
    assert "featureGates" not in manager_settings(older) and "waitForPodsReady" not in manager_settings(older)


@pytest.mark.parametrize("field, value", [("timeout_seconds", 1200), ("recovery_timeout_seconds", 2100)])
def test_a_timeout_shorter_than_what_it_guards_is_refused(field, value) -> None:
    with pytest.raises(
        SpecError, match=rf"^kueue\.wait_for_pods_ready\.{field}: {value} s is shorter than what it guards: tpu_pools\[0\] \(v5e-16, spot\)"
    ) as e:
        _spec(**{field: value})
    assert "raise it to at least" in str(e.value)


def test_kueue_copies_the_run_label_onto_every_workload() -> None:
    """Once a run is gone, the label on its Workload is the ownership ledger's proof that a run of the toolkit's made it."""
    from toolkit.names import TGK_RUN_LABEL

    for enabled in (True, False):
        assert manager_settings(_spec(enabled=enabled))["integrations"] == {"labelKeysToCopy": [TGK_RUN_LABEL]}
    merged = merge_manager_config({"integrations": {"frameworks": ["batch/job"]}}, manager_settings(_spec()))
    assert merged["integrations"] == {"frameworks": ["batch/job"], "labelKeysToCopy": [TGK_RUN_LABEL]}  # the release's frameworks kept


def test_merge_keeps_the_release_settings() -> None:
    base = {"kind": "Configuration", "integrations": {"frameworks": ["batch/job"]}, "waitForPodsReady": {"timeout": "5m", "x": 1}}
    out = merge_manager_config(base, {"waitForPodsReady": {"timeout": "60s"}})
    assert out == {"kind": "Configuration", "integrations": {"frameworks": ["batch/job"]}, "waitForPodsReady": {"timeout": "60s", "x": 1}}
    assert base["waitForPodsReady"]["timeout"] == "5m"  # not mutated


@pytest.mark.parametrize(
    "wfpr, field",
    [
        ({"backoff_base_seconds": 100, "backoff_max_seconds": 10}, "backoff_max_seconds"),
        ({"timeout_seconds": 5}, "timeout_seconds"),
        ({"requeue_limit": -1}, "requeue_limit"),
    ],
)
def test_bad_settings_name_the_field(wfpr, field) -> None:
    with pytest.raises(SpecError, match=rf"kueue\.wait_for_pods_ready\.{field}"):
        _spec(**wfpr)


def test_cli_merge_refuses_a_non_configuration(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("kind: ConfigMap\n")
    r = cli("workloads", "queues", "manager-config", "--merge", str(f))
    assert r.returncode == 2 and r.stderr.startswith("error: --merge:") and r.stderr.count("\n") == 1
