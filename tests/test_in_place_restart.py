"""JobSet's in-place restart: which runs take it, what they render, what their cluster needs, and how long Kueue waits.

What JobSet v0.12.0 requires of a JobSet that restarts in place is its webhook's
(github.com/kubernetes-sigs/jobset ``pkg/webhooks/jobset_webhook.go`` at v0.12.0: every child
Job's ``backoffLimit`` MaxInt32, ``podReplacementPolicy: Failed``, ``completions`` equal to
``parallelism``; ``restartStrategy`` one of the CRD's ``Recreate``, ``BlockingRecreate``,
``InPlaceRestart``), and the agent's environment is its ``cmd/in-place-restart-agent/main.go``
(``POD_NAME``, ``JOBSET_NAME``, ``WORKER_COMMAND``, ``IN_PLACE_RESTART_EXIT_CODE``). The real
webhook, CRD, controller and agent take these objects in tests/integration/test_in_place_restart.py.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import recovery
from infra.spec import IN_PLACE_RESTART_MIN_GKE_VERSION, IN_PLACE_RESTART_MIN_JOBSET
from tests.support import cli
from tests.support.specs import example_doc, spec_from
from toolkit.errors import FieldError, NotFound, Rejected, SpecError
from toolkit.names import CapacityMode
from workloads.cluster import capabilities
from workloads.local import agents
from workloads.planning.defaults import DEFAULT_IN_PLACE_MAX_RESTARTS, DEFAULT_MAX_RESTARTS, INT32_MAX
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import inplace, jobset, kueue
from workloads.runs import service

JOBSET_RESTART_STRATEGIES = {"Recreate", "BlockingRecreate", "InPlaceRestart"}  # the CRD's enum (jobset_types.go, v0.12.0)


def _doc(**top: Any) -> dict[str, Any]:
    """The default example whose spec says runs restart in place (which raises its GKE floor to 1.35)."""
    return {**example_doc(), "recovery": {"restart": "in-place"}, **top}


def _in_place_spec(**top: Any):
    return spec_from(_doc(**top))


def _plan(spec, recipe: str = "maxtext-6b", **kw):
    return plan_run(recipe, spec, Overrides(name="ip", **kw))


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _pod(plan) -> dict[str, Any]:
    return jobset.jobset(plan)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


# ------------------------------------------------------------------ which runs restart in place


@pytest.mark.parametrize(
    "top, expected",
    [
        ({}, recovery.RECREATE),  # the default example: GKE floor 1.27, no container restart rules
        ({"cluster": {"name": "tpu-dev", "min_version": IN_PLACE_RESTART_MIN_GKE_VERSION}}, recovery.IN_PLACE),
        ({"cluster": {"name": "tpu-dev", "min_version": "1.35.0-gke.3064000"}}, recovery.RECREATE),  # one build short
        ({"cluster": {"name": "tpu-dev", "min_version": "1.34.9-gke.9999999"}}, recovery.RECREATE),
        (
            {"cluster": {"name": "tpu-dev", "min_version": IN_PLACE_RESTART_MIN_GKE_VERSION}, "versions": {"jobset": "v0.10.1"}},
            recovery.RECREATE,
        ),
        (
            {"cluster": {"name": "tpu-dev", "min_version": IN_PLACE_RESTART_MIN_GKE_VERSION}, "versions": {"jobset": IN_PLACE_RESTART_MIN_JOBSET}},
            recovery.IN_PLACE,
        ),
        ({"cluster": {"name": "tpu-dev", "min_version": "1.36.1-gke.100"}, "recovery": {"restart": "recreate"}}, recovery.RECREATE),
        ({"recovery": {"restart": "in-place"}}, recovery.IN_PLACE),  # the spec's choice raises the floor itself
    ],
)
def test_auto_takes_in_place_only_where_the_specs_cluster_has_it(top, expected):
    spec = spec_from("default", **top)
    assert spec.restart_path == expected
    assert _plan(spec, slices=2).policy.restart == expected
    assert spec.cluster_has_in_place_restart == (expected == recovery.IN_PLACE or top.get("recovery") == {"restart": "recreate"})


def test_the_spec_asking_for_in_place_raises_the_gke_floor_to_container_restart_rules():
    assert spec_from("default").min_master_version != IN_PLACE_RESTART_MIN_GKE_VERSION
    assert _in_place_spec().min_master_version == IN_PLACE_RESTART_MIN_GKE_VERSION


@pytest.mark.parametrize(
    "recipe, runtime",
    [("maxtext-6b", "job"), ("maxtext-6b", "pathways"), ("llama3-8b", "ray")],
)
def test_other_runtimes_recreate_whatever_the_spec_says(recipe, runtime):
    head = {"machine_type": "n2-highmem-32", "min_nodes": 1, "max_nodes": 1}  # a Pathways head's size
    plan = _plan(_in_place_spec(cpu_pool=head), recipe, runtime=runtime)
    assert plan.policy.restart == recovery.RECREATE and plan.policy.agent_image is None


def test_restart_flag_overrides_the_spec_both_ways():
    assert _plan(_in_place_spec(), slices=2, restart="recreate").policy.restart == recovery.RECREATE
    cluster = {"name": "tpu-dev", "min_version": IN_PLACE_RESTART_MIN_GKE_VERSION}
    spec = spec_from("default", cluster=cluster, recovery={"restart": "recreate"})
    assert _plan(spec, slices=2, restart="in-place").policy.restart == recovery.IN_PLACE


@pytest.mark.parametrize(
    "doc, args, words",
    [
        (_doc(), ["--runtime", "job"], "this run is a job run"),
        (_doc(), ["--runtime", "pathways"], "this run is a pathways run"),
        (_doc(), ["--runtime", "ray", "--recipe-name-is", "llama3-8b"], "this run is a ray run"),
        (example_doc(), [], "GKE floor is 1.27"),
        (
            {**example_doc(), "cluster": {"name": "tpu-dev", "min_version": IN_PLACE_RESTART_MIN_GKE_VERSION}, "versions": {"jobset": "v0.10.1"}},
            [],
            "versions.jobset is v0.10.1",
        ),
    ],
    ids=["job", "pathways", "ray", "gke-floor", "old-jobset"],
)
def test_explicit_in_place_is_refused_on_one_line_naming_restart(tmp_path, doc, args, words):
    recipe = "maxtext-6b"
    if "--recipe-name-is" in args:
        i = args.index("--recipe-name-is")
        recipe, args = args[i + 1], args[:i]
    out = tmp_path / "out"
    r = cli("workloads", "render", recipe, "--spec", _write(tmp_path, doc), "--out", out, "--restart", "in-place", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --restart: "), r.stderr
    assert words in lines[0] and " — " in lines[0], lines[0]
    assert not out.exists() or not any(out.rglob("*.yaml"))


def test_an_unknown_restart_path_is_refused_with_the_choices(tmp_path):
    r = cli("workloads", "render", "maxtext-6b", "--spec", _write(tmp_path, _doc()), "--out", tmp_path / "out", "--restart", "inplace")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith("error: --restart: unknown restart path 'inplace'")
    assert "in-place" in r.stderr and "recreate" in r.stderr
    with pytest.raises(PlanError, match="--restart"):
        _plan(_in_place_spec(), restart="Recreate")


# ------------------------------------------------------------------ the restart budget


def test_the_in_place_budget_covers_the_preemptions_a_run_expects():
    # JobSet counts every in-place restart, disruptions included, against maxRestarts: a week of
    # spot (or flex-start) capacity preempted every 2 h is 84 restarts.
    week_of_two_hourly_preemptions = 7 * 24 // 2
    for mode in CapacityMode:
        assert DEFAULT_IN_PLACE_MAX_RESTARTS[mode] >= DEFAULT_MAX_RESTARTS[mode], mode
        assert DEFAULT_IN_PLACE_MAX_RESTARTS[mode] <= INT32_MAX
    for mode in (CapacityMode.SPOT, CapacityMode.FLEX_START):
        assert DEFAULT_IN_PLACE_MAX_RESTARTS[mode] >= week_of_two_hourly_preemptions, mode


def test_the_budget_follows_the_path_and_max_restarts_still_wins():
    spec = _in_place_spec()
    in_place, recreate = _plan(spec, slices=2), _plan(spec, slices=2, restart="recreate")
    assert in_place.policy.max_restarts == DEFAULT_IN_PLACE_MAX_RESTARTS[CapacityMode.SPOT]
    assert recreate.policy.max_restarts == DEFAULT_MAX_RESTARTS[CapacityMode.SPOT]
    assert jobset.jobset(in_place)["spec"]["failurePolicy"]["maxRestarts"] == DEFAULT_IN_PLACE_MAX_RESTARTS[CapacityMode.SPOT]
    assert _plan(spec, slices=2, max_restarts=7).policy.max_restarts == 7


# ------------------------------------------------------------------ what an in-place run renders


def test_the_jobset_takes_jobsets_in_place_strategy_and_its_webhooks_rules():
    js = jobset.jobset(_plan(_in_place_spec(), slices=2))
    fp = js["spec"]["failurePolicy"]
    assert fp["restartStrategy"] == "InPlaceRestart" and fp["restartStrategy"] in JOBSET_RESTART_STRATEGIES
    # A program error still fails the run; anything else restarts it (in place), counted.
    assert [(r["name"], r["action"]) for r in fp["rules"]] == [
        (jobset.PROGRAM_ERROR_RULE, "FailJobSet"),
        (jobset.OTHER_FAILURE_RULE, "RestartJobSet"),
    ]
    for rj in js["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        assert job["backoffLimit"] == 2**31 - 1
        assert job["podReplacementPolicy"] == "Failed"
        # The Job controller's replacement backoff counted per index, not per Job (infra.recovery.job_replacement_backoff).
        assert job["backoffLimitPerIndex"] == 2**31 - 1 and job["completionMode"] == "Indexed"
        assert job["completions"] == job["parallelism"]
        rules = job["podFailurePolicy"]["rules"]
        assert rules[jobset.DISRUPTION_INDEX] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        assert rules[jobset.PROGRAM_ERROR_INDEX]["action"] == "FailJob"


def test_a_recreate_run_renders_as_before():
    js = jobset.jobset(_plan(_in_place_spec(), slices=2, restart="recreate"))
    assert "restartStrategy" not in js["spec"]["failurePolicy"]
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimit"] == 0 and "podReplacementPolicy" not in job
    assert job["podFailurePolicy"]["rules"][jobset.DISRUPTION_INDEX]["action"] == "FailJob"
    pod = job["template"]["spec"]
    assert "initContainers" not in pod and "restartPolicyRules" not in pod["containers"][0]


def test_the_pod_runs_the_program_under_jobsets_agent_and_nothing_else_changes():
    spec = _in_place_spec()
    ip, rc = _plan(spec, slices=2), _plan(spec, slices=2, restart="recreate")
    pod, before = _pod(ip), _pod(rc)
    (init,) = pod["initContainers"]
    assert init["name"] == inplace.AGENT_INIT_CONTAINER and init["image"] == spec.in_place_agent_image
    assert init["image"].endswith(f"/jobset-in-place-restart-agent:{spec.versions.jobset}")
    assert init["command"] == ["cp", f"/{inplace.AGENT_BINARY}", f"{inplace.AGENT_DIR}/{inplace.AGENT_BINARY}"]
    assert init["volumeMounts"] == [{"name": inplace.AGENT_VOLUME, "mountPath": inplace.AGENT_DIR}]

    (c,) = pod["containers"]
    (old,) = before["containers"]
    assert c["command"] == [f"{inplace.AGENT_DIR}/{inplace.AGENT_BINARY}"] and "args" not in c
    env = _env(c)
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["JOBSET_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"}}
    assert env["IN_PLACE_RESTART_EXIT_CODE"]["value"] == str(inplace.AGENT_EXIT_CODE)
    # The agent runs the recreate run's program, word for word once the kubelet has unescaped $$,
    # but for autocheckpoint (test_in_place_runs_save_no_checkpoint_at_the_preemption_step).
    program = [w.replace("$$", "$") for w in [*old["command"], *old.get("args", [])]]
    program = [w.replace("enable_autocheckpoint=true", "enable_autocheckpoint=false") for w in program]
    assert shlex.split(env["WORKER_COMMAND"]["value"].replace("$$", "$")) == program
    assert _env(old) == {k: v for k, v in env.items() if k in _env(old)}

    # Restart rules: the agent's code and any crash that is not a program error restart in place.
    codes = sorted({0, *ip.policy.program_error_exit_codes})
    assert c["restartPolicy"] == "Never"
    assert c["restartPolicyRules"] == [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [inplace.AGENT_EXIT_CODE]}},
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [*codes, inplace.AGENT_EXIT_CODE]}},
    ]

    # The token reaches the workload container only; the pod still automounts none.
    assert pod["automountServiceAccountToken"] is False
    token = next(v for v in pod["volumes"] if v["name"] == inplace.TOKEN_VOLUME)
    sources = token["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": inplace.TOKEN_SECONDS}}
    assert {"name": inplace.TOKEN_VOLUME, "mountPath": inplace.SA_DIR, "readOnly": True} in c["volumeMounts"]
    assert all(m["name"] != inplace.TOKEN_VOLUME for m in init["volumeMounts"])
    assert {"name": inplace.AGENT_VOLUME, "emptyDir": {}} in pod["volumes"]

    # Everything else about the pod and its container is the recreate run's.
    assert pod["volumes"][: len(before["volumes"])] == before["volumes"]
    keep = {"initContainers", "containers", "volumes"}
    assert {k: v for k, v in pod.items() if k not in keep} == {k: v for k, v in before.items() if k not in keep}
    changed = {"command", "args", "env", "restartPolicy", "restartPolicyRules", "volumeMounts"}
    assert {k: v for k, v in c.items() if k not in changed} == {k: v for k, v in old.items() if k not in changed}


@pytest.mark.parametrize(
    "exit_code, action",
    [(inplace.AGENT_EXIT_CODE, "Restart"), (137, "Restart"), (143, "Restart"), (0, None), (1, None), (2, None)],
)
def test_the_rehearsals_kubelet_reads_the_rules_as_written(exit_code, action):
    # workloads/local/agents.py plays the kubelet's container restart rules for the rehearsal.
    pod = {"spec": {"containers": [_pod(_plan(_in_place_spec(), slices=2))["containers"][0]]}}
    assert agents.rule_action(pod, exit_code) == action


def test_in_place_runs_save_no_checkpoint_at_the_preemption_step():
    # The agent ends the program with SIGKILL when the pod stops: MaxText's autocheckpoint cannot run.
    spec = _in_place_spec()
    ip, rc = _plan(spec, slices=2), _plan(spec, slices=2, restart="recreate")
    assert rc.policy.checkpoint.autocheckpoint is True
    assert ip.policy.checkpoint.autocheckpoint is False
    assert "enable_autocheckpoint=true" in " ".join(_pod(rc)["containers"][0]["args"])
    assert "enable_autocheckpoint=false" in _env(_pod(ip)["containers"][0])["WORKER_COMMAND"]["value"]
    # An explicit --set still wins (the user's call, as for any MaxText key).
    assert _plan(spec, slices=2, sets=("enable_autocheckpoint=true",)).policy.checkpoint.autocheckpoint is True


# ------------------------------------------------------------------ the team's objects and JobSet's gate


def test_queues_apply_gives_each_team_the_agents_role_and_one_policy():
    spec = spec_from("teams", recovery={"restart": "in-place"})
    assert len(spec.teams) >= 2
    objects = kueue.cluster_objects(spec)
    roles = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == inplace.ROLE]
    bindings = [o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"] == inplace.ROLE]
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(t.ns for t in spec.teams)
    for role in roles:
        assert role["rules"] == [
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        ]
    for t in spec.teams:
        (b,) = [b for b in bindings if b["metadata"]["namespace"] == t.ns]
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": t.ksa, "namespace": t.ns}]
        assert b["roleRef"]["name"] == inplace.ROLE
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == inplace.POLICY]
    (pbind,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == inplace.POLICY]
    assert pbind["spec"] == {"policyName": inplace.POLICY, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
    match = policy["spec"]["matchConditions"][0]["expression"]
    for t in spec.teams:
        assert f"'system:serviceaccount:{t.ns}:{t.ksa}'" in match
    assert "jobset.sigs.k8s.io/in-place-restart-attempt" in policy["spec"]["validations"][0]["expression"]
    # Roles come after the namespaces they live in.
    kinds = [o["kind"] for o in objects]
    assert kinds.index("Namespace") < kinds.index("Role")


def test_a_cluster_without_in_place_restarts_gets_none_of_it():
    spec = spec_from("default")
    names = {o["metadata"]["name"] for o in kueue.cluster_objects(spec)}
    assert inplace.ROLE not in names and inplace.POLICY not in names
    assert inplace.jobset_settings(spec) == {}


# The release's own configuration (config/components/manager/controller_manager_config.yaml, JobSet v0.12.0).
JOBSET_RELEASE_CONFIG = {
    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
    "kind": "Configuration",
    "leaderElection": {"leaderElect": True},
    "internalCertManagement": {"enable": True},
}


def test_manager_config_for_jobset_turns_its_gate_on_where_runs_restart_in_place(tmp_path):
    r = cli("workloads", "queues", "manager-config", "--controller", "jobset", "--spec", _write(tmp_path, _doc()))
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout) == {"featureGates": {"InPlaceRestart": True}}
    off = tmp_path / "off"
    off.mkdir()
    r = cli("workloads", "queues", "manager-config", "--controller", "jobset", "--spec", _write(off, example_doc()), "-o", "json")
    assert r.returncode == 0 and yaml.safe_load(r.stdout) == {}


def test_manager_config_for_jobset_merges_into_the_releases_configuration(tmp_path):
    release = tmp_path / "jobset.yaml"
    release.write_text(yaml.safe_dump({**JOBSET_RELEASE_CONFIG, "featureGates": {"SomeOtherGate": True}}))
    r = cli("workloads", "queues", "manager-config", "--controller", "jobset", "--spec", _write(tmp_path, _doc()), "--merge", release)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout) == {**JOBSET_RELEASE_CONFIG, "featureGates": {"SomeOtherGate": True, "InPlaceRestart": True}}


def test_manager_config_refuses_another_controllers_configuration(tmp_path):
    # Kueue's Configuration is a Configuration too: laid into it, JobSet's gate would reach a Kueue that knows no such gate.
    kueue_config = tmp_path / "kueue.yaml"
    kueue_config.write_text(yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system"}))
    r = cli("workloads", "queues", "manager-config", "--controller", "jobset", "--spec", _write(tmp_path, _doc()), "--merge", kueue_config)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: --merge: ") and r.stderr.count("\n") == 1 and r.stdout == ""
    jobset_config = tmp_path / "jobset.yaml"
    jobset_config.write_text(yaml.safe_dump(JOBSET_RELEASE_CONFIG))
    r = cli("workloads", "queues", "manager-config", "--spec", _write(tmp_path, _doc()), "--merge", jobset_config)
    assert r.returncode == 2 and r.stderr.startswith("error: --merge: "), r.stderr


def test_manager_config_refuses_an_unknown_controller(tmp_path):
    r = cli("workloads", "queues", "manager-config", "--controller", "lws", "--spec", _write(tmp_path, _doc()))
    assert r.returncode == 2 and r.stderr.startswith("error: --controller: ") and r.stderr.count("\n") == 1


# ------------------------------------------------------------------ Kueue's waitForPodsReady from the recovery path

MIN = 60


def _wfpr(spec) -> tuple[int, int]:
    w = kueue.manager_settings(spec)["waitForPodsReady"]
    return w["timeout"], w["recoveryTimeout"]


def test_spot_slices_wait_for_a_slice_to_be_made_and_the_restart_path():
    # Spot: a slice may be gone at admission and is re-made whole after a preemption (30 min, no
    # published figure: the assumption in infra/recovery.py), then each path, then a pod's start (5 min).
    recreate = spec_from("default")
    in_place = _in_place_spec()
    assert recreate.wait_for_pods_ready == ((30 + 5) * MIN, (30 + 3 + 5) * MIN)
    # In place, the lost slice's pods come back after the Job controller's backoff: up to 10 min.
    assert in_place.wait_for_pods_ready == ((30 + 5) * MIN, (30 + 10 + 5) * MIN)
    assert _wfpr(recreate) == ("2100s", "2280s")
    assert _wfpr(in_place) == ("2100s", "2700s")


def test_the_job_controllers_replacement_backoff_is_kubernetes_own():
    # pkg/controller/job: 10 s, doubling with each failure in a row, at most 10 min.
    assert [recovery.job_replacement_backoff(n) for n in range(0, 9)] == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    assert recovery.RESTART_PATH[recovery.IN_PLACE].seconds == recovery.job_replacement_backoff(99) == 600


def test_the_rehearsal_shrinks_recovery_timeout_but_not_the_job_controllers_backoff():
    # The local control plane's kube-controller-manager is the real one: it holds an in-place run's
    # lost pods back as long as GKE's does, so the rehearsal's Kueue must wait that long too, or it
    # evicts (and recreates) a run GKE would see restart in place.
    factor = 0.03
    in_place, recreate = _in_place_spec(), spec_from("default")
    back = in_place.wait_for_pods_ready[1]
    here = kueue.manager_settings(in_place, time_scale=factor)["waitForPodsReady"]["recoveryTimeout"]
    assert here == f"{round((back - 600) * factor + 600)}s" and int(here[:-1]) >= recovery.JOB_POD_FAILURE_BACKOFF_MAX_S
    # Nothing of a recreate-only cluster's recovery runs at real speed: all of it shrinks.
    assert kueue.manager_settings(recreate, time_scale=factor)["waitForPodsReady"]["recoveryTimeout"] == f"{round(recreate.wait_for_pods_ready[1] * factor)}s"


def test_a_reservation_waits_for_a_pods_start_and_a_reserved_host_replaced():
    spec = spec_from("v6e-reservation")
    start, back = spec.wait_for_pods_ready
    assert start == 5 * MIN  # its VMs are there before admission
    assert back == (12 + recovery.RESTART_PATH[spec.restart_path].minutes + 5) * MIN


def test_the_slowest_pool_decides():
    doc = example_doc()
    reserved = {"name": "v5e-res", "type": "v5litepod-16", "slices": 1, "capacity": {"mode": "reservation", "name": "r1", "zone": "us-west4-a"}}
    both = spec_from(doc, tpu_pools=[reserved, *doc["tpu_pools"]])
    (start, why_start), (back, why_back) = both.wait_for_pods_ready_needs()
    assert (start, back) == ((30 + 5) * MIN, (30 + 3 + 5) * MIN)
    assert "tpu_pools[1] (v5e-16, spot)" in why_start and "tpu_pools[1] (v5e-16, spot)" in why_back
    alone = spec_from(doc, tpu_pools=[reserved]).wait_for_pods_ready
    assert alone == (5 * MIN, (12 + 3 + 5) * MIN)


@pytest.mark.parametrize("field, index", [("timeout_seconds", 0), ("recovery_timeout_seconds", 1)])
def test_a_setting_shorter_than_what_it_guards_is_refused_and_the_need_itself_is_taken(field, index):
    need = spec_from("default").wait_for_pods_ready[index]
    ok = spec_from("default", kueue={"wait_for_pods_ready": {field: need}})
    assert ok.wait_for_pods_ready[index] == need
    with pytest.raises(SpecError, match=rf"kueue\.wait_for_pods_ready\.{field}: {need - 1} s is shorter .* = {need} s"):
        spec_from("default", kueue={"wait_for_pods_ready": {field: need - 1}})


def test_in_place_needs_a_longer_recovery_so_the_same_setting_holds_only_for_recreate():
    setting = {"wait_for_pods_ready": {"recovery_timeout_seconds": 38 * MIN}}
    assert spec_from("default", kueue=setting).wait_for_pods_ready[1] == 38 * MIN
    with pytest.raises(SpecError, match="recovery_timeout_seconds"):
        _in_place_spec(kueue=setting)


def test_turned_off_it_guards_nothing_and_kueue_is_told_so():
    spec = spec_from("default", kueue={"wait_for_pods_ready": {"enabled": False, "recovery_timeout_seconds": 60}})
    settings = kueue.manager_settings(spec)
    assert "waitForPodsReady" not in settings and settings["featureGates"] == {"DisableWaitForPodsReady": True}


def test_every_figure_says_where_it_comes_from():
    figures = [*recovery.SLICE_PROVISIONING.values(), *recovery.RESTART_PATH.values(), recovery.POD_START, *recovery.RESTORE.values()]
    for f in [*figures, recovery.COMPILE, recovery.SAVE]:
        assert f.kind in ("published", "measured", "assumption") and len(f.source) > 20, f
        assert f.kind != "published" or any(
            s in f.source for s in ("github.com", "cloud.google.com", "docs.cloud.google.com", "Google Cloud blog", "jobset")
        ), f
    assert set(recovery.RESTART_PATH) == set(recovery.RESTART_PATHS)
    assert set(recovery.SLICE_PROVISIONING) == set(CapacityMode)
    assert recovery.whole_minutes(61) == 2 and math.isclose(recovery.POD_START.minutes, 5)


# ------------------------------------------------------------------ asking the cluster (submit's capability check)


class _Cluster:
    """Answers the capability probe's dry-run create as the API server would: accepted, refused, or no such kind."""

    def __init__(self, answer: Exception | None = None) -> None:
        self.answer, self.created = answer, []

    def create(self, obj, *, field_manager, dry_run=False):
        self.created.append((obj, dry_run))
        if self.answer is not None:
            raise self.answer
        return obj

    def preferred_version(self, group):
        return "v1"


def test_the_probe_is_a_jobset_the_v0_12_webhook_takes():
    probe = capabilities._probe("research")
    assert probe["spec"]["failurePolicy"]["restartStrategy"] == "InPlaceRestart"
    for rj in probe["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        assert job["backoffLimit"] == 2**31 - 1 and job["podReplacementPolicy"] == "Failed" and job["completions"] == job["parallelism"]


def test_submit_asks_the_cluster_before_anything_is_applied_and_names_restart():
    plan = _plan(_in_place_spec(), slices=2)
    ok = _Cluster()
    service.capability_check(ok, plan)
    assert [(o["spec"]["failurePolicy"]["restartStrategy"], dry) for o, dry in ok.created] == [("InPlaceRestart", True)]
    assert ok.created[0][0]["metadata"]["namespace"] == plan.target.namespace
    # What the real JobSet v0.12.0 webhook answers with its gate off (tests/integration/test_in_place_restart.py), and
    # what an older JobSet's CRD answers: each said plainly, not cut off before the reason.
    gate_off = Rejected(
        'create JobSet research/tgk-in-place-restart-probe: admission webhook "vjobset.kb.io" denied the request: '
        'JobSet.jobset.x-k8s.io "tgk-in-place-restart-probe" is invalid: <nil>: Internal error: '
        "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"
    )
    with pytest.raises(FieldError, match=r"--restart: the cluster's JobSet runs with its InPlaceRestart feature gate off") as e:
        service.capability_check(_Cluster(gate_off), plan)
    assert "--restart recreate" in e.value.fix
    old = Rejected(
        'JobSet.jobset.x-k8s.io "tgk-in-place-restart-probe" is invalid: spec.failurePolicy.restartStrategy: '
        'Unsupported value: "InPlaceRestart": supported values: "Recreate", "BlockingRecreate"'
    )
    with pytest.raises(
        FieldError,
        match=r"--restart: the cluster's JobSet predates in-place restarts \(its CRD has no restartStrategy InPlaceRestart\) — install JobSet v0\.11\.0",
    ):
        service.capability_check(_Cluster(old), plan)
    with pytest.raises(FieldError, match=r"--restart: the cluster's JobSet refuses in-place restarts \(quota"):
        service.capability_check(_Cluster(Rejected("quota exceeded")), plan)
    with pytest.raises(FieldError, match="--restart: the cluster does not serve JobSets"):
        service.capability_check(_Cluster(NotFound("no jobsets")), plan)
    # A recreate run asks nothing of the cluster's JobSet.
    quiet = _Cluster(gate_off)
    service.capability_check(quiet, _plan(_in_place_spec(), slices=2, restart="recreate"))
    assert quiet.created == []


def test_infra_spec_says_how_runs_restart_and_what_each_timeout_guards(tmp_path):
    r = cli("infra", "spec", "--spec", _write(tmp_path, _doc(kueue={"wait_for_pods_ready": {"recovery_timeout_seconds": 3000}})))
    assert r.returncode == 0, r.stderr
    assert "recovery: runs restart in-place (recovery.restart: in-place)" in r.stdout
    timeout = next(ln for ln in r.stdout.splitlines() if "waitForPodsReady timeout " in ln)
    back = next(ln for ln in r.stdout.splitlines() if "waitForPodsReady recoveryTimeout " in ln)
    assert "2100 s" in timeout and "derived" in timeout and "30 min to provision + 5 min pod start" in timeout
    assert "3000 s" in back and "set in the spec" in back and "10 min in-place restart" in back
    r = cli("infra", "spec", "--spec", _write(tmp_path, example_doc()))
    assert "recovery: runs restart recreate (auto: in-place needs JobSet >= v0.11.0" in r.stdout
    assert "2280 s" in next(ln for ln in r.stdout.splitlines() if "recoveryTimeout " in ln)
