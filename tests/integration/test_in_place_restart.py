"""JobSet's in-place restart against the real JobSet v0.12.0 (its CRD, webhook, controller and agent).

* On a cluster whose spec restarts in place (``<test state>-inplace``, its own control plane, started
  with JobSet's InPlaceRestart gate on by ``local up``), a run submitted through the CLI is accepted
  by JobSet's webhook with ``restartStrategy: InPlaceRestart``, and the same webhook still enforces
  what in-place needs (a child Job that could fail is refused): the gate is on, not bypassed.
* A crashed worker restarts in place: JobSet's real agent in every pod (the rehearsal plays the
  kubelet's part, workloads/local/agents.py) takes the run to its next in-place attempt, every pod
  keeps its uid (no pod of the run is recreated), the crashed container's restartCount goes up,
  and the run trains again and completes.
* A preempted slice comes back in place too: the other slice's pods are kept (Kueue waited for the
  Job controller's replacement backoff instead of evicting the run), and the real Job controller
  counted the lost pods per index (``backoffLimitPerIndex``: the backoff a slice's loss costs is
  its index's, not its hosts' times the Job's).
* On the tier's shared cluster (the default spec: JobSet's gate off), ``submit --restart in-place``
  with a spec that says the cluster has it is refused by ``runs.service.capability_check`` before
  anything is applied: one line naming --restart, exit 2.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import run_module
from tests.support.local_cluster import start_own_cluster, wait_for
from toolkit.errors import Rejected
from toolkit.names import JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL, TGK_FIELD_MANAGER
from workloads.cluster.client import Cluster
from workloads.local import CONTEXT
from workloads.local.disrupt import crash, preempt
from workloads.render.inplace import AGENT_BINARY, ATTEMPT_ANNOTATION, POLICY, STRATEGY

NS = "research"


def _in_place_doc() -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(DEFAULT_SPEC_PATH.read_text()))
    doc["recovery"] = {"restart": "in-place"}
    return doc


@pytest.fixture(scope="module")
def inplace(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    yield from start_own_cluster("inplace", _in_place_doc(), tmp_path_factory.mktemp("inplace"))


def wl(*args: str):
    return run_module("workloads", *args)


def _book(lc, kube: Cluster, run: str) -> dict[str, Any]:
    """The rehearsal daemon's book of the run (its attempts and their clocks)."""
    uid = ((kube.jobset(NS, run) or {}).get("metadata") or {}).get("uid", "")
    try:
        return json.loads((lc.state_dir / "rehearsal" / "runs" / f"{uid}.json").read_text())
    except (OSError, ValueError):
        return {}


def _joined(lc, kube: Cluster, run: str) -> dict[str, dict[str, Any]]:
    return {a: c for a, c in (_book(lc, kube, run).get("attempts") or {}).items() if "joined_at" in c}


def _pods(kube: Cluster, run: str) -> list[dict[str, Any]]:
    return kube.list(kube.resource("v1", "Pod"), NS, label_selector=f"{JOBSET_NAME_LABEL}={run}")


def test_webhook_takes_an_in_place_run_and_still_enforces_its_rules(inplace) -> None:
    lc, spec_path = inplace
    kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
    run = "ip-accept"
    sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--restart", "in-place", "--rehearse-seconds", "30", "--no-wait",
             "--spec", str(spec_path), "--kubeconfig", str(lc.kubeconfig))  # fmt: skip
    assert sub.returncode == 0, (sub.stdout, sub.stderr)
    try:
        js = kube.jobset(NS, run)
        assert js is not None
        assert js["spec"]["failurePolicy"]["restartStrategy"] == STRATEGY
        job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert job["backoffLimit"] == 2**31 - 1 and job["podReplacementPolicy"] == "Failed"
        assert job["template"]["spec"]["containers"][0]["command"][0].endswith(f"/{AGENT_BINARY}")
        # The same JobSet with a child Job that could fail: JobSet's own webhook refuses it.
        bad = copy.deepcopy(js)
        bad["metadata"] = {"name": "ip-bad", "namespace": NS}
        bad.pop("status", None)
        bad["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
        with pytest.raises(Rejected, match="backoffLimit"):
            kube.create(bad, field_manager=TGK_FIELD_MANAGER, dry_run=True)
        _the_agents_identity_may_touch_only_its_annotation(lc, kube, spec_path, run)
    finally:
        kube.delete_jobset(NS, run)
        wait_for(lambda: not _pods(kube, run), 120, "the run's pods gone")


def _the_agents_identity_may_touch_only_its_annotation(lc, kube: Cluster, spec_path: Path, run: str) -> None:
    """The team's service account (the agent's identity, a token bound to one of the run's pods) through `queues apply`'s
    Role and admission policy: it reads its JobSet, and may change nothing on a pod but the attempt annotation."""
    ksa = load_spec(spec_path).teams[0].ksa
    pod = wait_for(lambda: next(iter(_pods(kube, run)), None), 180, "a pod of the run")
    req = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
        },
    }
    token = kube.request("POST", kube.resource("v1", "ServiceAccount").path(NS, ksa, "token"), req)["status"]["token"]
    server = yaml.safe_load(lc.kubeconfig.read_text())["clusters"][0]["cluster"]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}],
        "current-context": "c",
    }
    kc = lc.state_dir / "agent-identity-test.kubeconfig"
    kc.write_text(yaml.safe_dump(doc))
    agent = Cluster.connect(kc, "c", timeout=30)
    assert agent.jobset(NS, run) is not None  # the Role: get jobsets
    path = agent.resource("v1", "Pod").path(NS, pod["metadata"]["name"])
    merge = "application/merge-patch+json"
    for body in ({"metadata": {"labels": {"x": "y"}}}, {"metadata": {"annotations": {"x": "y"}}}):
        resp = agent.transport.request("PATCH", path, body=body, content_type=merge)
        # The policy's Deny: the API server answers 422 (Invalid) with the policy's name and message.
        assert resp.status == 422 and POLICY in str(resp.body) and "may change only" in str(resp.body), (resp.status, resp.body[:300])
    attempt = (pod["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION, "0")
    resp = agent.transport.request("PATCH", path, body={"metadata": {"annotations": {ATTEMPT_ANNOTATION: attempt}}}, content_type=merge)
    assert resp.ok, (resp.status, resp.body[:300])
    # Anything else of the namespace's is beyond the Role.
    resp = agent.transport.request("DELETE", path)
    assert resp.status == 403, (resp.status, resp.body[:300])


def test_a_crashed_worker_restarts_in_place_and_the_run_completes(inplace) -> None:
    lc, spec_path = inplace
    kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
    run = "ip-crash"
    sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--checkpoint-every", "0.5", "--rehearse-seconds", "120", "--no-wait",
             "--spec", str(spec_path), "--kubeconfig", str(lc.kubeconfig))  # fmt: skip
    assert sub.returncode == 0, (sub.stdout, sub.stderr)
    try:
        # No --restart: the spec's recovery.restart (in-place) is the run's.
        assert kube.jobset(NS, run)["spec"]["failurePolicy"]["restartStrategy"] == STRATEGY
        first = wait_for(lambda: _joined(lc, kube, run), 300, "every worker's barrier down (the first attempt training)")
        pods = _pods(kube, run)
        assert len(pods) == 8, [p["metadata"]["name"] for p in pods]
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        saved = wait_for(lambda: _book(lc, kube, run).get("saved"), 120, "a complete checkpoint of the first attempt")

        hit = crash(kube, lc.state_dir, NS, run, 1, 0, exit_code=137)
        assert hit.how == "in place", hit

        new = wait_for(lambda: set(_joined(lc, kube, run)) - set(first), 300, "the next attempt's workers all running again")
        after = _pods(kube, run)
        # In place: no pod of the run was recreated, the crashed one included.
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == uids
        crashed = next(p for p in after if p["metadata"]["name"] == hit.pod)
        assert crashed["status"]["containerStatuses"][0]["restartCount"] >= 1, crashed["status"]
        js = kube.jobset(NS, run)
        assert (js.get("status") or {}).get("currentInPlaceRestartAttempt", 0) >= 1, js.get("status")
        # The next attempt resumes from the newest complete checkpoint (at least the one there before the crash).
        (clock,) = [c for a, c in _joined(lc, kube, run).items() if a in new]
        assert clock["restored"] is not None and clock["restored"] >= saved and clock["first"] == clock["restored"] + 1, clock

        def completed() -> bool:
            conds = ((kube.jobset(NS, run) or {}).get("status") or {}).get("conditions") or []
            assert not any(c["type"] == "Failed" and c["status"] == "True" for c in conds), conds
            return any(c["type"] == "Completed" and c["status"] == "True" for c in conds)

        wait_for(completed, 600, "the run completed")
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(kube, run)} == uids
    finally:
        kube.delete_jobset(NS, run)


def test_a_preempted_slice_comes_back_in_place(inplace) -> None:
    lc, spec_path = inplace
    kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
    run = "ip-preempt"
    sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--rehearse-seconds", "600", "--no-wait",
             "--spec", str(spec_path), "--kubeconfig", str(lc.kubeconfig))  # fmt: skip
    assert sub.returncode == 0, (sub.stdout, sub.stderr)
    try:
        first = wait_for(lambda: _joined(lc, kube, run), 300, "every worker's barrier down (the first attempt training)")
        before = {p["metadata"]["uid"]: p for p in _pods(kube, run)}
        kept = {u for u, p in before.items() if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "1"}
        assert len(kept) == 4, before.keys()

        preempt(kube, lc.state_dir, NS, run, 0, replace_after=0.0)  # the nodes come back at once: the control plane's part alone
        wait_for(lambda: set(_joined(lc, kube, run)) - set(first), 600, "the next attempt's workers all running again")
        after = _pods(kube, run)
        # Slice 1 restarted in place (its pods kept): Kueue did not evict the run, nor JobSet recreate it.
        assert kept <= {p["metadata"]["uid"] for p in after}
        status = kube.jobset(NS, run).get("status") or {}
        assert status.get("restarts", 0) == 0 and status.get("currentInPlaceRestartAttempt", 0) >= 1, status
        # Slice 0's pods are new, and the Job controller counted each one's loss for its own index.
        lost = [p for p in after if p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL] == "0"]
        assert len(lost) == 4 and not {p["metadata"]["uid"] for p in lost} & set(before)
        counts = {(p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-index-ignored-failure-count") for p in lost}
        assert counts == {"1"}, counts
    finally:
        kube.delete_jobset(NS, run)
        wait_for(lambda: not _pods(kube, run), 120, "the run's pods gone")


def test_in_place_refused_before_anything_is_applied_where_the_jobset_gate_is_off(kubeconfig, cluster, tmp_path) -> None:
    # The spec says the cluster restarts in place; the tier's shared cluster was started from the
    # default spec, so its JobSet runs with the InPlaceRestart gate off.
    spec = tmp_path / "in-place.yaml"
    spec.write_text(yaml.safe_dump(_in_place_doc()))
    run = "ip-gate-off"
    sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--restart", "in-place", "--rehearse-seconds", "10",
             "--spec", str(spec), "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert sub.returncode == 2, (sub.stdout, sub.stderr)
    errors = [ln for ln in sub.stderr.strip().splitlines() if not ln.startswith("warning: ")]  # the planner's HBM warning may come first
    assert len(errors) == 1 and errors[0].startswith("error: --restart: "), sub.stderr
    assert "InPlaceRestart feature gate off" in errors[0] and "--restart recreate" in errors[0], errors[0]
    # The run is one JobSet (workloads.runs.service.render): it is not there, nor any pod of the name.
    assert cluster.jobset(NS, run) is None
    assert not _pods(cluster, run)
