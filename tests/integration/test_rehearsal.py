"""A rehearsal that runs like a training run, on the local cluster (real control plane, kwok nodes).

* ``submit`` on the local cluster: every worker of every slice Running at the same time,
  each on a TPU VM of its own, for the rehearsal time; each serves a MaxText-format log
  through the apiserver (``logs``), its own attempt only, as on GKE; ``metrics`` and
  ``report`` read every attempt from the local Cloud Logging;
* ``local preempt`` (spot preemption and ``--maintenance``): the slice's pods get
  ``DisruptionTarget``, end Failed (exit 143) and are removed; the slice's nodes go
  NotReady and come back as new Ready nodes; the whole JobSet restarts once, without
  spending ``maxRestarts`` (0 here), every slice is admitted and Running again, the
  log restores the saved step and continues, and the run completes;
* an eviction through the Eviction API from outside (what ``kubectl drain`` does) ends
  the same way;
* bad input to ``local preempt``: one line naming the argument or flag, exit 2, nothing
  changed.

Program errors failing at once and unknown failures stopping at ``maxRestarts`` are in
test_local_cluster.py. Waits poll or watch with deadlines; nothing is timed against a
budget (the preemption-to-Running figure is scripts/bench_preempt.py's).
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import REPO, run_module
from tests.support.local_cluster import wait_for
from toolkit.errors import NotFound, ToolkitError
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL
from workloads.local.addons import SIGTERM_EXIT_CODE
from workloads.local.disrupt import replacements_dir

NS = "research"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
RESTORED = re.compile(r"restoring from this run's directory step (\d+)")
STEP = re.compile(r"completed step: (\d+),")


def wl(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


class Recorder(threading.Thread):
    """Every version of the watched objects, in order: what a test asserts the history on."""

    def __init__(self, cluster, info, namespace: str | None, selector: str | None = None) -> None:
        super().__init__(daemon=True)
        self.cluster, self.info, self.namespace, self.selector = cluster, info, namespace, selector
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._halt = threading.Event()
        self.start()

    def run(self) -> None:
        rv = None
        while not self._halt.is_set():
            try:
                for typ, obj in self.cluster.watch(self.info, self.namespace, label_selector=self.selector, resource_version=rv, timeout=3):
                    self.events.append((time.monotonic(), typ, obj))
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if self._halt.is_set():
                        return
            except ToolkitError:
                time.sleep(0.2)
                rv = None

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def history(self, uid: str) -> list[tuple[str, dict[str, Any]]]:
        return [(typ, obj) for _, typ, obj in self.events if obj["metadata"].get("uid") == uid]


def _cond(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def _pods(cluster, run: str, attempt: str | None = None) -> list[dict]:
    pods = cluster.pods(NS, run)
    return [p for p in pods if attempt is None or p["metadata"]["labels"].get(ATTEMPT) == attempt]


def _all_running(cluster, run: str, attempt: str, n: int) -> list[dict] | None:
    pods = [p for p in _pods(cluster, run, attempt) if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods) else None


def _finished(cluster, run: str) -> str | None:
    js = cluster.jobset(NS, run)
    for t in ("Completed", "Failed"):
        c = _cond(js or {}, t)
        if c and c.get("status") == "True":
            return t
    return None


def _log(cluster, run: str, slice_index: int = 0, worker: int = 0) -> str:
    """The worker's log; "" while it has none to serve (no pod yet, or a pod so new that the rehearsal daemon
    has not yet given kwok its log file: the API server answers 400 "no logs found" then)."""
    from workloads.cluster.api import LogsUnavailable

    pod = cluster.find_pod(NS, run, slice_index=slice_index, worker=worker)
    try:
        return "\n".join(cluster.logs(NS, pod["metadata"]["name"])) if pod else ""
    except LogsUnavailable:
        return ""


def _last_step(text: str) -> int:
    steps = STEP.findall(text)
    return int(steps[-1]) if steps else -1


@pytest.fixture()
def run_name(cluster):
    name = f"rh-{secrets.token_hex(3)}"
    yield name
    cluster.delete_jobset(NS, name)
    wait_for(lambda: cluster.jobset(NS, name) is None and not cluster.pods(NS, name), 120, f"JobSet {name} and its pods to go")


def _load_without_cloud_logging(kubeconfig: Path, run: str):
    """What `metrics RUN` reads when Cloud Logging cannot answer: the run's current pod and its files in the local bucket server."""
    from infra.fleet import load_env
    from workloads.cluster.client import Cluster
    from workloads.observe import analysis
    from workloads.observe.history import HistoryUnavailable
    from workloads.runs import hooks

    def no_logging(cluster, project):
        raise HistoryUnavailable("Cloud Logging is off in this test")

    return analysis.load_run(
        run,
        spec=lambda: load_env(None),
        cluster=lambda: Cluster.connect(kubeconfig, None),
        metrics_file=None,
        namespace=NS,
        team=None,
        logging_client=no_logging,
        storage_client=lambda cluster, project: hooks.storage_client(hooks.for_context(cluster.context), cluster, project),
    )


def _submit(kubeconfig: Path, run: str, seconds: float, *extra: str) -> None:
    sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--rehearse-seconds", str(seconds), "--kubeconfig", str(kubeconfig), *extra)
    assert sub.returncode == 0, (sub.stdout, sub.stderr)
    assert f"every worker Running for {seconds:.1f} s (--rehearse-seconds)" in sub.stderr, sub.stderr


# ------------------------------------------------------------------ a rehearsal run


@pytest.mark.usefixtures("tpu_quota")
def test_rehearsal_workers_run_together_on_their_own_vms_and_serve_maxtext_logs(cluster, kubeconfig, run_name, tmp_path) -> None:
    seconds = 6.0
    pods_seen = Recorder(cluster, cluster.resource("v1", "Pod"), NS, f"{JOBSET_NAME_LABEL}={run_name}")
    try:
        _submit(kubeconfig, run_name, seconds)
        running = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running at once")
        t_all = time.monotonic()
        # Every worker on a TPU VM of its own; each slice on a node pool of its own.
        assert len({p["spec"]["nodeName"] for p in running}) == 8
        node_pool = {n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in cluster.list(cluster.resource("v1", "Node"))}
        pools = {p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL]: {node_pool[p["spec"]["nodeName"]]} for p in running}
        assert len(pools) == 2 and all(len(v) == 1 for v in pools.values()) and pools["0"] != pools["1"], pools
        assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
        # Not before its time (a loaded machine only makes it later).
        assert time.monotonic() - t_all >= 0.8 * seconds
    finally:
        pods_seen.stop()
    # Every worker was Running until every other one had started: they overlap.
    started, ended = [], []
    for p in running:
        uid = p["metadata"]["uid"]
        times = [t for t, _, obj in pods_seen.events if obj["metadata"]["uid"] == uid and obj["status"].get("phase") == "Running"]
        done = [t for t, _, obj in pods_seen.events if obj["metadata"]["uid"] == uid and obj["status"].get("phase") == "Succeeded"]
        assert times and done, pods_seen.history(uid)[-1:]
        started.append(min(times))
        ended.append(min(done))
    assert max(started) < min(ended)

    # The logs through the apiserver (kwok serves each worker's file), MaxText's format.
    logs = wl("logs", run_name, "--slice", "1", "--worker", "3", "--kubeconfig", str(kubeconfig))
    assert logs.returncode == 0, logs.stderr
    assert "No existing checkpoints found, not restoring checkpoint." in logs.stdout
    assert [int(s) for s in STEP.findall(logs.stdout)] == list(range(100))
    assert "Started an asynchronous checkpoint save for step 99" in logs.stdout

    met = wl("metrics", run_name, "--pool", "v5e-16", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert met.returncode == 0, met.stderr
    doc = json.loads(met.stdout)
    text = json.dumps(doc)
    assert '"steps_seen": 100' in text, text[:500]
    mfu = re.search(r'"mfu": ([0-9.]+)', text)
    # The rehearsal steps at the plan's estimated step time: metrics measures the MFU the plan estimated.
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, plan_run

    expected = plan_run("maxtext-6b", load_spec(REPO / "examples" / "default.yaml"), Overrides(slices=2)).program.estimated_mfu
    assert mfu and expected and abs(float(mfu.group(1)) - expected) <= 0.02, (expected, text[:800])

    # Without --pool: the shape and slice count come from the run on the cluster, and the figures are the same.
    own = wl("metrics", run_name, "-o", "json", "--kubeconfig", str(kubeconfig))
    assert own.returncode == 0, own.stderr
    assert json.loads(own.stdout) == doc
    own_text = wl("metrics", run_name, "--kubeconfig", str(kubeconfig))
    assert own_text.returncode == 0 and "MFU" in own_text.stdout and "need --shape or --pool" not in own_text.stdout, own_text.stdout

    rep = wl("report", run_name, "--pool", "v5e-16", "--out", str(tmp_path / "report"), "--kubeconfig", str(kubeconfig))
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "report" / "report.md").is_file()


# ------------------------------------------------------------------ preemption and maintenance


@pytest.mark.usefixtures("tpu_quota")
@pytest.mark.parametrize("maintenance", [False, True], ids=["spot-preemption", "maintenance"])
def test_preemption_restarts_the_jobset_once_for_free_and_the_run_completes(cluster, local_cluster, kubeconfig, run_name, maintenance) -> None:
    node_info = cluster.resource("v1", "Node")
    pods_seen = Recorder(cluster, cluster.resource("v1", "Pod"), NS, f"{JOBSET_NAME_LABEL}={run_name}")
    nodes_seen = Recorder(cluster, node_info, None)
    try:
        _submit(kubeconfig, run_name, 12.0, "--max-restarts", "0")
        first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
        wait_for(lambda: _last_step(_log(cluster, run_name)) >= 10, 60, "the run to reach step 10", interval=0.5)
        first_attempt = [line for line in _log(cluster, run_name).splitlines() if STEP.search(line)]
        victims = {p["metadata"]["uid"] for p in first if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1"}
        args = ["local", "preempt", run_name, "--slice", "1", "--replace-after", "2", "--state-dir", str(local_cluster.state_dir), "-o", "json"]
        pre = wl(*args, *(["--maintenance"] if maintenance else []))
        assert pre.returncode == 0, (pre.stdout, pre.stderr)
        res = json.loads(pre.stdout)
        assert res["slice"] == 1 and len(res["pods"]) == 4 and len(res["nodes"]) == 4
        old_uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in cluster.list(node_info) if n["metadata"]["name"] in res["nodes"]}

        # The whole JobSet restarts once: every slice admitted and Running again, a new attempt.
        wait_for(lambda: _all_running(cluster, run_name, "1", 8), 180, "all 8 workers of the restarted JobSet Running")
        js = cluster.jobset(NS, run_name)
        assert js["status"].get("restarts") == 1
        assert not js["status"].get("restartsCountTowardsMax")  # free: maxRestarts is 0 and the run goes on
        assert _cond(cluster.workload_for(NS, js), "Admitted")["status"] == "True"

        # The new worker 0 is a new pod with a log of its own, as on GKE: it restores the
        # checkpoint saved at the preemption and goes on from the next step; not one line of
        # the first attempt is in it.
        def restarted_steps() -> str | None:
            text = _log(cluster, run_name)
            at = RESTORED.search(text)
            return text if at and STEP.search(text, at.end()) else None

        restarted = wait_for(restarted_steps, 60, "the restarted run's first step", interval=0.5)
        restored = RESTORED.search(restarted)
        assert not STEP.findall(restarted[: restored.start()]), "the new pod's log holds the first attempt's steps"
        assert first_attempt and not any(line in restarted for line in first_attempt)
        after = [int(s) for s in STEP.findall(restarted, restored.end())]
        assert after[0] == int(restored.group(1)) + 1 >= 11, after  # autocheckpoint: saved at the step reached (>= 10)

        assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
        assert _last_step(_log(cluster, run_name)) == 99
        assert cluster.jobset(NS, run_name)["status"].get("restarts") == 1
    finally:
        pods_seen.stop()
        nodes_seen.stop()

    # Both attempts, from the local Cloud Logging (what GKE's agent keeps), one per pod of worker 0.
    met = wl("metrics", run_name, "--pool", "v5e-16", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert met.returncode == 0, met.stderr
    doc = json.loads(met.stdout)
    good = doc["goodput"]
    assert good["attempts"] == 2 and good["restarts"] > 0 and good["steps_redone"] == 0 and 0 < good["goodput"] < 1, good
    assert doc["source"].startswith("Cloud Logging (project ") and doc["source"].count(f"{run_name}-") == 2, doc["source"]
    assert "warning" not in met.stderr, met.stderr
    assert sorted({s["step"] for s in doc["steps"]}) == list(range(100))  # every step, from both attempts

    # Without Cloud Logging: the new pod's log (its own attempt) and MaxText's metrics files in
    # the run's bucket, which worker 0 wrote every log_period steps in both attempts.
    got = _load_without_cloud_logging(kubeconfig, run_name)
    assert got.attempts is None and "metrics file(s) in gs://" in got.source, got.source
    # MaxText uploads every log_period (10) steps: the first attempt's whole periods are in the
    # files; the steps it did after its last upload were lost with it (checkpointed, not
    # uploaded); the second attempt's first file, named for the period it resumed in, holds
    # the steps from the restored one on.
    r = int(restored.group(1))
    uploaded_by_first = ((r + 1) // 10) * 10
    assert [s.step for s in got.log.steps] == [*range(uploaded_by_first), *range(r + 1, 100)]
    assert uploaded_by_first > 0 and not any(f"completed step: {s}," in got.text for s in range(uploaded_by_first))  # from the files only

    # Each preempted pod: DisruptionTarget (the reason says who), stopped by SIGTERM, Failed, then removed.
    reason = "EvictionByEvictionAPI" if maintenance else "TerminationByKubelet"
    for uid in victims:
        history = pods_seen.history(uid)
        failed = [o for _, o in history if o["status"].get("phase") == "Failed"]
        assert failed, [o["status"].get("phase") for _, o in history]
        cond = _cond(failed[-1], "DisruptionTarget")
        assert cond and cond["status"] == "True" and cond["reason"] == reason, failed[-1]["status"]
        codes = {c["state"]["terminated"]["exitCode"] for c in failed[-1]["status"]["containerStatuses"]}
        assert codes == {SIGTERM_EXIT_CODE}
        assert history[-1][0] == "DELETED"  # not Terminating forever
    # The slice's node pool: NotReady, then new Nodes (same names) Ready.
    for name, old_uid in old_uids.items():
        versions = [o for _, _, o in nodes_seen.events if o["metadata"]["name"] == name]
        assert any(o["metadata"]["uid"] == old_uid and (_cond(o, "Ready") or {}).get("status") == "Unknown" for o in versions), name
        new = cluster.get(node_info, name)
        assert new["metadata"]["uid"] != old_uid and _cond(new, "Ready")["status"] == "True" and not new["spec"].get("unschedulable")
    assert not list(replacements_dir(local_cluster.state_dir).glob("*.json"))


@pytest.mark.usefixtures("tpu_quota")
def test_an_outside_eviction_behaves_like_preempt(cluster, kubeconfig, run_name) -> None:
    pod_info = cluster.resource("v1", "Pod")
    pods_seen = Recorder(cluster, pod_info, NS, f"{JOBSET_NAME_LABEL}={run_name}")
    try:
        _submit(kubeconfig, run_name, 10.0, "--max-restarts", "0")
        first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
        victims = [p for p in first if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1"]
        # What `kubectl drain` does to each pod: a policy/v1 Eviction. The first one's restart may delete
        # the others before their turn: only the pods the eviction reached are checked below.
        evicted = []
        for p in victims:
            name = p["metadata"]["name"]
            try:
                cluster.request(
                    "POST", pod_info.path(NS, name, "eviction"), {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
                )
            except NotFound:
                continue
            evicted.append(p)
        victims = evicted
        assert victims  # at least the first eviction went through
        wait_for(lambda: _all_running(cluster, run_name, "1", 8), 180, "all 8 workers of the restarted JobSet Running")
        assert cluster.jobset(NS, run_name)["status"].get("restarts") == 1
        assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
        assert not cluster.jobset(NS, run_name)["status"].get("restartsCountTowardsMax")
    finally:
        pods_seen.stop()
    for p in victims:
        history = pods_seen.history(p["metadata"]["uid"])
        failed = [o for _, o in history if o["status"].get("phase") == "Failed"]
        assert failed and _cond(failed[-1], "DisruptionTarget")["reason"] == "EvictionByEvictionAPI"
        assert {c["state"]["terminated"]["exitCode"] for c in failed[-1]["status"]["containerStatuses"]} == {SIGTERM_EXIT_CODE}
        assert history[-1][0] == "DELETED"


@pytest.mark.usefixtures("tpu_quota")
def test_a_gcs_fuse_runs_event_files_hold_every_attempts_steps_when_cloud_logging_cannot_answer(cluster, kubeconfig, run_name) -> None:
    """Checkpoints through GCS FUSE: MaxText's gcs_metrics is off (it uploads to a gs:// output only), and
    process 0's TensorBoard event file of each attempt lands in the mounted bucket when its writer
    closes (here: at the SIGTERM of an outside eviction, and at the end). With Cloud Logging off,
    `metrics` reads the last pod's log and both event files, so every step is in the figures."""
    pod_info = cluster.resource("v1", "Pod")
    _submit(kubeconfig, run_name, 12.0, "--max-restarts", "0", "--checkpoint-storage", "gcsfuse")
    first = wait_for(lambda: _all_running(cluster, run_name, "0", 8), 180, "all 8 workers Running")
    wait_for(lambda: _last_step(_log(cluster, run_name)) >= 10, 60, "the run to reach step 10", interval=0.5)
    for p in (p for p in first if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1"):
        name = p["metadata"]["name"]
        try:
            cluster.request(
                "POST", pod_info.path(NS, name, "eviction"), {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
            )
        except NotFound:
            pass  # the first eviction's restart already deleted it
    wait_for(lambda: _all_running(cluster, run_name, "1", 8), 180, "all 8 workers of the restarted JobSet Running")
    assert wait_for(lambda: _finished(cluster, run_name), 180, "the run to finish") == "Completed"
    restored = RESTORED.search(_log(cluster, run_name))
    assert restored, "the second attempt restored a checkpoint from the mounted bucket"

    got = _load_without_cloud_logging(kubeconfig, run_name)
    assert "2 TensorBoard event file(s) in gs://" in got.source and f"/{run_name}/tensorboard/{run_name}/" in got.source, got.source
    # The first attempt's file holds every step it did (closed at its SIGTERM); the second's from the restored one on.
    assert [s.step for s in got.log.steps] == list(range(100))
    assert not any(f"completed step: {s}," in got.text for s in range(int(restored.group(1)) + 1))  # those come from the first file only


# ------------------------------------------------------------------ bad input


def test_preempt_refuses_an_unknown_run_or_slice_and_changes_nothing(cluster, local_cluster) -> None:
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render import jobset as manifests

    spec = load_spec(DEFAULT_SPEC_PATH)
    name = f"rh-bad-{secrets.token_hex(2)}"
    plan = plan_run("hello-tpu", spec, Overrides(slices=1, name=name))
    (js,) = manifests.run_objects(plan)
    js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "no-such-queue"  # never admitted: takes no quota
    sd = str(local_cluster.state_dir)
    node_info = cluster.resource("v1", "Node")

    def nodes_state() -> list[tuple]:
        return sorted((n["metadata"]["name"], n["metadata"]["uid"], bool(n["spec"].get("unschedulable"))) for n in cluster.list(node_info))

    before = nodes_state()
    try:
        cluster.apply([js])
        cases = [
            (["local", "preempt", "no-such-run", "--state-dir", sd], "error: RUN: no run 'no-such-run' in namespace 'research'"),
            (["local", "preempt", name, "--slice", "3", "--state-dir", sd], f"error: --slice: run '{name}' has 1 slice (0..0), not 3"),
            (["local", "preempt", name, "--state-dir", sd], "error: --slice: slice 0 of run"),
        ]
        for args, start in cases:
            r = wl(*args)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert line.startswith(start) and " — " in line, line
            assert r.stdout == ""
        assert nodes_state() == before
        assert not list(replacements_dir(local_cluster.state_dir).glob("*.json"))
    finally:
        cluster.delete_jobset(NS, name)


def test_logs_metrics_and_report_of_a_run_that_is_not_there_say_so(kubeconfig, tmp_path) -> None:
    """`logs` reads a pod: none is exit 3 (the cluster side). `metrics`/`report` read the run's
    history, which outlives its pods: with no run, no pod and no Cloud Logging entries it is
    gone, exit 2, one line saying what is missing and where it looked; nothing written."""
    name = f"rh-none-{secrets.token_hex(2)}"
    kc = ("--kubeconfig", str(kubeconfig))
    r = wl("logs", name, *kc)
    assert r.returncode == 3, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: no pod for") and name in line, r.stderr
    for args in (["metrics", name], ["report", name, "--out", str(tmp_path / "r")]):
        r = wl(*args, *kc)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith(f"error: LOGFILE_OR_RUN: no history of run '{name}'") and "Cloud Logging (project" in line and " — " in line, line
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # report wrote nothing
