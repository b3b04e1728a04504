"""The cluster seam: request shapes, normal outcomes, one-line errors, and the one wait.

Two levels: a recording fake Transport (what Cluster asks for), and both real transports —
the kubernetes client (token kubeconfigs) and the standard-library one (client certificates,
over TLS with the local cluster's own PKI) — talking to a tiny recording HTTP(S) server on
127.0.0.1 (what goes over the wire: method, path, query, content type, body, credential).
A real kube-apiserver comes in the integration tier.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from tests.support.fake_apiserver import serve
from toolkit.errors import ClusterError, ToolkitError
from workloads.cluster.api import LogsUnavailable
from workloads.cluster.client import Cluster
from workloads.cluster.kubeconfig import read_kubeconfig, stdlib_transport
from workloads.cluster.transport import Response, StdlibTransport
from workloads.cluster.wait import WaitFailed, WaitTimeout, wait_for

KUEUE_DISCOVERY = {
    "kind": "APIResourceList",
    "groupVersion": "kueue.x-k8s.io/v1beta2",
    "resources": [
        {"name": "resourceflavors", "kind": "ResourceFlavor", "namespaced": False},
        {"name": "clusterqueues", "kind": "ClusterQueue", "namespaced": False},
        {"name": "clusterqueues/status", "kind": "ClusterQueue", "namespaced": False},
        {"name": "localqueues", "kind": "LocalQueue", "namespaced": True},
        {"name": "workloads", "kind": "Workload", "namespaced": True},
    ],
}
KUEUE_GROUP = {"kind": "APIGroup", "name": "kueue.x-k8s.io", "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}}


class FakeTransport:
    """Routes (method, path) to canned responses and records every call."""

    server = "https://fake:6443"

    def __init__(self, routes: dict[tuple[str, str], Any] | None = None, streams: dict[str, Any] | None = None) -> None:
        self.routes = routes or {}
        self.streams = streams or {}
        self.calls: list[dict[str, Any]] = []

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None, accept=None) -> Response:
        self.calls.append({"method": method, "path": path, "query": dict(query or []), "body": body, "content_type": content_type, "accept": accept})
        r = self.routes.get((method, path))
        if callable(r):
            r = r(dict(query or []), body)
        if r is None:
            return Response(404, json.dumps({"kind": "Status", "message": f"{path} not found", "code": 404}).encode())
        if isinstance(r, Response):
            return r
        return Response(200, json.dumps(r).encode())

    def stream(self, path, *, query=None, timeout=None, deadline=None, ends=True) -> Iterator[bytes]:
        self.calls.append({"method": "STREAM", "path": path, "query": dict(query or [])})
        s = self.streams.get(path)
        if isinstance(s, Exception):
            raise s
        if callable(s):
            s = s(dict(query or []))
        yield from s or []


def jobset(name="r1", ns="research", uid="uid-1", suspend=True) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {"suspend": suspend}}


def workload(conds: list[dict], name="jobset-r1-abc", admission: dict | None = None, rv="5") -> dict:
    status: dict = {"conditions": conds}
    if admission:
        status["admission"] = admission
    return {
        "metadata": {"name": name, "namespace": "research", "resourceVersion": rv, "labels": {"kueue.x-k8s.io/job-uid": "uid-1"}},
        "spec": {"queueName": "research-queue"},
        "status": status,
    }


# ----------------------------------------------------------------- apply


def test_apply_is_server_side_with_field_manager_and_no_force() -> None:
    obj = jobset(suspend=False)
    t = FakeTransport({("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): lambda q, b: {**b, "status": {}}})
    out = Cluster(t).apply([obj])
    (call,) = t.calls
    assert call["method"] == "PATCH"
    assert call["content_type"] == "application/apply-patch+yaml"
    assert call["query"] == {"fieldManager": "tpu-gke-toolkit", "force": "false"}
    assert call["body"] == obj
    assert out == [{**obj, "status": {}}]


def test_apply_discovers_crd_kinds_once_and_respects_scope_and_dry_run() -> None:
    rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "v5e-4x4"}, "spec": {}}
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q"}, "spec": {"clusterQueue": "cq"}}
    t = FakeTransport(
        {
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("PATCH", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/v5e-4x4"): lambda q, b: b,
            ("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/q"): lambda q, b: b,
        }
    )
    Cluster(t, default_namespace="team-a").apply([rf, lq], field_manager="me", dry_run=True)
    assert [c["method"] for c in t.calls] == ["GET", "PATCH", "PATCH"]
    assert all(c["query"]["dryRun"] == "All" and c["query"]["fieldManager"] == "me" for c in t.calls[1:])


def test_apply_twice_sends_the_same_request() -> None:
    obj = jobset()
    t = FakeTransport({("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): lambda q, b: b})
    c = Cluster(t)
    assert c.apply([obj]) == c.apply([obj])
    assert t.calls[0] == t.calls[1]


@pytest.mark.parametrize(
    ("status", "message", "expect"),
    [
        (409, 'Apply failed with 1 conflict: conflict with "kubectl": .spec.suspend', "conflict"),
        (422, 'JobSet.jobset.x-k8s.io "r1" is invalid: spec.replicatedJobs: Required value', "is invalid"),
        (403, 'jobsets.jobset.x-k8s.io is forbidden: User "x" cannot patch', "forbidden"),
        (500, 'Internal error occurred: failed calling webhook "mjobset.kb.io": connection refused', "webhook"),
    ],
)
def test_apply_errors_are_one_line(status: int, message: str, expect: str) -> None:
    body = json.dumps({"kind": "Status", "message": message + "\n  more detail", "code": status}).encode()
    t = FakeTransport({("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): Response(status, body)})
    with pytest.raises(ClusterError) as e:
        Cluster(t).apply([jobset()])
    text = str(e.value)
    assert "\n" not in text and expect in text and "JobSet research/r1" in text


def test_apply_of_an_unserved_kind_says_what_to_install() -> None:
    t = FakeTransport()
    with pytest.raises(ClusterError, match="does not serve kueue.x-k8s.io/v1beta1"):
        Cluster(t).apply([{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"}}])


def test_apply_refuses_objects_without_identity() -> None:
    with pytest.raises(ClusterError, match="without apiVersion/kind/metadata.name"):
        Cluster(FakeTransport()).apply([{"kind": "JobSet", "metadata": {}}])


# ---------------------------------------------------------------- delete


def test_delete_of_a_missing_jobset_is_normal() -> None:
    t = FakeTransport()
    res = Cluster(t).delete_jobset("research", "gone")
    assert res.deleted is False
    assert [c["method"] for c in t.calls] == ["GET"]  # nothing there: nothing to delete


def _ours(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "research", "labels": {"app.kubernetes.io/managed-by": "tpu-gke-toolkit", "tpu-gke-toolkit/run": name}}}


def test_delete_existing_and_dry_run() -> None:
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"
    t = FakeTransport({("GET", path): _ours("r1"), ("DELETE", path): {"kind": "Status", "status": "Success"}})
    c = Cluster(t)
    assert c.delete_jobset("research", "r1").deleted is True
    assert t.calls[-1]["method"] == "DELETE" and t.calls[-1]["query"]["propagationPolicy"] == "Foreground"
    res = c.delete_jobset("research", "r1", dry_run=True)
    assert res.deleted and res.dry_run and t.calls[-1]["query"]["dryRun"] == "All"


def test_a_jobset_the_toolkit_did_not_submit_is_not_deleted() -> None:
    """The ownership ledger (toolkit/ledger.py): without the toolkit's labels nothing is deleted, by name or not."""
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/theirs"
    t = FakeTransport({("GET", path): {"metadata": {"name": "theirs", "namespace": "research", "labels": {"app": "x"}}}})
    assert Cluster(t).delete_jobset("research", "theirs").deleted is False
    assert "DELETE" not in [c["method"] for c in t.calls]


# -------------------------------------------------------- pods and logs


def test_find_pod_selects_by_jobset_labels_and_takes_the_newest() -> None:
    pods = {
        "items": [
            {"metadata": {"name": "old", "creationTimestamp": "2026-01-01T00:00:00Z"}},
            {"metadata": {"name": "new", "creationTimestamp": "2026-01-02T00:00:00Z"}},
        ]
    }
    t = FakeTransport({("GET", "/api/v1/namespaces/research/pods"): pods})
    pod = Cluster(t).find_pod("research", "r1", slice_index=1, worker=3)
    assert pod["metadata"]["name"] == "new"
    sel = t.calls[-1]["query"]["labelSelector"].split(",")
    assert sorted(sel) == sorted(["jobset.sigs.k8s.io/jobset-name=r1", "jobset.sigs.k8s.io/job-index=1", "batch.kubernetes.io/job-completion-index=3"])


def test_find_pod_of_a_plain_job_run_selects_by_the_job_name_and_worker() -> None:
    pods = {"items": [{"metadata": {"name": "r1-2-abcde", "creationTimestamp": "2026-01-01T00:00:00Z"}}]}
    t = FakeTransport(
        {
            ("GET", "/apis/batch/v1/namespaces/research/jobs/r1"): {"kind": "Job", "metadata": {"name": "r1"}},
            ("GET", "/api/v1/namespaces/research/pods"): pods,
        }
    )
    assert Cluster(t).find_pod("research", "r1", worker=2)["metadata"]["name"] == "r1-2-abcde"
    sel = t.calls[-1]["query"]["labelSelector"].split(",")
    assert sorted(sel) == ["batch.kubernetes.io/job-completion-index=2", "batch.kubernetes.io/job-name=r1"]


def test_logs_stream_lines_and_unavailable_logs_are_one_line() -> None:
    path = "/api/v1/namespaces/research/pods/p0/log"
    t = FakeTransport(streams={path: [b"a", b"b"]})
    assert list(Cluster(t).logs("research", "p0", follow=True)) == ["a", "b"]
    assert t.calls[0]["query"] == {"follow": "true"}
    t2 = FakeTransport(streams={path: ClusterError("GET /log: the server could not find the requested resource (HTTP 404)")})
    with pytest.raises(LogsUnavailable, match="not available") as e:
        list(Cluster(t2).logs("research", "p0"))
    assert "\n" not in str(e.value)


def test_a_followed_log_ends_when_the_pod_stops_even_if_the_stream_stays_open() -> None:
    """kwok's file-backed logs (the rehearsal) keep a followed stream open after the pod ended."""
    import threading

    path = "/api/v1/namespaces/research/pods/p0/log"
    never = threading.Event()
    phase = {"now": "Running"}

    def open_forever(query):
        yield b"a"
        yield b"b"
        phase["now"] = "Succeeded"
        if not never.wait(5):  # the server never closes it; a reader still here sees more
            yield b"after the pod ended"

    t = FakeTransport(
        routes={("GET", "/api/v1/namespaces/research/pods/p0"): lambda q, b: {"metadata": {"name": "p0"}, "status": {"phase": phase["now"]}}},
        streams={path: open_forever},
    )
    c = Cluster(t)
    c.FOLLOW_POLL_S = 0.05
    assert list(c.logs("research", "p0", follow=True)) == ["a", "b"]
    never.set()


# ------------------------------------------------------------ admission


def test_wait_admitted_follows_the_workload_to_admission() -> None:
    pending = workload(
        [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set slice: insufficient quota for google.com/tpu in flavor v5e-4x4, 16 more needed",
            }
        ]
    )
    admitted = workload(
        [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True", "reason": "Admitted"}],
        admission={"clusterQueue": "cq", "podSetAssignments": [{"name": "slice", "flavors": {"google.com/tpu": "v5e-4x4", "cpu": "default"}}]},
        rv="6",
    )
    t = FakeTransport(
        {
            ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): jobset(),
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"): {"items": [pending]},
        },
        streams={
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads": [
                json.dumps({"type": "MODIFIED", "object": pending}).encode(),
                json.dumps({"type": "MODIFIED", "object": admitted}).encode(),
            ]
        },
    )
    seen: list[str] = []
    res = Cluster(t).wait_admitted("research", "r1", timeout=120, on_progress=seen.append)
    assert res.admitted and res.state == "admitted" and res.flavors == {"slice": "v5e-4x4"} and res.workload == "jobset-r1-abc"
    assert any("insufficient quota" in s for s in seen) and "admitted" in seen[-1]
    watch = next(c for c in t.calls if c["method"] == "STREAM")
    assert watch["query"]["watch"] == "true" and watch["query"]["resourceVersion"] == "5"
    assert watch["query"]["labelSelector"] == "kueue.x-k8s.io/job-uid=uid-1"


def test_wait_admitted_times_out_with_the_pending_reason() -> None:
    pending = workload([{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota for google.com/tpu"}])
    t = FakeTransport(
        {
            ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): jobset(),
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"): {"items": [pending]},
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads/jobset-r1-abc"): pending,
        },
        streams={"/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads": []},
    )
    res = Cluster(t).wait_admitted("research", "r1", timeout=0.3, poll=0.05)
    assert not res.admitted and res.state == "pending" and "insufficient quota" in res.reason


def test_wait_admitted_on_a_missing_jobset() -> None:
    with pytest.raises(ClusterError, match="does not exist"):
        Cluster(FakeTransport()).wait_admitted("research", "nope", timeout=1)


def test_run_status_without_jobset_is_not_found() -> None:
    st = Cluster(FakeTransport()).run_status("research", "nope")
    assert st.phase.value == "NotFound"


# -------------------------------------------- the real client, on loopback


@pytest.fixture()
def fake_apiserver(tmp_path: Path):
    with serve() as api:
        yield api.kubeconfig(tmp_path, namespace="team-a"), api


def test_real_client_sends_an_apply_patch(fake_apiserver) -> None:
    kubeconfig, rec = fake_apiserver
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r1"
    rec.routes[("PATCH", path)] = lambda q, b: (200, json.loads(b))
    cluster = Cluster.connect(kubeconfig)
    assert cluster.default_namespace == "team-a" and cluster.server_version() == "v1.34.2"
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "r1"}, "spec": {"suspend": True}}
    (out,) = cluster.apply([obj])
    call = next(s for s in rec.seen if s["method"] == "PATCH")
    assert call["path"] == path
    assert call["content_type"] == "application/apply-patch+yaml"
    assert call["query"] == {"fieldManager": "tpu-gke-toolkit", "force": "false"}
    assert json.loads(call["body"]) == obj  # JSON is YAML: the server accepts it as an apply patch
    assert call["auth"] == "Bearer secret-token"
    assert out == obj


def test_real_client_delete_404_and_error_status(fake_apiserver) -> None:
    kubeconfig, rec = fake_apiserver
    cluster = Cluster.connect(kubeconfig)
    assert cluster.delete_jobset("team-a", "gone").deleted is False
    rec.routes[("GET", "/api/v1/namespaces/team-a/pods")] = lambda q, b: (401, {"kind": "Status", "message": "Unauthorized"})
    with pytest.raises(ClusterError, match="unauthorized"):
        cluster.pods("team-a", "r1")


# ---------------------------------------------------- connect failures


def _kubeconfig(tmp_path: Path, server: str, contexts=("c1",)) -> Path:
    p = tmp_path / "kubeconfig"
    p.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": contexts[0],
                "clusters": [{"name": "k", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": c, "context": {"cluster": "k", "user": "u"}} for c in contexts],
            }
        )
    )
    return p


def test_unreachable_server_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as e:
        Cluster.connect(_kubeconfig(tmp_path, "https://127.0.0.1:1"), timeout=3)
    msg = str(e.value)
    assert "\n" not in msg and "cannot reach the Kubernetes API server at https://127.0.0.1:1" in msg and "refused" in msg
    assert e.value.exit_code == 3


def test_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="no kubeconfig at"):
        Cluster.connect(tmp_path / "nope")


def test_kubeconfig_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "from-env"))
    with pytest.raises(ClusterError, match="from-env"):
        Cluster.connect()


def test_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="context 'prod' is not in .*contexts there: c1, c2"):
        Cluster.connect(_kubeconfig(tmp_path, "https://127.0.0.1:1", ("c1", "c2")), "prod")


def test_garbage_kubeconfig(tmp_path: Path) -> None:
    p = tmp_path / "kubeconfig"
    p.write_text("::: not yaml [")
    with pytest.raises(ClusterError) as e:
        Cluster.connect(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_wait_admitted_stops_at_a_deactivated_workload() -> None:
    inactive = workload([{"type": "Evicted", "status": "True", "reason": "InactiveWorkload", "message": "exceeded maximum requeue attempts"}])
    inactive["spec"]["active"] = False
    t = FakeTransport(
        {
            ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): jobset(),
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"): {"items": [inactive]},
        }
    )
    res = Cluster(t).wait_admitted("research", "r1", timeout=30)
    assert not res.admitted and res.state == "inactive" and "requeue" in res.reason
    # It stopped at the first answer rather than polling on to its timeout (counted in reads, not seconds).
    assert sum(c["path"].endswith("/workloads") for c in t.calls) == 1


def test_wait_admitted_without_any_workload_reports_missing() -> None:
    t = FakeTransport(
        {
            ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"): jobset(),
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads"): {"items": []},
        },
        streams={"/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads": []},
    )
    res = Cluster(t).wait_admitted("research", "r1", timeout=0.2, poll=0.05)
    assert not res.admitted and res.state == "missing" and "queue-name" in res.reason


# ------------------------------------- the standard-library transport, on loopback


def certs_for(directory: Path):
    """A CA, a serving cert for 127.0.0.1 and client certs: the local cluster's own PKI code."""
    from workloads.local import certs

    return certs.ensure_pki(directory)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return certs_for(tmp_path_factory.mktemp("pki"))


def _tls_server_context(pki) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.serving_cert), str(pki.serving_key))
    ctx.load_verify_locations(str(pki.ca_cert))
    ctx.verify_mode = ssl.CERT_REQUIRED  # like kube-apiserver with --client-ca-file, and no anonymous user here
    return ctx


def _cert_kubeconfig(tmp_path: Path, server: str, pki, *, inline: bool = True, namespace: str = "team-a") -> Path:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    if inline:
        cluster = {"server": server, "certificate-authority-data": b64(pki.ca_cert)}
        user = {"client-certificate-data": b64(pki.client_cert("admin")), "client-key-data": b64(pki.client_key("admin"))}
    else:  # file paths, relative to the kubeconfig's directory as kubectl resolves them
        for p in (pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin")):
            (tmp_path / p.name).write_bytes(p.read_bytes())
        cluster = {"server": server, "certificate-authority": pki.ca_cert.name}
        user = {"client-certificate": pki.client_cert("admin").name, "client-key": pki.client_key("admin").name}
    p = tmp_path / "kubeconfig"
    p.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": namespace}}],
            }
        )
    )
    return p


@pytest.mark.parametrize("inline", [True, False], ids=["inline-data", "files"])
def test_client_cert_kubeconfig_goes_over_the_standard_library(tmp_path: Path, pki, inline: bool) -> None:
    with serve(_tls_server_context(pki)) as api:
        path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r1"
        api.routes[("PATCH", path)] = lambda q, b: (200, json.loads(b))
        cluster = Cluster.connect(_cert_kubeconfig(tmp_path, api.url, pki, inline=inline))
        assert isinstance(cluster.transport, StdlibTransport)
        assert cluster.default_namespace == "team-a" and cluster.context == "c"
        obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "r1"}, "spec": {"suspend": True}}
        assert cluster.apply([obj]) == [obj]
    call = next(s for s in api.seen if s["method"] == "PATCH")
    assert call["path"] == path and call["content_type"] == "application/apply-patch+yaml"
    assert call["query"] == {"fieldManager": "tpu-gke-toolkit", "force": "false"}
    assert json.loads(call["body"]) == obj
    assert call["client_cn"] == "tgk-admin" and call["auth"] is None  # the client certificate is the credential


def test_with_client_cert_health_create_and_raw_requests(pki) -> None:
    with serve(_tls_server_context(pki)) as api:
        cluster = Cluster.with_client_cert(api.url, ca=pki.ca_cert, cert=pki.client_cert("admin"), key=pki.client_key("admin"))
        assert not cluster.healthy()  # no /readyz route yet: 404 is not healthy
        api.routes[("GET", "/readyz")] = lambda q, b: (200, b"ok")
        assert cluster.healthy()
        api.routes[("POST", "/api/v1/nodes")] = lambda q, b: (201, json.loads(b))
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": {"google.com/tpu": "4"}}}
        assert cluster.create(node, field_manager="tgk-local") == node
        api.json("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", {"items": [{"metadata": {"name": "cq"}}]})
        assert cluster.request("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues")["items"][0]["metadata"]["name"] == "cq"
        with pytest.raises(ClusterError, match=r"GET /apis/x/v1/things: /apis/x/v1/things not found \(HTTP 404\)"):
            cluster.request("GET", "/apis/x/v1/things")
    post = next(s for s in api.seen if s["method"] == "POST")
    assert post["query"] == {"fieldManager": "tgk-local"} and post["content_type"] == "application/json"
    assert json.loads(post["body"]) == node and post["client_cn"] == "tgk-admin"


def test_standard_library_errors_are_one_line(tmp_path: Path, pki) -> None:
    other = certs_for(tmp_path / "other-pki")
    with serve(_tls_server_context(pki)) as api:
        cluster = Cluster.with_client_cert(api.url, ca=pki.ca_cert, cert=pki.client_cert("admin"), key=pki.client_key("admin"))
        assert cluster.delete_jobset("team-a", "gone").deleted is False
        api.routes[("GET", "/api/v1/namespaces/team-a/pods")] = lambda q, b: (401, {"kind": "Status", "message": "Unauthorized"})
        with pytest.raises(ClusterError, match="unauthorized"):
            cluster.pods("team-a", "r1")
        conflict = {"kind": "Status", "message": 'Apply failed with 1 conflict: conflict with "kubectl"\n.spec.suspend'}
        api.routes[("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r1")] = lambda q, b: (409, conflict)
        with pytest.raises(ClusterError, match="conflict") as e:
            cluster.apply([jobset(ns="team-a")])
        assert "\n" not in str(e.value)
        # A server whose certificate the CA does not vouch for.
        wrong_ca = Cluster.with_client_cert(api.url, ca=other.ca_cert, cert=pki.client_cert("admin"), key=pki.client_key("admin"))
        with pytest.raises(ClusterError, match="TLS handshake failed") as e:
            wrong_ca.server_version()
        assert "\n" not in str(e.value) and not wrong_ca.healthy()
        port = api.port
    gone = Cluster.with_client_cert(f"https://127.0.0.1:{port}", ca=pki.ca_cert, cert=pki.client_cert("admin"), key=pki.client_key("admin"))
    with pytest.raises(ClusterError, match=r"cannot reach the Kubernetes API server at https://127.0.0.1:\d+ \(connection refused\)"):
        gone.server_version()
    assert not gone.healthy()
    missing = Cluster.with_client_cert("https://127.0.0.1:1", ca=tmp_path / "nope.crt", cert=tmp_path / "c", key=tmp_path / "k")
    with pytest.raises(ClusterError, match="cannot load the TLS certificates"):
        missing.server_version()


def test_standard_library_streams_lines_and_watches(tmp_path: Path) -> None:
    with serve() as api:
        p = tmp_path / "kubeconfig"
        p.write_text(
            yaml.safe_dump(
                {  # anonymous plain HTTP: no credentials at all
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "k", "cluster": {"server": api.url}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                }
            )
        )
        cluster = Cluster.connect(p)
        assert isinstance(cluster.transport, StdlibTransport)
        api.routes[("GET", "/api/v1/namespaces/default/pods/p0/log")] = lambda q, b: (200, b"step 1\nstep 2\nlast")
        assert list(cluster.logs("default", "p0", follow=True)) == ["step 1", "step 2", "last"]
        events = b"".join(json.dumps({"type": t, "object": {"metadata": {"name": n}}}).encode() + b"\n" for t, n in (("ADDED", "a"), ("DELETED", "a")))
        api.routes[("GET", "/api/v1/namespaces/default/pods")] = lambda q, b: (200, events)
        got = list(cluster.watch(cluster.resource("v1", "Pod"), "default", label_selector="x=y", timeout=120))
        assert got == [("ADDED", {"metadata": {"name": "a"}}), ("DELETED", {"metadata": {"name": "a"}})]
        api.routes[("GET", "/api/v1/namespaces/default/pods/p1/log")] = lambda q, b: (400, {"kind": "Status", "message": "container not ready"})
        with pytest.raises(LogsUnavailable, match="container not ready"):
            list(cluster.logs("default", "p1"))
    logs, watch = (s for s in api.seen if s["path"] in ("/api/v1/namespaces/default/pods/p0/log", "/api/v1/namespaces/default/pods"))
    assert logs["query"] == {"follow": "true"} and logs["auth"] is None and logs["client_cn"] is None
    assert watch["query"] == {"watch": "true", "allowWatchBookmarks": "false", "timeoutSeconds": "120", "labelSelector": "x=y"}


def test_the_transport_follows_the_kubeconfig_user(tmp_path: Path) -> None:
    def context(user: dict, cluster: dict | None = None):
        p = tmp_path / "kc"
        p.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:1"}}],
                    "users": [{"name": "u", "user": user}],
                    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                }
            )
        )
        return read_kubeconfig(p, None)

    cert = {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}
    assert isinstance(stdlib_transport(context(cert), 5), StdlibTransport)
    assert isinstance(stdlib_transport(context({}), 5), StdlibTransport)
    # Tokens, exec plugins (gke-gcloud-auth-plugin) and proxies are the kubernetes client's.
    assert stdlib_transport(context({"token": "t"}), 5) is None
    assert stdlib_transport(context({"exec": {"command": "gke-gcloud-auth-plugin"}}), 5) is None
    assert stdlib_transport(context(cert, {"server": "https://x", "proxy-url": "http://p"}), 5) is None
    with pytest.raises(ClusterError, match="certificate without its key"):
        stdlib_transport(context({"client-certificate-data": "Y2VydA=="}), 5)
    with pytest.raises(ClusterError, match="client-certificate-data .* is not base64"):
        stdlib_transport(context({"client-certificate-data": "!!", "client-key-data": "a2V5"}), 5)
    with pytest.raises(ClusterError, match="has no cluster with a server"):
        context({}, {"certificate-authority-data": "Y2E="})


def test_the_standard_library_path_does_not_import_the_kubernetes_client(tmp_path: Path) -> None:
    with serve() as api:
        p = tmp_path / "kubeconfig"
        p.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "k", "cluster": {"server": api.url}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                }
            )
        )
        code = (
            "import sys, workloads.local.controlplane\n"
            "from workloads.cluster.client import Cluster\n"
            f"print(Cluster.connect({str(p)!r}).server_version())\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3')])\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["v1.34.2", "[]"]


# ------------------------------------------------------------------- the one wait


class Clock:
    """Polls that return the next canned state; counts them."""

    def __init__(self, states: list[Any]) -> None:
        self.states, self.polls = list(states), 0

    def __call__(self) -> Any:
        self.polls += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_wait_returns_the_first_state_that_holds_and_reports_each_change_once() -> None:
    poll = Clock(["pending", "pending", "running", "running", "done"])
    seen: list[str] = []
    assert wait_for(poll, timeout=120, interval=0.01, until=lambda s: s == "done", on_change=seen.append) == "done"
    assert seen == ["pending", "running", "done"] and poll.polls == 5


def test_wait_key_decides_what_counts_as_a_change() -> None:
    poll = Clock([(1, "a"), (1, "b"), (2, "c")])
    seen: list[Any] = []
    wait_for(poll, timeout=120, interval=0.01, until=lambda s: s[0] == 2, on_change=seen.append, key=lambda s: s[0])
    assert seen == [(1, "a"), (2, "c")]


def test_wait_times_out_in_one_line_with_the_last_state() -> None:
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout) as e:
        wait_for(Clock([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), timeout=0.2, interval=0.05, what="the thing", until=lambda s: s > 100)
    assert time.monotonic() - t0 >= 0.2  # not before its timeout; how soon after is the benchmarks' business, not a test's
    assert str(e.value) == "timed out after 0.2s waiting for the thing" and isinstance(e.value.last, int) and e.value.last >= 2
    assert isinstance(e.value, ToolkitError) and e.value.exit_code == 1


def test_wait_fails_fast_on_a_state_that_will_not_get_better() -> None:
    poll = Clock(["starting", "starting", "crashed", "ok"])
    with pytest.raises(WaitFailed, match="^etcd exited: crashed$") as e:
        wait_for(poll, timeout=30, interval=0.01, until=lambda s: s == "ok", fail=lambda s: "etcd exited: crashed" if s == "crashed" else None)
    assert e.value.last == "crashed" and poll.polls == 3  # stopped at the bad state: three polls, not a 30 s timeout's worth


def test_wait_until_wins_over_fail_on_the_same_state() -> None:
    assert wait_for(lambda: "ok", timeout=1, fail=lambda s: "dead") == "ok"


def test_wait_between_polls_can_be_a_watch() -> None:
    poll = Clock(["pending"])
    calls: list[tuple[str, float]] = []

    def watch(state: str, remaining: float):
        calls.append((state, remaining))
        yield "pending"
        yield "admitted"
        raise AssertionError("the wait stops reading once a state holds")

    assert wait_for(poll, timeout=2000, interval=1000, until=lambda s: s == "admitted", between=watch) == "admitted"
    # no sleep of `interval` first: more than the timeout less one interval remained (only a 1000 s stall could break this)
    assert poll.polls == 1 and calls[0][0] == "pending" and 1000 < calls[0][1] <= 2000


def test_wait_between_that_returns_at_once_is_not_a_busy_loop() -> None:
    poll = Clock(["pending"])
    with pytest.raises(WaitTimeout):
        wait_for(poll, timeout=0.3, interval=0.1, until=lambda s: False, between=lambda s, r: iter(()))
    assert 2 <= poll.polls <= 5
