"""The spec's cross-field rules are one ordered list (``infra.spec.rules.RULES``), and EnvSpec runs exactly it.

Which refusal a spec with several problems gets is decided by that order, and the
bad-spec corpus (tests/bad_specs/) pins each refusal's words: so the order lives in one
place, every rule is in it, and no cross-field check hides in a model validator of its own.
"""

from __future__ import annotations

import inspect

import pytest
import yaml

from infra.spec import EnvFields, EnvSpec, parse_spec, rules
from tests.support import REPO
from toolkit.errors import SpecError

DEFAULT = yaml.safe_load((REPO / "examples" / "default.yaml").read_text())


def test_every_check_function_is_in_the_list_once():
    defined = [f for name, f in inspect.getmembers(rules, inspect.isfunction) if name.startswith("check_") and f.__module__ == rules.__name__]
    assert defined, "rules.py defines its rules as check_* functions"
    missing = [f.__name__ for f in defined if f not in rules.RULES]
    assert missing == [], f"check_* functions that never run (add them to RULES): {missing}"
    assert len(set(rules.RULES)) == len(rules.RULES), "a rule listed twice"


def test_envspec_has_one_model_validator_and_the_fields_none():
    """The cross-field checks run only through RULES: no other model validator on the environment."""
    assert list(EnvSpec.__pydantic_decorators__.model_validators) == ["_cross"]
    assert list(EnvFields.__pydantic_decorators__.model_validators) == []


def test_envspec_runs_the_list_in_order(monkeypatch: pytest.MonkeyPatch):
    ran: list[str] = []

    def recorder(rule):
        def run(spec):
            ran.append(rule.__name__)
            return rule(spec)

        return run

    monkeypatch.setattr(rules, "RULES", tuple(recorder(r) for r in rules.RULES))
    parse_spec(DEFAULT)
    assert ran == [
        "check_zones",
        "check_pools",
        "check_ironwood",
        "check_flavor_count",
        "check_gke_version",
        "check_teams",
        "check_quota_shares",
        "check_buckets_and_ci",
        "check_datasets",
        "check_datasets_mounted",
        "check_multi_tier_checkpointing",
        "check_lustre",
        "check_derived_names",
        "check",  # infra.derived_names.check: the derived names' collisions
        "check_network",
        "check_prices",
        "check_recovery",
    ]


def test_the_first_rule_in_the_list_decides_the_refusal(monkeypatch: pytest.MonkeyPatch):
    """Two problems, one per rule: the earlier rule's refusal is the one reported; reversing the list reverses it."""
    ci_without_registry = {"cloud_build": {"enabled": True, "github_owner": "o", "github_repo": "r"}, "artifact_registry": {"enabled": False}}
    doc = {**DEFAULT, "zones": ["europe-west4-a"], **ci_without_registry}
    with pytest.raises(SpecError) as first:
        parse_spec(doc)
    assert first.value.field == "zones[0]"
    monkeypatch.setattr(rules, "RULES", tuple(reversed(rules.RULES)))
    with pytest.raises(SpecError) as reversed_order:
        parse_spec(doc)
    assert reversed_order.value.field == "cloud_build.enabled"
