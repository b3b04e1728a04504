"""KubeRay on the local cluster and the JaxTrainer entrypoint: the parts that need neither a cluster nor Ray.

The real operator, Kueue and Ray head are exercised in tests/integration/test_ray_runtime.py;
the entrypoint's real Ray/JAX/MaxText run in tests/maxtext/test_ray_trainer.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.support import REPO, cli, run_module
from toolkit import names
from workloads.local import addons, kuberay
from workloads.ray import RAY_ACCELERATOR_TYPES, ray_accelerator_type


def _published_stages() -> list[dict]:
    pod_complete = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-complete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [{"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}]},
            "next": {"statusTemplate": "phase: Succeeded\n"},
        },
    }
    pod_ready = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-ready"},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "selector": {"matchExpressions": []}, "next": {}},
    }
    return [pod_complete, pod_ready]


def test_kwok_stages_keep_submitter_pods_running_until_the_standin_ends_them():
    published = _published_stages()
    before = json.dumps(published, sort_keys=True)
    out = kuberay.kwok_stages(published)
    assert json.dumps(published, sort_keys=True) == before  # the input is not modified
    by_name = {s["metadata"]["name"]: s for s in out}
    complete = by_name["pod-complete"]["spec"]["selector"]["matchExpressions"]
    assert {"key": ".spec.containers[0].name", "operator": "NotIn", "values": [names.RAY_SUBMITTER_CONTAINER]} in complete
    assert by_name["pod-ready"] == published[1]
    own = by_name["tgk-ray-submitter-complete"]["spec"]
    keys = {(m["key"], m["operator"]) for m in own["selector"]["matchExpressions"]}
    assert (".spec.containers[0].name", "In") in keys
    assert (f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]', "Exists") in keys
    assert (f'.metadata.labels["{addons.FAIL_LABEL}"]', "DoesNotExist") in keys  # a failed Ray job goes through the fail stage
    assert own["delay"]["durationFrom"]["expressionFrom"] == f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]'
    assert "phase: Succeeded" in own["next"]["statusTemplate"]


def test_kueue_config_gets_the_ray_integrations_once():
    cfg = addons.kueue_config(webhook_port=1, health_port=2, cert_dir=Path("/x"))
    base = list(cfg["integrations"]["frameworks"])
    out = kuberay.with_frameworks(kuberay.with_frameworks(cfg))
    fw = out["integrations"]["frameworks"]
    assert fw[: len(base)] == base
    assert fw[len(base) :] == ["ray.io/rayjob", "ray.io/raycluster"]


@pytest.mark.parametrize(
    "host, ok",
    [
        ("llama-abc-head-svc.team-a.svc.cluster.local", True),
        ("x.y.svc.cluster.local", True),
        ("svc.cluster.local", False),
        ("x.svc.cluster.local", False),
        ("x.y.svc.cluster.local.example.com", False),
        ("127.0.0.1", False),
        ("example.com", False),
    ],
)
def test_only_head_service_hosts_are_forwarded(host, ok):
    assert kuberay.is_head_service_host(host) is ok


def test_rehearsal_entrypoint_prints_the_real_one_verbatim():
    real = """python3 -m workloads.ray.jax_trainer --num-workers 4 -- cfg.yml run_name='a b' x="$(id)" `uname`"""
    cmd = kuberay.rehearsal_entrypoint(sys.executable, real, 0)
    done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"rehearsal of the RayJob entrypoint: {real}\n"


def test_job_seconds_from_the_annotation():
    ann = addons.RAY_JOB_SECONDS_ANNOTATION
    assert kuberay.job_seconds({"metadata": {}}) == kuberay.DEFAULT_JOB_SECONDS
    assert kuberay.job_seconds({"metadata": {"annotations": {ann: "7.5"}}}) == 7.5
    assert kuberay.job_seconds({"metadata": {"annotations": {ann: "-3"}}}) == 0.0
    assert kuberay.job_seconds({"metadata": {"annotations": {ann: "soon"}}}) == kuberay.DEFAULT_JOB_SECONDS


def test_operator_env_routes_only_plain_http_through_the_standin(tmp_path):
    env = kuberay.operator_env(tmp_path / "kubeconfig", 4321)
    assert env["HTTP_PROXY"] == "http://127.0.0.1:4321"
    assert "HTTPS_PROXY" not in env  # the apiserver (https) is reached directly
    assert "127.0.0.1" in env["NO_PROXY"].split(",")
    argv = kuberay.operator_argv(tmp_path, 999)
    assert argv[0] == str(tmp_path / "bin" / "ray-operator")
    assert "--health-probe-bind-address=127.0.0.1:999" in argv and "--enable-leader-election=false" in argv


def test_wanted_follows_the_flag_and_the_spec_addon():
    from infra.spec import DEFAULT_SPEC_PATH, load_spec

    spec = load_spec(DEFAULT_SPEC_PATH)
    assert spec.cluster.ray.enabled is False
    assert not kuberay.wanted(spec, False) and kuberay.wanted(spec, True)
    on = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"ray": spec.cluster.ray.model_copy(update={"enabled": True})})})
    assert kuberay.wanted(on, False)


class _Backend(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes, str | None]] = []

    def _any(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        _Backend.seen.append((self.command, self.path, body, self.headers.get("Host")))
        data = json.dumps({"path": self.path}).encode()
        self.send_response(404 if self.path.endswith("/missing") else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _any

    def log_message(self, *a) -> None:
        pass


def test_proxy_forwards_head_service_urls_to_the_standin_dashboard(monkeypatch):
    backend = HTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    monkeypatch.setattr(kuberay._Proxy, "dashboard_port", backend.server_address[1])
    monkeypatch.setattr(kuberay._Proxy, "log_message", lambda *a: None)
    proxy = kuberay._ThreadingServer(("127.0.0.1", 0), kuberay._Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy.server_address[1]}"}))
    _Backend.seen.clear()
    try:
        with opener.open("http://rj-head-svc.team-a.svc.cluster.local:8265/api/jobs/raysubmit_1?x=1", timeout=60) as r:
            assert json.loads(r.read()) == {"path": "/api/jobs/raysubmit_1?x=1"}
        req = urllib.request.Request("http://rj-head-svc.team-a.svc.cluster.local:8265/api/jobs/", data=b'{"entrypoint": "echo"}', method="POST")
        with opener.open(req, timeout=60) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open("http://rj-head-svc.team-a.svc.cluster.local:8265/api/jobs/missing", timeout=60)
        assert e.value.code == 404  # the head's own answer comes back unchanged
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open("http://example.com/api/jobs/", timeout=60)
        assert e.value.code == 403
    finally:
        proxy.shutdown()
        backend.shutdown()
    assert [(m, p, b) for m, p, b, _ in _Backend.seen] == [
        ("GET", "/api/jobs/raysubmit_1?x=1", b""),
        ("POST", "/api/jobs/", b'{"entrypoint": "echo"}'),
        ("GET", "/api/jobs/missing", b""),
    ]


def test_ray_accelerator_types_cover_every_catalog_generation():
    from infra import catalog

    names = {g.name for g in catalog.GENERATIONS.values()} if hasattr(catalog, "GENERATIONS") else set(RAY_ACCELERATOR_TYPES)
    assert names <= set(RAY_ACCELERATOR_TYPES)
    assert ray_accelerator_type("v6e") == "TPU-V6E" and ray_accelerator_type("v5e") == "TPU-V5LITEPOD"
    with pytest.raises(ValueError, match="no Ray accelerator type"):
        ray_accelerator_type("v9z")


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--num-workers", "4", "--topology", "4x4", "--accelerator-type", "TPU-V6E"], "no MaxText command line"),
        (["--num-workers", "0", "--cpu", "--", "cfg.yml"], "--num-workers 0"),
        (["--num-workers", "four", "--cpu", "--", "cfg.yml"], "--num-workers"),
        (["--num-workers", "4", "--accelerator-type", "TPU-V6E", "--", "cfg.yml"], "--topology (missing)"),
        (["--num-workers", "4", "--topology", "4x4", "--accelerator-type", "v6e", "--", "cfg.yml"], "--accelerator-type v6e"),
        (["--num-workers", "1", "--cpu", "--topology", "4x4", "--", "cfg.yml"], "--topology is a TPU setting"),
        (["--num-workers", "1", "--cpu", "--env", "1BAD=x", "--", "cfg.yml"], "--env '1BAD=x'"),
        (["--num-workers", "1", "--cpu", "--", "steps=5"], "must start with its config file"),
        (["--num-workers", "1", "--cpu", "--bogus", "--", "cfg.yml"], "--bogus"),
    ],
)
def test_entrypoint_bad_flags_one_line_exit_2_before_ray(args, flag):
    # The toolkit's venv has no Ray: a check that passed would fail on `import ray` instead.
    done = run_module("workloads.ray.jax_trainer", *args, cwd=REPO, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], done.stderr
    assert done.stdout == ""


def test_entrypoint_scaling_config_is_one_worker_per_vm_spread():
    from workloads.ray import jax_trainer as jt

    tpu = jt.parse_args(
        ["--num-workers", "8", "--topology", "4x4", "--accelerator-type", "TPU-V6E", "--chips-per-worker", "4", "--env", "A=b=c", "--", "cfg.yml", "steps=3"]
    )
    assert jt.scaling_kwargs(tpu) == {
        "num_workers": 8,
        "use_tpu": True,
        "topology": "4x4",
        "accelerator_type": "TPU-V6E",
        "placement_strategy": "SPREAD",
        "resources_per_worker": {"TPU": 4},
    }
    assert jt.worker_env(tpu) == {"A": "b=c"}
    assert tpu.maxtext_args == ["cfg.yml", "steps=3"]
    cpu = jt.parse_args(["--num-workers", "2", "--cpu", "--env", "JAX_PLATFORMS=tpu,cpu", "--", "cfg.yml"])
    assert jt.scaling_kwargs(cpu) == {"num_workers": 2, "use_tpu": False, "resources_per_worker": {"CPU": 1}}
    assert jt.worker_env(cpu)["JAX_PLATFORMS"] == "cpu"


def test_local_up_with_an_unknown_addon_is_one_line_exit_2(tmp_path):
    state = tmp_path / "state"
    done = cli("workloads", "local", "up", "--with", "spark", "--state-dir", str(state), "--no-build")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: --with spark: unknown add-on — the local cluster offers only --with ray"]
    assert not state.exists()


@pytest.mark.parametrize("module", ["jax_trainer.py", "standin_head.py", "__init__.py", "entrypoint.py"])
def test_ray_side_modules_import_only_stdlib_and_ray(module):
    """They run in the run's image and the Ray venv, where of the toolkit only workloads/ray is shipped."""
    import ast

    tree = ast.parse((REPO / "workloads" / "ray" / module).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module != "workloads.ray":  # its own package, shipped with it (and checked here too)
                roots.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"ray", "__future__"}
    assert roots <= allowed, roots - allowed
