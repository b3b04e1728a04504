"""ClusterError typed by the API server's answer, and the call sites that act on the type.

Two levels, as tests/test_cluster.py: both real transports against the recording HTTP
server on loopback answering with a chosen status (what each class is made from), and the
recording fake Transport for the run-level queries and the commands' helpers (what each
call site now does with it). Each "acts" test fails on the untyped client, where any
ClusterError was read as "not there". The real API server's RBAC is in
tests/integration/test_cluster_rbac.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_apiserver import serve
from tests.test_cluster import KUEUE_DISCOVERY, KUEUE_GROUP, FakeTransport, jobset, workload
from toolkit.errors import ClusterError, Conflict, Forbidden, NotFound, Rejected, Unreachable
from workloads.cluster.api import LogsUnavailable
from workloads.cluster.client import Cluster
from workloads.cluster.errors import Access, access
from workloads.cluster.transport import Response

JS_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r1"
RBAC_403 = 'jobsets.jobset.x-k8s.io "r1" is forbidden: User "bob" cannot get resource "jobsets" in API group "jobset.x-k8s.io" in the namespace "team-a"'
PSA_403 = 'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)'


def status(code: int, message: str) -> Response:
    return Response(code, json.dumps({"kind": "Status", "code": code, "message": message}).encode())


# ------------------------------------------------ the classes, over both transports


@pytest.fixture(params=["kubernetes-client", "stdlib"])
def loopback(request, tmp_path: Path):
    """(Cluster, fake server): the kubernetes client (token kubeconfig) or the standard library (anonymous)."""
    with serve() as api:
        kc = api.kubeconfig(tmp_path, namespace="team-a")
        if request.param == "stdlib":
            doc = kc.read_text().replace("token: secret-token", "{}")
            kc.write_text(doc)
        yield Cluster.connect(kc), api


def answer(api, method: str, path: str, code: int, message: str) -> None:
    api.routes[(method, path)] = lambda q, b: (code, {"kind": "Status", "code": code, "message": message})


def test_rbac_403_is_forbidden_naming_the_verb_resource_and_the_check(loopback) -> None:
    cluster, api = loopback
    answer(api, "GET", JS_PATH, 403, RBAC_403)
    with pytest.raises(Forbidden) as e:
        cluster.jobset("team-a", "r1")
    msg = str(e.value)
    assert e.value.status == 403 and e.value.exit_code == 3 and "\n" not in msg
    assert "lacks RBAC permission to get jobsets.jobset.x-k8s.io in namespace team-a" in msg
    assert "kubectl auth can-i get jobsets.jobset.x-k8s.io -n team-a" in msg


def test_each_verb_names_its_own_rbac_verb(loopback) -> None:
    cluster, api = loopback
    pods = "/api/v1/namespaces/team-a/pods"
    answer(api, "GET", pods, 403, 'pods is forbidden: User "bob" cannot list resource "pods"')
    with pytest.raises(Forbidden, match=r"to list pods in namespace team-a: .*can-i list pods -n team-a\)$"):
        cluster.pods("team-a", "r1")
    ours = {"labels": {"app.kubernetes.io/managed-by": "tpu-gke-toolkit", "tpu-gke-toolkit/run": "r1"}}
    api.routes[("GET", JS_PATH)] = lambda q, b: (200, {**jobset(ns="team-a"), "metadata": {"name": "r1", "namespace": "team-a", **ours}})
    answer(api, "DELETE", JS_PATH, 403, "nope")
    with pytest.raises(Forbidden, match=r"to delete jobsets.jobset.x-k8s.io in namespace team-a"):
        cluster.delete_jobset("team-a", "r1")
    answer(api, "PATCH", JS_PATH, 403, "nope")
    with pytest.raises(Forbidden, match=r"^apply JobSet team-a/r1: forbidden .* to patch jobsets.jobset.x-k8s.io in namespace team-a"):
        cluster.apply([jobset(ns="team-a")])
    answer(api, "GET", "/api/v1/nodes", 401, "Unauthorized")
    with pytest.raises(Forbidden, match="unauthorized .* refresh credentials") as e:
        cluster.list(cluster.resource("v1", "Node"))
    assert e.value.status == 401


def test_404_409_422_500_and_admission_403(loopback) -> None:
    cluster, api = loopback
    with pytest.raises(NotFound, match=r"GET /apis/x/v1/things: /apis/x/v1/things not found \(HTTP 404\)") as e:
        cluster.request("GET", "/apis/x/v1/things")
    assert e.value.status == 404
    answer(api, "PATCH", JS_PATH, 409, 'Apply failed with 1 conflict: conflict with "kubectl": .spec.suspend')
    with pytest.raises(Conflict, match="another field manager") as c:
        cluster.apply([jobset(ns="team-a")])
    assert c.value.status == 409
    answer(api, "POST", "/api/v1/namespaces", 409, 'namespaces "team-a" already exists')
    with pytest.raises(Conflict, match=r'^create Namespace team-a: namespaces "team-a" already exists \(HTTP 409\)$'):
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    answer(api, "POST", "/api/v1/namespaces/team-a/pods", 422, 'Pod "p" is invalid: spec.containers: Required value')
    with pytest.raises(Rejected, match=r"is invalid.*\(HTTP 422\)") as r:
        cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}})
    assert r.value.status == 422
    answer(api, "GET", "/api/v1/namespaces/team-a/services", 503, "service unavailable")
    with pytest.raises(Rejected, match=r"\(HTTP 503\)") as r:
        cluster.list(cluster.resource("v1", "Service"), "team-a")
    assert r.value.status == 503
    # Pod Security and webhooks also answer 403: admission refused the object, RBAC allowed the request.
    answer(api, "POST", "/api/v1/namespaces/team-a/pods", 403, PSA_403)
    with pytest.raises(Rejected, match=r"violates PodSecurity.*\(HTTP 403\)") as r:
        cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}})
    assert not isinstance(r.value, Forbidden) and r.value.status == 403 and "RBAC" not in str(r.value)
    answer(api, "POST", "/api/v1/namespaces/team-a/pods", 403, 'admission webhook "v.kb.io" denied the request: no')
    with pytest.raises(Rejected, match="refused by an admission webhook"):
        cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}})


def test_a_refused_stream_is_typed_too(loopback) -> None:
    cluster, api = loopback
    answer(api, "GET", "/api/v1/namespaces/team-a/pods/p0/log", 403, 'pods "p0" is forbidden: User "bob" cannot get resource "pods/log"')
    with pytest.raises(Forbidden, match=r"to get pods/log in namespace team-a"):
        list(cluster.logs("team-a", "p0"))
    answer(api, "GET", "/api/v1/namespaces/team-a/pods", 403, 'pods is forbidden: User "bob" cannot watch resource "pods"')
    with pytest.raises(Forbidden, match=r"to watch pods in namespace team-a"):
        list(cluster.watch(cluster.resource("v1", "Pod"), "team-a"))


def test_no_answer_is_unreachable(tmp_path: Path) -> None:
    with serve() as api:
        kc = api.kubeconfig(tmp_path)
        cluster = Cluster.connect(kc)
    with pytest.raises(Unreachable, match="connection refused") as e:
        cluster.jobset("team-a", "r1")
    assert e.value.status is None and e.value.exit_code == 3
    assert not cluster.healthy()


def test_every_class_is_a_cluster_error_with_exit_code_3() -> None:
    for cls in (NotFound, Forbidden, Conflict, Unreachable, Rejected):
        err = cls("x")
        assert isinstance(err, ClusterError) and err.exit_code == 3
    assert (NotFound("x").status, Forbidden("x").status, Conflict("x").status, Unreachable("x").status) == (404, 403, 409, None)
    assert Rejected("x", status=429).status == 429 and ClusterError("x").status is None


@pytest.mark.parametrize(
    ("method", "path", "query", "want"),
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", None, Access("get", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods", None, Access("list", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods", [("watch", "true")], Access("watch", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", None, Access("get", "pods/log", "ns")),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction", None, Access("create", "pods/eviction", "ns")),
        ("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/r", None, Access("patch", "jobsets.jobset.x-k8s.io", "ns")),
        ("DELETE", "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads", None, Access("deletecollection", "workloads.kueue.x-k8s.io", "ns")),
        ("GET", "/api/v1/namespaces/ns", None, Access("get", "namespaces")),
        ("GET", "/api/v1/nodes", None, Access("list", "nodes")),
        ("GET", "/apis/ray.io/v1", None, Access("get", "/apis/ray.io/v1")),
        ("GET", "/version", None, Access("get", "/version")),
    ],
)
def test_access_reads_the_request_as_the_api_server_does(method, path, query, want) -> None:
    assert access(method, path, query) == want


# ------------------------------------------------ the call sites that act on the type


def test_find_run_raises_forbidden_where_it_said_no_such_run() -> None:
    """A refused discovery of a runtime's API (RayJob here) was skipped as "not installed": the run was "not found"."""
    t = FakeTransport({("GET", "/apis/ray.io/v1"): status(403, 'forbidden: User "bob" cannot get path "/apis/ray.io/v1"')})
    with pytest.raises(Forbidden, match=r"discovery of ray.io/v1: forbidden .* kubectl auth can-i get /apis/ray.io/v1"):
        Cluster(t).find_run("team-a", "r1")
    with pytest.raises(Forbidden):
        Cluster(t).run_status("team-a", "r1")  # was phase NotFound
    with pytest.raises(Forbidden):
        Cluster(t).delete_run("team-a", "r1")  # was "already deleted"


def test_find_run_is_none_only_when_nothing_is_there() -> None:
    # No RayJob CRD (discovery 404), no JobSet, no Job: no such run.
    assert Cluster(FakeTransport()).find_run("team-a", "r1") is None
    assert Cluster(FakeTransport()).run_status("team-a", "r1").phase.value == "NotFound"
    t = FakeTransport({("GET", JS_PATH): status(403, RBAC_403)})
    with pytest.raises(Forbidden, match="get jobsets.jobset.x-k8s.io in namespace team-a"):
        Cluster(t).find_run("team-a", "r1")


def _run_with_kueue(workloads_answer) -> FakeTransport:
    return FakeTransport(
        {
            ("GET", JS_PATH): jobset(ns="team-a"),
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"): workloads_answer,
            ("GET", "/api/v1/namespaces/team-a/pods"): {"items": []},
            ("GET", "/api/v1/namespaces/team-a/events"): {"items": []},
        }
    )


def test_run_status_raises_a_refused_workload_read_instead_of_hiding_the_workload() -> None:
    st = Cluster(_run_with_kueue({"items": [workload([{"type": "QuotaReserved", "status": "False", "reason": "Pending"}])]})).run_status("team-a", "r1")
    assert st.workload is not None
    no_kueue = FakeTransport({("GET", JS_PATH): jobset(ns="team-a"), ("GET", "/api/v1/namespaces/team-a/pods"): {"items": []}})
    assert Cluster(no_kueue).run_status("team-a", "r1").workload is None  # Kueue not installed: still a status
    refused = status(403, 'workloads.kueue.x-k8s.io is forbidden: User "bob" cannot list resource "workloads"')
    with pytest.raises(Forbidden, match="to list workloads.kueue.x-k8s.io in namespace team-a"):
        Cluster(_run_with_kueue(refused)).run_status("team-a", "r1")


def test_events_are_optional_but_a_failing_server_is_not_hidden() -> None:
    path = "/api/v1/namespaces/team-a/events"
    assert Cluster(FakeTransport({("GET", path): status(403, 'User "bob" cannot list resource "events"')})).events("team-a", "JobSet", "r1") == []
    with pytest.raises(Rejected, match=r"\(HTTP 500\)"):
        Cluster(FakeTransport({("GET", path): status(500, "etcd leader changed")})).events("team-a", "JobSet", "r1")


def test_logs_unavailable_is_about_the_pod_not_the_identity() -> None:
    path = "/api/v1/namespaces/team-a/pods/p0/log"
    gone = FakeTransport(streams={path: NotFound('GET log: pods "p0" not found (HTTP 404)')})
    with pytest.raises(LogsUnavailable, match="not available") as e:
        list(Cluster(gone).logs("team-a", "p0"))
    assert e.value.status == 404
    refused = FakeTransport(streams={path: Forbidden("GET log: forbidden")})
    with pytest.raises(Forbidden) as f:
        list(Cluster(refused).logs("team-a", "p0"))
    assert not isinstance(f.value, LogsUnavailable)
    down = FakeTransport(streams={path: Unreachable("cannot reach")})
    with pytest.raises(Unreachable):
        list(Cluster(down).logs("team-a", "p0", follow=True))


def test_admission_wait_polls_when_watching_is_refused_and_stops_when_the_server_is_gone() -> None:
    wl_path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"
    pending = workload([{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}])
    pending["metadata"]["namespace"] = "team-a"
    routes = {
        ("GET", JS_PATH): jobset(ns="team-a"),
        ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
        ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
        ("GET", wl_path): {"items": [pending]},
        ("GET", f"{wl_path}/jobset-r1-abc"): pending,
    }
    watch_refused = FakeTransport(routes, streams={wl_path: Forbidden("watch refused")})
    res = Cluster(watch_refused).wait_admitted("team-a", "r1", timeout=0.3, poll=0.05)
    assert not res.admitted and res.state == "pending"
    gone = FakeTransport(routes, streams={wl_path: Unreachable("cannot reach the Kubernetes API server")})
    with pytest.raises(Unreachable):  # was swallowed: the wait polled on to its timeout
        Cluster(gone).wait_admitted("team-a", "r1", timeout=120, poll=0.05)


def test_wait_admitted_on_a_missing_run_is_not_found() -> None:
    with pytest.raises(NotFound, match="does not exist — submit it first"):
        Cluster(FakeTransport()).wait_admitted("team-a", "nope", timeout=1)


def test_cleanup_collect_raises_a_refused_workload_list_instead_of_finding_no_orphans() -> None:
    from workloads.cluster import cleanup as cl

    base = {("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets"): {"items": [jobset(ns="team-a")]}}
    runs, orphans = cl.collect(Cluster(FakeTransport(base)), ["team-a"])  # no RayJob CRD, no Kueue: skipped
    assert [r.name for r in runs] == ["r1"] and orphans == []
    refused = FakeTransport(
        {
            **base,
            ("GET", "/apis/kueue.x-k8s.io"): KUEUE_GROUP,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2"): KUEUE_DISCOVERY,
            ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"): status(403, 'User "bob" cannot list resource "workloads"'),
        }
    )
    with pytest.raises(Forbidden, match="list workloads.kueue.x-k8s.io"):
        cl.collect(Cluster(refused), ["team-a"])


def test_preflight_says_kueue_is_missing_only_when_it_is_not_served() -> None:
    from infra.spec import TeamSpec
    from workloads.observe import preflight as pf

    team = TeamSpec(name="research")
    nodes = {("GET", "/api/v1/nodes"): {"items": []}}
    assert pf.gather(Cluster(FakeTransport(nodes)), team).kueue_served is False
    refused = FakeTransport({**nodes, ("GET", "/apis/kueue.x-k8s.io"): status(403, 'User "bob" cannot get path "/apis/kueue.x-k8s.io"')})
    with pytest.raises(Forbidden, match="discovery of kueue.x-k8s.io"):  # was reported as "Kueue not installed"
        pf.gather(Cluster(refused), team)


def test_status_helpers_warn_on_a_refusal_and_stay_quiet_on_an_unservable_log(capsys) -> None:
    from workloads.observe import analysis as observe
    from workloads.observe import status as run_status

    pods = {"items": [{"metadata": {"name": "p0", "creationTimestamp": "2026-01-01T00:00:00Z"}}]}
    routes = {("GET", JS_PATH): jobset(ns="team-a"), ("GET", "/api/v1/namespaces/team-a/pods"): pods}
    log = "/api/v1/namespaces/team-a/pods/p0/log"
    kwok = FakeTransport(routes, streams={log: Rejected("GET log: no kubelet (HTTP 500)", status=500)})
    assert run_status.last_checkpoint(Cluster(kwok), "team-a", "r1") is None
    assert capsys.readouterr().err == ""
    refused = FakeTransport(routes, streams={log: Forbidden("GET log: forbidden (x) — the kubeconfig identity lacks RBAC permission to get pods/log")})
    assert run_status.last_checkpoint(Cluster(refused), "team-a", "r1") is None
    err = capsys.readouterr().err
    assert err.startswith("warning: the last checkpoint is unknown: GET log: forbidden") and err.count("\n") == 1
    down = FakeTransport(routes, streams={log: Unreachable("cannot reach")})
    with pytest.raises(Unreachable):  # was "unknown": the command now fails with exit 3
        run_status.last_checkpoint(Cluster(down), "team-a", "r1")
    wl_refused = FakeTransport({**routes, ("GET", "/apis/kueue.x-k8s.io"): status(403, 'User "bob" cannot get path "/apis/kueue.x-k8s.io"')})
    assert observe.timeline(Cluster(wl_refused), "team-a", "r1") is None
    assert capsys.readouterr().err.startswith("warning: the run's queueing time is unknown: discovery of kueue.x-k8s.io: forbidden")


# ------------------------------------------------ the local cluster's daemons


def test_node_recreation_takes_a_conflict_as_done() -> None:
    from workloads.local import disrupt

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}
    rec = disrupt.Replacement(pool="p", nodes=[node], preempted_at=0, down_at=0, up_at=0, down=0, gone=0)
    t = FakeTransport({("POST", "/api/v1/nodes"): status(409, 'nodes "n1" already exists')})
    assert disrupt.advance(Cluster(t), rec, now=100) is False and rec.created
    assert [c["method"] for c in t.calls] == ["POST"]  # no second look: the conflict says it exists
    refused = FakeTransport({("POST", "/api/v1/nodes"): status(403, 'User "x" cannot create resource "nodes"')})
    rec2 = disrupt.Replacement(pool="p", nodes=[node], preempted_at=0, down_at=0, up_at=0, down=0, gone=0)
    with pytest.raises(Forbidden):
        disrupt.advance(Cluster(refused), rec2, now=100)
    assert not rec2.created


def test_force_delete_of_a_gone_pod_is_fine_and_other_refusals_are_not() -> None:
    from workloads.local import disrupt

    path = "/api/v1/namespaces/team-a/pods/p0"
    t = FakeTransport()
    disrupt.force_delete(Cluster(t), path)
    assert t.calls[0]["method"] == "DELETE" and t.calls[0]["query"] == {"gracePeriodSeconds": "0"}
    with pytest.raises(Forbidden, match="to delete pods in namespace team-a"):
        disrupt.force_delete(Cluster(FakeTransport({("DELETE", path): status(403, 'User "x" cannot delete resource "pods"')})), path)
    with pytest.raises(NotFound, match=r"^PATCH /api/v1/nodes/n1: .* \(HTTP 404\)$"):
        disrupt.patch(Cluster(FakeTransport()), "/api/v1/nodes/n1", {"spec": {}})


def test_the_rehearsal_takes_an_existing_kwok_logs_object_as_made(tmp_path: Path) -> None:
    from workloads.local import rehearsald

    gv = rehearsald.KWOK_API
    discovery = {"resources": [{"name": "logs", "kind": "Logs", "namespaced": True}]}
    pod = {"metadata": {"name": "p0", "namespace": "team-a", "uid": "u0"}}
    taken = FakeTransport({("GET", f"/apis/{gv}"): discovery, ("POST", f"/apis/{gv}/namespaces/team-a/logs"): status(409, 'logs "p0" already exists')})
    rehearsald.Rehearsals(tmp_path, Cluster(taken))._logs_object(pod, tmp_path / "p0.log")
    refused = FakeTransport({("GET", f"/apis/{gv}"): discovery, ("POST", f"/apis/{gv}/namespaces/team-a/logs"): status(422, "spec.logs: Invalid value")})
    with pytest.raises(Rejected, match="HTTP 422"):
        rehearsald.Rehearsals(tmp_path, Cluster(refused))._logs_object(pod, tmp_path / "p0.log")
