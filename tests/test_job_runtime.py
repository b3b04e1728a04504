"""The ``job`` runtime: a batch/v1 Indexed Job + headless Service from the RunPlan.

Contract facts, goldens, the Kustomize round trip, the one-line refusals, and the
cluster side (find the run, its pods, its status, delete it and its Service) against a
recording fake transport. The real API server with Kueue is in
tests/integration/test_job_runtime.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, cli
from tests.support.goldens import check_golden
from tests.test_cluster import KUEUE_DISCOVERY, KUEUE_GROUP, FakeTransport
from tests.test_kustomize import kustomize_bin  # noqa: F401  (the pinned kustomize, a fixture)
from toolkit import names
from workloads.cluster import runkinds
from workloads.cluster import status as st
from workloads.cluster.client import Cluster
from workloads.cluster.runkinds import JOB, JOBSET, LOOKUP_ORDER
from workloads.planning.planner import Overrides, PlanError, name_budget, plan_run
from workloads.render import exitguard, job, jobset, yamlio
from workloads.render.kustomize import RUNTIMES, base_files, build, build_overlay, render, write_tree
from workloads.render.kustomize import run_objects as stamped  # the runtime's objects + the submission digest

# Runs applied to fake clusters keep their checkpoint directory's identity in memory (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("memory_buckets")


def _plan(example: str = "default", recipe: str = "hello-tpu", **kw):
    kw.setdefault("name", "jr")
    return plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), Overrides(runtime="job", **kw), rand="abc")


def _by_kind(objects: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objects}


# ------------------------------------------------------------------ contract


def test_job_and_service_follow_the_plan() -> None:
    plan = _plan()
    assert plan.runtime == "job"
    objs = job.run_objects(plan)
    assert [o["kind"] for o in objs] == ["Service", "Job"]  # DNS names exist before the pods
    svc, j = objs
    hosts = plan.target.shape.nodes
    assert hosts == 4  # a v5e 4x4: four TPU VMs
    spec = j["spec"]
    assert spec["completions"] == spec["parallelism"] == hosts
    assert spec["completionMode"] == "Indexed"
    assert spec["suspend"] is True  # Kueue starts it
    assert spec["backoffLimit"] == 0
    assert j["metadata"]["labels"][names.KUEUE_QUEUE_LABEL] == plan.target.local_queue == "research-queue"
    assert j["metadata"]["namespace"] == svc["metadata"]["namespace"] == plan.target.namespace
    assert spec["podFailurePolicy"] == jobset.pod_failure_policy(plan)
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert spec["ttlSecondsAfterFinished"] == plan.policy.ttl_seconds

    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {names.K8S_JOB_NAME_LABEL: plan.name}
    assert svc["metadata"]["labels"][names.TGK_RUN_LABEL] == plan.name  # `delete` checks it before deleting

    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"] == j["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {
        names.GKE_TPU_ACCELERATOR_LABEL: "tpu-v5-lite-podslice",
        names.GKE_TPU_TOPOLOGY_LABEL: "4x4",
    }
    assert pod["tolerations"] == [dict(names.TPU_TOLERATION)]
    assert pod["priorityClassName"] == plan.target.priority
    assert pod["serviceAccountName"] == plan.target.service_account
    assert "hostNetwork" not in pod

    (c,) = pod["containers"]
    assert c["name"] == names.WORKLOAD_CONTAINER
    assert c["resources"]["limits"] == {names.TPU_RESOURCE: plan.target.shape.chips_per_vm}
    env = {e["name"]: e for e in c["env"]}
    assert env[names.TPU_WORKER_ID_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": f"metadata.annotations['{names.K8S_COMPLETION_INDEX_LABEL}']"}}
    assert env[names.TPU_WORKER_HOSTNAMES_ENV]["value"] == "jr-0.jr,jr-1.jr,jr-2.jr,jr-3.jr"
    for k, v in plan.program.env:
        assert env[k]["value"] == v
    assert not any(n.startswith("MEGASCALE") for n in env)  # one slice: no DCN
    assert [p["containerPort"] for p in c["ports"]] == [jobset.TPU_RUNTIME_PORT]


def test_the_exit_guard_wraps_the_program() -> None:
    plan = _plan(recipe="maxtext-6b")
    (c,) = job.job(plan)["spec"]["template"]["spec"]["containers"]
    assert c["command"] == [exitguard.SHELL, "-c", exitguard.SCRIPT, exitguard.NAME]
    assert c["args"] == [*plan.program.command, *plan.program.args]


def test_workers_share_one_node_pool_and_keep_other_jobs_off_it() -> None:
    plan = _plan(example="default")
    assert len(plan.target.node_pools) == 2  # two v5e 4x4 pools: the selector alone would let pods spread
    aff = job.job(plan)["spec"]["template"]["spec"]["affinity"]
    (same,) = aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert same["topologyKey"] == names.GKE_NODEPOOL_LABEL
    assert same["labelSelector"]["matchExpressions"] == [{"key": names.K8S_JOB_NAME_LABEL, "operator": "In", "values": ["jr"]}]
    (other,) = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert other["topologyKey"] == names.GKE_NODEPOOL_LABEL
    assert other["namespaceSelector"] == {}  # every team's Jobs
    exprs = {(e["key"], e["operator"]) for e in other["labelSelector"]["matchExpressions"]}
    assert exprs == {(names.K8S_JOB_NAME_LABEL, "Exists"), (names.K8S_JOB_NAME_LABEL, "NotIn")}


def test_flex_start_and_tpu7x_selectors() -> None:
    flex = _plan(example="flex-start", recipe="llama3-8b")
    assert flex.target.capacity == "flex-start"
    sel = job.job(flex)["spec"]["template"]["spec"]["nodeSelector"]
    assert sel == jobset.node_selector(flex) == {names.GKE_TPU_ACCELERATOR_LABEL: "tpu-v6e-slice", names.GKE_TPU_TOPOLOGY_LABEL: "4x4"}
    assert job.job(flex)["spec"]["parallelism"] == 4

    big = _plan(example="tpu7x", recipe="maxtext-6b")
    sel = job.job(big)["spec"]["template"]["spec"]["nodeSelector"]
    assert big.target.placement_policy and sel[names.GKE_PLACEMENT_POLICY_LABEL] == big.target.placement_policy
    assert job.job(big)["spec"]["completions"] == big.target.shape.nodes > 4


def test_a_single_host_slice_is_a_job_of_one() -> None:
    plan = _plan(example="v5p", pool="v5p-8")
    j = job.job(plan)
    assert j["spec"]["parallelism"] == j["spec"]["completions"] == 1
    env = {e["name"]: e for e in j["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[names.TPU_WORKER_HOSTNAMES_ENV]["value"] == "jr-0.jr"


def test_policy_of_a_plain_job_has_no_restarts() -> None:
    assert _plan(example="default").policy.max_restarts == 0
    assert _plan(example="default", max_restarts=0).policy.max_restarts == 0
    with pytest.raises(PlanError, match="--max-restarts"):
        _plan(example="default", max_restarts=2)


def test_name_budget_is_the_plain_jobs_pod_names() -> None:
    # pods are <job>-<index>-<5 random>: 63 - len("-3") - 6
    assert name_budget(1, 4, "job") == 55
    assert name_budget(1, 4, "job") > name_budget(1, 4, "jobset")
    plan = _plan(name="a" * 55)
    assert len(plan.name) == 55
    with pytest.raises(PlanError, match="--name"):
        _plan(name="a" * 56)


# ------------------------------------------------------------------ goldens

GOLDEN_RUNS = [
    ("default", "maxtext-6b", {}),
    ("flex-start", "llama3-8b", {"priority": "very-high"}),
    ("tpu7x", "maxtext-6b", {}),
]


@pytest.mark.golden
@pytest.mark.parametrize("example, recipe, kw", GOLDEN_RUNS, ids=[f"{e}-{r}" for e, r, _ in GOLDEN_RUNS])
def test_job_golden(example: str, recipe: str, kw: dict) -> None:
    plan = _plan(example, recipe, **{"name": "golden", **kw})
    check_golden(f"job-{example}-{recipe}-x1", job.run_objects(plan))


# ------------------------------------------------------------------ the Kustomize tree


def test_job_runtime_is_registered_with_its_own_base() -> None:
    assert RUNTIMES["job"].objects is job.run_objects
    files = base_files("job")
    assert sorted(files) == ["base/job/job.yaml", "base/job/kustomization.yaml", "base/job/service.yaml"]
    a, b = _plan(recipe="maxtext-6b", name="a"), _plan(example="v6e-reservation", recipe="llama3-8b", name="b", team="research")
    assert {k: v for k, v in render(a).items() if k.startswith("base/")} == {k: v for k, v in render(b).items() if k.startswith("base/")}


@pytest.mark.parametrize("example, recipe, kw", GOLDEN_RUNS)
def test_overlay_rebuilds_the_job_and_service_in_process(example, recipe, kw) -> None:
    plan = _plan(example, recipe, **kw)
    files = render(plan)
    assert sorted(f for f in files if f.startswith("overlays/")) == [
        "overlays/jr/kustomization.yaml",
        "overlays/jr/patch-job.yaml",
        "overlays/jr/patch-service.yaml",
    ]
    assert build_overlay(files, plan.name) == stamped(plan)


@pytest.mark.tools
@pytest.mark.parametrize("example, recipe, kw", GOLDEN_RUNS)
def test_kustomize_build_of_a_job_run_equals_its_objects(tmp_path: Path, kustomize_bin: str, example, recipe, kw) -> None:  # noqa: F811
    plan = _plan(example, recipe, **kw)
    write_tree(tmp_path, render(plan))
    assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == stamped(plan)


@pytest.mark.tools
def test_job_and_jobset_runs_share_one_tree(tmp_path: Path, kustomize_bin: str) -> None:  # noqa: F811
    spec = load_spec(EXAMPLES / "default.yaml")
    as_job = plan_run("maxtext-6b", spec, Overrides(name="as-job", runtime="job"))
    as_jobset = plan_run("maxtext-6b", spec, Overrides(name="as-jobset", slices=2))
    for plan in (as_job, as_jobset):
        write_tree(tmp_path, render(plan))
    assert sorted(p.name for p in (tmp_path / "base").iterdir()) == ["job", "jobset"]
    assert build(tmp_path / "overlays" / "as-job", binary=kustomize_bin) == stamped(as_job)
    assert build(tmp_path / "overlays" / "as-jobset", binary=kustomize_bin) == stamped(as_jobset)


@pytest.mark.tools
def test_cli_render_job_then_build_equals_submit_dry_run(tmp_path: Path, kustomize_bin: str) -> None:  # noqa: F811
    args = ["hello-tpu", "--runtime", "job", "--name", "eq-job"]
    r = cli("workloads", "render", *args, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    d = cli("workloads", "submit", *args, "--dry-run", "-o", "json")
    assert d.returncode == 0, d.stderr
    assert build(tmp_path / "overlays" / "eq-job", binary=kustomize_bin) == json.loads(d.stdout)


def test_submit_dry_run_of_a_job_run_prints_the_service_and_the_job() -> None:
    y = cli("workloads", "submit", "maxtext-6b", "--runtime", "job", "--name", "dj", "--dry-run")
    assert y.returncode == 0, y.stderr
    docs = yamlio.load_all(y.stdout)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("Service", "dj"), ("Job", "dj")]
    assert docs[1]["spec"]["parallelism"] == 4


# ------------------------------------------------------------------ bad input

BAD = [
    (["hello-tpu", "--runtime", "slurm"], "--runtime", "use one of jobset, job, ray"),
    (["hello-tpu", "--runtime", "ray"], "--runtime", "does not run on ray"),
    (["maxtext-6b", "--runtime", "job", "--slices", "2"], "--slices", "--runtime jobset"),
    (["maxtext-6b", "--runtime", "job", "--max-restarts", "2"], "--max-restarts", "--runtime jobset"),
]


def _one_line(r, field: str, words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"error: {field}:") and words in lines[0], lines[0]
    assert r.stdout == ""


@pytest.mark.parametrize("args, field, words", BAD, ids=[a[-1] if a[-1] != "2" else a[-2] for a, _, _ in BAD])
def test_bad_runtime_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], field: str, words: str) -> None:
    out = tmp_path / "tree"
    _one_line(cli("workloads", "render", *args, "--out", str(out)), field, words)
    assert not out.exists()
    # A kubeconfig that does not exist: reaching the cluster would be exit 3, so exit 2 means nothing was applied.
    _one_line(cli("workloads", "submit", *args, "--kubeconfig", str(tmp_path / "none")), field, words)


# ------------------------------------------------------------------ the cluster side

JOB_PATH = "/apis/batch/v1/namespaces/research/jobs/jr"
SVC_PATH = "/api/v1/namespaces/research/services/jr"
PODS_PATH = "/api/v1/namespaces/research/pods"


def _job_obj(**status) -> dict:
    plan = _plan()
    obj = job.job(plan)
    obj["metadata"]["uid"] = "job-uid"
    obj["status"] = status
    return obj


def _job_pod(i: int, phase: str = "Running", node: str | None = None) -> dict:
    return {
        "metadata": {
            "name": f"jr-{i}-abcde",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {names.K8S_JOB_NAME_LABEL: "jr", names.K8S_COMPLETION_INDEX_LABEL: str(i)},
        },
        "spec": {"nodeName": node or f"vm-{i}"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}]},
    }


def test_lookup_order_covers_every_runtime_and_puts_the_rayjob_before_the_job() -> None:
    order = [k.runtime for k in LOOKUP_ORDER]
    # A Pathways run is a JobSet, found as one and told apart by its runtime label (runkinds.kind_of).
    assert sorted([*order, runkinds.PATHWAYS.runtime]) == sorted(RUNTIMES) == sorted(runkinds.BY_RUNTIME)
    assert order.index("ray") < order.index("job")  # KubeRay's submitter Job carries the RayJob's name


def test_status_of_a_running_job_run() -> None:
    wl = {
        "metadata": {"name": "job-jr-1a2b3"},
        "spec": {"queueName": "research-queue"},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {names.TPU_RESOURCE: "v5e-4x4"}}]},
        },
    }
    pods = [_job_pod(i) for i in range(4)]
    admitted = _job_obj()
    admitted["spec"]["suspend"] = False  # Kueue resumed it
    t = FakeTransport(
        {
            ("GET", JOB_PATH): admitted,
            ("GET", PODS_PATH): lambda q, _b: {"items": pods if q.get("labelSelector") == f"{names.K8S_JOB_NAME_LABEL}=jr" else []},
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"): {"items": [wl]},
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
        }
    )
    s = Cluster(t).run_status("research", "jr")
    assert s.phase is st.RunPhase.RUNNING, s
    assert s.expected_pods == 4 and s.running == 4
    assert [sl.index for sl in s.slices] == [0] and s.slices[0].vms == 4
    assert [p.worker for p in s.pods] == [0, 1, 2, 3]
    assert s.workload is not None and s.workload.flavors == {"main": "v5e-4x4"}
    # It asked for no JobSet pods: the selector came from the Job run kind.
    selectors = {c["query"].get("labelSelector") for c in t.calls if c["path"] == PODS_PATH}
    assert selectors == {JOB.pod_selector("jr")}


@pytest.mark.parametrize(
    "conditions, phase, words",
    [
        ([{"type": "Complete", "status": "True"}], st.RunPhase.SUCCEEDED, "completed"),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Container workload for pod research/jr-1-abcde failed with exit code 1 matching FailJob rule at index 1",
                }
            ],
            st.RunPhase.FAILED,
            "exit code 1",
        ),
    ],
)
def test_status_of_a_finished_job_run(conditions, phase, words) -> None:
    obj = _job_obj(conditions=conditions)
    obj["spec"]["suspend"] = False
    s = st.run_status("research", "jr", obj, None, [_job_pod(i, "Succeeded") for i in range(4)])
    assert s.phase is phase and words in (s.message + s.last_failure), s


def test_status_of_a_queued_job_run_says_what_kueue_says() -> None:
    wl = {
        "metadata": {"name": "job-jr-1"},
        "spec": {"queueName": "research-queue"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota for google.com/tpu"}]},
    }
    s = st.run_status("research", "jr", _job_obj(), wl, [])
    assert s.phase is st.RunPhase.QUEUED and "insufficient quota" in s.message


def test_find_pod_of_a_job_run_ignores_the_slice() -> None:
    t = FakeTransport({("GET", JOB_PATH): _job_obj(), ("GET", PODS_PATH): {"items": [_job_pod(3)]}})
    assert Cluster(t).find_pod("research", "jr", slice_index=5, worker=3)["metadata"]["name"] == "jr-3-abcde"
    assert sorted(t.calls[-1]["query"]["labelSelector"].split(",")) == [f"{names.K8S_COMPLETION_INDEX_LABEL}=3", f"{names.K8S_JOB_NAME_LABEL}=jr"]


def _svc(run_label: str | None = "jr") -> dict:
    labels = {names.K8S_MANAGED_BY_LABEL: names.TGK, names.TGK_RUN_LABEL: run_label} if run_label else {}
    return {"kind": "Service", "metadata": {"name": "jr", "labels": labels}}


def _deletes(t: FakeTransport) -> list[tuple[str, str]]:
    return [(c["path"], c["query"].get("dryRun", "")) for c in t.calls if c["method"] == "DELETE"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_delete_takes_the_job_and_its_service(dry_run: bool) -> None:
    ok = {"kind": "Status", "status": "Success"}
    t = FakeTransport({("GET", JOB_PATH): _job_obj(), ("DELETE", JOB_PATH): ok, ("GET", SVC_PATH): _svc(), ("DELETE", SVC_PATH): ok})
    results = Cluster(t).delete_run("research", "jr", dry_run=dry_run)
    assert [(r.kind, r.deleted, r.dry_run) for r in results] == [("Job", True, dry_run), ("Service", True, dry_run)]
    mark = "All" if dry_run else ""
    assert _deletes(t) == [(JOB_PATH, mark), (SVC_PATH, mark)]
    job_delete = next(c for c in t.calls if c["method"] == "DELETE" and c["path"] == JOB_PATH)
    assert job_delete["query"]["propagationPolicy"] == "Foreground"  # the pods go first


def test_delete_leaves_a_service_that_is_not_the_runs() -> None:
    ok = {"kind": "Status", "status": "Success"}
    t = FakeTransport({("GET", JOB_PATH): _job_obj(), ("DELETE", JOB_PATH): ok, ("GET", SVC_PATH): _svc(run_label=None)})
    assert [r.kind for r in Cluster(t).delete_run("research", "jr")] == ["Job"]
    assert _deletes(t) == [(JOB_PATH, "")]


def test_delete_after_the_jobs_ttl_still_removes_its_service() -> None:
    t = FakeTransport({("GET", SVC_PATH): _svc(), ("DELETE", SVC_PATH): {"kind": "Status", "status": "Success"}})
    results = Cluster(t).delete_run("research", "jr")
    assert [(r.kind, r.deleted) for r in results] == [("Service", True)]


def test_delete_of_nothing_is_one_not_deleted_result() -> None:
    t = FakeTransport()
    (r,) = Cluster(t).delete_run("research", "gone")
    assert not r.deleted and _deletes(t) == []


def test_a_jobset_run_is_found_first() -> None:
    t = FakeTransport({("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/jr"): {"kind": "JobSet", "metadata": {"name": "jr"}}})
    kind, _ = Cluster(t).find_run("research", "jr")
    assert kind is JOBSET
    assert not any(c["path"] == JOB_PATH for c in t.calls)


# checkov's Kubernetes policies over the Job runtime's Service and Job and the RayJob with the pods
# KubeRay makes of it: tests/test_k8s_policy.py, with every other rendered manifest.


# ------------------------------------------------------------------ submit, in process, with a fake cluster


@pytest.mark.parametrize(
    "runtime, recipe, kinds, extra",
    [
        ("job", "hello-tpu", ["Service", "Job"], []),
        ("ray", "llama3-8b", ["RayJob"], ["--spec", str(EXAMPLES / "v6e-reservation.yaml"), "--team", "research"]),
    ],
)
def test_submit_applies_the_runtimes_objects_and_waits_on_its_kind(monkeypatch, capsys, runtime, recipe, kinds, extra) -> None:
    import workloads.cluster.client
    from tests.test_workloads_cli import FakeCluster
    from toolkit.clikit import run
    from workloads.cli import _register, app

    waited: list = []

    class Recording(FakeCluster):
        def wait_admitted(self, namespace, name, *, timeout, on_progress=None, kind=None, **kw):
            waited.append(kind)
            return super().wait_admitted(namespace, name, timeout=timeout, on_progress=on_progress, **kw)

    FakeCluster.instances.clear()
    monkeypatch.setattr(workloads.cluster.client, "Cluster", Recording)
    monkeypatch.delenv("TGK_SPEC", raising=False)
    _register()
    code = run(app, ["submit", recipe, "--runtime", runtime, "--name", "fk", *extra])
    _, err = capsys.readouterr()
    assert code == 0, err
    (fake,) = FakeCluster.instances
    assert [o["kind"] for o in fake.applied] == kinds
    assert [k.runtime for k in waited] == [runtime]
    assert ("a plain Job" if runtime == "job" else "a RayJob: KubeRay retries") in err
