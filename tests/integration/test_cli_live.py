"""The CLIs against the live local cluster, run as a user runs them (subprocesses).

* ``preflight``: every row passes on the cluster ``local up`` built from the default spec,
  and the same command fails, row by row, for a spec that cluster was not built from;
* ``local up | status | down``: reuse of the running cluster, its status, and the empty cases;
* ``submit`` → ``status --wait`` → ``delete``: a 2-slice maxtext-6b run through the normal
  commands (a 3-second rehearsal), admitted by Kueue, placed one slice per node pool, to
  completion on kwok.

The cluster is the tier's shared one (tests/integration/conftest.py); nothing here stops it.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import run_module
from toolkit.names import GKE_NODEPOOL_LABEL


def wl(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


# ------------------------------------------------------------------ preflight


def test_preflight_passes_on_the_live_cluster(kubeconfig: Path) -> None:
    r = wl("preflight", "maxtext-6b", "--slices", "2", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rep = json.loads(r.stdout)
    assert rep["ok"] is True and rep["slices"] == 2
    rows = {c["name"]: c["result"] for c in rep["checks"]}
    assert {"resource-flavor", "local-queue", "cluster-queue", "nodes", "zone"} <= set(rows)
    assert set(rows.values()) == {"pass"}, rows

    text = wl("preflight", "maxtext-6b", "--kubeconfig", str(kubeconfig))
    assert text.returncode == 0, text.stderr
    assert text.stdout.strip().splitlines()[-1] == "ready"
    assert "[FAIL]" not in text.stdout and "[WARN]" not in text.stdout


def test_preflight_fails_for_a_spec_the_cluster_was_not_built_from(kubeconfig: Path) -> None:
    # v6e pools in us-east5: the live cluster has neither their flavor nor their nodes.
    r = wl("preflight", "maxtext-6b", "--spec", "examples/v6e-reservation.yaml", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    rep = json.loads(r.stdout)
    rows = {c["name"]: c for c in rep["checks"]}
    assert rep["ok"] is False
    assert rows["resource-flavor"]["result"] == "fail" and rows["nodes"]["result"] == "fail"
    assert all(c["fix"] for c in rep["checks"] if c["result"] == "fail")


# ------------------------------------------------------------------ local up / status / down


def test_local_status_of_the_running_cluster(local_cluster) -> None:
    sd = str(local_cluster.state_dir)
    r = wl("local", "status", "--state-dir", sd, "-o", "json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["state"] == "up" and st["state_dir"] == sd and st["kubeconfig"] == str(local_cluster.kubeconfig)
    tpu_nodes = sum(len(p.node_pool_names()) * p.shape.nodes for p in load_spec(DEFAULT_SPEC_PATH).tpu_pools)
    assert st["nodes_ready"] == st["nodes"] >= tpu_nodes
    assert all(d["running"] for d in st["daemons"].values())

    text = wl("local", "status", "--state-dir", sd)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "state:      up" and f"kubeconfig: {local_cluster.kubeconfig}" in lines
    assert f"nodes:      {st['nodes']}/{st['nodes']} Ready" in lines


def test_local_up_reuses_the_running_cluster(local_cluster) -> None:
    r = wl("local", "up", "--state-dir", str(local_cluster.state_dir), "--no-build")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{local_cluster.kubeconfig}\n"  # the kubeconfig path, for `$(... | tail -1)`
    assert "reusing it" in r.stderr


def test_local_status_and_down_with_nothing_running(tmp_path: Path) -> None:
    sd = str(tmp_path / "state")
    st = wl("local", "status", "--state-dir", sd, "-o", "json")
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["state"] == "down" and doc["kubeconfig"] is None
    assert not any(d["running"] for d in doc["daemons"].values())
    down = wl("local", "down", "--state-dir", sd)
    assert down.returncode == 0 and down.stdout == "nothing was running\n", down.stderr


def test_local_up_refuses_a_file_as_state_dir(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("")
    r = wl("local", "up", "--state-dir", str(f), "--no-build")
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: --state-dir")


# ------------------------------------------------------------------ submit → status --wait → delete


def test_submit_through_the_cli_runs_to_completion(kubeconfig: Path, cluster, tpu_quota) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    pool = spec.tpu_pools[0]
    team = spec.teams[0]
    run = f"cli-live-{secrets.token_hex(3)}"
    kc = ("--kubeconfig", str(kubeconfig))
    try:
        sub = wl("submit", "maxtext-6b", "--slices", str(pool.slices), "--name", run, "--rehearse-seconds", "3", *kc)
        assert sub.returncode == 0, (sub.stdout, sub.stderr)
        assert sub.stderr.startswith(f"submitted {team.ns}/{run}: maxtext-6b on {pool.slices} x ")
        assert "rehearsal on the local cluster: every worker Running for 3.0 s" in sub.stderr
        assert sub.stdout.startswith("admitted after ")

        done = wl("status", run, "--wait", "--timeout", "180", *kc)
        assert done.returncode == 0, (done.stdout, done.stderr)
        # Live progress on stderr: one line per change, each saying the pod count at most once.
        progress = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        assert progress and all(line.count("pods running") <= 1 for line in progress), progress
        assert progress[-1].startswith("Succeeded")
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"{team.ns}/{run}: Succeeded")
        # One line per slice (no worker lines: nothing is abnormal), one slice per node pool.
        slices = [line for line in lines if line.startswith("  slice ")]
        assert len(slices) == pool.slices
        assert not [line for line in lines if line.lstrip().startswith("worker ")]
        n = pool.shape.nodes
        for i, line in enumerate(slices):
            # A rehearsal's workers run at the same time: each on a TPU VM of its own.
            assert re.fullmatch(rf"  slice {i}: {n} workers \({n} Succeeded\), on {n} VMs, 0 restarts", line), line

        st = json.loads(wl("status", run, "-o", "json", *kc).stdout)
        assert st["phase"] == "Succeeded" and st["workload"]["state"] in ("admitted", "finished")
        node_info = cluster.resource("v1", "Node")
        pool_of = {n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in cluster.list(node_info)}
        placed = {s["index"]: {pool_of[p["node"]] for p in s["pods"]} for s in st["slices"]}
        # One slice per node pool: each slice on one pool, every pool used once.
        assert all(len(p) == 1 for p in placed.values()), placed
        assert sorted(next(iter(p)) for p in placed.values()) == sorted(pool.node_pool_names())

        every = wl("status", run, "--workers", *kc)
        assert sum(line.lstrip().startswith("worker ") for line in every.stdout.splitlines()) == pool.slices * n
    finally:
        gone = wl("delete", run, "--yes", *kc)
    assert gone.returncode == 0 and gone.stdout.strip() == f"deleted JobSet {team.ns}/{run}", (gone.stdout, gone.stderr)
