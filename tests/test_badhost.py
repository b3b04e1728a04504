"""The bad host: which VM a run's failed attempts name (and which they never name), the actions on it, the report's request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from toolkit.errors import FieldError
from toolkit.names import GKE_NODEPOOL_LABEL, TGK_CAPACITY_LABEL, TGK_DEGRADED_SLICE_LABEL
from workloads.observe import faults
from workloads.observe.faults import AttemptFailures, Failure
from workloads.runs import badhost


def _attempt(n: int, *failures: tuple[str, int, float]) -> AttemptFailures:
    return AttemptFailures(n, tuple(Failure(f"pod-{node}-{n}", node, code, at) for node, code, at in failures))


def test_the_vm_that_failed_first_in_each_attempt_is_named_and_its_slice_peers_are_not() -> None:
    # vm-a's container fails; JobSet's restart then stops vm-b and vm-c (143) — they only shared the slice.
    attempts = [_attempt(k, ("vm-a", 134, 10.0 * k), ("vm-b", 143, 10.0 * k + 2), ("vm-c", 143, 10.0 * k + 2)) for k in range(3)]
    v = faults.bad_host(attempts)
    assert v.node == "vm-a" and v.bystanders == ()
    assert [f.exit_code for f in v.evidence] == [134, 134]


def test_a_peer_whose_collective_broke_after_the_culprit_in_every_attempt_is_never_named() -> None:
    """The counter-case: the peer fails (not merely stopped) in every attempt too — but always after the culprit."""
    attempts = [_attempt(k, ("vm-b", 134, 10.0 * k + 0.5), ("vm-a", 139, 10.0 * k), ("vm-c", 143, 10.0 * k + 3)) for k in range(4)]
    v = faults.bad_host(attempts, repeats=3)
    assert v.node == "vm-a"
    assert v.bystanders == ("vm-b",)
    assert all(f.node == "vm-a" for f in v.evidence)


def test_attempts_that_failed_first_on_different_vms_name_none() -> None:
    v = faults.bad_host([_attempt(0, ("vm-a", 134, 1.0), ("vm-b", 134, 2.0)), _attempt(1, ("vm-b", 134, 11.0), ("vm-a", 134, 12.0))])
    assert v.node is None and "different VMs" in v.why


def test_a_tie_for_first_names_none() -> None:
    v = faults.bad_host([_attempt(0, ("vm-a", 134, 1.0)), _attempt(1, ("vm-a", 134, 5.0), ("vm-b", 134, 5.0))])
    assert v.node is None and "tie" in v.why


def test_one_failure_is_not_a_loop_and_hangs_and_stops_name_nobody() -> None:
    assert faults.bad_host([_attempt(0, ("vm-a", 134, 1.0))]).node is None
    hung = [_attempt(k, ("vm-a", 124, 1.0 + k), ("vm-b", 124, 1.5 + k)) for k in range(3)]
    v = faults.bad_host(hung)
    assert v.node is None and all(a.hung for a in v.attempts)
    preempted = [_attempt(k, ("vm-a", 143, 1.0 + k), ("vm-b", 137, 1.5 + k)) for k in range(3)]
    assert faults.bad_host(preempted).node is None


def test_the_older_attempts_do_not_outvote_the_last_ones() -> None:
    # vm-a failed first twice long ago; the last two failed first on vm-b: vm-b, not vm-a.
    attempts = [_attempt(0, ("vm-a", 134, 1.0)), _attempt(1, ("vm-a", 134, 2.0)), _attempt(2, ("vm-b", 134, 3.0)), _attempt(3, ("vm-b", 134, 4.0))]
    assert faults.bad_host(attempts).node == "vm-b"


def test_failures_read_from_the_exit_guards_lines_and_from_failed_pods_are_one_per_pod() -> None:
    labels = {
        "k8s-pod/jobset_sigs_k8s_io/restart-attempt": "2",
        "k8s-pod/jobset_sigs_k8s_io/job-index": "1",
        "k8s-pod/batch_kubernetes_io/job-completion-index": "0",
    }
    logged = faults.from_history(
        ["E1127 20:00:00.000000 0 exitguard.sh:0] tgk-exit-guard: exit 134 on node vm-a", "completed step: 3"],
        ["run-slice-1-0-x", "run-slice-0-0-y"],
        ["2026-11-27T20:00:00.5Z", "2026-11-27T20:00:00Z"],
        [labels, labels],
    )
    assert [(a, f.node, f.exit_code, f.slice, f.worker) for a, f in logged] == [(2, "vm-a", 134, 1, 0)]
    pod = {
        "metadata": {"name": "run-slice-1-0-x", "labels": {"jobset.sigs.k8s.io/restart-attempt": "2"}},
        "spec": {"nodeName": "vm-a"},
        "status": {"containerStatuses": [{"name": "workload", "state": {"terminated": {"exitCode": 134, "finishedAt": "2026-11-27T20:00:01Z"}}}]},
    }
    api = faults.from_pods([pod], "workload")
    merged = faults.by_attempt(api, logged)
    assert len(merged) == 1 and len(merged[0].failures) == 1


class FakeCluster:
    """The API calls ``act`` makes, recorded; a node with the given labels."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.node = {"metadata": {"name": "vm-a", "labels": labels}, "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}}
        self.calls: list[tuple[str, str, Any]] = []

    class _Info:
        def path(self, ns: str | None, name: str) -> str:
            return f"/api/v1/nodes/{name}"

    def resource(self, api_version: str, kind: str) -> Any:
        return self._Info()

    def get(self, info: Any, name: str, namespace: str | None = None) -> Any:
        return self.node if name == "vm-a" else None

    def list(self, info: Any, namespace: str | None = None, label_selector: str | None = None) -> list[Any]:
        assert label_selector == "cloud.google.com/gke-nodepool=pool-1"
        return [{"metadata": {"name": n}} for n in ("vm-a", "vm-b", "vm-c")]

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        self.calls.append((method, path, body))
        return {}


def _examined() -> badhost.Examined:
    attempts = [_attempt(k, ("vm-a", 134, 10.0 * k), ("vm-b", 143, 10.0 * k + 1)) for k in range(2)]
    return badhost.Examined("team-a", "run-1", faults.bad_host(attempts))


def test_cordon_adds_the_taint_beside_the_nodes_own_labels_its_pool_and_dry_run_changes_nothing() -> None:
    cluster = FakeCluster({TGK_CAPACITY_LABEL: "spot", GKE_NODEPOOL_LABEL: "pool-1"})
    shown = badhost.act(cluster, _examined(), cordon=True, report=False, dry_run=True)
    assert cluster.calls == [] and shown[0].done is False and "unschedulable" in shown[0].request
    done = badhost.act(cluster, _examined(), cordon=True, report=False, dry_run=False)
    (method, path, body), *labelled = cluster.calls
    assert (method, path) == ("PATCH", "/api/v1/nodes/vm-a") and done[0].done
    # every node of the pool is labelled (pods keep off the pool), none but vm-a cordoned or tainted
    assert [(m, p) for m, p, _ in labelled] == [("PATCH", f"/api/v1/nodes/{n}") for n in ("vm-a", "vm-b", "vm-c")]
    assert all(b == {"metadata": {"labels": {TGK_DEGRADED_SLICE_LABEL: "true"}}} for _, _, b in labelled)
    assert body["spec"]["unschedulable"] is True
    assert body["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}, {"key": badhost.BAD_HOST_TAINT_KEY, "value": "run-1", "effect": "NoSchedule"}]


def test_a_report_for_a_vm_not_in_reserved_capacity_is_refused_before_anything_changes() -> None:
    cluster = FakeCluster({TGK_CAPACITY_LABEL: "spot", "topology.kubernetes.io/zone": "us-east5-b"})
    with pytest.raises(FieldError, match="--report-faulty") as e:
        badhost.act(cluster, _examined(), cordon=True, report=True, dry_run=False)
    assert e.value.exit_code == 2 and cluster.calls == []


class _Compute(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Compute.seen.append((self.path, self.headers.get("Authorization", ""), body))
        out = json.dumps({"kind": "compute#operation", "name": "operation-1", "status": "RUNNING"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def test_the_faulty_host_report_is_compute_engines_call_sent_through_the_one_google_client() -> None:
    from infra.gcp_api import Client

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Compute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = FakeCluster({TGK_CAPACITY_LABEL: "reservation", "topology.kubernetes.io/zone": "us-east5-b"})
        google = Client(endpoint=f"http://127.0.0.1:{server.server_address[1]}", token=lambda: "t0k")
        dry = badhost.act(cluster, _examined(), cordon=False, report=True, dry_run=True, project=lambda: "proj", google=lambda: google)
        assert _Compute.seen == [] and dry[0].request.startswith(
            "POST https://compute.googleapis.com/compute/v1/projects/proj/zones/us-east5-b/instances/vm-a/reportHostAsFaulty "
        )
        sent = badhost.act(cluster, _examined(), cordon=False, report=True, dry_run=False, project=lambda: "proj", google=lambda: google)
    finally:
        server.shutdown()
    ((path, auth, body),) = _Compute.seen
    assert path == "/compute/v1/projects/proj/zones/us-east5-b/instances/vm-a/reportHostAsFaulty" and auth == "Bearer t0k"
    assert body["disruptionSchedule"] == "IMMEDIATE" and body["faultReasons"][0]["behavior"] == "BEHAVIOR_UNSPECIFIED"
    assert "run team-a/run-1" in body["faultReasons"][0]["description"]
    assert sent[0].done and sent[0].answer["name"] == "operation-1"
