"""KubeRay on the local cluster: the real operator, its CRDs, and a real Ray head standing in for head pods.

``local up --with ray`` (or a spec with ``cluster.ray.enabled``) adds, on top of the usual
control plane:

- the KubeRay operator v1.6.0 (``ray-operator``, built by scripts/build-kuberay.sh from
  the Go module proxy) as a loopback process, with the CRDs from the same module. The
  CRDs are installed *before* Kueue starts and Kueue's Configuration lists
  ``ray.io/rayjob`` and ``ray.io/raycluster``: Kueue only sets up an integration whose
  CRDs exist when it starts.
- ``ray-head``: a real Ray head (the Ray venv, scripts/setup-ray.sh) on loopback. KubeRay
  follows a RayJob through the dashboard of its head pod
  (``http://<head-svc>.<ns>.svc.cluster.local:8265/api/jobs/<id>``); a kwok head pod
  serves nothing. The operator runs with ``HTTP_PROXY`` pointing at ``ray-standin``,
  which forwards exactly those head-service URLs to this real dashboard, so KubeRay's
  unmodified dashboard client talks to Ray's real job manager.
- ``ray-standin``: that forward proxy, plus the part of the submitter pod. In KubeRay's
  default ``K8sJobMode`` the operator creates a submitter Job whose pod runs ``ray job
  submit`` and exits when the Ray job ends. Here the pod is a kwok pod: once it is
  Running, the stand-in submits, under the RayJob's own ``status.jobId``, a rehearsal
  entrypoint (it prints the RayJob's entrypoint and lasts ``addons.RAY_JOB_SECONDS_ANNOTATION``
  seconds, default ``DEFAULT_JOB_SECONDS``) to the real head; when Ray reports the job
  finished, the stand-in ends the submitter pod the way ``ray job submit`` would exit
  (kwok's ``tgk-ray-submitter-complete`` stage, or the fail stage for a failed job).

What this leaves unrehearsed: the entrypoint itself (JaxTrainer/MaxText on TPU VMs —
tests/maxtext/test_ray_trainer.py runs it on CPU), Ray worker processes joining from
the worker pods, the head pod's own ``ray start``, and the network path from the
operator to a pod IP.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import shlex
import socketserver
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import tools
from toolkit.errors import ClusterError, ToolkitError
from toolkit.names import RAY_API, RAY_SUBMITTER_CONTAINER
from toolkit.owned import write_atomic
from toolkit.paths import REPO_ROOT, script
from workloads.local import LocalClusterError, addons, builds, state
from workloads.local.procs import free_port, http_ok

if TYPE_CHECKING:
    from workloads.local.daemons import Daemons

KUBERAY_VERSION = "v1.6.0"  # keep in step with scripts/build-kuberay.sh
BUILD_SCRIPT = script("build-kuberay.sh")
BUILD_STAMP = ".complete-1"  # keep in step with scripts/build-kuberay.sh
BUILD = builds.Build("KubeRay", f"KubeRay {KUBERAY_VERSION}", BUILD_SCRIPT, BUILD_STAMP, cold="~3 min")
RAY_SETUP_SCRIPT = script("setup-ray.sh")
CRDS = "manifests/kuberay-crds.yaml"  # under the build root
KUEUE_FRAMEWORKS = ["ray.io/rayjob", "ray.io/raycluster"]
# Stop order (first stopped first): the stand-in, then the operator, then the head.
DAEMONS = ("ray-standin", "kuberay", "ray-head")
DEFAULT_JOB_SECONDS = 2.0  # a RayJob applied without `submit` (no annotation)
# KubeRay builds the dashboard URL from the head Service and this cluster domain.
CLUSTER_DOMAIN = "cluster.local"
_TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}

Progress = Callable[[str], None]


# ------------------------------------------------------------------ build


def ensure_built(progress: Progress, *, build: bool = True) -> Path:
    """The KubeRay build root (bin/ray-operator, the CRDs), building it if allowed."""
    return BUILD.ensure(progress, build=build)


def ray_venv(progress: Progress) -> Path:
    """The Ray venv (scripts/setup-ray.sh; builds the MaxText venv under it the first time)."""
    progress("locating the Ray venv (scripts/setup-ray.sh; cold: MaxText venv ~8 min + Ray ~2 min)")
    return tools.script_path(RAY_SETUP_SCRIPT, what="cannot set up the Ray venv", error=LocalClusterError, stderr_to_terminal=True, holds="bin/python")


# ------------------------------------------------------------------ pure pieces


def wanted(spec: Any, asked: bool) -> bool:
    """KubeRay runs when asked for (``--with ray``) or when the spec turns GKE's Ray add-on on (``cluster.ray.enabled``)."""
    return asked or bool(spec.cluster.ray.enabled)


def crd_objects(root: Path) -> list[dict[str, Any]]:
    return [d for d in addons.load_docs(root / CRDS) if d.get("kind") == "CustomResourceDefinition"]


def with_frameworks(kueue_config: dict[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration with the RayJob and RayCluster integrations on."""
    frameworks = kueue_config.setdefault("integrations", {}).setdefault("frameworks", [])
    frameworks.extend(f for f in KUEUE_FRAMEWORKS if f not in frameworks)
    return kueue_config


def kwok_stages(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kwok's stages with KubeRay's submitter pods left running until the stand-in ends them.

    kwok's pod-complete stage completes every running pod a Job owns at once; a
    submitter pod instead lives as long as its Ray job (``ray job submit`` follows it).
    """
    not_submitter = addons._key(".spec.containers[0].name", "NotIn", RAY_SUBMITTER_CONTAINER)
    out = []
    for st in stages:
        if st.get("metadata", {}).get("name") == "pod-complete":
            st = {**st, "spec": {**st["spec"], "selector": {"matchExpressions": [*st["spec"]["selector"]["matchExpressions"], not_submitter]}}}
        out.append(st)
    out.append(
        addons._pod_stage(
            "tgk-ray-submitter-complete",
            [
                addons._key(".spec.containers[0].name", "In", RAY_SUBMITTER_CONTAINER),
                addons._key(f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]', "Exists"),
                addons._key(f'.metadata.labels["{addons.FAIL_LABEL}"]', "DoesNotExist"),
                addons._NOT_DELETED,
                addons._RUNNING,
                addons._NOT_DISRUPTED,
            ],
            addons._terminated_status("0", "Completed", "Succeeded"),
            delay_from=f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]',
        )
    )
    return out


def operator_argv(root: Path, probe_port: int) -> list[str]:
    return [
        str(root / "bin" / "ray-operator"),
        "--metrics-addr=0",  # nothing scrapes it here
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]


def operator_env(kubeconfig: Path, proxy_port: int) -> dict[str, str]:
    # Go's default transport reads HTTP_PROXY for http:// URLs (the dashboard client's
    # plain http.Client); the apiserver (https, loopback) never goes through it.
    return {
        "KUBECONFIG": str(kubeconfig),
        "HTTP_PROXY": f"http://127.0.0.1:{proxy_port}",
        "NO_PROXY": "127.0.0.1,localhost",
        "CLUSTER_DOMAIN": CLUSTER_DOMAIN,
    }


def is_head_service_host(host: str) -> bool:
    """``<svc>.<ns>.svc.<cluster domain>``: what KubeRay dials for a head's dashboard."""
    parts = host.split(".")
    return len(parts) >= 4 and ".".join(parts[2:]) == f"svc.{CLUSTER_DOMAIN}" and all(parts[:2])


def rehearsal_entrypoint(python: str, entrypoint: str, seconds: float) -> str:
    """What the stand-in head runs for a RayJob: a line naming the real entrypoint, then the planned time."""
    code = "import sys,time; print('rehearsal of the RayJob entrypoint:', sys.argv[1], flush=True); time.sleep(float(sys.argv[2]))"
    return " ".join(shlex.quote(x) for x in (python, "-c", code, entrypoint, f"{seconds:g}"))


def job_seconds(rayjob: dict[str, Any]) -> float:
    raw = ((rayjob.get("metadata") or {}).get("annotations") or {}).get(addons.RAY_JOB_SECONDS_ANNOTATION)
    try:
        return max(0.0, float(raw)) if raw is not None else DEFAULT_JOB_SECONDS
    except ValueError:
        return DEFAULT_JOB_SECONDS


@dataclass(frozen=True)
class RayBoot:
    """What a start with Ray needs, found (or built) before anything starts."""

    root: Path  # the KubeRay build
    venv: Path  # the Ray venv


def prepare(progress: Progress, *, build: bool = True) -> RayBoot:
    return RayBoot(ensure_built(progress, build=build), ray_venv(progress))


def ready_port(ready_file: Path) -> int:
    """The port a daemon of ours bound itself and wrote into its ready file (JSON ``{"port": N}``)."""
    try:
        return int(json.loads(ready_file.read_text())["port"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LocalClusterError(f"{ready_file} does not name the port its daemon bound: {e}") from None


def start_daemons(daemons: Daemons, ray: RayBoot, timeout: float) -> None:
    """The stand-in head, the stand-in (proxy + submitter), then the operator; each ready before the next.

    ``daemons`` are those of the local cluster being started (its state dir, waits and progress). The head's
    dashboard and the stand-in's proxy bind ports of their own choosing and name them in their
    ready files, so no port is picked here and released before its daemon binds it; only the
    operator's health port is a flag (``free_port``; a start that finds it taken is retried).
    """
    run = daemons.state_dir / "ray"
    run.mkdir(parents=True, exist_ok=True)
    head_ready, standin_ready = run / "head.ready", run / "standin.ready"
    head_ready.unlink(missing_ok=True)
    standin_ready.unlink(missing_ok=True)
    python = str(ray.venv / "bin" / "python")
    daemons.progress("starting the stand-in Ray head (a real Ray on loopback, for the head pods' dashboard)")
    daemons.daemon("ray-head").start(
        [python, "-m", "workloads.ray.standin_head", "--ready-file", str(head_ready)],
        env={"PYTHONPATH": str(REPO_ROOT), "RAY_USAGE_STATS_ENABLED": "0"},
        cwd=REPO_ROOT,
    )
    daemons.wait("the stand-in Ray head's dashboard", head_ready.is_file, timeout)
    dashboard = ready_port(head_ready)
    daemons.daemon("ray-standin").start(
        [
            sys.executable,
            "-m",
            "workloads.local.kuberay",
            "--state-dir",
            str(daemons.state_dir),
            "--dashboard-port",
            str(dashboard),
            "--ray-python",
            python,
            "--ready-file",
            str(standin_ready),
        ],
        env={"PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    daemons.wait("the Ray stand-in (dashboard proxy)", standin_ready.is_file, timeout)
    proxy, probe = ready_port(standin_ready), free_port()
    daemons.progress(f"starting KubeRay {KUBERAY_VERSION}")
    daemons.daemon("kuberay").start(operator_argv(ray.root, probe), env=operator_env(state.kubeconfig(daemons.state_dir), proxy))
    daemons.wait("KubeRay readiness", lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"), timeout)
    st = json.loads(state.state_file(daemons.state_dir).read_text())
    st["ray"] = {"kuberay": KUBERAY_VERSION, "venv": str(ray.venv), "ports": {"probe": probe, "dashboard": dashboard, "proxy": proxy}}
    write_atomic(state.state_file(daemons.state_dir), json.dumps(st, indent=2))


# ------------------------------------------------------------------ the stand-in daemon


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A forward HTTP proxy that only knows one destination: the stand-in head's dashboard."""

    dashboard_port = 0
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if not url.hostname or not is_head_service_host(url.hostname):
            self._reply(403, b"the local Ray stand-in forwards only RayCluster head services\n")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        path = url.path + (f"?{url.query}" if url.query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-connection", "connection", "keep-alive")}
        conn = http.client.HTTPConnection("127.0.0.1", self.dashboard_port, timeout=30)
        try:
            conn.request(self.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self._reply(502, f"the stand-in Ray head did not answer: {e}\n".encode())
            return
        finally:
            conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    def log_message(self, fmt: str, *args: Any) -> None:
        _say(f"proxy: {self.command} {self.path} -> {fmt % args}")


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _say(msg: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stdout.flush()


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StandIn:
    """One pass (``tick``) plays the submitter of every running RayJob against the real head."""

    def __init__(self, kube, dashboard: str, ray_python: str) -> None:
        self.kube = kube
        self.dashboard = dashboard
        self.ray_python = ray_python
        self.finished: set[str] = set()  # submitter pods already ended

    def _jobs_api(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        u = urllib.parse.urlsplit(self.dashboard)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw or b"null")
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def tick(self) -> None:
        rayjobs = self.kube.list(self.kube.resource(RAY_API, "RayJob"))
        pod_info = self.kube.resource("v1", "Pod")
        for rj in rayjobs:
            meta, spec, status = rj["metadata"], rj.get("spec") or {}, rj.get("status") or {}
            if (spec.get("submissionMode") or "K8sJobMode") != "K8sJobMode":
                continue  # HTTPMode: the operator submits itself (to the same head, through the proxy)
            job_id = status.get("jobId")
            if status.get("jobDeploymentStatus") != "Running" or not job_id:
                continue
            ns, name = meta["namespace"], meta["name"]
            pods = [
                p
                for p in self.kube.list(pod_info, ns, label_selector=f"batch.kubernetes.io/job-name={name}")
                if (p["spec"].get("containers") or [{}])[0].get("name") == RAY_SUBMITTER_CONTAINER
            ]
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
            if not running:
                continue
            code, info = self._jobs_api("GET", f"/api/jobs/{job_id}")
            if code == 404:
                entry = rehearsal_entrypoint(self.ray_python, spec.get("entrypoint") or "", job_seconds(rj))
                code, reply = self._jobs_api("POST", "/api/jobs/", {"entrypoint": entry, "submission_id": job_id, "metadata": {"rayjob": f"{ns}/{name}"}})
                _say(f"submitted {job_id} for RayJob {ns}/{name} to the stand-in head: {code} {reply}")
                continue
            if code != 200 or not isinstance(info, dict):
                _say(f"GET /api/jobs/{job_id}: {code} {info}")
                continue
            if info.get("status") in _TERMINAL:
                for p in running:
                    self._end_submitter(p, ok=info["status"] == "SUCCEEDED")

    def _end_submitter(self, pod: dict[str, Any], *, ok: bool) -> None:
        from workloads.local.disrupt import patch

        meta = pod["metadata"]
        key = meta["uid"]
        if key in self.finished:
            return
        meta_patch: dict[str, Any] = {"annotations": {addons.FINISH_AT_ANNOTATION: _now_rfc3339()}}
        if not ok:
            meta_patch = {"labels": {addons.FAIL_LABEL: "true"}, "annotations": {addons.FAIL_EXIT_CODE_ANNOTATION: "1"}}
        patch(self.kube, self.kube.resource("v1", "Pod").path(meta["namespace"], meta["name"]), {"metadata": meta_patch})
        self.finished.add(key)
        _say(f"ended submitter pod {meta['namespace']}/{meta['name']} ({'succeeded' if ok else 'failed'})")


def serve(state_dir: Path, dashboard_port: int, ray_python: str, ready_file: Path, proxy_port: int = 0) -> int:
    """Serve until killed; ``proxy_port`` 0 (the default) binds a port the kernel picks, named in ``ready_file``."""
    _Proxy.dashboard_port = dashboard_port
    server = _ThreadingServer(("127.0.0.1", proxy_port), _Proxy)
    proxy_port = server.server_address[1]
    threading.Thread(target=server.serve_forever, name="proxy", daemon=True).start()
    kube = state.client(state_dir)
    standin = StandIn(kube, f"http://127.0.0.1:{dashboard_port}", ray_python)
    write_atomic(ready_file, json.dumps({"port": proxy_port}) + "\n")  # whole or absent: the parent reads it as soon as it exists
    _say(f"forwarding head-service dashboards to 127.0.0.1:{dashboard_port} (proxy on 127.0.0.1:{proxy_port})")
    while True:
        try:
            standin.tick()
        except (ClusterError, ToolkitError, OSError) as e:
            _say(f"pass failed, retrying: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.local.kuberay")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--dashboard-port", type=int, required=True)
    p.add_argument("--proxy-port", type=int, default=0, help="default 0: a port the kernel picks, written to the ready file")
    p.add_argument("--ray-python", required=True)
    p.add_argument("--ready-file", type=Path, required=True)
    a = p.parse_args(argv)
    return serve(a.state_dir, a.dashboard_port, a.ray_python, a.ready_file, a.proxy_port)


if __name__ == "__main__":
    sys.exit(main())
