"""`workloads cleanup` against the real control plane: a finished run goes with its Kueue
Workload, a running one is refused (exit 2, nothing deleted) unless --force.

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
