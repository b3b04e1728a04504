"""The ``ray`` runtime: a KubeRay RayJob with its RayCluster, from the RunPlan.

Contract facts, goldens, the Kustomize round trip, the one-line refusals, and the cluster
side (find the run, its driver/head/worker pods, its status, delete it) against a recording
fake transport. KubeRay itself on the local cluster is tests/integration/test_ray_runtime.py.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, cli
from tests.support.goldens import check_golden
from tests.test_cluster import FakeTransport
from tests.test_job_runtime import _one_line
from tests.test_kustomize import kustomize_bin  # noqa: F401  (the pinned kustomize, a fixture)
from toolkit import names
from toolkit.names import RAY_HOST_INDEX_LABEL, RAY_NODE_TYPE_LABEL, RAY_REPLICA_INDEX_LABEL
from workloads.cluster import status as st
from workloads.cluster.client import Cluster
from workloads.cluster.runkinds import RAYJOB
from workloads.planning.images import RAY_IMAGE
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.ray import ENTRYPOINT_MODULE, RAY_VERSION
from workloads.render import jobset, rayjob
from workloads.render.kustomize import RUNTIMES, build, build_overlay, render, write_tree
from workloads.render.kustomize import run_objects as stamped  # the runtime's objects + the submission digest


def _plan(example: str = "v6e-reservation", recipe: str = "llama3-8b", **kw):
    kw.setdefault("name", "rj")
    if example == "v6e-reservation":
        kw.setdefault("team", "research")
    return plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), Overrides(runtime="ray", **kw), rand="abc")


# ------------------------------------------------------------------ contract


@pytest.mark.parametrize("slices", [1, 2])
def test_rayjob_follows_the_plan(slices: int) -> None:
    plan = _plan(slices=slices)
    (rj,) = rayjob.run_objects(plan)
    assert (rj["apiVersion"], rj["kind"]) == ("ray.io/v1", "RayJob")
    assert rj["metadata"]["name"] == plan.name and rj["metadata"]["namespace"] == plan.target.namespace
    assert rj["metadata"]["labels"][names.KUEUE_QUEUE_LABEL] == plan.target.local_queue
    spec = rj["spec"]
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True  # what Kueue requires
    assert spec["ttlSecondsAfterFinished"] == 0  # the TPUs are freed when the job ends
    assert spec["backoffLimit"] == plan.policy.max_restarts
    assert "clusterSelector" not in spec  # Kueue refuses a RayJob on an existing cluster
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == RAY_VERSION

    (group,) = cluster["workerGroupSpecs"]
    hosts = plan.target.shape.nodes
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == slices
    assert group["numOfHosts"] == hosts == 4
    pod = group["template"]["spec"]
    assert (
        pod["nodeSelector"]
        == jobset.node_selector(plan)
        == {
            names.GKE_TPU_ACCELERATOR_LABEL: "tpu-v6e-slice",
            names.GKE_TPU_TOPOLOGY_LABEL: "4x4",
        }
    )
    assert pod["tolerations"] == [dict(names.TPU_TOLERATION)]
    (worker,) = pod["containers"]
    assert worker["resources"] == {"requests": {names.TPU_RESOURCE: 4}, "limits": {names.TPU_RESOURCE: 4}}
    assert {e["name"]: e["value"] for e in worker["env"]} == {**dict(plan.program.env), "HOME": "/tmp"}  # non-root: a HOME it can write
    assert group["template"]["metadata"]["labels"][names.TGK_RUN_LABEL] == plan.name  # how status finds them

    head = cluster["headGroupSpec"]["template"]["spec"]
    submitter = spec["submitterPodTemplate"]["spec"]
    for cpu_pod in (head, submitter):
        assert cpu_pod["nodeSelector"] == {names.GKE_NODEPOOL_LABEL: "cpu"}  # the spec's CPU pool
        assert "tolerations" not in cpu_pod
        # No requests at all: Kueue assigns no (TPU) flavor to a pod set that requests nothing it covers.
        assert all("resources" not in c for c in cpu_pod["containers"])
        assert cpu_pod["serviceAccountName"] == plan.target.service_account
        assert cpu_pod["priorityClassName"] == plan.target.priority
    assert "command" not in submitter["containers"][0]  # KubeRay writes `ray job submit ...`
    images = {c["image"] for c in (worker, head["containers"][0], submitter["containers"][0])}
    assert images == {plan.program.image} and plan.program.image.endswith(f"/{RAY_IMAGE}")
    assert RAY_VERSION in RAY_IMAGE


def test_the_entrypoint_is_the_jaxtrainer_with_the_plans_maxtext_args() -> None:
    plan = _plan(slices=2)
    argv = shlex.split(rayjob.rayjob(plan)["spec"]["entrypoint"])
    assert argv[:3] == ["python3", "-m", ENTRYPOINT_MODULE]
    sep = argv.index("--")
    flags = dict(zip(argv[3:sep:2], argv[4:sep:2], strict=True))
    assert flags == {
        "--num-workers": "8",  # hosts x slices: one Ray Train worker per TPU VM
        "--topology": "4x4",
        "--accelerator-type": "TPU-V6E",
        "--chips-per-worker": "4",
        "--run-name": "rj",
    }
    assert argv[sep + 1 :] == list(plan.program.args)  # exactly what the JobSet's container gets
    assert "dcn_data_parallelism=2" in argv


def test_v5e_is_ray_v5litepod_and_image_flag_wins() -> None:
    plan = _plan(example="default", image="example.com/r/ray:1.0")
    argv = shlex.split(rayjob.rayjob(plan)["spec"]["entrypoint"])
    assert argv[argv.index("--accelerator-type") + 1] == "TPU-V5LITEPOD"
    assert plan.program.image == "example.com/r/ray:1.0"


def test_other_runtimes_keep_the_maxtext_image() -> None:
    spec = load_spec(EXAMPLES / "v6e-reservation.yaml")
    plain = plan_run("llama3-8b", spec, Overrides(team="research"))
    assert plain.program.image.endswith("/maxtext:0.2.5")


def test_rayjob_names_stay_within_kuberays_limit() -> None:
    assert len(_plan(name="r" * 47).name) == 47
    with pytest.raises(PlanError, match="--name"):
        _plan(name="r" * 48)


def test_recipes_that_do_not_list_ray_are_refused() -> None:
    with pytest.raises(PlanError, match="does not run on ray"):
        _plan(example="default", recipe="maxtext-6b")


# ------------------------------------------------------------------ goldens

GOLDEN_RUNS = [("v6e-reservation", 1), ("v6e-reservation", 2), ("flex-start", 1)]


@pytest.mark.golden
@pytest.mark.parametrize("example, slices", GOLDEN_RUNS, ids=[f"{e}-x{s}" for e, s in GOLDEN_RUNS])
def test_rayjob_golden(example: str, slices: int) -> None:
    plan = _plan(example, slices=slices, name="golden")
    check_golden(f"ray-{example}-llama3-8b-x{slices}", rayjob.run_objects(plan))


# ------------------------------------------------------------------ the Kustomize tree


def test_ray_runtime_is_registered() -> None:
    assert RUNTIMES["ray"].objects is rayjob.run_objects


@pytest.mark.parametrize("example, slices", GOLDEN_RUNS)
def test_overlay_rebuilds_the_rayjob_in_process(example: str, slices: int) -> None:
    plan = _plan(example, slices=slices)
    files = render(plan)
    assert "base/ray/rayjob.yaml" in files and "overlays/rj/patch-rayjob.yaml" in files
    assert build_overlay(files, plan.name) == stamped(plan)


@pytest.mark.tools
@pytest.mark.parametrize("example, slices", GOLDEN_RUNS)
def test_kustomize_build_of_a_ray_run_equals_its_objects(tmp_path: Path, kustomize_bin: str, example: str, slices: int) -> None:  # noqa: F811
    plan = _plan(example, slices=slices)
    write_tree(tmp_path, render(plan))
    assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == stamped(plan)


# ------------------------------------------------------------------ bad input


def test_tpu7x_is_ray_v7x() -> None:
    plan = _plan(example="tpu7x")
    argv = shlex.split(rayjob.rayjob(plan)["spec"]["entrypoint"])
    assert argv[argv.index("--accelerator-type") + 1] == "TPU-V7X"
    group = rayjob.rayjob(plan)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["nodeSelector"][names.GKE_PLACEMENT_POLICY_LABEL] == plan.target.placement_policy


def test_a_generation_ray_has_no_type_for_is_refused(monkeypatch) -> None:
    import workloads.ray

    monkeypatch.setattr(workloads.ray, "RAY_ACCELERATOR_TYPES", {k: v for k, v in workloads.ray.RAY_ACCELERATOR_TYPES.items() if k != "v6e"})
    with pytest.raises(PlanError) as e:
        _plan()
    assert e.value.field == "--runtime" and "no Ray TPU accelerator type" in str(e.value) and "--runtime jobset" in str(e.value)
    with pytest.raises(PlanError) as e:
        _plan(pool="v6e-16")
    assert e.value.field == "--pool"


def test_a_ray_worker_pool_not_in_the_spec_is_one_line(tmp_path: Path) -> None:
    args = ["llama3-8b", "--runtime", "ray", "--pool", "v6e-64", "--spec", str(EXAMPLES / "v6e-reservation.yaml"), "--team", "research"]
    _one_line(cli("workloads", "submit", *args, "--kubeconfig", str(tmp_path / "none")), "--pool", "v6e-64")


# ------------------------------------------------------------------ the cluster side

NS = "research"
RAYJOB_PATH = f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/rj"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"
RAY_DISCOVERY = {
    "kind": "APIResourceList",
    "groupVersion": "ray.io/v1",
    "resources": [
        {"name": "rayjobs", "kind": "RayJob", "namespaced": True},
        {"name": "rayclusters", "kind": "RayCluster", "namespaced": True},
    ],
}


def _rayjob_obj(suspend: bool = False, **status) -> dict:
    obj = rayjob.rayjob(_plan(slices=2))
    obj["metadata"]["uid"] = "rj-uid"
    obj["spec"]["suspend"] = suspend
    obj["status"] = status
    return obj


def _ray_pod(kind: str, slice_i: int = 0, host: int | None = 0, phase: str = "Running") -> dict:
    labels = {names.TGK_RUN_LABEL: "rj", RAY_NODE_TYPE_LABEL: kind}
    if kind == "worker":
        labels[RAY_REPLICA_INDEX_LABEL] = str(slice_i)
        if host is not None:
            labels[RAY_HOST_INDEX_LABEL] = str(host)
    return {
        "metadata": {"name": f"rj-{kind}-{slice_i}-{host}", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": labels},
        "spec": {"nodeName": f"vm-{slice_i}-{host}"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_expected_pods_are_replicas_times_hosts() -> None:
    assert st.expected_pods(_rayjob_obj()) == 8


def test_status_while_queued_running_and_after() -> None:
    pending_wl = {
        "metadata": {"name": "rayjob-rj-1"},
        "spec": {"queueName": "research-queue"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota for google.com/tpu"}]},
    }
    q = st.run_status(NS, "rj", _rayjob_obj(suspend=True), pending_wl, [])
    assert q.phase is st.RunPhase.QUEUED and "insufficient quota" in q.message

    workers = [_ray_pod("worker", s, h) for s in range(2) for h in range(4)]
    r = st.run_status(NS, "rj", _rayjob_obj(jobStatus="RUNNING", jobDeploymentStatus="Running"), None, workers)
    assert r.phase is st.RunPhase.RUNNING and "8/8" in r.message and "Ray job RUNNING" in r.message
    assert [(s.index, len(s.pods), s.vms) for s in r.slices] == [(0, 4, 4), (1, 4, 4)]
    assert [p.worker for p in r.slices[1].pods] == [0, 1, 2, 3]
    assert r.max_restarts == 1 and r.restarts == 0

    starting = st.run_status(NS, "rj", _rayjob_obj(jobDeploymentStatus="Initializing"), None, workers[:3])
    assert starting.phase is st.RunPhase.STARTING and "3/8" in starting.message and "not submitted" in starting.message

    done = st.run_status(NS, "rj", _rayjob_obj(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", succeeded=1), None, [])
    assert done.phase is st.RunPhase.SUCCEEDED

    failed = st.run_status(
        NS,
        "rj",
        _rayjob_obj(jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed", message="Job entrypoint command failed with exit code 1", failed=2),
        None,
        [],
    )
    assert failed.phase is st.RunPhase.FAILED and "AppFailed" in failed.message and "exit code 1" in failed.message
    assert failed.restarts == 1  # two failed attempts: the first was retried once
    assert "AppFailed" in failed.last_failure

    retrying = st.run_status(NS, "rj", _rayjob_obj(jobStatus="FAILED", jobDeploymentStatus="Retrying", failed=1), None, [])
    assert retrying.phase is st.RunPhase.STARTING and retrying.restarts == 1


def _transport(pods: list[dict]) -> FakeTransport:
    def pods_for(q, _b):
        want = set(q["labelSelector"].split(","))
        return {"items": [p for p in pods if want <= {f"{k}={v}" for k, v in p["metadata"]["labels"].items()}]}

    return FakeTransport(
        {
            ("GET", "/apis/ray.io/v1"): RAY_DISCOVERY,
            ("GET", RAYJOB_PATH): _rayjob_obj(),
            ("GET", PODS_PATH): pods_for,
            ("DELETE", RAYJOB_PATH): {"kind": "Status", "status": "Success"},
        }
    )


def test_a_rayjob_is_found_before_the_submitter_job_of_the_same_name() -> None:
    t = _transport([])
    t.routes[("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/rj")] = {"kind": "Job", "metadata": {"name": "rj"}}
    kind, obj = Cluster(t).find_run(NS, "rj")
    assert kind is RAYJOB and obj["kind"] == "RayJob"


def test_logs_default_to_the_driver_and_can_pick_the_head_or_a_worker() -> None:
    submitter = {
        "metadata": {"name": "rj-submitter", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {names.TGK_RUN_LABEL: "rj", names.K8S_JOB_NAME_LABEL: "rj"}}
    }
    pods = [submitter, _ray_pod("head", 0, None), *(_ray_pod("worker", s, h) for s in range(2) for h in range(4))]
    c = Cluster(_transport(pods))
    assert c.find_pod(NS, "rj")["metadata"]["name"] == "rj-submitter"
    assert c.find_pod(NS, "rj", head=True)["metadata"]["name"] == "rj-head-0-None"
    assert c.find_pod(NS, "rj", slice_index=1, worker=2)["metadata"]["name"] == "rj-worker-1-2"
    assert c.find_pod(NS, "rj", worker=0)["metadata"]["name"] == "rj-worker-0-0"


def test_a_single_host_slices_worker_has_no_host_index_and_is_still_found() -> None:
    c = Cluster(_transport([_ray_pod("worker", 1, None)]))
    assert c.find_pod(NS, "rj", slice_index=1, worker=0)["metadata"]["name"] == "rj-worker-1-None"
    assert c.find_pod(NS, "rj", slice_index=1, worker=1) is None


def test_delete_takes_the_rayjob_foreground_and_nothing_else() -> None:
    t = _transport([])
    (res,) = Cluster(t).delete_run(NS, "rj")
    assert (res.kind, res.deleted) == ("RayJob", True)
    (call,) = [c for c in t.calls if c["method"] == "DELETE"]
    assert call["path"] == RAYJOB_PATH and call["query"]["propagationPolicy"] == "Foreground"


def test_a_cluster_without_kuberay_has_no_ray_runs() -> None:
    t = FakeTransport({("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/rj"): {"kind": "Job", "metadata": {"name": "rj"}}})
    kind, _ = Cluster(t).find_run(NS, "rj")  # ray.io/v1 is not served: skipped, not an error
    assert kind.kind == "Job"


def test_each_slice_of_workers_keeps_to_one_node_pool_of_its_own() -> None:
    from toolkit.names import RAY_REPLICA_NAME_LABEL
    from workloads.render.rayjob import slice_affinity

    plan = _plan_for_affinity()
    (rj,) = rayjob.run_objects(plan)
    (group,) = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    aff = group["template"]["spec"]["affinity"]
    assert aff == slice_affinity()
    (together,) = aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (apart,) = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert together["topologyKey"] == apart["topologyKey"] == "cloud.google.com/gke-nodepool"
    assert together["matchLabelKeys"] == [RAY_REPLICA_NAME_LABEL] and apart["mismatchLabelKeys"] == [RAY_REPLICA_NAME_LABEL]
    assert apart["namespaceSelector"] == {}  # another namespace's slice is kept off the pool too


def _plan_for_affinity():
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, plan_run

    return plan_run("llama3-8b", load_spec(EXAMPLES / "v6e-reservation.yaml"), Overrides(runtime="ray", slices=2, name="aff"))
