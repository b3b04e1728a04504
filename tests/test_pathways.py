"""``--runtime pathways``: the published Pathways-on-GKE layout, elastic slices, and what Pathways cannot honour.

The layout is compared with xpk's ``workload create-pathways`` template and Cluster Toolkit's
``pathways_jobset.tmpl`` field by field (names, ports, arguments, sidecars, policies); the
JobSet is applied to the real API server with JobSet's webhooks, and an elastic slice replaced
there, in tests/integration/test_ironwood.py.
"""

from __future__ import annotations

import copy

import pytest

from infra.spec import load_spec, parse_spec
from tests.support import EXAMPLES, cli, example_doc
from workloads.cluster import runkinds
from workloads.planning import pathways
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import pathways as render
from workloads.render.kustomize import render_run


def _spec():
    doc = copy.deepcopy(example_doc("tpu7x-multislice"))
    doc["cpu_pool"] = {"machine_type": "n2-highmem-32", "min_nodes": 1, "max_nodes": 1}
    return parse_spec(doc)


def _plan(**kw):
    return plan_run("maxtext-6b", _spec(), Overrides(runtime="pathways", slices=2, name="pw", **kw))


def _jobs(plan) -> dict:
    (js,) = render.run_objects(plan)
    return {rj["name"]: rj for rj in js["spec"]["replicatedJobs"]}, js


def test_the_head_runs_proxy_and_resource_manager_beside_the_program_on_the_cpu_pool():
    jobs, js = _jobs(_plan(elastic_slices=1, max_slice_restarts=3))
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert js["spec"]["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert js["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    assert js["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"
    assert js["metadata"]["labels"][runkinds.PATHWAYS_RUNTIME_LABEL] == "pathways"
    head = jobs["pathways-head"]
    assert head["replicas"] == 1 and head["template"]["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"}
    pod = head["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"}
    proxy, rm = pod["initContainers"]
    assert (proxy["name"], proxy["restartPolicy"], rm["name"], rm["restartPolicy"]) == ("pathways-proxy", "Always", "pathways-rm", "Always")
    assert proxy["args"][:2] == ["--server_port=29000", "--resource_manager_address=$(PATHWAYS_HEAD):29001"]
    assert "--num_elastic_slices=1" in proxy["args"]
    assert rm["args"][0] == "--server_port=29001" and "--node_type=resource_manager" in rm["args"]
    assert "--instance_count=2" in rm["args"] and "--instance_type=tpu7x:4x4x8" in rm["args"]
    assert all(c["image"].endswith(f":jax-{pathways.PATHWAYS_JAX}") for c in (proxy, rm))  # pinned, never latest
    (program,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in program["env"]}
    assert env["JAX_PLATFORMS"] == "proxy" and env["JAX_BACKEND_TARGET"] == "grpc://pw-pathways-head-0-0.pw:29000"
    assert env["PATHWAYS_HEAD"] == "pw-pathways-head-0-0.pw" and "LIBTPU_INIT_ARGS" not in env
    assert "resources" not in program and not any("resources" in c for c in (proxy, rm))  # no Kueue flavor for the head
    args = program["args"]
    assert "enable_single_controller=true" in args and "elastic_enabled=true" in args and "elastic_max_retries=3" in args


def test_workers_are_the_slices_and_a_lost_one_is_replaced_within_its_budget():
    jobs, _ = _jobs(_plan(elastic_slices=1, max_slice_restarts=3))
    w = jobs["worker"]
    assert w["replicas"] == 2 and w["template"]["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    spec = w["template"]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (32, 32, 3 * 32)  # xpk: max_slice_restarts x hosts
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    (c,) = pod["containers"]
    assert c["name"] == "pathways-worker" and c["args"][:2] == ["--server_port=29005", "--resource_manager_address=$(PATHWAYS_HEAD):29001"]
    assert [p["containerPort"] for p in c["ports"]] == [29005, 29006, 8471, 8080]
    assert c["resources"]["limits"] == {"google.com/tpu": 4}
    names = [e["name"] for e in c["env"]]
    assert {"MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS", "PATHWAYS_HEAD", "LIBTPU_INIT_ARGS"} <= set(names)
    plain, _ = _jobs(_plan())
    assert plain["worker"]["template"]["spec"]["backoffLimit"] == 4 * 32  # xpk's without elastic slices
    assert "--num_elastic_slices" not in " ".join(plain["pathways-head"]["template"]["spec"]["template"]["spec"]["initContainers"][0]["args"])


def test_the_tree_builds_to_the_same_objects():
    rendered = render_run(_plan(elastic_slices=1))  # its self-check: the tree's files rebuild exactly the objects
    assert [o["kind"] for o in rendered.objects] == ["JobSet"]
    assert any(p.startswith("base/pathways/") for p in rendered.files)


def test_pathways_runs_find_their_driver_in_the_head():
    assert runkinds.refine(runkinds.JOBSET, {"metadata": {"labels": {runkinds.PATHWAYS_RUNTIME_LABEL: "pathways"}}}) is runkinds.PATHWAYS
    assert runkinds.refine(runkinds.JOBSET, {"metadata": {"labels": {}}}) is runkinds.JOBSET
    assert runkinds.PATHWAYS.driver_selector("pw") == "jobset.sigs.k8s.io/jobset-name=pw,jobset.sigs.k8s.io/replicatedjob-name=pathways-head"


@pytest.mark.parametrize(
    ("kw", "flag", "words"),
    [
        ({"runtime": "jobset", "elastic_slices": 1}, "--elastic-slices", "elastic slices are Pathways'"),
        ({"runtime": "jobset", "max_slice_restarts": 2}, "--max-slice-restarts", "elastic slices are Pathways'"),
        ({"elastic_slices": 3}, "--elastic-slices", "3 elastic slices of a run of 2"),
        ({"max_slice_restarts": 2}, "--max-slice-restarts", "the run has none"),
        ({"multi_tier_checkpointing": True}, "--multi-tier-checkpointing", "JobSet pods only"),
        ({"parallel_containers": True}, "--parallel-containers", "lays out its own containers"),
    ],
)
def test_what_pathways_cannot_honour_is_refused(kw: dict, flag: str, words: str):
    kw = {"runtime": "pathways", **kw}
    with pytest.raises(PlanError) as e:
        plan_run("maxtext-6b", _spec(), Overrides(slices=2, name="pw", **kw))
    assert e.value.field == flag and words in str(e.value)


def test_a_plain_command_and_a_small_cpu_pool_are_refused_in_one_line():
    with pytest.raises(PlanError, match="recipe hello-tpu does not run on pathways"):
        plan_run("hello-tpu", _spec(), Overrides(runtime="pathways", slices=2, name="pw"))
    proc = cli("workloads", "submit", "maxtext-6b", "--spec", str(EXAMPLES / "tpu7x-multislice.yaml"), "--runtime", "pathways", "--slices", "2", "--dry-run")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --runtime: the Pathways head needs 24 vCPU and 132 GiB on one CPU node") and "n2-standard-8" in line
    assert load_spec(EXAMPLES / "tpu7x-multislice.yaml").cpu_pool.machine_type == "n2-standard-8"
