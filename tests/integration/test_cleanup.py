"""`workloads cleanup` against the real control plane: a finished run goes with its Kueue
Workload, a running one is refused (exit 2, nothing deleted) unless --force. What the toolkit
did not submit stays (toolkit/ledger.py): a finished JobSet without its labels, and a finished
Workload whose owner is a kind of object the toolkit never submits.

Runs are named on the command line (or --dry-run): the namespace is shared with other
tests, whose finished runs an unnamed cleanup would take.
"""

from __future__ import annotations

import copy
import json

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import run_module
from tests.support.local_cluster import wait_for
from toolkit.names import TGK_FIELD_MANAGER
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset as manifests

COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def _jobset(spec, name: str, complete_after: str) -> dict:
    plan = plan_run("hello-tpu", spec, Overrides(slices=1, name=name, max_restarts=0))
    (js,) = copy.deepcopy(manifests.run_objects(plan))
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[COMPLETE_DELAY] = complete_after
    return js


def _cond(obj: dict | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in ((obj or {}).get("status") or {}).get("conditions") or [])


def test_cleanup_removes_finished_runs_and_refuses_running_ones(cluster, kubeconfig, tpu_quota) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    done, live = _jobset(spec, "cln-done", "1s"), _jobset(spec, "cln-live", "3600s")
    ns = done["metadata"]["namespace"]
    cli = ("--kubeconfig", str(kubeconfig), "--context", "tgk-local", "--spec", str(DEFAULT_SPEC_PATH))
    try:
        cluster.apply([done, live], field_manager=TGK_FIELD_MANAGER)
        wait_for(lambda: _cond(cluster.jobset(ns, "cln-done"), "Completed"), 180, "cln-done to complete")
        wait_for(lambda: cluster.workload_for(ns, cluster.jobset(ns, "cln-live")), 60, "cln-live's Workload")
        done_wl = cluster.workload_for(ns, cluster.jobset(ns, "cln-done"))
        assert done_wl is not None

        # A running run, named: one line, exit 2, and nothing deleted (not even the finished one named with it).
        r = run_module("workloads", "cleanup", "cln-done", "cln-live", "--yes", *cli)
        assert r.returncode == 2, (r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and f"{ns}/cln-live is still queued or running" in lines[0] and "--force" in lines[0], r.stderr
        assert cluster.jobset(ns, "cln-done") is not None and cluster.jobset(ns, "cln-live") is not None

        # The dry run of an unnamed cleanup: the finished run would go, the running one stays.
        r = run_module("workloads", "cleanup", "--dry-run", "-o", "json", *cli)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert {"kind": "JobSet", "namespace": ns, "name": "cln-done", "state": "Succeeded"} in doc["runs"]
        assert not any(x["name"] == "cln-live" for x in doc["runs"])
        assert any(k["what"] == f"JobSet {ns}/cln-live" and "running" in k["why"] for k in doc["kept"])
        assert cluster.jobset(ns, "cln-done") is not None

        r = run_module("workloads", "cleanup", "cln-done", "--yes", *cli)
        assert r.returncode == 0, r.stderr
        assert f"deleted JobSet {ns}/cln-done" in r.stdout
        wl_info = cluster.kueue("Workload")
        wait_for(lambda: cluster.jobset(ns, "cln-done") is None, 120, "cln-done to go")
        wait_for(lambda: cluster.get(wl_info, done_wl["metadata"]["name"], ns) is None, 120, "cln-done's Workload to go")
        assert cluster.jobset(ns, "cln-live") is not None

        r = run_module("workloads", "cleanup", "cln-live", "--force", "--yes", *cli)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: cluster.jobset(ns, "cln-live") is None and not cluster.pods(ns, "cln-live"), 120, "cln-live and its pods to go")
    finally:
        for name in ("cln-done", "cln-live"):
            cluster.delete_jobset(ns, name)


def test_cleanup_keeps_what_the_toolkit_did_not_submit(cluster, kubeconfig, tpu_quota) -> None:
    """Once deleted, now kept: a finished JobSet without the toolkit's labels (xpk's, a user's), and a finished Workload
    owned by a kind cleanup does not list, were deleted; now each is listed as kept, and naming one is one line, exit 2."""
    import secrets

    from toolkit.names import K8S_MANAGED_BY_LABEL, TGK_RUN_LABEL

    spec = load_spec(DEFAULT_SPEC_PATH)
    name = f"cln-foreign-{secrets.token_hex(2)}"
    theirs = _jobset(spec, name, "1s")
    ns = theirs["metadata"]["namespace"]
    for labels in (theirs["metadata"]["labels"], theirs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]):
        labels.pop(K8S_MANAGED_BY_LABEL, None)
        labels.pop(TGK_RUN_LABEL, None)
    cli = ("--kubeconfig", str(kubeconfig), "--context", "tgk-local", "--spec", str(DEFAULT_SPEC_PATH))
    cm_info, wl_info = cluster.resource("v1", "ConfigMap"), cluster.kueue("Workload")
    owner = cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-owner", "namespace": ns}})
    workload = {
        "apiVersion": wl_info.api_version,
        "kind": "Workload",
        "metadata": {
            "name": f"{name}-wl",
            "namespace": ns,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}],
        },
        "spec": {
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}]
        },
    }
    try:
        cluster.apply([theirs], field_manager=TGK_FIELD_MANAGER)
        wait_for(lambda: _cond(cluster.jobset(ns, name), "Completed"), 180, f"{name} to complete")
        cluster.create(workload)
        finished = {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done elsewhere", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        path = wl_info.path(ns, workload["metadata"]["name"], "status")
        cluster.request("PATCH", path, body={"status": {"conditions": [finished]}}, content_type="application/merge-patch+json")
        wait_for(lambda: _cond(cluster.get(wl_info, workload["metadata"]["name"], ns), "Finished"), 60, "the Workload to be finished")

        r = run_module("workloads", "cleanup", "--dry-run", "-o", "json", *cli)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert not any(x["name"] == name for x in doc["runs"]) and not any(o["name"] == f"{name}-wl" for o in doc["orphaned_workloads"])
        kept = {k["what"]: k["why"] for k in doc["kept"]}
        assert "not submitted by this toolkit" in kept[f"JobSet {ns}/{name}"]
        assert "ConfigMap, not a kind of run the toolkit submits" in kept[f"Workload {ns}/{name}-wl"]

        for args in (("cleanup", name, "--yes"), ("delete", name, "--yes")):
            r = run_module("workloads", *args, *cli)
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not submitted by this toolkit" in r.stderr, (args, r.stderr)
        assert cluster.jobset(ns, name) is not None and cluster.get(wl_info, workload["metadata"]["name"], ns) is not None
    finally:
        cluster.delete(cluster.resource(theirs["apiVersion"], "JobSet"), name, ns)
        cluster.delete(wl_info, workload["metadata"]["name"], ns)
        cluster.delete(cm_info, f"{name}-owner", ns)
