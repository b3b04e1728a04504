"""A node upgrade and announced host maintenance met by a running rehearsal, on the real control plane.

* ``local upgrade --pool P``: the slice's pool is cordoned and drained through the Eviction API
  (each pod ``DisruptionTarget``/``EvictionByEvictionAPI``), its VMs come back reporting the new
  kubelet; the whole JobSet restarts once for free, resumes from the step saved on SIGTERM and
  completes; ``maintain --watch`` beside it names the disruption an upgrade, and ``status`` says so;
* ``local maintenance --node N --in 60s``: GKE's ``cloud.google.com/scheduled-maintenance-time``
  on the pool's nodes; ``status`` and ``preflight`` list the window; ``maintain`` (one pass) cordons
  the announced nodes and evicts the slice before the window; the run restarts once, resumes and
  completes; at the window the rehearsal daemon takes the nodes (ONGOING) and gives them back
  without the labels, and the next ``maintain`` pass has nothing of its own left to undo;
* the same window met without moving: at its start the pool's nodes get ``ONGOING`` and the
  impending-termination taint, the slice is drained and restarts once, resumes and completes,
  and the watching ``maintain`` records host maintenance (not an upgrade);
* bad input to ``local upgrade`` / ``local maintenance`` / ``maintain``: one line naming the flag, exit 2.

Nothing is timed against a budget (scripts/bench_disruptions.py has the figures).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.test_rehearsal import (
    NS,
    RESTORED,
    STEP,
    Recorder,
    _all_running,
    _cond,
    _finished,
    _last_step,
    _log,
    _submit,
    wl,
)
from tests.support.local_cluster import wait_for
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL
from workloads.cluster import maintenance as mt
from workloads.local.disrupt import replacements_dir


@pytest.fixture()
def run_name(cluster):
    import secrets

    name = f"um-{secrets.token_hex(3)}"
    yield name
    cluster.delete_jobset(NS, name)
    wait_for(lambda: cluster.jobset(NS, name) is None and not cluster.pods(NS, name), 120, f"JobSet {name} and its pods to go")


def _pool_of_slice(cluster, pods: list[dict], slice_index: str) -> str:
    node_info = cluster.resource("v1", "Node")
    names = {p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == slice_index}
    pools = {cluster.get(node_info, n)["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in names}
    assert len(pools) == 1, pools
    return pools.pop()


def _resumed(cluster, run: str) -> str | None:
    text = _log(cluster, run)
    at = RESTORED.search(text)
    return text if at and STEP.search(text, at.end()) else None


@pytest.mark.usefixtures("tpu_quota")
def test_an_upgrade_of_a_slices_pool_restarts_the_run_once_and_status_says_upgrade(cluster, local_cluster, kubeconfig, run_name) -> None:
    _submit(kubeconfig, run_name, 30.0, "--max-restarts", "0")
    first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
    pool = _pool_of_slice(cluster, first, "1")
    kc = ["--kubeconfig", str(kubeconfig)]
    watcher = subprocess.Popen(
        [sys.executable, "-m", "workloads", "maintain", run_name, "--watch", "--interval", "1", "--timeout", "600", *kc],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _last_step(_log(cluster, run_name)) >= 10, 60, "the run to reach step 10", interval=0.5)
        up = wl(
            "local", "upgrade", "--pool", pool, "--version", "v1.99.0-gke.1", "--replace-after", "2", "--state-dir", str(local_cluster.state_dir), "-o", "json"
        )
        assert up.returncode == 0, (up.stdout, up.stderr)
        res = json.loads(up.stdout)
        assert res["pool"] == pool and res["to_version"] == "v1.99.0-gke.1" and len(res["nodes"]) == 4 and len(res["pods"]) == 4, res

        # The pods of the drained slice: evicted (the reason says how), not killed by a kubelet.
        for name in res["pods"]:
            pod = cluster.get(cluster.resource("v1", "Pod"), name.split("/", 1)[1], NS)
            if pod is not None and _cond(pod, "DisruptionTarget"):
                assert _cond(pod, "DisruptionTarget")["reason"] == "EvictionByEvictionAPI", pod["status"]

        wait_for(lambda: _all_running(cluster, run_name, "1", 8), 180, "all 8 workers of the restarted JobSet Running")
        restarted = wait_for(lambda: _resumed(cluster, run_name), 60, "the restarted run's first step", interval=0.5)
        restored = int(RESTORED.search(restarted).group(1))
        after = [int(s) for s in STEP.findall(restarted, RESTORED.search(restarted).end())]
        assert restored >= 10 and after[0] == restored + 1  # saved at the drain's SIGTERM: no step redone
        assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
        js = cluster.jobset(NS, run_name)
        assert js["status"].get("restarts") == 1 and not js["status"].get("restartsCountTowardsMax")
        watcher.wait(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.terminate()
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, (out, err)
    # The new VMs report the new kubelet; nothing is left cordoned or being replaced.
    for n in cluster.list(cluster.resource("v1", "Node"), None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"):
        assert n["status"]["nodeInfo"]["kubeletVersion"] == "v1.99.0-gke.1" and not n["spec"].get("unschedulable")
    assert not (replacements_dir(local_cluster.state_dir) / f"{pool}.json").exists()

    recorded = mt.parse_disruptions(cluster.jobset(NS, run_name))
    assert [(d.kind, d.pool) for d in recorded] == [("upgrade", pool)], recorded
    # The pods' reason is in the record when the watcher saw them evicted (a loaded host may see them only gone).
    assert "v1.99.0-gke.1" in recorded[0].detail, recorded[0]
    assert "pods" not in recorded[0].detail or "EvictionByEvictionAPI" in recorded[0].detail, recorded[0]
    st = wl("status", run_name, *kc)
    assert st.returncode == 0, st.stderr
    assert f"disruption  {recorded[0].at} upgrade of node pool {pool}:" in st.stdout, st.stdout
    doc = json.loads(wl("status", run_name, "-o", "json", *kc).stdout)
    assert [d["kind"] for d in doc["disruptions"]] == ["upgrade"]


@pytest.mark.usefixtures("tpu_quota")
def test_announced_maintenance_is_shown_and_the_run_moves_before_the_window(cluster, local_cluster, kubeconfig, run_name) -> None:
    _submit(kubeconfig, run_name, 60.0, "--max-restarts", "0")  # long enough to be running still when maintain moves it
    first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
    pool = _pool_of_slice(cluster, first, "1")
    node = next(p["spec"]["nodeName"] for p in first if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1")
    kc = ["--kubeconfig", str(kubeconfig)]
    wait_for(lambda: _last_step(_log(cluster, run_name)) >= 10, 60, "the run to reach step 10", interval=0.5)

    ann = wl("local", "maintenance", "--node", node, "--in", "60s", "--state-dir", str(local_cluster.state_dir), "-o", "json")
    assert ann.returncode == 0, (ann.stdout, ann.stderr)
    window = json.loads(ann.stdout)
    assert window["pool"] == pool and len(window["nodes"]) == 4
    # What GKE puts on the nodes: the window's start in epoch seconds, on every VM of the slice.
    pool_nodes = cluster.list(cluster.resource("v1", "Node"), None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}")
    starts = {n["metadata"]["labels"].get(mt.SCHEDULED_MAINTENANCE_LABEL) for n in pool_nodes}
    assert len(starts) == 1 and mt.iso(float(starts.pop())) == window["window_start"]

    st = wl("status", run_name, *kc)
    assert st.returncode == 0 and st.stdout.count(f"(pool {pool}): window starts {window['window_start']}") == 4, st.stdout
    pf = wl("preflight", "maxtext-6b", "--slices", "2", *kc, "-o", "json")
    row = next(c for c in json.loads(pf.stdout)["checks"] if c["name"] == "maintenance")
    assert row["result"] == "warn" and row["detail"].startswith("4 node(s) with host maintenance announced"), row

    dry = wl("maintain", run_name, "--lead", "10m", "--dry-run", "-o", "json", *kc)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["slices"] == [1] and len(plan["cordon"]) == 4 and not plan["evicted"] and not plan["cordoned"]
    assert not any(n["spec"].get("unschedulable") for n in cluster.list(cluster.resource("v1", "Node"), None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"))

    moved = wl("maintain", run_name, "--lead", "10m", "-o", "json", *kc)
    assert moved.returncode == 0, moved.stderr
    done = json.loads(moved.stdout)
    assert sorted(done["cordoned"]) == sorted(window["nodes"]) and len(done["evicted"]) == 4, done
    assert [d["kind"] for d in done["recorded"]] == ["moved-ahead-of-maintenance"]

    wait_for(lambda: _all_running(cluster, run_name, "1", 8), 300, "all 8 workers of the restarted JobSet Running (after the window)")
    restarted = wait_for(lambda: _resumed(cluster, run_name), 60, "the restarted run's first step", interval=0.5)
    restored = int(RESTORED.search(restarted).group(1))
    after = [int(s) for s in STEP.findall(restarted, RESTORED.search(restarted).end())]
    assert restored >= 10 and after[0] == restored + 1
    assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
    js = cluster.jobset(NS, run_name)
    assert js["status"].get("restarts") == 1 and not js["status"].get("restartsCountTowardsMax")
    # The maintenance happened to nodes the run had left: they came back without GKE's labels, uncordoned.
    for n in cluster.list(cluster.resource("v1", "Node"), None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"):
        labels = n["metadata"]["labels"]
        assert mt.SCHEDULED_MAINTENANCE_LABEL not in labels and mt.ACTIVE_MAINTENANCE_LABEL not in labels
        assert not n["spec"].get("unschedulable") and mt.CORDONED_FOR_ANNOTATION not in (n["metadata"].get("annotations") or {})
    again = json.loads(wl("maintain", run_name, "-o", "json", *kc).stdout)
    assert not again["due"] and not again["uncordoned"] and not again["evicted"]


@pytest.mark.usefixtures("tpu_quota")
def test_a_window_met_without_moving_drains_the_slice_and_is_recorded_as_maintenance(cluster, local_cluster, kubeconfig, run_name) -> None:
    import threading

    from workloads.runs.maintain import Watch, maintain_once

    node_info = cluster.resource("v1", "Node")
    nodes_seen = Recorder(cluster, node_info, None)
    memory, halt, kinds, polled = Watch(), threading.Event(), [], []

    def watch() -> None:  # maintain beside the run, never moving it (a lead no window is within)
        while not halt.is_set():
            try:
                kinds.extend(d.kind for d in maintain_once(cluster, NS, run_name, lead_s=-1e9, watch=memory).recorded)
            except Exception:  # noqa: BLE001  (the run is not there yet, or the API server is busy: the next pass)
                pass
            halt.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        _submit(kubeconfig, run_name, 30.0, "--max-restarts", "0")
        first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
        pool = _pool_of_slice(cluster, first, "1")
        node = next(p["spec"]["nodeName"] for p in first if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1")
        watcher.start()
        wait_for(lambda: _last_step(_log(cluster, run_name)) >= 10, 60, "the run to reach step 10", interval=0.5)
        ann = wl("local", "maintenance", "--node", node, "--in", "5s", "--state-dir", str(local_cluster.state_dir), "-o", "json")
        assert ann.returncode == 0, ann.stderr

        def poll_pool() -> None:  # beside the watch: a watch that has to start over (a loaded server) skips versions
            while not halt.is_set():
                try:
                    polled.extend(cluster.list(node_info, None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"))
                except Exception:  # noqa: BLE001  (a busy API server: the next poll)
                    pass
                halt.wait(0.05)

        poller = threading.Thread(target=poll_pool, daemon=True)
        poller.start()
        wait_for(lambda: _all_running(cluster, run_name, "1", 8), 240, "all 8 workers of the restarted JobSet Running")
        restarted = wait_for(lambda: _resumed(cluster, run_name), 60, "the restarted run's first step", interval=0.5)
        after = [int(s) for s in STEP.findall(restarted, RESTORED.search(restarted).end())]
        assert after[0] == int(RESTORED.search(restarted).group(1)) + 1
        assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
        wait_for(lambda: "maintenance" in kinds, 60, "maintain to record the maintenance")
    finally:
        halt.set()
        watcher.join(timeout=30)
        nodes_seen.stop()
    assert kinds == ["maintenance"], kinds
    assert cluster.jobset(NS, run_name)["status"].get("restarts") == 1
    # What GKE shows during the maintenance: ONGOING and the taint, on every node of the pool, then neither.
    pool_nodes = json.loads(ann.stdout)["nodes"]
    for name in pool_nodes:
        versions = [o for _, _, o in nodes_seen.events if o["metadata"]["name"] == name] + [o for o in polled if o["metadata"]["name"] == name]
        ongoing = [o for o in versions if o["metadata"]["labels"].get(mt.ACTIVE_MAINTENANCE_LABEL) == mt.ACTIVE_MAINTENANCE_VALUE]
        assert ongoing, name
        assert any(t["key"] == mt.IMPENDING_TERMINATION_TAINT_KEY for t in ongoing[-1]["spec"].get("taints") or [])
        assert mt.SCHEDULED_MAINTENANCE_LABEL not in ongoing[-1]["metadata"]["labels"]
        now = cluster.get(node_info, name)
        assert mt.ACTIVE_MAINTENANCE_LABEL not in now["metadata"]["labels"] and not now["spec"].get("unschedulable")
    recorded = mt.parse_disruptions(cluster.jobset(NS, run_name))
    assert [(d.kind, d.pool) for d in recorded] == [("maintenance", pool)]


def test_bad_input_to_upgrade_maintenance_and_maintain_is_one_line_exit_2(cluster, local_cluster, kubeconfig) -> None:
    sd = ["--state-dir", str(local_cluster.state_dir)]
    cases = [
        (("local", "upgrade", "--pool", "no-such-pool", *sd), "--pool"),
        (("local", "maintenance", "--node", "no-such-node", *sd), "--node"),
        (("local", "maintenance", "--node", "x", "--in", "soon", *sd), "--in"),
        (("maintain", "no-such-run", "--kubeconfig", str(kubeconfig)), "RUN"),
        (("maintain", "r", "--lead", "forever", "--kubeconfig", str(kubeconfig)), "--lead"),
    ]
    for args, field in cases:
        got = wl(*args)
        assert got.returncode == 2, (args, got.stdout, got.stderr)
        lines = got.stderr.strip().splitlines()
        assert len(lines) == 1 and field in lines[0], (args, got.stderr)
    # Nothing applied: no node announced for maintenance, cordoned or being replaced.
    for n in cluster.list(cluster.resource("v1", "Node")):
        assert mt.SCHEDULED_MAINTENANCE_LABEL not in n["metadata"]["labels"] and not n["spec"].get("unschedulable"), n["metadata"]["name"]
