"""Kueue's controller settings from the spec: waitForPodsReady, scaled for the rehearsal."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, cli, spec_from
from toolkit.errors import SpecError
from workloads.render.kueue import manager_settings, merge_manager_config


def _spec(**wfpr):
    return spec_from("default", kueue={"wait_for_pods_ready": wfpr})


def test_defaults_turn_it_on_with_requeue_forever() -> None:
    w = manager_settings(load_spec(EXAMPLES / "default.yaml"))["waitForPodsReady"]
    assert w == {
        "timeout": "1200s",
        "recoveryTimeout": "1200s",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }


def test_time_scale_and_limit() -> None:
    w = manager_settings(_spec(timeout_seconds=600, recovery_timeout_seconds=300, requeue_limit=3), time_scale=0.05)["waitForPodsReady"]
    assert (w["timeout"], w["recoveryTimeout"]) == ("30s", "15s")
    assert w["requeuingStrategy"] == {"timestamp": "Eviction", "backoffBaseSeconds": 3, "backoffMaxSeconds": 180, "backoffLimitCount": 3}


def test_disabled_is_absent() -> None:
    assert manager_settings(_spec(enabled=False)) == {}


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
