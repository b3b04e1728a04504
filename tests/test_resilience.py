"""Runs that survive preemption and maintenance: the failure policy, restarts by capacity
mode, the step-time estimate and the checkpoint period, and their bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from infra import access
from infra.spec import BucketPurpose, load_spec
from tests.support import EXAMPLES, cli, example_doc, spec_from
from tests.support.specs import MINIMAL
from workloads.planning import planner
from workloads.planning.model import (
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_MAX_RESTARTS,
    Checkpointing,
)
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.planning.recipes import Recipe, load_recipe
from workloads.render import jobset as js

# The Job controller's failure messages, verbatim from Kubernetes v1.34.2
# pkg/controller/job/pod_failure_policy.go (Sprintf formats filled in).
K8S_DISRUPTION_MESSAGE = "Pod {ns}/{pod} has condition DisruptionTarget matching FailJob rule at index {i}"
K8S_EXIT_CODE_MESSAGE = "Container {c} for pod {ns}/{pod} failed with exit code {code} matching FailJob rule at index {i}"


def spec_with(capacity: object, buckets: list[dict] | None = None, teams: list[dict] | None = None):
    """One v5litepod-16 pool with this capacity (and these buckets and teams)."""
    changes = {"buckets": buckets} if buckets is not None else {}
    if teams is not None:
        changes["teams"] = teams
    return spec_from(MINIMAL, tpu_pools=[{"name": "p", "type": "v5litepod-16", "capacity": capacity}], **changes)


RESERVATION = {"mode": "reservation", "name": "r1", "zone": "us-central1-a"}
CAPACITIES = {"spot": "spot", "flex-start": "flex-start", "on-demand": "on-demand", "reservation": RESERVATION}


def arg(plan, key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in plan.program.args if a.split("=", 1)[0] == key), None)


# ------------------------------------------------------------ failure policy


def _first_match(rules: list[dict], reason: str, message: str) -> str:
    """JobSet's rule choice for one failed Job (v0.10.1, unchanged in v0.12.0) (failure_policy.go: first rule that applies)."""
    for rule in rules:
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        patterns = rule.get("onJobFailureMessagePatterns")
        # Go's regexp.MatchString: unanchored search; the patterns anchor themselves.
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return rule["action"]
    return "RestartJobSet"  # JobSet's default action


def test_jobset_rules_tell_disruption_program_error_and_the_rest_apart() -> None:
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=2, name="r"))
    job = js.job_spec(plan)
    pfp = job["podFailurePolicy"]["rules"]
    assert job["backoffLimit"] == 0
    # Child Job: any disruption or fatal exit code fails the Job at once (never a replacement pod).
    assert pfp[js.DISRUPTION_INDEX] == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert pfp[js.PROGRAM_ERROR_INDEX]["action"] == "FailJob"
    assert pfp[js.PROGRAM_ERROR_INDEX]["onExitCodes"] == {"containerName": "workload", "operator": "In", "values": [1, 2]}
    assert all(r["action"] != "Ignore" for r in pfp)

    rules = js.failure_policy(plan)["rules"]
    assert [r["name"] for r in rules] == ["disruption", "program_error", "other_failure"]
    disrupted = K8S_DISRUPTION_MESSAGE.format(ns="research", pod="r-slice-1-3-x7k2p", i=js.DISRUPTION_INDEX)
    assert _first_match(rules, "PodFailurePolicy", disrupted) == "RestartJobSetAndIgnoreMaxRestarts"
    for code in (1, 2):
        crashed = K8S_EXIT_CODE_MESSAGE.format(c="workload", ns="research", pod="r-slice-0-0-abcde", code=code, i=js.PROGRAM_ERROR_INDEX)
        assert _first_match(rules, "PodFailurePolicy", crashed) == "FailJobSet"
    # Signals, OOM kills, lost peers: no FailJob rule matches, backoffLimit 0 ends the Job.
    assert _first_match(rules, "BackoffLimitExceeded", "Job has reached the specified backoff limit") == "RestartJobSet"
    assert _first_match(rules, "DeadlineExceeded", "Job was active longer than specified deadline") == "RestartJobSet"
    # Another container's exit code or a different rule index is not a program error.
    other = K8S_EXIT_CODE_MESSAGE.format(c="sidecar", ns="research", pod="p", code=1, i=js.PROGRAM_ERROR_INDEX)
    assert _first_match(rules, "PodFailurePolicy", other) == "RestartJobSet"


def test_rule_names_pass_jobset_webhook() -> None:
    # JobSet v0.12.0 pkg/webhooks/jobset_webhook.go ruleNameFmt (as in v0.10.1), and its length bounds.
    name_fmt = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    plan = plan_run("llama3-8b", load_spec(EXAMPLES / "flex-start.yaml"), Overrides(slices=4, name="r"))
    names = [r["name"] for r in js.failure_policy(plan)["rules"]]
    assert len(set(names)) == len(names)
    assert all(name_fmt.match(n) and 1 <= len(n) <= 128 and "-" not in n for n in names)


def test_pod_condition_rule_always_has_status() -> None:
    """A resubmit once failed with 422 'onPodConditions[0].status: Required value'."""
    for example, recipe in [("default", "hello-tpu"), ("v4", "maxtext-6b")]:
        plan = plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), Overrides(name="r"))
        for rule in js.pod_failure_policy(plan)["rules"]:
            for cond in rule.get("onPodConditions", []):
                assert cond["status"] == "True"


def test_recipe_fatal_exit_codes_join_the_program_errors(monkeypatch) -> None:
    base = load_recipe("maxtext-6b")
    recipe = Recipe.model_validate({**base.model_dump(mode="json", exclude_none=True), "fatal_exit_codes": [42, 3, 42]})
    monkeypatch.setattr(planner, "load_recipe", lambda name: recipe)
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(name="r"))
    assert plan.policy.program_error_exit_codes == (1, 2, 3, 42)
    assert js.pod_failure_policy(plan)["rules"][js.PROGRAM_ERROR_INDEX]["onExitCodes"]["values"] == [1, 2, 3, 42]


@pytest.mark.parametrize("code", [0, 128, 137, 143, 255, 300])
def test_signal_exit_codes_cannot_be_declared_fatal(code: int) -> None:
    base = load_recipe("maxtext-6b").model_dump(mode="json", exclude_none=True)
    with pytest.raises(ValueError, match="fatal_exit_codes"):
        Recipe.model_validate({**base, "fatal_exit_codes": [code]})


# ------------------------------------------------------- restarts by capacity


@pytest.mark.parametrize("mode", sorted(CAPACITIES))
def test_max_restarts_default_by_capacity(mode: str) -> None:
    plan = plan_run("maxtext-6b", spec_with(CAPACITIES[mode]), Overrides(name="r"))
    assert plan.target.capacity == mode
    assert plan.policy.max_restarts == DEFAULT_MAX_RESTARTS[mode]
    assert js.failure_policy(plan)["maxRestarts"] == DEFAULT_MAX_RESTARTS[mode]
    assert plan.summary()["max_restarts"] == DEFAULT_MAX_RESTARTS[mode]


def test_preemptible_capacity_restarts_more_than_dedicated() -> None:
    assert DEFAULT_MAX_RESTARTS["spot"] > 0 and DEFAULT_MAX_RESTARTS["flex-start"] > 0
    assert DEFAULT_MAX_RESTARTS["spot"] >= DEFAULT_MAX_RESTARTS["on-demand"]
    assert set(DEFAULT_MAX_RESTARTS) == set(DEFAULT_CHECKPOINT_MINUTES) == set(CAPACITIES)


def test_explicit_max_restarts_wins_including_zero() -> None:
    spec = spec_with("spot")
    assert plan_run("maxtext-6b", spec, Overrides(max_restarts=0)).policy.max_restarts == 0
    assert plan_run("maxtext-6b", spec, Overrides(max_restarts=7)).policy.max_restarts == 7
    with pytest.raises(PlanError, match="^--max-restarts: must be >= 0"):
        plan_run("maxtext-6b", spec, Overrides(max_restarts=-1))


# ------------------------------------------------------------ step time


def test_step_time_is_the_work_of_the_step_at_the_fitted_efficiencies() -> None:
    from workloads.planning import step_time

    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=2, name="r"))
    p, t = plan.program, plan.target
    tokens = p.sizing.global_batch_size * 2048 / t.devices  # per device
    # maxtext-6b: emb 4096, 16 heads x 256, MLP 16384 (gated), 32 layers, vocab 32768; remat full
    # recomputes every layer's forward but the last MLP projection.
    e, hd, m, layers, v, seq = 4096, 16 * 256, 16384, 32, 32768, 2048
    qkv, out, mlp_in, mlp_out = 2 * e * 3 * hd, 2 * hd * e, 2 * e * m * 2, 2 * e * m
    attention = 2 * seq * hd  # causal scores and values, per token and layer
    dense = (layers * (4 * (qkv + out + mlp_in) + 3 * mlp_out) + 3 * 2 * e * v) * tokens
    # v5e publishes no step time: its dense matmuls take the lowest fitted efficiency.
    expected = dense / (197e12 * min(step_time.DENSE_EFFICIENCY.values())) + 4 * layers * attention * tokens / (197e12 * step_time.ATTENTION_EFFICIENCY)
    assert p.estimated_step_seconds == pytest.approx(expected)
    assert p.estimated_run_seconds == pytest.approx(100 * expected)
    model_flops = (layers * 3 * (qkv + out + mlp_in + mlp_out + attention) + 3 * 2 * e * v) * tokens
    assert p.estimated_mfu == pytest.approx(model_flops / expected / 197e12)
    s = plan.summary()
    assert s["estimated_step_seconds"] == round(expected, 3)
    assert s["step_time_error"] == {"kind": "dense, bf16", "measured": False}  # no published v5e figure
    assert 1 < expected < 60  # an 8.6B model on 32 v5e chips: seconds, not ms or minutes


def test_step_time_scales_with_slices_and_generation() -> None:
    one = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=1, name="r")).program
    two = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=2, name="r")).program
    # Twice the chips and twice the global batch: the same step time.
    assert two.sizing.global_batch_size == 2 * one.sizing.global_batch_size
    assert two.estimated_step_seconds == pytest.approx(one.estimated_step_seconds)
    v6e = plan_run("llama3-8b", load_spec(EXAMPLES / "v6e-reservation.yaml"), Overrides(slices=1, name="r", team="research")).program
    assert v6e.estimated_step_seconds < one.estimated_step_seconds


def test_plain_command_has_no_estimate_and_no_checkpoints() -> None:
    plan = plan_run("hello-tpu", load_spec(EXAMPLES / "default.yaml"), Overrides(name="r"))
    assert plan.program.estimated_step_seconds is None and plan.program.estimated_run_seconds is None
    assert plan.policy.checkpoint is None and plan.summary()["checkpoint"] is None
    with pytest.raises(PlanError, match="^--checkpoint-every:"):
        plan_run("hello-tpu", load_spec(EXAMPLES / "default.yaml"), Overrides(checkpoint_every=30))


# -------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("mode", sorted(CAPACITIES))
def test_checkpointing_is_on_by_default_with_capacity_defaults(mode: str) -> None:
    plan = plan_run("maxtext-6b", spec_with(CAPACITIES[mode]), Overrides(name="run-a", steps=5000))
    c = plan.policy.checkpoint
    step_s = plan.program.estimated_step_seconds
    assert c is not None and c.every_minutes == DEFAULT_CHECKPOINT_MINUTES[mode]
    assert c.period_steps == math.floor(c.every_minutes * 60 / step_s)
    assert c.keep == DEFAULT_CHECKPOINTS_KEPT and c.async_save
    assert c.autocheckpoint is (mode == "spot")
    # A stable run_name under the team's checkpoints bucket: a restarted JobSet finds its steps.
    assert arg(plan, "run_name") == "run-a"
    assert arg(plan, "base_output_directory") == "gs://my-ckpt-bucket"
    for key, value in c.maxtext_args().items():
        assert arg(plan, key) == value
    assert plan.summary()["checkpoint"]["directory"] == "gs://my-ckpt-bucket/run-a/checkpoints/"


def test_spot_checkpoints_more_often_than_dedicated_capacity() -> None:
    m = DEFAULT_CHECKPOINT_MINUTES
    assert m["spot"] < m["flex-start"] <= m["on-demand"] == m["reservation"] <= 60


def test_checkpoint_every_sets_the_period_in_steps() -> None:
    spec = spec_with("spot")
    plan = plan_run("maxtext-6b", spec, Overrides(steps=5000, checkpoint_every=5))
    step_s = plan.program.estimated_step_seconds
    assert plan.policy.checkpoint.every_minutes == 5
    assert plan.policy.checkpoint.period_steps == math.floor(300 / step_s)
    assert arg(plan, "checkpoint_period") == str(math.floor(300 / step_s))


def test_default_period_is_clamped_to_the_run() -> None:
    # 10 steps of a few seconds: a 15-minute period would never fire; the run's last step is its checkpoint.
    plan = plan_run("maxtext-6b", spec_with("spot"), Overrides(steps=10))
    assert plan.policy.checkpoint.period_steps == 10


@pytest.mark.parametrize("minutes, needle", [(0.001, "shorter than one step"), (10_000, "longer than the whole run")])
def test_explicit_period_outside_the_run_is_refused(minutes: float, needle: str) -> None:
    with pytest.raises(PlanError, match=f"^--checkpoint-every: .*{needle}"):
        plan_run("maxtext-6b", spec_with("spot"), Overrides(steps=100, checkpoint_every=minutes))


@pytest.mark.parametrize("minutes", [0, -5, math.nan, math.inf])
def test_checkpoint_every_must_be_a_positive_number(minutes: float) -> None:
    with pytest.raises(PlanError, match="^--checkpoint-every: must be a number of minutes above 0"):
        plan_run("maxtext-6b", spec_with("spot"), Overrides(checkpoint_every=minutes))


def test_set_keys_override_defaults_and_reach_the_policy() -> None:
    sets = ("checkpoint_period=7", "max_num_checkpoints_to_keep=5", "async_checkpointing=false", "enable_autocheckpoint=false")
    plan = plan_run("maxtext-6b", spec_with("spot"), Overrides(steps=50, sets=sets))
    c = plan.policy.checkpoint
    assert (c.period_steps, c.keep, c.async_save, c.autocheckpoint) == (7, 5, False, False)
    assert [arg(plan, k) for k in ("checkpoint_period", "max_num_checkpoints_to_keep", "async_checkpointing")] == ["7", "5", "false"]
    assert sum(a.startswith("checkpoint_period=") for a in plan.program.args) == 1  # never twice


def test_checkpointing_off() -> None:
    plan = plan_run("maxtext-6b", spec_with("spot"), Overrides(sets=("enable_checkpointing=false",)))
    assert plan.policy.checkpoint is None
    assert arg(plan, "enable_checkpointing") == "false" and arg(plan, "checkpoint_period") is None


def test_checkpointing_needs_a_checkpoints_bucket() -> None:
    spec = spec_with("spot", buckets=[{"name": "my-art-bucket", "purpose": "artifacts"}])
    with pytest.raises(PlanError, match="^buckets: checkpointing is on .*purpose: checkpoints.*enable_checkpointing=false"):
        plan_run("maxtext-6b", spec)
    # Off, the artifacts bucket is enough for MaxText's other output.
    plan = plan_run("maxtext-6b", spec, Overrides(sets=("enable_checkpointing=false",)))
    assert arg(plan, "base_output_directory") == "gs://my-art-bucket"


def test_checkpoints_only_where_the_run_can_write(monkeypatch) -> None:
    spec = spec_with("spot")
    monkeypatch.setitem(access.BUCKET_ROLES, BucketPurpose.CHECKPOINTS, ("roles/storage.objectViewer", "roles/storage.objectViewer"))
    with pytest.raises(PlanError, match="^buckets: checkpoints cannot be saved: .*can only read bucket my-ckpt-bucket"):
        plan_run("maxtext-6b", spec)


def test_output_outside_the_spec_is_the_users_to_vouch_for() -> None:
    plan = plan_run("maxtext-6b", spec_with("spot", buckets=[]), Overrides(sets=("base_output_directory=gs://elsewhere/x",)))
    assert plan.policy.checkpoint is not None
    assert plan.summary()["checkpoint"]["directory"] == f"gs://elsewhere/x/{plan.name}/checkpoints/"


def test_checkpointing_dataclass_args() -> None:
    c = Checkpointing(every_minutes=15, period_steps=120, keep=3, async_save=True, autocheckpoint=True)
    assert c.maxtext_args() == {
        "enable_checkpointing": "true",
        "async_checkpointing": "true",
        "checkpoint_period": "120",
        "max_num_checkpoints_to_keep": "3",
        "enable_autocheckpoint": "true",
    }


def test_every_checkpoint_key_is_a_maxtext_key() -> None:
    from workloads.planning.maxtext_keys import maxtext_keys

    assert set(planner.CHECKPOINT_KEYS) <= maxtext_keys()
    assert set(Checkpointing(1, 1, 1).maxtext_args()) == set(planner.CHECKPOINT_KEYS)


def test_training_recipes_do_not_turn_checkpointing_off() -> None:
    for name in ("maxtext-6b", "llama3-8b", "gpt3-6b"):
        args = load_recipe(name).maxtext.args
        assert str(args.get("enable_checkpointing", True)).lower() == "true", name


# ------------------------------------------------------------------- CLI


def test_cli_prints_the_policy_in_the_plan(tmp_path: Path) -> None:
    r = cli("workloads", "render", "maxtext-6b", "--name", "rs", "--out", str(tmp_path), "-o", "json", "--checkpoint-every", "20", "--steps", "2000")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["max_restarts"] == 3 and plan["checkpoint"]["every_minutes"] == 20
    assert plan["estimated_step_seconds"] > 0 and plan["estimated_run_seconds"] == pytest.approx(2000 * plan["estimated_step_seconds"], rel=1e-3)
    patch = yaml.safe_load((tmp_path / "overlays" / "rs" / "patch-jobset.yaml").read_text())
    assert "RestartJobSetAndIgnoreMaxRestarts" in json.dumps(patch)


def test_cli_no_checkpoints_bucket_is_one_line(tmp_path: Path) -> None:
    data = example_doc("default")
    data["buckets"] = [b for b in data["buckets"] if b["purpose"] != "checkpoints"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "tree"
    r = cli("workloads", "render", "maxtext-6b", "--spec", str(spec), "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: buckets: checkpointing is on"), r.stderr
    assert not out.exists()
