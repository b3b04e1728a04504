"""A bad host and a hang, rehearsed on the local cluster (real control plane, JobSet, Kueue, kwok nodes).

* ``local badhost NODE``: every workload container on the node fails; the run
  restart-loops on the same VMs; ``badhost`` names that node (and none of its slice peers,
  which JobSet's restart stops with 143), ``status`` says so, ``--cordon`` cordons and taints it
  and labels its pool, and the next attempt runs on the other pool and completes;
* ``local hang RUN``: worker 0 stops stepping, every pod stays Running, the exit guard's
  bound (the plan's, on the rehearsal's clock) ends the attempt with 124, the JobSet restarts
  it from the last checkpoint, the run completes; ``status`` and ``metrics`` count the hang;
* bad input to both: one line naming the argument or flag, exit 2, nothing changed.

Figures (time to detection, to Running again, steps redone) are scripts/bench_faults.py's.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.support import run_module
from tests.support.local_cluster import wait_for
from toolkit.names import GKE_NODEPOOL_LABEL, TGK_DEGRADED_SLICE_LABEL
from workloads.local import faults as localfaults
from workloads.runs import badhost

NS = "research"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def wl(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


@pytest.fixture()
def run_name(cluster):
    name = f"fl-{secrets.token_hex(3)}"
    yield name
    cluster.delete_jobset(NS, name)
    wait_for(lambda: cluster.jobset(NS, name) is None and not cluster.pods(NS, name), 120, f"JobSet {name} and its pods to go")


def _running(cluster, run: str) -> list[dict] | None:
    pods = [p for p in cluster.pods(NS, run) if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods) else None


def _finished(cluster, run: str) -> str | None:
    js = cluster.jobset(NS, run) or {}
    return next((c["type"] for c in (js.get("status") or {}).get("conditions") or [] if c["type"] in ("Completed", "Failed") and c["status"] == "True"), None)


def _last_step(cluster, run: str) -> int:
    import re

    from workloads.cluster.api import LogsUnavailable

    pod = cluster.find_pod(NS, run, slice_index=0, worker=0)
    try:
        text = "\n".join(cluster.logs(NS, pod["metadata"]["name"])) if pod else ""
    except LogsUnavailable:
        return -1
    steps = re.findall(r"completed step: ([0-9]+),", text)
    return int(steps[-1]) if steps else -1


def _label_pool(cluster, pool: str, value: str | None) -> None:
    info = cluster.resource("v1", "Node")
    for n in cluster.list(info, None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"):
        cluster.request(
            "PATCH",
            info.path(None, n["metadata"]["name"]),
            body={"metadata": {"labels": {TGK_DEGRADED_SLICE_LABEL: value}}},
            content_type="application/merge-patch+json",
        )


def _heal(cluster, node: str) -> None:
    info = cluster.resource("v1", "Node")
    obj = cluster.get(info, node) or {}
    taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if t.get("key") != badhost.BAD_HOST_TAINT_KEY]
    cluster.request(
        "PATCH",
        info.path(None, node),
        body={"spec": {"unschedulable": None, "taints": taints}, "metadata": {"annotations": {localfaults.BAD_HOST_ANNOTATION: None}}},
        content_type="application/merge-patch+json",
    )


def _pools(cluster) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "") for n in cluster.list(cluster.resource("v1", "Node"))}


@pytest.mark.usefixtures("tpu_quota")
def test_a_bad_host_loops_the_run_until_it_is_named_and_cordoned_then_the_run_finishes_elsewhere(cluster, local_cluster, kubeconfig, run_name) -> None:
    sub = wl("submit", "maxtext-6b", "--slices", "1", "--name", run_name, "--rehearse-seconds", "60", "--max-restarts", "20", "--kubeconfig", str(kubeconfig))
    assert sub.returncode == 0, sub.stderr
    first = wait_for(lambda: _running(cluster, run_name), 180, "all 4 workers Running")
    pools = _pools(cluster)
    bad = next(p for p in first if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2")["spec"]["nodeName"]
    bad_pool = pools[bad]
    other_pool = next(p for p in set(pools.values()) if p.startswith("v5e-16") and p != bad_pool)
    peers = sorted(n for n, p in pools.items() if p == bad_pool and n != bad)
    # No other capacity while the loop runs (the scheduler could otherwise move the slice by chance): the other pool kept off.
    _label_pool(cluster, other_pool, "true")
    try:
        wait_for(lambda: _last_step(cluster, run_name) >= 5, 60, "step 5", interval=0.5)
        res = wl("local", "badhost", bad, "--state-dir", str(local_cluster.state_dir))
        assert res.returncode == 0 and f"bad host {bad}: every workload container on it fails with exit 134" in res.stdout, res.stderr

        def named():
            got = wl("badhost", run_name, "-o", "json", "--kubeconfig", str(kubeconfig))
            assert got.returncode == 0, got.stderr
            doc = json.loads(got.stdout)
            return doc if doc["node"] else None

        doc = wait_for(named, 240, "badhost to name the VM", interval=1.0)
        assert doc["node"] == bad and doc["bystanders"] == [] and len(doc["evidence"]) == 2
        assert all(f["exit_code"] == 134 and f["node"] == bad for f in doc["evidence"])
        # Its slice peers were there in every attempt, stopped by the restart: on record, never named.
        stopped = {f["node"] for a in doc["attempts"] for f in a["failures"] if f["exit_code"] == 143}
        assert stopped <= set(peers)
        # The second failure is on record once its pod failed; JobSet counts the restart it makes of it a moment later.
        wait_for(
            lambda: int((cluster.jobset(NS, run_name) or {}).get("status", {}).get("restarts") or 0) >= 2, 60, "JobSet to restart after the second failure"
        )
        st = wl("status", run_name, "--kubeconfig", str(kubeconfig))
        assert f"bad host  {bad}: its workload container failed first" in st.stdout and f"badhost {run_name} --cordon" in st.stdout, st.stdout

        dry = wl("badhost", run_name, "--cordon", "--dry-run", "--kubeconfig", str(kubeconfig))
        assert dry.returncode == 0 and "would send PATCH /api/v1/nodes/" in dry.stdout, dry.stdout
        assert not (cluster.get(cluster.resource("v1", "Node"), bad)["spec"].get("unschedulable"))

        _label_pool(cluster, other_pool, None)  # capacity elsewhere
        done = wl("badhost", run_name, "--cordon", "--kubeconfig", str(kubeconfig))
        assert done.returncode == 0, done.stderr
        node = cluster.get(cluster.resource("v1", "Node"), bad)
        assert node["spec"]["unschedulable"] is True
        assert {"key": badhost.BAD_HOST_TAINT_KEY, "value": run_name, "effect": "NoSchedule"} in node["spec"]["taints"]
        for peer in peers:  # labelled with their pool, never cordoned or tainted
            obj = cluster.get(cluster.resource("v1", "Node"), peer)
            assert obj["metadata"]["labels"].get(TGK_DEGRADED_SLICE_LABEL) == "true"
            assert not obj["spec"].get("unschedulable") and not any(t["key"] == badhost.BAD_HOST_TAINT_KEY for t in obj["spec"].get("taints") or [])

        def elsewhere():
            pods = _running(cluster, run_name)
            return pods if pods and all(pools[p["spec"]["nodeName"]] == other_pool for p in pods) else None

        wait_for(elsewhere, 240, "every worker Running on the other pool")
        assert wait_for(lambda: _finished(cluster, run_name), 240, "the run to finish") == "Completed"
        st = wl("status", run_name, "--kubeconfig", str(kubeconfig))
        assert f"bad host  {bad}" in st.stdout and "cordoned and tainted" in st.stdout, st.stdout
    finally:
        _label_pool(cluster, other_pool, None)
        _label_pool(cluster, bad_pool, None)
        _heal(cluster, bad)


@pytest.mark.usefixtures("tpu_quota")
def test_a_hang_ends_the_attempt_with_the_guards_code_and_the_run_resumes(cluster, local_cluster, kubeconfig, run_name) -> None:
    sub = wl("submit", "maxtext-6b", "--slices", "1", "--name", run_name, "--rehearse-seconds", "60", "--kubeconfig", str(kubeconfig))
    assert sub.returncode == 0, sub.stderr
    first = wait_for(lambda: _running(cluster, run_name), 180, "all 4 workers Running")
    wait_for(lambda: _last_step(cluster, run_name) >= 10, 60, "step 10", interval=0.5)
    res = wl("local", "hang", run_name, "--state-dir", str(local_cluster.state_dir))
    assert res.returncode == 0, res.stderr

    def ended_by_guard():
        for p in cluster.pods(NS, run_name):
            for cs in p["status"].get("containerStatuses") or []:
                if ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 124:
                    return p
        return None

    hung_pod = wait_for(ended_by_guard, 240, "the exit guard to end the hung attempt", interval=0.2)
    assert hung_pod["metadata"]["labels"][ATTEMPT] == "0" and hung_pod["metadata"]["uid"] in {p["metadata"]["uid"] for p in first}
    assert wait_for(lambda: _finished(cluster, run_name), 240, "the run to finish") == "Completed"
    js = cluster.jobset(NS, run_name)
    assert js["status"].get("restarts") == 1 and js["status"].get("restartsCountTowardsMax") == 1  # a counted failure, not a free disruption
    st = wl("status", run_name, "--kubeconfig", str(kubeconfig))
    assert "hangs  attempt 0 ended by the exit guard" in st.stdout, st.stdout
    met = wl("metrics", run_name, "--pool", "v5e-16", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert met.returncode == 0, met.stderr
    good = json.loads(met.stdout)["goodput"]
    assert good["attempts"] == 2 and good["hangs"] == 1 and good["hang"] > 0, good
    assert sorted({s["step"] for s in json.loads(met.stdout)["steps"]}) == list(range(100))


def test_bad_input_to_badhost_and_the_local_faults_is_one_line_exit_2_and_changes_nothing(cluster, local_cluster, kubeconfig) -> None:
    node = next(n for n, p in _pools(cluster).items() if p.startswith("v5e-16"))
    cases = [
        (["badhost", "no-such-run", "--kubeconfig", str(kubeconfig)], "RUN"),
        (["local", "badhost", node, "--exit-code", "143", "--state-dir", str(local_cluster.state_dir)], "--exit-code"),
        (["local", "badhost", "no-such-node", "--state-dir", str(local_cluster.state_dir)], "NODE"),
        (["local", "hang", "no-such-run", "--state-dir", str(local_cluster.state_dir)], "--worker"),
    ]
    for args, field in cases:
        res = wl(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and field in res.stderr, (args, res.stderr)
    assert localfaults.BAD_HOST_ANNOTATION not in (cluster.get(cluster.resource("v1", "Node"), node)["metadata"].get("annotations") or {})
