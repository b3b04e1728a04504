"""The secure defaults (tests/test_secure_defaults.py) against the real API server of the local cluster.

- The priority admission policy that ``local up`` applied for the default spec's team
  (through ``cluster_objects``, as ``queues apply`` and the provision pipeline do): a Pod,
  a Job or a JobSet with a priority the team may not use is refused with a line naming
  the team, the priority and the allowed ones; an allowed one is admitted; other
  namespaces are not touched. A narrowed policy does not strand what was admitted before
  (updates that leave priorities alone pass). The policy type-checks clean.
- Pod Security: every team gets ``restricted`` (its pods run as non-root by default; a
  ``run_as_user`` of its own too), and every pod the toolkit renders for it, on every
  runtime (with what KubeRay adds to its pods), is admitted; the same pods as root are
  refused. A team that opted into its image's user (``run_as_root``) gets ``baseline``,
  which admits its pods.
- Every example's NetworkPolicies and admission objects pass server-side validation
  (dry run). The local cluster has no network plugin, so NetworkPolicies are not
  enforced here: what they allow is tested as data in tests/test_secure_defaults.py.

Dry runs where possible; what is created is deleted. RayJob and RayCluster refusals need
KubeRay's CRDs: tests/integration/test_ray_runtime.py checks them on its Ray cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from infra.spec import DEFAULT_SPEC_PATH, EXAMPLES_DIR, TeamSpec, load_spec, parse_spec
from tests.support.k8s_scan import EXAMPLES, created
from tests.support.local_cluster import wait_for
from toolkit.errors import Rejected
from toolkit.names import KUEUE_PRIORITY_CLASS_LABEL, TGK_FIELD_MANAGER
from workloads.planning.planner import Overrides, plan_run
from workloads.render import admission, kueue, netpol
from workloads.render.kustomize import RUNTIMES

ADMISSION_API = "admissionregistration.k8s.io/v1"


def _pod(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": copy.deepcopy(spec)}


def _pods_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod the run's objects make (as Pods): JobSet child Jobs' and the Job's templates, KubeRay's pods and submitter."""
    out = []
    for obj in [*objects, *created(objects)]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"][:50]
        if obj["kind"] == "Pod":
            out.append(_pod(name, ns, obj["spec"]))
        elif obj["kind"] == "Job":
            out.append(_pod(f"{name}-pod", ns, obj["spec"]["template"]["spec"]))
    return out


def _refused(cluster, obj: dict[str, Any]) -> str:
    with pytest.raises(Rejected) as e:
        cluster.create(obj, dry_run=True)
    return str(e.value)


@pytest.fixture(scope="module")
def team():
    (t,) = load_spec(DEFAULT_SPEC_PATH).teams
    return t


@pytest.fixture(scope="module")
def jobset(team) -> dict[str, Any]:
    plan = plan_run("hello-tpu", load_spec(DEFAULT_SPEC_PATH), Overrides(name="prio"))
    (js,) = RUNTIMES["jobset"].objects(plan)
    return js


def _with_priority(obj: dict[str, Any], priority: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for spec in _templates(obj):
        spec["priorityClassName"] = priority
    return obj


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    return [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]


# ------------------------------------------------------------------ priorities


def test_the_team_policy_is_applied_and_type_checks_clean(cluster, team) -> None:
    name = admission.policy_name(team)

    def checked() -> dict | None:
        p = cluster.get(cluster.resource(ADMISSION_API, "ValidatingAdmissionPolicy"), name)
        return p if p and (p.get("status") or {}).get("observedGeneration") == p["metadata"]["generation"] else None

    policy = wait_for(checked, 60, f"ValidatingAdmissionPolicy {name} to be type-checked")
    assert not (policy["status"].get("typeChecking") or {}).get("expressionWarnings"), policy["status"]
    assert cluster.get(cluster.resource(ADMISSION_API, "ValidatingAdmissionPolicyBinding"), name) is not None


@pytest.mark.parametrize("kind", ["JobSet", "Job", "Pod"])
def test_a_forbidden_priority_is_refused_and_an_allowed_one_admitted(cluster, team, jobset, kind) -> None:
    if kind == "JobSet":
        obj = jobset
    else:
        job = RUNTIMES["job"].objects(plan_run("hello-tpu", load_spec(DEFAULT_SPEC_PATH), Overrides(name="prio-job", runtime="job")))[1]
        obj = job if kind == "Job" else _pod("prio-pod", team.ns, job["spec"]["template"]["spec"])
    for allowed in team.allowed_priorities:
        assert cluster.create(_with_priority(obj, allowed), dry_run=True)["metadata"]["name"] == obj["metadata"]["name"]
    for forbidden in ("very-high", "system-cluster-critical", "system-node-critical"):
        msg = _refused(cluster, _with_priority(obj, forbidden))
        assert f"priorityClassName {forbidden} is not allowed in namespace {team.ns}" in msg, msg
        assert f"team {team.name} may use {', '.join(team.allowed_priorities)}" in msg and "(HTTP 403)" in msg, msg


def test_no_priority_at_all_is_admitted(cluster, team, jobset) -> None:
    js = copy.deepcopy(jobset)
    for spec in _templates(js):
        spec.pop("priorityClassName")
    assert cluster.create(js, dry_run=True)


def test_a_kueue_workload_priority_class_label_is_refused(cluster, team, jobset) -> None:
    js = copy.deepcopy(jobset)
    js["metadata"]["labels"][KUEUE_PRIORITY_CLASS_LABEL] = "urgent"
    msg = _refused(cluster, js)
    assert f"the {KUEUE_PRIORITY_CLASS_LABEL} label is not allowed in team {team.name}'s namespace" in msg, msg


def test_other_namespaces_are_not_bound(cluster, jobset) -> None:
    pod = _pod("prio-elsewhere", "default", _templates(jobset)[0])
    pod["spec"]["priorityClassName"] = "very-high"
    pod["spec"]["serviceAccountName"] = "default"
    assert cluster.create(pod, dry_run=True)["spec"]["priorityClassName"] == "very-high"


@pytest.fixture()
def narrowing_team(cluster) -> Iterator[TeamSpec]:
    """A namespace of its own whose team may first use high, then only up to medium."""
    t = TeamSpec(name="tgk-narrow", priority="high")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": t.ns, "labels": kueue.pod_security_labels(t)}}
    ksa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": t.ksa, "namespace": t.ns}}
    cluster.apply([ns, ksa, admission.priority_policy(t), admission.priority_binding(t)], field_manager=TGK_FIELD_MANAGER)
    try:
        yield t
    finally:
        cluster.delete(cluster.resource(ADMISSION_API, "ValidatingAdmissionPolicyBinding"), admission.policy_name(t))
        cluster.delete(cluster.resource(ADMISSION_API, "ValidatingAdmissionPolicy"), admission.policy_name(t))
        cluster.delete(cluster.resource("v1", "Namespace"), t.ns)


def test_narrowing_a_team_refuses_new_pods_but_not_updates_of_admitted_ones(cluster, jobset, narrowing_team) -> None:
    t = narrowing_team
    spec = copy.deepcopy(_templates(jobset)[0])
    spec.update(priorityClassName="high", serviceAccountName=t.ksa, schedulingGates=[{"name": "tpu-gke-toolkit/test"}])  # never scheduled
    pod = _pod("admitted-before", t.ns, spec)
    wait_for(lambda: cluster.create(pod, dry_run=True), 30, "the new binding's namespace to admit a high pod")
    cluster.create(pod)
    narrowed = t.model_copy(update={"priority": "medium"})
    cluster.apply([admission.priority_policy(narrowed)], field_manager=TGK_FIELD_MANAGER)

    def refused_now() -> bool:
        try:
            cluster.create({**pod, "metadata": {"name": "after", "namespace": t.ns}}, dry_run=True)
            return False
        except Rejected as e:
            return "priorityClassName high is not allowed" in str(e)

    wait_for(refused_now, 60, "the narrowed policy to refuse a new high pod")
    patched = cluster.apply(
        [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admitted-before", "namespace": t.ns, "labels": {"touched": "yes"}}}],
        field_manager="tgk-test-update",
    )
    assert patched[0]["metadata"]["labels"]["touched"] == "yes" and patched[0]["spec"]["priorityClassName"] == "high"


# ------------------------------------------------------------------ Pod Security


def _team_spec(namespace: str, **team: Any):
    doc = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml").model_dump(mode="json", exclude_none=True)
    doc["teams"][1].update(namespace=namespace, **team)
    return parse_spec(doc)


def _namespace_of(cluster, spec) -> Iterator[Any]:
    team = spec.teams[1]
    cluster.apply(
        [
            o
            for o in kueue.queue_objects(spec)
            if o["kind"] in ("Namespace", "ServiceAccount") and team.ns in (o["metadata"].get("namespace"), o["metadata"]["name"])
        ]
    )
    try:
        yield spec
    finally:
        cluster.delete(cluster.resource("v1", "Namespace"), team.ns)


# A namespace each: the first one's deletion is still going on when the second is made.
@pytest.fixture(scope="module", params=[("tgk-psa-default-uid", {}), ("tgk-psa-own-uid", {"run_as_user": 20000})], ids=["default-uid", "own-uid"])
def restricted(cluster, request) -> Iterator[Any]:
    namespace, team = request.param
    spec = _team_spec(namespace, **team)
    team = spec.teams[1]
    assert kueue.pod_security_labels(team) == {"pod-security.kubernetes.io/enforce": "restricted"}
    yield from _namespace_of(cluster, spec)


@pytest.mark.parametrize("runtime", ["jobset", "job", "ray"])
def test_a_non_root_team_meets_restricted_on_every_runtime(cluster, restricted, runtime) -> None:
    plan = plan_run("llama3-8b", restricted, Overrides(team="research", runtime=runtime, name=f"psa-{runtime}"))
    pods = _pods_of(RUNTIMES[runtime].objects(plan))
    assert pods
    for pod in pods:
        stored = cluster.create(pod, dry_run=True)
        ctx = stored["spec"]["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["fsGroup"] == plan.target.run_as_user, pod["metadata"]["name"]
        as_root = copy.deepcopy(pod)
        for key in ("runAsNonRoot", "runAsUser", "runAsGroup"):
            as_root["spec"]["securityContext"].pop(key)
        msg = _refused(cluster, as_root)
        assert 'violates PodSecurity "restricted:latest": runAsNonRoot != true' in msg, msg


@pytest.fixture(scope="module")
def opted_into_root(cluster) -> Iterator[Any]:
    spec = _team_spec("tgk-psa-root", run_as_root=True)
    assert kueue.pod_security_labels(spec.teams[1])["pod-security.kubernetes.io/enforce"] == "baseline"
    yield from _namespace_of(cluster, spec)


@pytest.mark.parametrize("runtime", ["jobset", "job", "ray"])
def test_a_team_that_opted_into_root_is_admitted_under_baseline(cluster, opted_into_root, runtime) -> None:
    plan = plan_run("llama3-8b", opted_into_root, Overrides(team="research", runtime=runtime, name=f"root-{runtime}"))
    pods = _pods_of(RUNTIMES[runtime].objects(plan))
    assert pods
    for pod in pods:
        stored = cluster.create(pod, dry_run=True)
        assert "runAsNonRoot" not in stored["spec"]["securityContext"], pod["metadata"]["name"]


@pytest.mark.parametrize("runtime", ["jobset", "job", "ray"])
def test_the_default_team_namespace_admits_every_hardened_pod(cluster, team, runtime) -> None:
    recipe = "llama3-8b" if runtime == "ray" else "hello-tpu"  # the recipe that lists ray
    plan = plan_run(recipe, load_spec(DEFAULT_SPEC_PATH), Overrides(runtime=runtime, name=f"base-{runtime}"))
    pods = _pods_of(RUNTIMES[runtime].objects(plan))
    assert pods and all(p["metadata"]["namespace"] == team.ns for p in pods)
    for pod in pods:
        assert cluster.create(pod, dry_run=True)["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


# ------------------------------------------------------------------ credentials from Secrets


@pytest.mark.parametrize("runtime", ["jobset", "job"])
def test_a_secret_env_run_is_admitted_and_stored_holding_only_the_reference(cluster, team, runtime) -> None:
    """--secret-env renders a secretKeyRef the real API server takes (with the JobSet webhook, Pod Security restricted)."""
    recipe = "hello-tpu"
    plan = plan_run(recipe, load_spec(DEFAULT_SPEC_PATH), Overrides(runtime=runtime, name=f"secret-{runtime}", secret_env=("HF_TOKEN=hf-token/token",)))
    workloads = [o for o in RUNTIMES[runtime].objects(plan) if o["kind"] in ("JobSet", "Job")]
    assert workloads
    for obj in workloads:
        stored = cluster.create(obj, dry_run=True)
        refs = [e for t in _templates(stored) for c in t["containers"] for e in c.get("env", []) if e["name"] == "HF_TOKEN"]
        assert refs == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}], refs
    for pod in _pods_of(RUNTIMES[runtime].objects(plan)):
        assert cluster.create(pod, dry_run=True)["spec"]["securityContext"]["runAsNonRoot"] is True


def test_submit_refuses_a_secret_env_whose_secret_is_missing_and_asks_only_for_metadata(cluster, kubeconfig, team) -> None:
    """On GKE the pods would wait in CreateContainerConfigError with the slice held: refused first, nothing applied.
    The real API server answers the toolkit's question with the Secret's metadata only, never its data."""
    import base64
    import secrets as pysecrets

    from tests.support import run_module
    from workloads.cluster.api import PARTIAL_METADATA
    from workloads.runs import service

    suffix = pysecrets.token_hex(3)
    name, run = f"tgk-missing-{suffix}", f"secret-missing-{suffix}"
    r = run_module("workloads", "submit", "hello-tpu", "--name", run, "--secret-env", f"HF_TOKEN={name}/token", "--no-wait", "--kubeconfig", str(kubeconfig))
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: --secret-env: the Secret {name} (HF_TOKEN reads it) does not exist in namespace {team.ns} — create it first"), line
    assert cluster.get(cluster.resource("jobset.x-k8s.io/v1alpha2", "JobSet"), run, team.ns) is None

    info = cluster.resource("v1", "Secret")
    value = base64.b64encode(f"hf_{suffix}".encode()).decode()
    cluster.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": team.ns}, "data": {"token": value}})
    try:
        raw = cluster.transport.request("GET", info.path(team.ns, name), accept=PARTIAL_METADATA)
        assert raw.ok and raw.json()["kind"] == "PartialObjectMetadata" and "data" not in raw.json(), raw.json()
        assert value.encode() not in raw.body
        assert cluster.metadata(info, name, team.ns)["metadata"]["name"] == name
        plan = plan_run("hello-tpu", load_spec(DEFAULT_SPEC_PATH), Overrides(name=run, secret_env=(f"HF_TOKEN={name}/token",)))
        assert service.secrets_check(cluster, plan) == ""
    finally:
        cluster.delete(info, name, team.ns)


# ------------------------------------------------------------------ schemas


@pytest.fixture(scope="module")
def scratch_namespace(cluster) -> Iterator[str]:
    ns = "tgk-netpol-dry-run"
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}], field_manager=TGK_FIELD_MANAGER)
    try:
        yield ns
    finally:
        cluster.delete(cluster.resource("v1", "Namespace"), ns)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_examples_policies_pass_server_side_validation(cluster, scratch_namespace, example) -> None:
    spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
    policies = netpol.network_policies(spec)
    closed = netpol.network_policies(spec.model_copy(update={"network_policy": spec.network_policy.model_copy(update={"egress_cidrs": ["199.36.153.8/30"]})}))
    assert policies and len(closed) == len(policies) + len(spec.teams)
    for p in closed:
        p = copy.deepcopy(p)
        p["metadata"]["namespace"] = scratch_namespace
        stored = cluster.apply([p], field_manager=TGK_FIELD_MANAGER, dry_run=True)[0]
        assert stored["spec"]["policyTypes"] == p["spec"]["policyTypes"]
    for obj in admission.admission_objects(spec):
        obj = copy.deepcopy(obj)
        obj["metadata"]["name"] += "-dry-run"
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            obj["spec"]["policyName"] += "-dry-run"
        assert cluster.apply([obj], field_manager=TGK_FIELD_MANAGER, dry_run=True)[0]["kind"] == obj["kind"]


def test_local_up_applied_the_teams_network_policies(cluster, team) -> None:
    got = {p["metadata"]["name"] for p in cluster.list(cluster.resource("networking.k8s.io/v1", "NetworkPolicy"), team.ns)}
    assert {netpol.SAME_NAMESPACE, netpol.RAY_DASHBOARD} <= got, got
