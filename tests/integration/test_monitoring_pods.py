"""The alert metrics' pod-name filters against pods the real Job and JobSet controllers name (Kubernetes 1.34.2, JobSet v0.12.0).

Cloud Logging knows a worker only by its pod's name: the attempts metric counts the first
worker's lines, and both metrics cut the run's name out of the pod name
(``modules/monitoring.py``). Here the names come from the controllers themselves: a 2-slice
JobSet and a plain Job (the Job runtime), each checked for the run's name on every pod and
exactly one first worker, the one with slice and completion index 0.
"""

from __future__ import annotations

import re

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from modules import monitoring as mon
from tests.support.local_cluster import wait_for
from toolkit.names import JOBSET_JOB_INDEX_LABEL, K8S_COMPLETION_INDEX_LABEL, K8S_JOB_NAME_LABEL, TGK_FIELD_MANAGER
from workloads.planning.overrides import Overrides
from workloads.planning.planner import plan_run
from workloads.render import job as job_manifests
from workloads.render import jobset as jobset_manifests

NS = "research"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def _first_worker(pod: str) -> bool:
    return bool(re.search(mon.JOBSET_FIRST_POD, pod)) or (not re.search(mon.JOBSET_POD, pod) and bool(re.search(mon.JOB_FIRST_POD, pod)))


def _keep_running(pod_template: dict) -> None:
    pod_template.setdefault("metadata", {}).setdefault("annotations", {})[COMPLETE_DELAY] = "600s"


def _check(pods: list[dict], run: str) -> None:
    assert pods
    for p in pods:
        name = p["metadata"]["name"]
        assert re.match(mon.RUN_OF_POD, name).group(1) == run, name
    firsts = [p for p in pods if _first_worker(p["metadata"]["name"])]
    assert len(firsts) == 1, [p["metadata"]["name"] for p in pods]
    labels = firsts[0]["metadata"]["labels"]
    assert labels.get(K8S_COMPLETION_INDEX_LABEL) == "0" and labels.get(JOBSET_JOB_INDEX_LABEL, "0") == "0", labels


@pytest.mark.usefixtures("tpu_quota")
def test_jobset_and_job_pod_names_give_the_run_and_one_first_worker(cluster):
    spec = load_spec(DEFAULT_SPEC_PATH)
    name = "mon-names-js"
    plan = plan_run("hello-tpu", spec, Overrides(slices=2, name=name))
    (js,) = jobset_manifests.run_objects(plan)
    _keep_running(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    hosts = plan.target.shape.nodes * 2
    try:
        cluster.apply([js], field_manager=TGK_FIELD_MANAGER)
        pods = wait_for(lambda: (lambda p: p if len(p) == hosts else None)(cluster.pods(NS, name)), 180, "every JobSet pod")
        _check(pods, name)
    finally:
        cluster.delete_jobset(NS, name)
        wait_for(lambda: cluster.jobset(NS, name) is None and not cluster.pods(NS, name), 120, "the JobSet and its pods to go")

    name = "mon-names-job"
    plan = plan_run("hello-tpu", spec, Overrides(slices=1, name=name))
    objs = job_manifests.run_objects(plan)
    job = next(o for o in objs if o["kind"] == "Job")
    _keep_running(job["spec"]["template"])
    pod_info = cluster.resource("v1", "Pod")
    try:
        cluster.apply(objs, field_manager=TGK_FIELD_MANAGER)
        want = job["spec"]["parallelism"]
        pods = wait_for(
            lambda: (lambda p: p if len(p) == want else None)(cluster.list(pod_info, NS, label_selector=f"{K8S_JOB_NAME_LABEL}={name}")),
            180,
            "every Job pod",
        )
        _check(pods, name)
    finally:
        for o in reversed(objs):
            cluster.delete(cluster.resource(o["apiVersion"], o["kind"]), name, NS)
        wait_for(lambda: not cluster.list(pod_info, NS, label_selector=f"{K8S_JOB_NAME_LABEL}={name}"), 120, "the Job's pods to go")
