"""``submit --runtime job`` on the live local cluster: an Indexed Job + headless Service through Kueue.

What it shows, through the normal commands (subprocesses) and the toolkit's client:
Kueue's batch/Job integration makes one Workload for the Job and admits it with the TPU
flavor and the slice's TPU count; every worker lands on a kwok TPU VM of its own, all in
one node pool (one slice), with the stable hostname ``<job>-<i>`` under the Service's
subdomain; the rehearsal completes it; ``status``, ``logs`` and ``delete`` work, and
delete leaves no Job, Service, pod or Workload behind.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import run_module
from tests.support.local_cluster import wait_for
from toolkit.names import GKE_NODEPOOL_LABEL, K8S_COMPLETION_INDEX_LABEL, K8S_JOB_NAME_LABEL, KUEUE_JOB_UID_LABEL, TPU_RESOURCE


def wl(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


def _gone(cluster, ns: str, run: str, job_uid: str, timeout: float = 90) -> dict[str, int]:
    """What is left of the run (by kind) once nothing is, or at the timeout."""
    kinds = {
        "Job": lambda: [cluster.get(cluster.resource("batch/v1", "Job"), run, ns)],
        "Service": lambda: [cluster.get(cluster.resource("v1", "Service"), run, ns)],
        "Pod": lambda: cluster.list(cluster.resource("v1", "Pod"), ns, label_selector=f"{K8S_JOB_NAME_LABEL}={run}"),
        "Workload": lambda: cluster.list(cluster.kueue("Workload"), ns, label_selector=f"{KUEUE_JOB_UID_LABEL}={job_uid}"),
    }
    deadline = time.monotonic() + timeout
    while True:
        left = {k: len([o for o in f() if o]) for k, f in kinds.items()}
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(1)


def test_a_plain_job_run_is_admitted_placed_completed_and_deleted(kubeconfig: Path, cluster, tpu_quota) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    team = spec.teams[0]
    ns = team.ns
    run = f"job-live-{secrets.token_hex(3)}"
    kc = ("--kubeconfig", str(kubeconfig))
    job_uid = ""
    try:
        sub = wl("submit", "hello-tpu", "--runtime", "job", "--name", run, "--rehearse-seconds", "3", *kc)
        assert sub.returncode == 0, (sub.stdout, sub.stderr)
        assert sub.stdout.startswith("admitted after "), sub.stdout
        assert "a plain Job: any pod failure ends it" in sub.stderr

        job = cluster.get(cluster.resource("batch/v1", "Job"), run, ns)
        job_uid = job["metadata"]["uid"]
        # Kueue: one Workload, owned by the Job, admitted with the slice's TPU flavor and count.
        workload = cluster.workload_for(ns, job)
        assert workload is not None
        assert [o["kind"] for o in workload["metadata"].get("ownerReferences", [])] == ["Job"]
        (podset,) = workload["spec"]["podSets"]
        hosts = job["spec"]["parallelism"]
        chips_per_vm = int(podset["template"]["spec"]["containers"][0]["resources"]["requests"][TPU_RESOURCE])
        assert podset["count"] == hosts == 4
        (assignment,) = workload["status"]["admission"]["podSetAssignments"]
        pool = spec.tpu_pools[0]
        assert assignment["flavors"][TPU_RESOURCE] == pool.flavor_name()
        assert hosts * chips_per_vm == pool.shape.chips  # the whole slice's TPUs, in one Workload

        done = wl("status", run, "--wait", "--timeout", "180", *kc)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert done.stdout.splitlines()[0].startswith(f"{ns}/{run}: Succeeded"), done.stdout
        assert f"  slice 0: {hosts} workers ({hosts} Succeeded), on {hosts} VMs, 0 restarts" in done.stdout.splitlines()

        # Placement: one pod per TPU VM, every VM in the same node pool (one slice).
        pods = cluster.list(cluster.resource("v1", "Pod"), ns, label_selector=f"{K8S_JOB_NAME_LABEL}={run}")
        assert len(pods) == hosts
        pool_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) for n in cluster.list(cluster.resource("v1", "Node"))}
        nodes = [p["spec"]["nodeName"] for p in pods]
        assert len(set(nodes)) == hosts, nodes
        assert len({pool_of[n] for n in nodes}) == 1 and pool_of[nodes[0]] in pool.node_pool_names()
        # Stable DNS names: hostname <job>-<index> under the headless Service's subdomain.
        for p in pods:
            index = p["metadata"]["labels"][K8S_COMPLETION_INDEX_LABEL]
            assert (p["spec"].get("hostname"), p["spec"].get("subdomain")) == (f"{run}-{index}", run)
        svc = cluster.get(cluster.resource("v1", "Service"), run, ns)
        assert svc["spec"]["clusterIP"] == "None"

        logs = wl("logs", run, "--worker", "2", *kc)
        assert logs.returncode == 0, logs.stderr
        assert "rehearsal of:" in logs.stdout and "process 2/4" in logs.stdout, logs.stdout
    finally:
        gone = wl("delete", run, "--yes", *kc)
    assert gone.returncode == 0, (gone.stdout, gone.stderr)
    assert gone.stdout.splitlines() == [f"deleted Job {ns}/{run}", f"deleted Service {ns}/{run}"]
    assert _gone(cluster, ns, run, job_uid) == {"Job": 0, "Service": 0, "Pod": 0, "Workload": 0}


def test_a_job_runs_attempts_across_a_kueue_eviction_are_its_history(kubeconfig: Path, cluster, tpu_quota) -> None:
    """A plain Job's whole-run restart is a Kueue eviction (here: the Workload deactivated, then
    reactivated, Kueue's own `spec.active`): the Job is suspended, its pods go, new pods come at
    re-admission. `metrics` reads worker 0 of both attempts from the local Cloud Logging, by the
    labels the Job controller puts on its pods, one attempt per pod."""
    from workloads.local.disrupt import patch

    ns = load_spec(DEFAULT_SPEC_PATH).teams[0].ns
    run = f"job-hist-{secrets.token_hex(3)}"
    kc = ("--kubeconfig", str(kubeconfig))
    step = re.compile(r"completed step: (\d+),")

    def worker0() -> dict | None:
        return cluster.find_pod(ns, run)

    def worker0_steps() -> int:
        from workloads.cluster.api import LogsUnavailable

        pod = worker0()
        try:
            text = "\n".join(cluster.logs(ns, pod["metadata"]["name"])) if pod else ""
        except LogsUnavailable:
            return -1
        found = step.findall(text)
        return int(found[-1]) if found else -1

    def running(n: int) -> list[dict] | None:
        pods = [
            p
            for p in cluster.list(cluster.resource("v1", "Pod"), ns, label_selector=f"{K8S_JOB_NAME_LABEL}={run}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        return pods if len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods) else None

    try:
        # The eviction must land while the first attempt runs. On a loaded two-core host one pod-log
        # read through the API server has taken a minute (the whole of a 30 s run), so the run is
        # given 120 s; the second attempt replays only the steps left.
        sub = wl("submit", "llama3-8b", "--runtime", "job", "--name", run, "--rehearse-seconds", "120", *kc)
        assert sub.returncode == 0, (sub.stdout, sub.stderr)
        first = wait_for(lambda: running(4), 180, "the Job's 4 workers Running")
        first_uids = {p["metadata"]["uid"] for p in first}
        wait_for(lambda: worker0_steps() >= 5, 120, "worker 0 to reach step 5", interval=0.5)

        job = cluster.get(cluster.resource("batch/v1", "Job"), run, ns)
        workload = cluster.workload_for(ns, job)
        wl_path = cluster.kueue("Workload").path(ns, workload["metadata"]["name"])
        patch(cluster, wl_path, {"spec": {"active": False}})
        finished = [
            c["type"]
            for c in (cluster.get(cluster.resource("batch/v1", "Job"), run, ns) or {}).get("status", {}).get("conditions", [])
            if c.get("status") == "True"
        ]
        assert not {"Complete", "Failed", "SuccessCriteriaMet"} & set(finished), f"the first attempt ended before the eviction landed: {finished}"
        wait_for(
            lambda: (cluster.get(cluster.resource("batch/v1", "Job"), run, ns) or {}).get("spec", {}).get("suspend") is True and running(0) is not None,
            120,
            "the Job suspended and its pods gone",
        )
        patch(cluster, wl_path, {"spec": {"active": True}})
        second = wait_for(lambda: running(4), 180, "the re-admitted Job's 4 workers Running")
        assert not first_uids & {p["metadata"]["uid"] for p in second}  # new pods: a new attempt

        done = wl("status", run, "--wait", "--timeout", "240", *kc)
        assert done.returncode == 0 and done.stdout.startswith(f"{ns}/{run}: Succeeded"), (done.stdout, done.stderr)
        evictions = (cluster.workload_for(ns, job)["status"].get("schedulingStats") or {}).get("evictions") or []
        assert sum(e.get("count", 0) for e in evictions) >= 1, evictions

        met = wl("metrics", run, "-o", "json", *kc)
        assert met.returncode == 0, met.stderr
        doc = json.loads(met.stdout)
        assert doc["source"].startswith("Cloud Logging (project ") and doc["source"].count(f"{run}-0-") == 2, doc["source"]
        assert doc["goodput"]["attempts"] == 2, doc["goodput"]
        assert max(s["step"] for s in doc["steps"]) == 99 and "warning" not in met.stderr, met.stderr
    finally:
        wl("delete", run, "--yes", *kc)
