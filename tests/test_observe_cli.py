"""`python -m workloads` status/logs/metrics/report/delete/preflight, as a user sees them (in process: tests/support/cli.py).

Offline paths use the real MaxText test data; cluster paths use a kubeconfig that points at
an unreachable port, or at a small recording HTTP server on loopback (tests/support/fake_apiserver.py)
so the real kubernetes client is exercised end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support import cli
from tests.support.fake_apiserver import serve

DATA = Path(__file__).parent / "data" / "maxtext"
LOG = str(DATA / "tiny_cpu.log")
MFILE = str(DATA / "tiny_cpu.metrics.jsonl")


def wl(*args: str, **kw):
    return cli("workloads", *args, **kw)


def assert_one_line_error(r, code: int, *fragments: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and lines[0].startswith("error: ")
    for f in fragments:
        assert f in lines[0], lines[0]


# -------------------------------------------------------------- offline metrics


def test_help_lists_the_observe_commands() -> None:
    r = wl("--help")
    assert r.returncode == 0
    for cmd in ("status", "logs", "metrics", "report", "delete", "preflight"):
        assert cmd in r.stdout


def test_metrics_text_on_the_real_log() -> None:
    r = wl("metrics", LOG)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tiny_cpu (")
    assert "steady state over 4 (steps 2–4, 9)" in r.stdout
    assert "per-chip figures and MFU need --shape or --pool" in r.stdout


def test_metrics_json_with_shape_and_metrics_file() -> None:
    r = wl("metrics", LOG, "--metrics-file", MFILE, "--shape", "tpu7x-8", "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    s = doc["summary"]
    raw = [json.loads(x) for x in Path(MFILE).read_text().splitlines()]
    steady = [x for x in raw if int(x["step"]) in (2, 3, 4, 9)]
    # total work / total time, from the file's own per-step work and full-precision seconds
    want_tflops = sum(x["perf/per_device_tflops"] for x in steady) / sum(x["perf/step_time_seconds"] for x in steady)
    assert s["steady_steps"] == [2, 3, 4, 9]
    assert s["tflops_per_device"] == pytest.approx(want_tflops)  # the file's full precision won
    assert s["tflops_per_chip"] == pytest.approx(2 * want_tflops)
    assert s["mfu"] == pytest.approx(want_tflops / (2307 / 2))
    assert doc["run"] == "tiny_cpu" and len(doc["steps"]) == 10


def test_metrics_text_on_a_log_worked_out_by_hand(tmp_path: Path) -> None:
    from tests.test_metrics import HAND

    log = tmp_path / "hand.log"
    log.write_text(HAND + "\n")
    r = wl("metrics", str(log), "--shape", "v5litepod-16")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    # 4 steady steps x 1,000 tokens (40 TFLOP) per device in 1.6 + 1.6 + 1.6 + 0.2 = 5.0 s
    assert "  step time      1.2500 s mean, 1.6000 s median, range 0.2000–1.6000 s" in out
    assert "  TFLOP/s        32.000 per device, 32.000 per chip (total / time)" in out
    assert "                 per step: median 25.000, range 25.000–200.000 per chip" in out
    assert "  tokens/s       800.0 per device, 800.0 per chip (total / time)" in out
    assert "                 per step: median 625.0, range 625.0–5,000.0 per chip" in out
    assert any(line.startswith("  MFU            16.24% of 197 TFLOP/s per device") for line in out)


def test_metrics_on_a_metrics_file_alone_and_with_a_pool() -> None:
    r = wl("metrics", str(DATA / "tiny_cpu_noprof.metrics.jsonl"), "--pool", "v5e-16", "-o", "json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["summary"]
    assert s["hardware"]["name"] == "v5litepod-16" and s["hardware"]["chips"] == 32  # the default spec's 2 slices
    assert s["tokens_per_chip"] == pytest.approx(s["tokens_per_device"])  # v5e: one device per chip
    assert s["steady_steps"] == list(range(2, 12))


def test_metrics_profiler_override() -> None:
    r = wl("metrics", LOG, "--profiler-steps", "0", "-o", "json")
    assert json.loads(r.stdout)["summary"]["steady_steps"] == list(range(2, 10))


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["metrics", "/nonexistent/run.log"], ["/nonexistent/run.log does not exist"]),
        (["metrics", LOG, "--shape", "v9-16"], ["--shape", "unknown TPU type 'v9-16'"]),
        (["metrics", LOG, "--pool", "nope"], ["--pool", "no TPU pool 'nope'", "v5e-16"]),
        (["metrics", LOG, "--shape", "v5litepod-16", "--pool", "v5e-16"], ["not both"]),
        (["metrics", "README.md"], ["no MaxText step metrics"]),
        (["metrics", LOG, "--metrics-file", LOG], ["metrics file line 1 is not JSON"]),
        (["report", LOG, "--out", "/tmp/x", "--upload", "--spec", "examples/tpu7x.yaml"], ["no bucket with purpose: artifacts"]),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(wl(*args), 2, *fragments)


def test_report_writes_files(tmp_path: Path) -> None:
    r = wl("report", LOG, "--metrics-file", MFILE, "--shape", "tpu7x-8", "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| TFLOP/s per chip |" in md and "## Per step" in md
    assert (tmp_path / "rep" / "metrics.png").read_bytes()[:4] == b"\x89PNG"


def test_report_upload_to_the_spec_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each upload is a new prefix, every object created only where none is (fake-gcs-server checks the precondition):
    a second report, or another run's under a reused name, never replaces the first."""
    from tests.support.gcs_emulator import running_precondition_server
    from workloads.observe import storage

    with running_precondition_server() as url:
        monkeypatch.setenv(storage.EMULATOR_ENV, url)
        client = storage.make_client(project="my-tpu-project")
        bucket = "my-tpu-project-tpu-dev-artifacts"  # buckets[purpose=artifacts] of examples/default.yaml
        client.create_bucket(bucket)
        r = wl("report", LOG, "--out", str(tmp_path / "rep"), "--upload")
        assert r.returncode == 0, r.stderr
        assert f"uploaded gs://{bucket}/reports/tiny_cpu/2" in r.stdout
        first = {b.name: b.generation for b in client.list_blobs(bucket)}
        assert sorted(n.rsplit("/", 1)[1] for n in first) == ["metrics.png", "report.md", "summary.json"]
        prefix = next(iter(first)).rsplit("/", 1)[0]
        import time

        time.sleep(1.1)  # the prefix is the upload's second
        again = wl("report", LOG, "--out", str(tmp_path / "rep2"), "--upload")
        assert again.returncode == 0, again.stderr
        now = {b.name: b.generation for b in client.list_blobs(bucket)}
        assert len(now) == 6 and all(now[n] == g for n, g in first.items())  # the first report is as it was
        with pytest.raises(storage.StorageError, match="already exists, and an upload never replaces an object"):
            storage.upload(tmp_path / "rep", bucket, prefix, client=client)
        assert {b.name: b.generation for b in client.list_blobs(bucket)} == now


# ------------------------------------------------------------ cluster paths


@pytest.fixture()
def dead_kubeconfig(tmp_path: Path) -> str:
    p = tmp_path / "kubeconfig"
    p.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dead",
                "clusters": [{"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
            }
        )
    )
    return str(p)


@pytest.mark.parametrize(
    "args",
    [
        ["status", "r1"],
        ["logs", "r1"],
        ["delete", "r1", "--yes"],
        ["preflight"],
        ["metrics", "some-run"],
    ],
)
def test_unreachable_cluster_is_one_line_exit_3(args: list[str], dead_kubeconfig: str) -> None:
    assert_one_line_error(wl(*args, "--kubeconfig", dead_kubeconfig), 3, "cannot reach the Kubernetes API server at https://127.0.0.1:1")


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(wl("status", "r1", "--kubeconfig", str(tmp_path / "none")), 3, "no kubeconfig at")


def test_unknown_context(dead_kubeconfig: str) -> None:
    assert_one_line_error(wl("status", "r1", "--kubeconfig", dead_kubeconfig, "--context", "prod"), 3, "context 'prod'")


def test_delete_asks_for_confirmation_without_a_terminal(dead_kubeconfig: str) -> None:
    assert_one_line_error(wl("delete", "r1", "--kubeconfig", dead_kubeconfig), 2, "--yes")


JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "r1", "namespace": "research", "uid": "u1"},
    "spec": {"suspend": False, "replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {"parallelism": 2}}}]},
    "status": {"restarts": 0},
}


def _pod(worker: int) -> dict:
    return {
        "metadata": {
            "name": f"r1-slice-0-{worker}-abc",
            "creationTimestamp": "2026-11-22T00:00:00Z",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "r1", "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(worker)},
        },
        "spec": {"nodeName": f"gke-v5e-16-0-{worker}"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _select(items: list[dict], query: dict) -> list[dict]:
    """Equality label selectors, as the API server applies them."""
    want = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
    return [i for i in items if all(i["metadata"]["labels"].get(k) == v for k, v in want.items())]


@pytest.fixture()
def api(tmp_path: Path):
    with serve() as server:
        server.json("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1", JOBSET)
        server.json("GET", "/apis/kueue.x-k8s.io", {"preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2"}})
        server.json(
            "GET",
            "/apis/kueue.x-k8s.io/v1beta2",
            {
                "resources": [
                    {"name": "workloads", "kind": "Workload", "namespaced": True},
                    {"name": "localqueues", "kind": "LocalQueue", "namespaced": True},
                    {"name": "clusterqueues", "kind": "ClusterQueue", "namespaced": False},
                    {"name": "resourceflavors", "kind": "ResourceFlavor", "namespaced": False},
                ]
            },
        )
        server.json(
            "GET",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads",
            {
                "items": [
                    {
                        "metadata": {"name": "jobset-r1-x", "labels": {"kueue.x-k8s.io/job-uid": "u1"}},
                        "spec": {"queueName": "research-queue"},
                        "status": {
                            "conditions": [{"type": "Admitted", "status": "True"}],
                            "admission": {"clusterQueue": "research", "podSetAssignments": [{"name": "slice", "flavors": {"google.com/tpu": "v5e-4x4"}}]},
                        },
                    }
                ]
            },
        )
        server.routes[("GET", "/api/v1/namespaces/research/pods")] = lambda q, b: (200, {"items": _select([_pod(0), _pod(1)], q)})
        yield server, str(server.kubeconfig(tmp_path))


def test_status_json_and_text_through_the_real_client(api) -> None:
    server, kc = api
    r = wl("status", "r1", "--kubeconfig", kc, "-o", "json")  # namespace: the default spec's team
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["phase"] == "Running" and d["workload"]["flavors"] == {"slice": "v5e-4x4"}
    assert [p["node"] for p in d["slices"][0]["pods"]] == ["gke-v5e-16-0-0", "gke-v5e-16-0-1"]
    t = wl("status", "r1", "--kubeconfig", kc)
    assert t.returncode == 0 and "research/r1: Running — 2/2 pods running" in t.stdout
    assert "  slice 0: 2 workers (2 Running), on 2 VMs, 0 restarts" in t.stdout.splitlines()
    assert "worker" not in t.stdout.replace("2 workers", "")  # nothing abnormal: no worker lines
    assert any(s["query"].get("labelSelector") == "kueue.x-k8s.io/job-uid=u1" for s in server.seen)


def test_status_summarizes_each_slice_and_lists_only_abnormal_workers(api) -> None:
    server, kc = api
    big = json.loads(json.dumps(JOBSET))
    big["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 32
    server.json("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1", big)
    pods = [_pod(w) for w in range(32)]  # a 32-VM slice, like one tpu7x 4x4x8 slice
    pods[7]["status"] = {
        "phase": "Failed",
        "conditions": [],
        "containerStatuses": [{"restartCount": 1, "state": {"terminated": {"reason": "Error", "exitCode": 1}}}],
    }
    server.routes[("GET", "/api/v1/namespaces/research/pods")] = lambda q, b: (200, {"items": _select(pods, q)})
    t = wl("status", "r1", "--kubeconfig", kc)
    assert t.returncode == 0, t.stderr
    lines = t.stdout.splitlines()
    assert lines[0] == "research/r1: Starting — 31/32 pods running; r1-slice-0-7-abc: Error (exit 1)"
    assert "  slice 0: 32 workers (31 Running, 1 Failed), on 32 VMs, 1 restart" in lines
    workers = [line for line in lines if line.lstrip().startswith("worker ")]
    assert len(workers) == 1 and workers[0].split()[:3] == ["worker", "7", "Failed"] and "Error (exit 1)" in workers[0]
    assert len(lines) <= 5  # header, workload, slice, the one abnormal worker: not 32 lines
    every = wl("status", "r1", "--workers", "--kubeconfig", kc)
    assert every.returncode == 0, every.stderr
    assert sum(line.lstrip().startswith("worker ") for line in every.stdout.splitlines()) == 32


def test_status_of_a_missing_run_exits_1(api) -> None:
    _, kc = api
    r = wl("status", "nope", "--kubeconfig", kc)
    assert r.returncode == 1 and "NotFound" in r.stdout


def test_logs_of_a_simulated_pod_say_not_available(api) -> None:
    _, kc = api  # no /log route: like a kwok node without a kubelet
    assert_one_line_error(wl("logs", "r1", "--kubeconfig", kc), 3, "logs of pod research/r1-slice-0-0-abc are not available")


def test_logs_and_metrics_of_a_run_from_the_cluster(api) -> None:
    server, kc = api
    text = Path(LOG).read_bytes()
    server.routes[("GET", "/api/v1/namespaces/research/pods/r1-slice-0-1-abc/log")] = lambda q, b: (200, text)
    r = wl("logs", "r1", "--worker", "1", "--kubeconfig", kc)
    assert r.returncode == 0 and r.stdout.count("completed step:") == 10
    server.routes[("GET", "/api/v1/namespaces/research/pods/r1-slice-0-0-abc/log")] = lambda q, b: (200, text)
    m = wl("metrics", "r1", "--kubeconfig", kc, "--pool", "v5e-16", "-o", "json")
    assert m.returncode == 0, m.stderr
    doc = json.loads(m.stdout)
    assert doc["source"] == "research/r1-slice-0-0-abc" and doc["summary"]["steady_steps"] == [2, 3, 4, 9]


def test_delete_normal_and_already_gone(api) -> None:
    server, kc = api
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1"
    # A JobSet the toolkit did not submit (no labels of its own): one line, exit 2, nothing deleted (toolkit/ledger.py).
    theirs = wl("delete", "r1", "--yes", "--kubeconfig", kc)
    assert theirs.returncode == 2 and theirs.stderr.count("\n") == 1 and "not submitted by this toolkit" in theirs.stderr, theirs.stderr
    assert not any(s["method"] == "DELETE" for s in server.seen)
    labels = {"app.kubernetes.io/managed-by": "tpu-gke-toolkit", "tpu-gke-toolkit/run": "r1"}
    server.json("GET", path, {**JOBSET, "metadata": {**JOBSET["metadata"], "labels": {**(JOBSET["metadata"].get("labels") or {}), **labels}}})
    server.json("DELETE", path, {"kind": "Status", "status": "Success"})
    r = wl("delete", "r1", "--yes", "--kubeconfig", kc)
    assert r.returncode == 0 and "deleted JobSet research/r1" in r.stdout
    d = next(s for s in server.seen if s["method"] == "DELETE")
    assert d["query"]["propagationPolicy"] == "Foreground"
    gone = wl("delete", "gone", "--yes", "--kubeconfig", kc, "-o", "json")
    assert gone.returncode == 0 and json.loads(gone.stdout)["deleted"] is False
    dry = wl("delete", "r1", "--dry-run", "--kubeconfig", kc)
    assert dry.returncode == 0 and "would delete" in dry.stdout
    assert server.seen[-1]["query"].get("dryRun") == "All"


def test_preflight_on_an_empty_cluster_fails_with_fixes(api) -> None:
    server, kc = api
    server.json("GET", "/api/v1/nodes", {"items": []})
    r = wl("preflight", "--kubeconfig", kc, "-o", "json")
    assert r.returncode == 1
    rep = json.loads(r.stdout)
    assert rep["ok"] is False and rep["pool"] == "v5e-16"
    rows = {c["name"]: c for c in rep["checks"]}
    assert rows["resource-flavor"]["result"] == "fail" and "queues apply" in rows["resource-flavor"]["fix"]
    assert rows["nodes"]["result"] == "fail"


def test_importing_the_cli_stays_light() -> None:
    # --help must not pay for the kubernetes client, matplotlib or google-cloud-storage.
    import subprocess
    import sys

    code = (
        "import sys; from workloads import cli; cli._register(); "
        "print([m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'matplotlib', 'urllib3') or m.startswith('google.cloud')])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


# ------------------------------------------------------------ one read of --spec per command


@pytest.fixture()
def spec_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each YAML file is read by the spec and fleet loader (infra.spec.load, which infra.fleet reads through), by file name."""
    import infra.spec.load

    reads: dict[str, int] = {}
    real = infra.spec.load.read_capped

    def counted(path, *a, **kw):
        reads[Path(path).name] = reads.get(Path(path).name, 0) + 1
        return real(path, *a, **kw)

    monkeypatch.setattr(infra.spec.load, "read_capped", counted)
    return reads


@pytest.mark.parametrize(
    "args",
    [
        ["status", "r1"],  # the team's namespace, and whether the file is a fleet's
        ["delete", "r1", "--yes", "--dry-run"],
        ["metrics", "r1", "--pool", "v5e-16"],  # the namespace, the pool, the run's Cloud Logging scope
        ["preflight"],
    ],
)
def test_each_command_reads_the_spec_once(api, spec_reads: dict[str, int], args: list[str]) -> None:
    server, kc = api
    server.json("GET", "/api/v1/nodes", {"items": []})
    server.json("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1", {"kind": "Status", "status": "Success"})
    server.routes[("GET", "/api/v1/namespaces/research/pods/r1-slice-0-0-abc/log")] = lambda q, b: (200, Path(LOG).read_bytes())
    wl(*args, "--kubeconfig", kc, "--spec", "examples/default.yaml")
    assert spec_reads == {"default.yaml": 1}


def test_report_reads_the_spec_once_for_its_pool_and_its_cost(tmp_path: Path, spec_reads: dict[str, int]) -> None:
    r = wl("report", LOG, "--metrics-file", MFILE, "--pool", "v5e-16", "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    assert "cost:" in r.stdout and spec_reads == {"default.yaml": 1}


def test_a_fleet_file_is_read_once_with_each_workers_spec(spec_reads: dict[str, int], dead_kubeconfig: str) -> None:
    r = wl("preflight", "--spec", "examples/fleet/fleet.yaml", "--kubeconfig", dead_kubeconfig)
    assert r.returncode == 3  # planned against the manager's spec, then the cluster is unreachable
    assert spec_reads["fleet.yaml"] == 1 and all(n == 1 for n in spec_reads.values()), spec_reads


def test_a_command_that_does_not_need_the_spec_never_reads_it(api, tmp_path: Path, spec_reads: dict[str, int]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("project: [\n")
    _, kc = api
    assert wl("metrics", LOG, "--spec", str(broken)).returncode == 0  # a log file, no --pool: no spec
    assert spec_reads == {}
    r = wl("status", "r1", "-n", "research", "--spec", str(broken), "--kubeconfig", kc)  # the namespace given
    assert r.returncode == 0 and "research/r1: Running" in r.stdout, r.stderr
    assert_one_line_error(wl("status", "r1", "--spec", str(broken), "--kubeconfig", kc), 2, "broken.yaml")  # the team's namespace needs it


def test_a_spec_the_command_does_not_need_is_not_refused_but_a_broken_fleet_is(api, tmp_path: Path) -> None:
    _, kc = api
    spec = tmp_path / "spec.yaml"
    spec.write_text("project: my-tpu-project\n")  # YAML, but no environment spec (no region, cluster...)
    r = wl("status", "r1", "-n", "research", "--spec", str(spec), "--kubeconfig", kc)
    assert r.returncode == 0 and "research/r1: Running" in r.stdout, r.stderr
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: f\nmanager: {cluster: m}\nworkers: []\n")  # a fleet's document, refused as a fleet
    assert_one_line_error(wl("status", "r1", "-n", "research", "--spec", str(fleet), "--kubeconfig", kc), 2, "workers")
