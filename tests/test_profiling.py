"""`--profile`: MaxText's profiler for a window of steps, uploaded to the spec's Vertex AI TensorBoard.

What a profiled run needs, and where each piece is checked here:

- MaxText 0.2.5's keys: ``profiler=xplane``, ``skip_first_n_steps_for_profiler``,
  ``profiler_steps``; ``use_vertex_tensorboard=true`` with ``vertex_tensorboard_project`` /
  ``_region`` makes it find the TensorBoard by display name (env ``TENSORBOARD_NAME``, else it
  would create ``<project>-tb-instance``), create an experiment named after the run and upload.
  (The keys pass MaxText's own validation in tests/maxtext/test_validate.py.)
- the pods' identity must hold ``roles/aiplatform.user``: on the pod network that is the team's
  SA (Workload Identity); on hostNetwork it is the node SA, which gets the role exactly when a
  team allows hostNetwork runs, as with that team's buckets. Checked over the synthesized IAM,
  with the identity each rendered pod would act as (tests/test_isolation.py's reading of GKE).
- ``metrics`` excludes the profiled steps: the window the plan writes is the one it reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import access
from infra.spec import EXAMPLES_DIR, EnvSpec, load_spec, parse_spec
from tests.support import cli
from workloads.observe.metrics import ProfilerWindow, parse_log
from workloads.planning.planner import DEFAULT_PROFILE_START, Overrides, PlanError, plan_run

DEFAULT = EXAMPLES_DIR / "default.yaml"


def _args(plan) -> dict[str, str]:
    return dict(a.split("=", 1) for a in plan.program.args[1:])


def _no_tensorboard() -> EnvSpec:
    data = yaml.safe_load(DEFAULT.read_text())
    data["tensorboard"] = {"enabled": False}
    return parse_spec(data)


# ------------------------------------------------------------------ the plan


def test_profile_sets_maxtext_s_profiler_and_vertex_keys() -> None:
    spec = load_spec(DEFAULT)
    plan = plan_run("maxtext-6b", spec, Overrides(profile_steps=3, name="prof"))
    args = _args(plan)
    assert (args["profiler"], args["skip_first_n_steps_for_profiler"], args["profiler_steps"]) == ("xplane", str(DEFAULT_PROFILE_START), "3")
    assert args["use_vertex_tensorboard"] == "true"  # the recipe's false is replaced in place, not appended twice
    assert [a.split("=")[0] for a in plan.program.args].count("use_vertex_tensorboard") == 1
    assert (args["vertex_tensorboard_project"], args["vertex_tensorboard_region"]) == (spec.project, spec.region)
    assert dict(plan.program.env)["TENSORBOARD_NAME"] == spec.tensorboard.display_name == access.tensorboard_name(spec)
    # MaxText names the experiment after run_name; Vertex AI experiment ids are [a-z0-9-]: run names fit.
    assert args["run_name"] == "prof"
    assert plan.summary()["profile"] == {"first_step": DEFAULT_PROFILE_START, "steps": 3, "vertex_tensorboard": "tpu-dev"}
    # Goodput recording stays off (GCS metrics stay on, as without --profile): --profile turns on only what it needs.
    assert args["enable_goodput_recording"] == args["monitor_goodput"] == "false" and args["gcs_metrics"] == "true"


def test_without_profile_nothing_changes() -> None:
    spec = load_spec(DEFAULT)
    plan = plan_run("maxtext-6b", spec, Overrides(name="prof"))
    args = _args(plan)
    assert args["use_vertex_tensorboard"] == "false" and "profiler" not in args
    assert "TENSORBOARD_NAME" not in dict(plan.program.env) and "profile" not in plan.summary()


def test_without_a_tensorboard_traces_stay_in_the_bucket() -> None:
    plan = plan_run("maxtext-6b", _no_tensorboard(), Overrides(profile_steps=2, profile_start=3))
    args = _args(plan)
    assert args["profiler"] == "xplane" and args["skip_first_n_steps_for_profiler"] == "3"
    assert args["use_vertex_tensorboard"] == "false" and "vertex_tensorboard_project" not in args
    assert "TENSORBOARD_NAME" not in dict(plan.program.env)


def test_metrics_excludes_exactly_the_planned_window() -> None:
    plan = plan_run("maxtext-6b", load_spec(DEFAULT), Overrides(profile_steps=4, profile_start=7))
    args = _args(plan)
    # MaxText logs its resolved config as "Config param <key>: <value>" lines.
    log = "\n".join(f"I1123 10:00:00.000 1 train.py:1] Config param {k}: {args[k]}" for k in ("profiler", "skip_first_n_steps_for_profiler", "profiler_steps"))
    window = parse_log(log).profiler_window()
    assert window == ProfilerWindow(first=7, steps=4)
    assert set(range(7, 11)) <= set(window.affected())


@pytest.mark.parametrize(
    "overrides, flag, needle",
    [
        (Overrides(profile_start=2), "--profile-start", "without --profile"),
        (Overrides(profile_steps=0), "--profile", "at least 1"),
        (Overrides(profile_steps=2, profile_start=-1), "--profile-start", ">= 0"),
        (Overrides(profile_steps=5, profile_start=98), "--profile", "past the end of the run (100 steps)"),
        (Overrides(profile_steps=2, sets=("profiler_steps=9",)), "--set", "profiler_steps is set by --profile"),
        (Overrides(profile_steps=2, sets=("use_vertex_tensorboard=false",)), "--set", "use_vertex_tensorboard"),
    ],
)
def test_bad_profile_flags(overrides: Overrides, flag: str, needle: str) -> None:
    with pytest.raises(PlanError) as e:
        plan_run("maxtext-6b", load_spec(DEFAULT), overrides)
    assert e.value.field == flag and needle in str(e.value)


def test_bad_profile_flag_cli_one_line_nothing_applied(tmp_path: Path) -> None:
    res = cli("workloads", "submit", "maxtext-6b", "--profile", "3", "--profile-start", "99", "--kubeconfig", str(tmp_path / "none"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --profile:"), res.stderr
    assert res.stdout == ""
    res = cli("workloads", "submit", "hello-tpu", "--profile", "3", "--dry-run")
    assert res.returncode == 2 and "plain command" in res.stderr


def test_submit_dry_run_json_carries_the_profile() -> None:
    res = cli("workloads", "submit", "maxtext-6b", "--profile", "3", "--profile-start", "4", "--dry-run", "--output", "json")
    assert res.returncode == 0, res.stderr
    js = next(o for o in json.loads(res.stdout) if o["kind"] == "JobSet")
    c = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert {"profiler=xplane", "skip_first_n_steps_for_profiler=4", "profiler_steps=3", "use_vertex_tensorboard=true"} <= set(c["args"])
    assert {"name": "TENSORBOARD_NAME", "value": "tpu-dev"} in c["env"]


# --------------------------------------------- who can write the TensorBoard


def test_role_table_follows_the_spec() -> None:
    default = load_spec(DEFAULT)  # one team, no hostNetwork
    assert access.team_tensorboard_roles(default) == (access.TENSORBOARD_ROLE,)
    assert access.node_tensorboard_roles(default) == ()
    opted = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml")
    assert any(t.host_network for t in opted.teams)
    assert access.node_tensorboard_roles(opted) == (access.TENSORBOARD_ROLE,)
    off = _no_tensorboard()
    assert access.team_tensorboard_roles(off) == access.node_tensorboard_roles(off) == ()
    assert "no Vertex AI TensorBoard" in (access.tensorboard_problem(off, off.teams[0], False) or "")


def _project_roles(spec: EnvSpec, doc: dict[str, Any], iam) -> dict[str, set[str]]:
    from tests.test_isolation import _deref

    out: dict[str, set[str]] = {e: set() for e in iam.emails.values()}
    for m in doc["resource"].get("google_project_iam_member", {}).values():
        if m["member"].startswith("${google_service_account."):
            out[iam.emails[_deref(m["member"], "google_service_account", "member")]].add(m["role"])
    return out


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, tuple[EnvSpec, dict[str, Any]]]:
    from infra.stack import synth
    from tests.test_isolation import three_teams

    root = tmp_path_factory.mktemp("profiling")
    specs = {"v6e-reservation": load_spec(EXAMPLES_DIR / "v6e-reservation.yaml"), "three-teams": three_teams(), "no-tensorboard": _no_tensorboard()}
    return {name: (spec, json.loads(synth(spec, root / name).read_text())) for name, spec in specs.items()}


RECIPE = {"v6e-reservation": "llama3-8b", "three-teams": "maxtext-6b", "no-tensorboard": "maxtext-6b"}


@pytest.mark.synth
@pytest.mark.parametrize("name", ["v6e-reservation", "three-teams"])
def test_profiled_pods_identity_can_write_the_tensorboard(synthesized, name) -> None:
    """Every profiled pod, on the pod network or (for opted-in teams) hostNetwork, acts as an
    identity that holds the TensorBoard role in the synthesized IAM; the node SA holds it only
    because some team opted in to hostNetwork."""
    from tests.test_isolation import identity_of, pods, read_iam

    spec, doc = synthesized[name]
    iam = read_iam(spec, doc)
    roles = _project_roles(spec, doc, iam)
    checked = 0
    for team in spec.teams:
        for host_network in (False, True) if team.host_network else (False,):
            plan = plan_run(RECIPE[name], spec, Overrides(slices=1, name="prof", team=team.name, host_network=host_network, profile_steps=2))
            assert plan.program.profile is not None and plan.program.profile.tensorboard == access.tensorboard_name(spec)
            for ns, pod in pods(plan):
                who = identity_of(spec, iam, ns, pod)
                assert who is not None, (team.name, host_network)
                assert (who == iam.node_sa) is host_network
                assert access.TENSORBOARD_ROLE in roles[who], f"{team.name} (hostNetwork={host_network}) acts as {who}, which cannot upload"
                checked += 1
    assert checked >= len(spec.teams)
    assert access.TENSORBOARD_ROLE in roles[iam.node_sa]  # both specs have an opted-in team


@pytest.mark.synth
def test_no_tensorboard_no_role_and_no_upload(synthesized) -> None:
    from tests.test_isolation import read_iam

    spec, doc = synthesized["no-tensorboard"]
    iam = read_iam(spec, doc)
    roles = _project_roles(spec, doc, iam)
    assert all(access.TENSORBOARD_ROLE not in r for r in roles.values()), roles
    assert "google_vertex_ai_tensorboard" not in doc["resource"]
    plan = plan_run("maxtext-6b", spec, Overrides(profile_steps=2))
    assert plan.program.profile is not None and plan.program.profile.tensorboard is None


@pytest.mark.synth
def test_the_stack_names_the_tensorboard_as_runs_look_it_up(synthesized) -> None:
    for name, (spec, doc) in synthesized.items():
        tbs = doc["resource"].get("google_vertex_ai_tensorboard", {})
        if spec.tensorboard.enabled:
            ((_, tb),) = tbs.items()
            assert tb["display_name"] == access.tensorboard_name(spec), name


def test_the_default_example_without_opt_in_keeps_the_node_sa_off_vertex() -> None:
    # The default example has no hostNetwork team: a node SA with aiplatform.user would be a
    # grant no pod needs. (The synthesized form of this is in the synth tests above.)
    spec = load_spec(DEFAULT)
    assert not any(t.host_network for t in spec.teams)
    with pytest.raises(PlanError, match="--host-network"):
        plan_run("maxtext-6b", spec, Overrides(host_network=True, profile_steps=2))
