"""Secure defaults (docs/security.md), checked over what the toolkit renders and synthesizes.

- every pod of every runtime and example: RuntimeDefault seccomp, no privilege
  escalation, every capability dropped (none added), no mounted service-account token,
  runAsNonRoot exactly when the team names a UID; the DCN DaemonSet: privileged only in
  its init container;
- Pod Security labels per team; the priority admission policy's objects per team;
- the team NetworkPolicies as data: a small evaluator of NetworkPolicy semantics (for the
  selectors the toolkit writes) says which connections each set of policies allows;
- the planner and the CLI refuse a priority the spec does not allow the team;
- the spec's cluster defaults and their opt-outs, down to the synthesized Terraform.

The real API server's verdicts are in tests/integration/test_secure_defaults.py.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

import pytest
import yaml

from infra.spec import EXAMPLES_DIR, PRIORITY_CLASSES, TeamSpec, load_spec, parse_spec
from infra.spec.teams import DEFAULT_RUN_AS_USER
from tests.support import REPO
from tests.support.k8s_scan import EXAMPLES, created, runs
from toolkit.errors import SpecError
from toolkit.names import K8S_NAMESPACE_NAME_LABEL, K8S_PSA_AUDIT_LABEL, K8S_PSA_ENFORCE_LABEL, K8S_PSA_WARN_LABEL, RAY_NODE_TYPE_LABEL
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import admission, kueue, netpol, podsecurity
from workloads.render.kustomize import RUNTIMES
from workloads.render.multinetwork import tcp_tuning_daemonset

DEFAULT = yaml.safe_load((EXAMPLES_DIR / "default.yaml").read_text())


def spec_from(**changes: Any):
    doc = copy.deepcopy(DEFAULT)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return parse_spec(doc)


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod spec in an object the toolkit renders or a controller creates from it."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind == "Pod":
        return [spec]
    if kind == "Job":
        return [spec["template"]["spec"]]
    if kind == "JobSet":
        return [rj["template"]["spec"]["template"]["spec"] for rj in spec["replicatedJobs"]]
    if kind == "RayJob":
        c = spec["rayClusterSpec"]
        return [spec["submitterPodTemplate"]["spec"], c["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in c["workerGroupSpecs"])]
    return []


def every_run_pod(example: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, pod spec) for every pod of every runtime's run of ``example`` (what the controllers create too)."""
    out = []
    for plan in runs(example):
        objs = RUNTIMES[plan.runtime].objects(plan)
        for obj in [*objs, *created(objs)]:
            out += [(f"{example}/{plan.name}/{obj['kind']}", s) for s in _pod_specs(obj)]
    return out


# ------------------------------------------------------------------ pods


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_run_pod_is_hardened(example: str) -> None:
    pods = every_run_pod(example)
    runtimes_seen = {label.split("/")[1].split("-")[1] for label, _ in pods}
    assert "jobset" in runtimes_seen
    for label, spec in pods:
        assert spec["automountServiceAccountToken"] is False, label
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, label
        ctx = spec["securityContext"]
        uid = DEFAULT_RUN_AS_USER
        assert (ctx["runAsNonRoot"], ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"]) == (True, uid, uid, uid), f"{label}: non-root by default"
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert c["securityContext"].get("runAsUser", uid) != 0, (label, c["name"])
            if c["name"] != "wait-gcs-ready":  # KubeRay's own init container: its env is KubeRay's (RAY_IP), HOME as the image sets it
                assert any(e["name"] == "HOME" for e in c.get("env", [])), (label, c["name"])
            ctx = c["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, (label, c["name"])
            assert ctx["capabilities"] == {"drop": ["ALL"]}, (label, c["name"])  # nothing added back
            assert not ctx.get("privileged"), (label, c["name"])


def test_the_examples_cover_every_runtime() -> None:
    seen = {p.runtime for e in EXAMPLES for p in runs(e)}
    assert seen == {"jobset", "job", "ray", "pathways"}


def test_a_team_uid_runs_every_pod_as_non_root() -> None:
    spec = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml")
    doc = spec.model_dump(mode="json", exclude_none=True)
    doc["teams"][1]["run_as_user"] = 20000
    spec = parse_spec(doc)
    for runtime in ("jobset", "job", "ray"):
        plan = plan_run("llama3-8b", spec, Overrides(team="research", runtime=runtime, name=f"uid-{runtime}"))
        objs = RUNTIMES[runtime].objects(plan)
        for obj in [*objs, *created(objs)]:
            for s in _pod_specs(obj):
                ctx = s["securityContext"]
                assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["runAsGroup"] == ctx["fsGroup"] == 20000, obj["kind"]
                for c in s["containers"]:
                    assert {"name": "HOME", "value": podsecurity.NON_ROOT_HOME} in c["env"], (runtime, c["name"])


def test_root_only_by_the_team_s_explicit_opt_in() -> None:
    spec = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml")
    doc = spec.model_dump(mode="json", exclude_none=True)
    doc["teams"][1]["run_as_root"] = True
    spec = parse_spec(doc)
    for runtime in ("jobset", "job", "ray"):
        plan = plan_run("llama3-8b", spec, Overrides(team="research", runtime=runtime, name=f"root-{runtime}"))
        assert plan.target.run_as_user is None
        objs = RUNTIMES[runtime].objects(plan)
        for obj in [*objs, *created(objs)]:
            for s in _pod_specs(obj):
                assert not {"runAsNonRoot", "runAsUser", "fsGroup"} & set(s["securityContext"]), obj["kind"]
    other = plan_run("llama3-8b", spec, Overrides(team=spec.teams[0].name, name="other"))
    assert other.target.run_as_user == DEFAULT_RUN_AS_USER  # the opt-in is the team's, not the cluster's


def test_a_recipe_home_is_kept() -> None:
    env = [{"name": "HOME", "value": "/work"}]
    assert podsecurity.home_env(1000, env) == env
    assert podsecurity.home_env(None, []) == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_team_ksas_mount_no_token_by_default(example: str) -> None:
    ksas = [o for o in kueue.queue_objects(load_spec(EXAMPLES_DIR / f"{example}.yaml")) if o["kind"] == "ServiceAccount"]
    assert ksas and all(k["automountServiceAccountToken"] is False for k in ksas)


def test_the_dcn_daemonset_is_privileged_only_where_it_must_be() -> None:
    ds = tcp_tuning_daemonset(load_spec(EXAMPLES_DIR / "tpu7x-multislice.yaml"))
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (init,) = pod["initContainers"]
    assert init["securityContext"] == {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    (pause,) = pod["containers"]
    ctx = pause["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"]


# ------------------------------------------------------------------ Pod Security


@pytest.mark.parametrize(
    "team, labels",
    [
        (TeamSpec(name="a"), {K8S_PSA_ENFORCE_LABEL: "restricted"}),
        (TeamSpec(name="a", run_as_user=1000), {K8S_PSA_ENFORCE_LABEL: "restricted"}),
        (TeamSpec(name="a", run_as_root=True), {K8S_PSA_ENFORCE_LABEL: "baseline", K8S_PSA_WARN_LABEL: "restricted", K8S_PSA_AUDIT_LABEL: "restricted"}),
        (TeamSpec(name="a", host_network=True), {K8S_PSA_ENFORCE_LABEL: "privileged", K8S_PSA_WARN_LABEL: "baseline"}),
    ],
    ids=["default", "run_as_user", "run_as_root", "host_network"],
)
def test_pod_security_labels(team: TeamSpec, labels: dict[str, str]) -> None:
    assert kueue.pod_security_labels(team) == labels


# ------------------------------------------------------------------ priorities


def test_a_team_may_use_its_priority_and_the_lower_ones_by_default() -> None:
    assert TeamSpec(name="a", priority="medium").allowed_priorities == ("very-low", "low", "medium")
    assert TeamSpec(name="a", priority="very-high").allowed_priorities == tuple(PRIORITY_CLASSES)
    assert TeamSpec(name="a", priorities=["high", "low"], priority="low").allowed_priorities == ("low", "high")
    # A spec without teams: one implicit team, nothing to outrank, every toolkit class (never system-*)
    assert load_spec(EXAMPLES_DIR / "flex-start.yaml").teams[0].allowed_priorities == tuple(PRIORITY_CLASSES)


@pytest.mark.parametrize(
    "team, field",
    [
        ({"name": "a", "priorities": ["urgent"]}, "teams[0].priorities"),
        ({"name": "a", "priorities": ["low", "low"], "priority": "low"}, "teams[0].priorities"),
        ({"name": "a", "priorities": ["low"]}, "teams[0].priorities"),  # its own priority (medium) missing
        ({"name": "a", "priorities": []}, "teams[0].priorities"),
        ({"name": "a", "run_as_user": 0}, "teams[0].run_as_user"),
        ({"name": "a", "run_as_user": 1000, "run_as_root": True}, "teams[0].run_as_root"),
    ],
)
def test_bad_team_security_fields_are_one_line(team: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_from(teams=[team])
    assert e.value.field == field and "\n" not in str(e.value), str(e.value)


def test_the_planner_refuses_a_priority_the_team_may_not_use() -> None:
    spec = load_spec(EXAMPLES_DIR / "default.yaml")
    with pytest.raises(PlanError) as e:
        plan_run("hello-tpu", spec, Overrides(priority="very-high"))
    assert e.value.field == "--priority" and "very-low, low, medium, high" in str(e.value)
    assert plan_run("hello-tpu", spec, Overrides(priority="high")).target.priority == "high"


def test_submit_refuses_it_with_one_line_and_applies_nothing(monkeypatch) -> None:
    from tests.test_fuzz_inputs import cli, workloads_app

    monkeypatch.setenv("KUBECONFIG", "/nonexistent")  # nothing may reach a cluster
    rc, out, err = cli(workloads_app, "submit", "hello-tpu", "--priority", "very-high", "--dry-run")
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: --priority: team research may not use priority very-high"), err


@pytest.mark.parametrize("example", EXAMPLES)
def test_one_priority_policy_and_binding_per_team(example: str) -> None:
    spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
    objs = admission.admission_objects(spec)
    assert len(objs) == 2 * len(spec.teams)
    for team in spec.teams:
        (policy,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == admission.policy_name(team)]
        (binding,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == admission.policy_name(team)]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: team.ns}}
        allowed = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "allowed")
        assert allowed == "[" + ", ".join(f"'{p}'" for p in team.allowed_priorities) + "]"
        resources = {r["resources"][0] for r in policy["spec"]["matchConstraints"]["resourceRules"]}
        assert resources == {"pods", "jobs", "jobsets", "rayjobs", "rayclusters"}
        assert policy["spec"]["failurePolicy"] == "Fail"
    # queues apply, the provision pipeline and local up all apply cluster_objects
    assert all(o in kueue.cluster_objects(spec) for o in objs)


# ------------------------------------------------------------------ NetworkPolicies, as data


def _match_labels(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions In/NotIn/Exists) against ``labels``; {} selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values, "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


Pod = dict[str, Any]  # {"ns": str, "labels": {...}} or {"ip": "a.b.c.d"}


def _peer_matches(peer: dict[str, Any], src: Pod, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        return "ip" in src and ipaddress.ip_address(src["ip"]) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
    if "ip" in src:
        return False
    ns_ok = _match_labels(peer["namespaceSelector"], {K8S_NAMESPACE_NAME_LABEL: src["ns"]}) if "namespaceSelector" in peer else src["ns"] == policy_ns
    return ns_ok and _match_labels(peer.get("podSelector", {}), src["labels"])


def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("protocol", "TCP") == protocol and p["port"] == port for p in ports)


def ingress_allowed(policies: list[dict[str, Any]], src: Pod, dst: Pod, port: int, protocol: str = "TCP") -> bool:
    """Kubernetes NetworkPolicy semantics: a pod no Ingress policy selects takes anything; else the union of their rules."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == dst["ns"] and "Ingress" in p["spec"]["policyTypes"] and _match_labels(p["spec"]["podSelector"], dst["labels"])
    ]
    if not selecting:
        return True
    return any(
        _port_matches(rule, port, protocol) and (not rule.get("from") or any(_peer_matches(peer, src, p["metadata"]["namespace"]) for peer in rule["from"]))
        for p in selecting
        for rule in p["spec"].get("ingress", [])
    )


def egress_allowed(policies: list[dict[str, Any]], src: Pod, dst: Pod, port: int, protocol: str = "TCP") -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == src["ns"] and "Egress" in p["spec"]["policyTypes"] and _match_labels(p["spec"]["podSelector"], src["labels"])
    ]
    if not selecting:
        return True
    return any(
        _port_matches(rule, port, protocol) and (not rule.get("to") or any(_peer_matches(peer, dst, p["metadata"]["namespace"]) for peer in rule["to"]))
        for p in selecting
        for rule in p["spec"].get("egress", [])
    )


def _run_pod(plan, role: str) -> Pod:
    labels = {**dict(plan.labels), **({RAY_NODE_TYPE_LABEL: role} if role in ("head", "worker") else {})}
    return {"ns": plan.target.namespace, "labels": labels}


@pytest.fixture(scope="module")
def teams_spec():
    return load_spec(EXAMPLES_DIR / "teams.yaml")


def test_a_runs_pods_reach_each_other_and_other_teams_are_refused(teams_spec) -> None:
    policies = netpol.network_policies(teams_spec)
    mine = plan_run("maxtext-6b", teams_spec, Overrides(team="research", slices=2, name="mine"))
    theirs = plan_run("maxtext-6b", teams_spec, Overrides(team="pretrain", slices=1, name="theirs"))
    coordinator, worker, intruder = _run_pod(mine, "jobset"), _run_pod(mine, "jobset"), _run_pod(theirs, "jobset")
    for port in (8080, 8471, 1234):  # megascale, the TPU runtime, whatever JAX's coordinator picks
        assert ingress_allowed(policies, worker, coordinator, port)
        assert not ingress_allowed(policies, intruder, coordinator, port)
    # the same team's other runs share its identity, and its namespace
    other_run = _run_pod(plan_run("maxtext-6b", teams_spec, Overrides(team="research", slices=1, name="other")), "jobset")
    assert ingress_allowed(policies, other_run, coordinator, 8080)
    # a pod of no team (default namespace) is refused too
    assert not ingress_allowed(policies, {"ns": "default", "labels": {}}, coordinator, 8080)


def test_the_ray_head_takes_its_workers_submitter_and_kuberay_only() -> None:
    spec = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml")
    policies = netpol.network_policies(spec)
    plan = plan_run("llama3-8b", spec, Overrides(team="research", runtime="ray", name="r"))
    head, worker, submitter = _run_pod(plan, "head"), _run_pod(plan, "worker"), _run_pod(plan, "submitter")
    for port in (6379, 8265, 10001):
        assert ingress_allowed(policies, worker, head, port) and ingress_allowed(policies, submitter, head, port)
    operator = {"ns": "ray-system", "labels": {"app.kubernetes.io/name": "kuberay-operator"}}
    assert ingress_allowed(policies, operator, head, 8265)
    assert not ingress_allowed(policies, operator, head, 6379) and not ingress_allowed(policies, operator, worker, 8265)
    other_team = _run_pod(plan_run("llama3-8b", spec, Overrides(team="pretrain", runtime="ray", name="o")), "worker")
    assert not ingress_allowed(policies, other_team, head, 8265)


def test_the_control_plane_range_reaches_the_dashboard_only_with_the_ray_addon() -> None:
    head = {"ns": "research", "labels": {RAY_NODE_TYPE_LABEL: "head"}}
    control_plane = {"ip": "172.16.0.2"}
    assert not ingress_allowed(netpol.network_policies(spec_from()), control_plane, head, 8265)
    with_addon = spec_from(cluster={"ray": {"enabled": True}})
    assert ingress_allowed(netpol.network_policies(with_addon), control_plane, head, 8265)
    assert not ingress_allowed(netpol.network_policies(with_addon), control_plane, head, 6379)


def test_managed_prometheus_scrapes_ray_pods_only_with_the_addons_monitoring() -> None:
    head = {"ns": "research", "labels": {RAY_NODE_TYPE_LABEL: "head", netpol.RAY_NODE_LABEL: "yes"}}
    collector = {"ns": netpol.GMP_NAMESPACE, "labels": {"app.kubernetes.io/name": "collector"}}
    assert not ingress_allowed(netpol.network_policies(spec_from()), collector, head, 8080)
    monitored = netpol.network_policies(spec_from(cluster={"ray": {"enabled": True}}))
    assert ingress_allowed(monitored, collector, head, 8080) and not ingress_allowed(monitored, collector, head, 8265)
    unmonitored = netpol.network_policies(spec_from(cluster={"ray": {"enabled": True, "monitoring": False}}))
    assert not ingress_allowed(unmonitored, collector, head, 8080)


def test_egress_is_open_unless_the_spec_lists_where_to() -> None:
    worker = {"ns": "research", "labels": {}}
    pypi = {"ip": "151.101.0.223"}
    assert egress_allowed(netpol.network_policies(spec_from()), worker, pypi, 443)
    closed = netpol.network_policies(spec_from(network_policy={"egress_cidrs": ["199.36.153.8/30"]}))
    assert not egress_allowed(closed, worker, pypi, 443)
    assert egress_allowed(closed, worker, {"ip": "199.36.153.9"}, 443)  # private.googleapis.com
    assert egress_allowed(closed, worker, {"ns": "kube-system", "labels": {"k8s-app": "kube-dns"}}, 53, "UDP")
    assert egress_allowed(closed, worker, {"ip": "169.254.169.254"}, 80)  # Workload Identity's tokens (Dataplane V2)
    assert egress_allowed(closed, worker, {"ip": "169.254.169.252"}, 988)  # (other dataplanes)
    assert egress_allowed(closed, worker, {"ns": "research", "labels": {"x": "y"}}, 8080)
    assert not egress_allowed(closed, worker, {"ns": "pretrain", "labels": {}}, 8080)


def test_network_policies_can_be_turned_off() -> None:
    assert netpol.network_policies(spec_from(network_policy={"enabled": False})) == []
    assert {o["kind"] for o in kueue.cluster_objects(spec_from())} >= {"NetworkPolicy", "ValidatingAdmissionPolicy"}


# ------------------------------------------------------------------ the cluster's defaults


def test_cluster_defaults_are_safe_and_each_opt_out_is_a_field() -> None:
    c = spec_from().cluster
    assert c.private_nodes and c.dns_endpoint and c.deletion_protection and c.master_authorized_networks == []
    opted = spec_from(cluster={"name": "tpu-dev", "private_nodes": False, "dns_endpoint": False, "deletion_protection": False}).cluster
    assert not (opted.private_nodes or opted.dns_endpoint or opted.deletion_protection)
    with pytest.raises(SpecError) as e:
        spec_from(cluster={"name": "tpu-dev", "master_authorized_networks": ["my laptop"]})
    assert e.value.field == "cluster.master_authorized_networks"


@pytest.mark.synth
def test_the_default_stack_is_private_with_nat_and_protected(tmp_path) -> None:
    from infra.stack import synth

    doc = json.loads(synth(load_spec(EXAMPLES_DIR / "default.yaml"), tmp_path).read_text())
    res = doc["resource"]
    (cluster,) = res["google_container_cluster"].values()
    assert cluster["private_cluster_config"]["enable_private_nodes"] is True
    assert cluster["master_authorized_networks_config"] == {"gcp_public_cidrs_access_enabled": False}
    assert cluster["control_plane_endpoints_config"]["dns_endpoint_config"]["allow_external_traffic"] is True
    assert cluster["deletion_protection"] is True
    # private nodes reach PyPI, GitHub and Docker Hub through Cloud NAT, Google APIs through Private Google Access
    assert len(res["google_compute_router_nat"]) == 1 and len(res["google_compute_router"]) == 1
    (subnet,) = [s for s in res["google_compute_subnetwork"].values() if "secondary_ip_range" in s]
    assert subnet["private_ip_google_access"] is True


def test_the_security_page_documents_every_opt_out() -> None:
    page = (REPO / "docs" / "security.md").read_text()
    for field in (
        "private_nodes: false",
        "master_authorized_networks",
        "dns_endpoint: false",
        "deletion_protection: false",
        "priorities:",
        "run_as_user",
        "run_as_root: true",
        "network_policy",
        "egress_cidrs",
    ):
        assert field in page, f"docs/security.md does not document {field}"


def test_stdout_stays_clean_for_dry_runs() -> None:
    """queues apply --dry-run prints the new objects too (what would be applied)."""
    from tests.test_fuzz_inputs import cli, workloads_app

    rc, out, _err = cli(workloads_app, "queues", "apply", "--dry-run", "-o", "json")
    kinds = {o["kind"] for o in json.loads(out)} if out.lstrip().startswith("[") else set()
    assert rc == 0 and {"NetworkPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds, out[:300]


def test_the_toolkit_s_other_pods_are_non_root_by_default() -> None:
    """Not only runs: the conversion Job and the Lustre helper pod run as the team's non-root UID (Pod Security restricted refuses
    them otherwise, as the real API server did)."""
    from workloads.planning.conversion import plan_conversion
    from workloads.render import convert_job, volume_helper
    from workloads.runs.cleanup import _lustre

    uid = DEFAULT_RUN_AS_USER
    pod = convert_job.job(plan_conversion("llama3.1-8b", load_spec(EXAMPLES_DIR / "default.yaml"), source="gs://my-hf/meta/L", name="c"))["spec"]["template"][
        "spec"
    ]
    assert (pod["securityContext"]["runAsNonRoot"], pod["securityContext"]["runAsUser"]) == (True, uid)
    spec = load_spec(EXAMPLES_DIR / "tpu7x-multislice.yaml")
    (v, *_) = _lustre(spec, None)
    helper = volume_helper.helper_pod(name="h", namespace=v.namespace, claim=v.claim, mount_dir=v.mount_dir, request={}, run_as_user=v.run_as_user)
    assert (helper["spec"]["securityContext"]["runAsNonRoot"], helper["spec"]["securityContext"]["runAsUser"]) == (True, uid)
