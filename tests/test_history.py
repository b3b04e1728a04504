"""A run's history from Cloud Logging: Google's real client over REST against the local cluster's
logging server (a loopback server playing the v2 ``entries:list`` call), and the pure parts
(the filter, the cut by pod, goodput per attempt).

What the server holds is written the way the rehearsal daemon writes it (``Store.ship``, as
GKE's logging agent stamps a container's lines). The integration tier's rehearsal test reads
a preempted run's two attempts through the same path.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from toolkit.errors import Forbidden
from toolkit.names import (
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    K8S_COMPLETION_INDEX_LABEL,
    K8S_JOB_NAME_LABEL,
    RAY_SUBMITTER_CONTAINER,
    TGK_RUN_LABEL,
    WORKLOAD_CONTAINER,
)
from workloads.local import cloudlogging as cl
from workloads.local import loopback
from workloads.observe import goodput
from workloads.observe.history import JOB_UID_LABEL, JOBSET_UID_LABEL, HistoryUnavailable, LogScope, make_client, read, worker_filter

SCOPE = LogScope(project="proj-1", location="us-east5", cluster="tpu-a", namespace="research", run="llm-1", run_uid="uid-2")


def _source(pod: str, *, run: str = "llm-1", uid: str = "uid-2", job: str = "0", index: str = "0", ns: str = "research") -> cl.Container:
    labels = {JOBSET_NAME_LABEL: run, JOBSET_UID_LABEL: uid, JOBSET_JOB_INDEX_LABEL: job, K8S_COMPLETION_INDEX_LABEL: index}
    return cl.Container("proj-1", "us-east5", "tpu-a", ns, pod, WORKLOAD_CONTAINER, labels)


def _absl(t: float, msg: str) -> str:
    s = time.gmtime(t)
    return f"I{s.tm_mon:02d}{s.tm_mday:02d} {s.tm_hour:02d}:{s.tm_min:02d}:{s.tm_sec:02d}.{int((t % 1) * 1e6):06d} 1 train.py:1] {msg}"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[cl.Store, str]]:
    srv = cl.serve(tmp_path, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield cl.Store(cl.store_file(tmp_path)), loopback.url(srv.server_address[1])
    finally:
        srv.shutdown()
        srv.server_close()


def _two_attempts(store: cl.Store, t0: float) -> None:
    a1 = [_absl(t0, "start"), *(_absl(t0 + 10 + k, f"completed step: {k}, seconds: 1.0") for k in range(5))]
    a2 = [_absl(t0 + 60, "restoring from this run's directory step 3"), *(_absl(t0 + 70 + k, f"completed step: {k}, seconds: 1.0") for k in range(4, 8))]
    store.ship(_source("llm-1-slice-0-0-aaaaa"), a1, t0)
    # Not worker 0, another run, an earlier run under the same name, another namespace: none is its history.
    store.ship(_source("llm-1-slice-0-1-bbbbb", index="1"), ["worker 1"], t0 + 1)
    store.ship(_source("llm-1-slice-1-0-ccccc", job="1"), ["slice 1"], t0 + 1)
    store.ship(_source("llm-2-slice-0-0-ddddd", run="llm-2"), ["another run"], t0 + 1)
    store.ship(_source("llm-1-slice-0-0-eeeee", uid="uid-1"), ["an earlier run of the name"], t0 + 1)
    store.ship(_source("llm-1-slice-0-0-fffff", ns="other"), ["another namespace"], t0 + 1)
    store.ship(_source("llm-1-slice-0-0-ggggg"), a2, t0 + 60)


def test_worker_zero_of_the_run_every_attempt_in_order_through_googles_client(server) -> None:
    store, url = server
    t0 = time.time() - 3 * 86400  # three days old: the client's own default reads one day back
    _two_attempts(store, t0)
    hist = read(make_client("proj-1", endpoint=url), SCOPE, limit_bytes=1 << 20)
    assert hist.pods == ("llm-1-slice-0-0-aaaaa", "llm-1-slice-0-0-ggggg")
    assert len(hist.lines) == 11 and not any(w in hist.text for w in ("worker 1", "slice 1", "another", "earlier"))
    first, second = hist.per_pod()
    assert "completed step: 4," in first and "restoring" not in first
    assert second.startswith(_absl(t0 + 60, "restoring"))
    g = goodput.from_attempt_logs(hist.per_pod())
    assert g.attempts == 2 and g.steps_redone == 1  # step 4 again after restoring 3
    assert g.restarts == pytest.approx(60 - 14, abs=0.01)


def test_pages_are_followed_to_the_end(server, monkeypatch) -> None:
    from workloads.observe import history

    store, url = server
    monkeypatch.setattr(history, "PAGE_SIZE", 7)
    t0 = time.time() - 100
    store.ship(_source("llm-1-slice-0-0-aaaaa"), [f"line {k}" for k in range(30)], t0)
    hist = read(make_client("proj-1", endpoint=url), SCOPE, limit_bytes=1 << 20)
    assert list(hist.lines) == [f"line {k}" for k in range(30)]


def test_since_bounds_the_entries_to_this_run(server) -> None:
    store, url = server
    t0 = time.time() - 1000
    store.ship(_source("llm-1-slice-0-0-aaaaa"), ["before"], t0)
    store.ship(_source("llm-1-slice-0-0-aaaaa"), ["after"], t0 + 500)
    scope = LogScope(**{**SCOPE.__dict__, "since": cl.rfc3339(t0 + 100)})
    assert read(make_client("proj-1", endpoint=url), scope, limit_bytes=1 << 20).lines == ("after",)


def test_a_history_over_the_size_cap_is_refused_in_one_line(server) -> None:
    store, url = server
    store.ship(_source("llm-1-slice-0-0-aaaaa"), ["x" * 100] * 20, time.time())
    with pytest.raises(HistoryUnavailable, match=r"more than 1,000 bytes of log in Cloud Logging \(project proj-1"):
        read(make_client("proj-1", endpoint=url), SCOPE, limit_bytes=1000)


def test_hostile_values_stay_inside_their_quotes() -> None:
    evil = LogScope(project="p", location="l", cluster="c", namespace="ns", run='x" OR resource.type="gce_instance', run_uid="u\\")
    terms = cl.parse_filter(worker_filter(evil))
    by_field = {".".join(t.path): t.value for t in terms}
    assert by_field["labels.k8s-pod/jobset_sigs_k8s_io/jobset-name"] == 'x" OR resource.type="gce_instance'
    assert by_field["labels.k8s-pod/jobset_sigs_k8s_io/jobset-uid"] == "u\\"
    assert by_field["resource.type"] == "k8s_container" and len(terms) == 11
    assert all(t.op == "=" for t in terms if t.path != ("timestamp",))


def test_the_filter_always_bounds_time() -> None:
    # Without a timestamp term Google's client reads only the last 24 hours.
    assert worker_filter(LogScope("p", "l", "c", "ns", "r")).endswith('timestamp>="1970-01-01T00:00:00Z"')
    assert 'jobset-uid"' not in worker_filter(LogScope("p", "l", "c", "ns", "r"))


def test_the_server_refuses_what_it_cannot_parse_as_the_api_does(server) -> None:
    _, url = server

    def post(body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"{url}/v2/entries:list", json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    ok = {"resourceNames": ["projects/p"], "filter": 'resource.type="k8s_container"'}
    assert post(ok)[0] == 200
    for bad in (
        {**ok, "filter": 'resource.type="a" OR resource.type="b"'},
        {**ok, "filter": "resource.type=k8s_container"},
        {**ok, "resourceNames": []},
        {**ok, "pageSize": -1},
        {**ok, "pageSize": 5000},
        {**ok, "pageToken": "!!"},
        {**ok, "orderBy": "severity"},
    ):
        code, body = post(bad)
        assert code == 400 and body["error"]["status"] == "INVALID_ARGUMENT", bad


def _refusing_server(code: int) -> ThreadingHTTPServer:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a) -> None:
            pass

        def do_POST(self) -> None:
            body = json.dumps({"error": {"code": code, "message": "no", "status": "PERMISSION_DENIED" if code == 403 else "INTERNAL"}}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.parametrize(("code", "error"), [(403, Forbidden), (500, HistoryUnavailable)])
def test_refusals_and_failures_are_typed(code: int, error: type) -> None:
    srv = _refusing_server(code)
    try:
        with pytest.raises(error):
            read(make_client("p", endpoint=loopback.url(srv.server_address[1])), SCOPE, limit_bytes=1 << 20)
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_unreachable_server_is_unavailable_not_a_traceback() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HistoryUnavailable, match=r"^Cloud Logging \(POST http://127\.0\.0\.1:\d+/v2/entries:list\): cannot connect") as failed:
        read(make_client("p", endpoint=loopback.url(port)), SCOPE, limit_bytes=1 << 20)
    assert failed.value.exit_code == 3 and "\n" not in str(failed.value)


def test_an_attempt_that_never_reached_a_step_stays_an_attempt() -> None:
    t0 = 1_000_000.0
    crashed = "\n".join([_absl(t0, "start"), _absl(t0 + 30, "compiling")])
    ran = "\n".join([_absl(t0 + 90, "start"), *(_absl(t0 + 100 + k, f"completed step: {k}, seconds: 1.0") for k in range(4))])
    g = goodput.from_attempt_logs([crashed, ran])
    assert g.attempts == 2 and g.restarts == pytest.approx(60)
    joined = goodput.from_log(crashed + "\n" + ran)
    assert joined.attempts == 1  # one text cannot tell the crashed pod from the next one's start-up


def test_pod_labels_are_stamped_as_gke_writes_them() -> None:
    assert cl.pod_label_key("batch.kubernetes.io/job-completion-index") == "k8s-pod/batch_kubernetes_io/job-completion-index"
    assert cl.pod_label_key("app") == "k8s-pod/app"


def test_the_agent_takes_a_cri_line_apart_as_gkes_does(server) -> None:
    store, url = server
    store.ship(
        _source("llm-1-slice-0-0-aaaaa"),
        ["2026-11-20T10:00:00.250000000Z stderr F I1120 10:00:00.250000 1 train.py:1] completed step: 0, seconds: 1.0\n"],
        time.time(),
    )
    (entry,) = store.entries()
    assert entry["textPayload"] == "I1120 10:00:00.250000 1 train.py:1] completed step: 0, seconds: 1.0"
    assert entry["timestamp"] == "2026-11-20T10:00:00.250000Z" and entry["logName"] == "projects/proj-1/logs/stderr"


class _GoneCluster:
    """A cluster where the run is no longer there: no run object, no pod."""

    context = "gke_proj-1_us-east5_tpu-a"

    def find_run(self, ns: str, run: str):
        return None

    def find_pod(self, ns: str, run: str, found=None):
        return None


def test_a_deleted_run_is_still_read_from_cloud_logging_and_a_gone_one_is_one_line(server) -> None:
    from infra.spec import DEFAULT_SPEC_PATH, load_spec
    from toolkit.errors import SpecError
    from workloads.observe import analysis

    store, url = server
    env = load_spec(DEFAULT_SPEC_PATH)
    client = lambda cluster, project: make_client(project, endpoint=url)  # noqa: E731
    t0 = time.time() - 3600
    for k, uid in enumerate(("uid-1", "uid-2")):  # an earlier JobSet of the name, then the one deleted since
        src = cl.Container(env.project, env.region, env.cluster.name, "research", f"llm-1-slice-0-0-{k}", WORKLOAD_CONTAINER, _source("x", uid=uid).pod_labels)
        store.ship(src, [_absl(t0 + 100 * k + s, f"completed step: {s}, seconds: 1.0") for s in range(3)], t0 + 100 * k)
    scope = dict(spec=lambda: env, cluster=_GoneCluster, metrics_file=None, namespace="research", team=None, logging_client=client)
    got = analysis.load_run("llm-1", **scope)
    # No uid to pin (the run object is gone): every JobSet of the name in the namespace, one attempt per pod.
    assert got.attempts is not None and len(got.attempts) == 2 and got.source.startswith(f"Cloud Logging (project {env.project}")
    assert got.text.count("completed step") == 6 and [s.step for s in got.log.steps] == [0, 1, 2]  # a step redone counts once
    with pytest.raises(SpecError) as e:
        analysis.load_run("never-ran", **scope)
    assert e.value.exit_code == 2
    line = str(e.value)
    assert (
        "no history of run 'never-ran'" in line
        and f"Cloud Logging (project {env.project}, cluster {env.region}/{env.cluster.name}, namespace research)" in line
    )


# ------------------------------------------------------------------ every runtime: a Job's and a RayJob's attempts


def _job_source(pod: str, *, run: str = "llm-1", uid: str = "job-uid-2", index: str = "0") -> cl.Container:
    """A pod of an Indexed Job, labelled as the Job controller labels it."""
    labels = {K8S_JOB_NAME_LABEL: run, "job-name": run, JOB_UID_LABEL: uid, K8S_COMPLETION_INDEX_LABEL: index, TGK_RUN_LABEL: run}
    return cl.Container("proj-1", "us-east5", "tpu-a", "research", pod, WORKLOAD_CONTAINER, labels)


def _submitter_source(pod: str, *, run: str = "llm-1") -> cl.Container:
    """A RayJob's submitter pod (K8sJobMode): the Job KubeRay makes carries the RayJob's name."""
    labels = {K8S_JOB_NAME_LABEL: run, "job-name": run, JOB_UID_LABEL: f"uid-of-{pod}", TGK_RUN_LABEL: run}
    return cl.Container("proj-1", "us-east5", "tpu-a", "research", pod, RAY_SUBMITTER_CONTAINER, labels)


def _steps(t: float, ks: range) -> list[str]:
    return [_absl(t + k, f"completed step: {k}, seconds: 1.0") for k in ks]


def test_a_job_runs_attempts_are_read_by_its_own_labels(server) -> None:
    store, url = server
    t0 = time.time() - 3600
    store.ship(_job_source("llm-1-0-aaaaa"), _steps(t0, range(0, 5)), t0)  # attempt 1: worker 0
    store.ship(_job_source("llm-1-1-bbbbb", index="1"), ["worker 1"], t0)
    store.ship(_job_source("llm-1-0-ccccc", uid="job-uid-1"), ["an earlier Job of the name"], t0)
    store.ship(_submitter_source("llm-1-ddddd"), ["a RayJob's submitter of the name"], t0)
    store.ship(_source("llm-1-slice-0-0-eeeee"), ["a JobSet of the name"], t0)
    store.ship(_job_source("llm-1-0-fffff"), _steps(t0 + 100, range(3, 8)), t0 + 100)  # attempt 2, after a Kueue eviction
    scope = LogScope("proj-1", "us-east5", "tpu-a", "research", "llm-1", run_uid="job-uid-2", runtime="job")
    hist = read(make_client("proj-1", endpoint=url), scope, limit_bytes=1 << 20)
    assert hist.pods == ("llm-1-0-aaaaa", "llm-1-0-fffff") and len(hist.lines) == 10
    assert goodput.from_attempt_logs(hist.per_pod()).attempts == 2


def test_a_rayjobs_attempts_are_its_submitter_pods(server) -> None:
    store, url = server
    t0 = time.time() - 3600
    store.ship(_submitter_source("llm-1-aaaaa"), _steps(t0, range(0, 4)), t0)
    store.ship(_job_source("llm-1-0-bbbbb"), ["a plain Job of the name"], t0)
    store.ship(_submitter_source("llm-1-ccccc"), _steps(t0 + 100, range(2, 6)), t0 + 100)  # KubeRay's retry: a new submitter
    scope = LogScope("proj-1", "us-east5", "tpu-a", "research", "llm-1", runtime="ray", since=cl.rfc3339(t0 - 1))
    assert 'container_name="ray-job-submitter"' in worker_filter(scope) and "controller-uid" not in worker_filter(scope)
    hist = read(make_client("proj-1", endpoint=url), scope, limit_bytes=1 << 20)
    assert hist.pods == ("llm-1-aaaaa", "llm-1-ccccc") and "a plain Job" not in hist.text


def test_each_runtimes_filter_names_its_own_pods() -> None:
    def fields(runtime: str, uid: str | None) -> dict[str, str]:
        return {".".join(t.path): t.value for t in cl.parse_filter(worker_filter(LogScope("p", "l", "c", "ns", "r", run_uid=uid, runtime=runtime)))}

    job = fields("job", "u-1")
    assert job["labels.k8s-pod/batch_kubernetes_io/job-name"] == "r" and job["labels.k8s-pod/batch_kubernetes_io/controller-uid"] == "u-1"
    assert job["labels.k8s-pod/batch_kubernetes_io/job-completion-index"] == "0" and job["resource.labels.container_name"] == WORKLOAD_CONTAINER
    assert not any("jobset" in k for k in job)
    ray = fields("ray", None)
    assert ray["resource.labels.container_name"] == RAY_SUBMITTER_CONTAINER and ray["labels.k8s-pod/batch_kubernetes_io/job-name"] == "r"
    with pytest.raises(ValueError):
        LogScope("p", "l", "c", "ns", "r", runtime="pods")


def _load(run: str, env, cluster, url: str):
    """``metrics RUN``'s loader, on ``cluster`` (a callable giving the fake), with the local Cloud Logging server at ``url``."""
    from workloads.observe import analysis

    return analysis.load_run(
        run,
        spec=lambda: env,
        cluster=cluster,
        metrics_file=None,
        namespace="research",
        team=None,
        logging_client=lambda cluster, project: make_client(project, endpoint=url),
    )


class _RunThere:
    """A cluster where the run object is there (a Job or a RayJob) and its pod is the last attempt's."""

    context = "gke_proj-1_us-east5_tpu-a"

    def __init__(self, kind, uid: str, created: str) -> None:
        self.kind, self.uid, self.created = kind, uid, created

    def find_run(self, ns: str, run: str):
        return self.kind, {"metadata": {"name": run, "namespace": ns, "uid": self.uid, "creationTimestamp": self.created}, "status": {}}

    def find_pod(self, ns: str, run: str, found=None):
        return {"metadata": {"name": f"{run}-last"}}

    def workload_for(self, ns: str, obj):
        return None


@pytest.mark.parametrize("runtime", ["job", "ray"])
def test_metrics_of_a_job_or_rayjob_run_reads_every_attempt(server, runtime: str) -> None:
    from infra.spec import DEFAULT_SPEC_PATH, load_spec
    from workloads.cluster import runkinds

    store, url = server
    env = load_spec(DEFAULT_SPEC_PATH)
    t0 = time.time() - 3600
    kind = runkinds.BY_RUNTIME[runtime]
    for k in range(2):
        src = _job_source(f"llm-1-0-{k}") if runtime == "job" else _submitter_source(f"llm-1-{k}")
        store.ship(
            cl.Container(env.project, env.region, env.cluster.name, "research", src.pod, src.container, src.pod_labels),
            _steps(t0 + 100 * k, range(3 * k, 3 * k + 3)),
            t0 + 100 * k,
        )
    there = _RunThere(kind, "job-uid-2", cl.rfc3339(t0 - 10))
    got = _load("llm-1", env, lambda: there, url)
    assert got.attempts is not None and len(got.attempts) == 2, got.source
    assert got.source.startswith(f"Cloud Logging (project {env.project}") and [s.step for s in got.log.steps] == list(range(6))


@pytest.mark.parametrize("runtime", ["job", "ray"])
def test_a_gone_job_or_rayjob_run_is_found_as_its_runtime(server, runtime: str) -> None:
    from infra.spec import DEFAULT_SPEC_PATH, load_spec

    store, url = server
    env = load_spec(DEFAULT_SPEC_PATH)
    t0 = time.time() - 3600
    src = _job_source("llm-9-0-x", run="llm-9") if runtime == "job" else _submitter_source("llm-9-x", run="llm-9")
    store.ship(cl.Container(env.project, env.region, env.cluster.name, "research", src.pod, src.container, src.pod_labels), _steps(t0, range(4)), t0)
    got = _load("llm-9", env, _GoneCluster, url)
    assert [s.step for s in got.log.steps] == [0, 1, 2, 3] and got.source.endswith(src.pod)


@pytest.mark.parametrize(
    ("runtime", "status", "workload"),
    [
        ("job", {}, {"status": {"schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}}}),
        ("ray", {"failed": 1}, None),
        ("jobset", {"restarts": 1}, None),
    ],
)
def test_where_earlier_attempts_cannot_be_had_one_line_says_so(server, capsys, runtime: str, status: dict, workload: dict | None) -> None:
    """Cloud Logging holds nothing of the run: the last attempt's pod log is read, and one warning line says what is missing."""
    from infra.spec import DEFAULT_SPEC_PATH, load_spec
    from workloads.cluster import runkinds

    _, url = server
    env = load_spec(DEFAULT_SPEC_PATH)

    class Restarted(_RunThere):
        def find_run(self, ns: str, run: str):
            kind, obj = super().find_run(ns, run)
            return kind, {**obj, "status": status}

        def workload_for(self, ns: str, obj):
            return workload

        def logs(self, ns: str, pod: str):
            return iter(_steps(time.time() - 60, range(5, 8)))

    there = Restarted(runkinds.BY_RUNTIME[runtime], "uid-x", cl.rfc3339(time.time() - 600))
    got = _load("llm-5", env, lambda: there, url)
    assert [s.step for s in got.log.steps] == [5, 6, 7] and got.source == "research/llm-5-last"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "warning: run 'llm-5' restarted 1 time(s); pod llm-5-last's log holds its own attempt only (earlier attempts: no entries for it in Cloud Logging"
    )


def test_a_cloud_logging_that_misbehaves_is_a_warning_beside_a_pod_and_exit_3_without_one(capsys) -> None:
    """An endless listing (tests/support/hostile_server.py): beside the run's pod, one warning and its log; with
    nothing on the cluster, the service's failure is the answer, one line, exit 3."""
    from infra.spec import DEFAULT_SPEC_PATH, load_spec
    from tests.support.hostile_server import serve
    from workloads.cluster import runkinds

    env = load_spec(DEFAULT_SPEC_PATH)

    class WithPod(_RunThere):
        def logs(self, ns: str, pod: str):
            return iter(_steps(time.time() - 60, range(2)))

    page = b'{"entries": [], "nextPageToken": "again"}'
    with serve({"*": "json"}, body=page) as h:
        got = _load("llm-7", env, lambda: WithPod(runkinds.JOBSET, "u", cl.rfc3339(time.time() - 600)), h.url)
        (line,) = capsys.readouterr().err.splitlines()
        assert [s.step for s in got.log.steps] == [0, 1] and got.source == "research/llm-7-last"
        assert line.startswith("warning: earlier attempts unknown: Cloud Logging (POST http://127.0.0.1:") and "more than 1000 pages" in line
        with pytest.raises(HistoryUnavailable) as failed:
            _load("llm-7", env, _GoneCluster, h.url)
    text = str(failed.value)
    assert failed.value.exit_code == 3 and "\n" not in text and text.count(" — ") == 1
    assert text.startswith("no history of run 'llm-7' in namespace 'research' (no run and no pod there): Cloud Logging (POST http://127.0.0.1:")
