"""Teams sharing a cohort: borrowing and lending limits, fair-sharing weights, preemption policies.

What the spec's team fields become in each team's ClusterQueue, Kueue's fair-sharing
configuration (for ``local up`` and the provision pipeline alike), and the bad inputs,
each one line naming the field. Borrowing and reclaiming live: tests/integration/test_teams.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.spec import EXAMPLES_DIR, load_spec
from tests.support import cli, example_doc, spec_from
from toolkit.errors import SpecError
from workloads.render import kueue


def spec_with(teams: list[dict[str, Any]] | None = None, **changes: Any):
    """The teams example; ``teams`` replaces its teams (and drops its team buckets)."""
    return spec_from("teams", **({"teams": teams, "buckets": []} if teams is not None else {}), **changes)


def _cq(spec, team: str) -> dict[str, Any]:
    return next(cq for cq in kueue.cluster_queues(spec) if cq["metadata"]["name"] == f"{team}-cq")


def _tpu(cq: dict[str, Any]) -> dict[str, Any]:
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "google.com/tpu")


def test_limits_are_shares_of_the_chips():
    spec = load_spec(EXAMPLES_DIR / "teams.yaml")
    chips = sum(p.total_chips for p in spec.tpu_pools)
    pretrain, research = _tpu(_cq(spec, "pretrain")), _tpu(_cq(spec, "research"))
    assert pretrain == {"name": "google.com/tpu", "nominalQuota": chips // 2, "borrowingLimit": chips // 2, "lendingLimit": chips // 2}
    assert research == {"name": "google.com/tpu", "nominalQuota": chips // 2, "borrowingLimit": chips // 4}  # no lendingLimit: lends all


def test_cpu_and_memory_borrow_with_the_chips():
    spec = load_spec(EXAMPLES_DIR / "teams.yaml")
    (group,) = _cq(spec, "research")["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    by = {r["name"]: r for r in flavor["resources"]}
    # a quarter of the chips to borrow: a quarter of the VMs' CPU and memory too (half of the nominal)
    assert int(by["cpu"]["borrowingLimit"]) * 2 == int(by["cpu"]["nominalQuota"])
    assert int(by["memory"]["borrowingLimit"].removesuffix("Gi")) * 2 == int(by["memory"]["nominalQuota"].removesuffix("Gi"))


def test_weights_and_preemption_reach_the_cluster_queues():
    spec = load_spec(EXAMPLES_DIR / "teams.yaml")
    assert _cq(spec, "pretrain")["spec"]["fairSharing"] == {"weight": "2"}
    assert _cq(spec, "research")["spec"]["fairSharing"] == {"weight": "1"}
    teams = [
        {"name": "a", "quota_share": 0.5, "preemption": {"within_cluster_queue": "Never", "reclaim_within_cohort": "LowerPriority"}},
        {"name": "b", "quota_share": 0.5, "preemption": {"borrow_within_cohort": {"policy": "LowerPriority", "max_priority_threshold": 250}}},
    ]
    spec = spec_with(teams, kueue={"fair_sharing": {"enabled": False}})
    assert _cq(spec, "a")["spec"]["preemption"] == {"withinClusterQueue": "Never", "reclaimWithinCohort": "LowerPriority"}
    assert _cq(spec, "b")["spec"]["preemption"] == {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 250},
    }
    assert "fairSharing" not in _cq(spec, "a")["spec"]


def test_defaults_keep_the_cluster_queue_as_it_was():
    spec = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}])
    cq = _cq(spec, "a")
    assert cq["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    assert "fairSharing" not in cq["spec"]
    assert set(_tpu(cq)) == {"name", "nominalQuota"}


def test_fair_sharing_config_is_on_with_two_teams():
    two = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}])
    assert two.fair_sharing
    assert kueue.manager_settings(two)["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    one = load_spec(EXAMPLES_DIR / "default.yaml")
    assert not one.fair_sharing and "fairSharing" not in kueue.manager_settings(one)
    off = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}], kueue={"fair_sharing": {"enabled": False}})
    assert "fairSharing" not in kueue.manager_settings(off)
    # without waitForPodsReady, fair sharing is still configured
    no_wait = spec_with(kueue={"wait_for_pods_ready": {"enabled": False}, "fair_sharing": {"preemption_strategies": ["LessThanInitialShare"]}})
    # (Kueue v0.19 turns waitForPodsReady on by itself: off is said with its gate)
    settings = kueue.manager_settings(no_wait)
    assert settings["fairSharing"] == {"preemptionStrategies": ["LessThanInitialShare"]}
    assert settings["featureGates"] == {"DisableWaitForPodsReady": True} and "waitForPodsReady" not in settings


def test_manager_config_cli_merges_fair_sharing(tmp_path: Path):
    release = tmp_path / "kueue.yaml"
    release.write_text(yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system"}))
    r = cli("workloads", "queues", "manager-config", "--spec", str(EXAMPLES_DIR / "teams.yaml"), "--merge", str(release))
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert cfg["namespace"] == "kueue-system"
    assert cfg["fairSharing"]["preemptionStrategies"] == ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


@pytest.mark.parametrize(
    "teams, kueue_cfg, field, words",
    [
        ([{"name": "a", "quota_share": 0.3, "lending_limit": 0.5}, {"name": "b", "quota_share": 0.5}], None, "teams[0].lending_limit", "quota_share"),
        ([{"name": "a", "quota_share": 0.5, "borrowing_limit": 1.5}, {"name": "b", "quota_share": 0.5}], None, "teams[0].borrowing_limit", "out of range"),
        ([{"name": "a", "fair_sharing_weight": 2}], None, "teams[0].fair_sharing_weight", "fair sharing is off"),
        (
            [{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5, "preemption": {"borrow_within_cohort": {"policy": "LowerPriority"}}}],
            None,
            "teams[1].preemption.borrow_within_cohort",
            "fair sharing",
        ),
        (
            [{"name": "a", "quota_share": 0.5, "preemption": {"reclaim_within_cohort": "Sometimes"}}, {"name": "b", "quota_share": 0.5}],
            None,
            "teams[0].preemption.reclaim_within_cohort",
            "Sometimes",
        ),
        (
            [{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}],
            {"fair_sharing": {"preemption_strategies": ["Biggest"]}},
            "kueue.fair_sharing.preemption_strategies[0]",
            "Biggest",
        ),
    ],
)
def test_bad_team_settings_name_the_field(teams, kueue_cfg, field, words):
    with pytest.raises(SpecError) as e:
        spec_with(teams, **({"kueue": kueue_cfg} if kueue_cfg else {}))
    assert e.value.field == field, str(e.value)
    assert words in str(e.value)


def test_cli_refuses_a_lending_limit_above_the_quota(tmp_path: Path):
    d = example_doc("teams")
    d["teams"][1]["lending_limit"] = 0.75
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    out = tmp_path / "out"
    r = cli("infra", "synth", "--spec", str(bad), "--out", str(out))
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: teams[1].lending_limit: ") and " — " in line
    assert not out.exists()
