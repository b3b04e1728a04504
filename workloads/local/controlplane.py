"""Bring the local cluster up, report on it, take it down.

Start order and what "ready" means for each step (every wait polls a real
signal with a generous deadline; none is a fixed sleep):

  etcd                     GET /health is {"health":"true"}
  kube-apiserver           GET /readyz is "ok" (admin client cert)
  controller-manager,      GET /healthz on their secure ports is "ok"
  scheduler
  kwok                     GET /healthz; then every Node from the spec is Ready
  JobSet, Kueue            GET /readyz; then a server-side dry-run create of a
                           JobSet and of a Kueue LocalQueue goes through their
                           mutating/validating webhooks (and Kueue's conversion
                           webhook), i.e. the apiserver really reaches them
  queues                   the spec's Kueue objects are applied (workloads.render.kueue)

State lives in one directory (default ``$TGK_CACHE/local-cluster/state``):
``pki/``, ``etcd/`` (wiped by ``down``), ``logs/<daemon>.log``,
``run/<daemon>.pid``, ``kubeconfig`` and ``cluster.json`` (ports, bin dir, spec).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from infra.spec import REPO_ROOT, EnvSpec
from workloads.local import LocalClusterError, addons, certs, nodes
from workloads.local.kapi import ApiError, Kube
from workloads.local.procs import Daemon, free_port, port_open

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-local-cluster.sh"
BUILD_STAMP = ".complete-2"  # keep in step with scripts/build-local-cluster.sh
FIELD_MANAGER = "tgk-local"
CONTEXT = "tgk-local"
# Stop order; start order is the reverse, with the controllers last.
DAEMONS = ("kueue", "jobset", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")

Progress = Callable[[str], None]


def default_state_dir() -> Path:
    cache = Path(os.environ.get("TGK_CACHE") or Path.home() / ".cache" / "tpu-gke-toolkit")
    return cache / "local-cluster" / "state"


def build_root() -> Path:
    """The versioned cache dir the build script uses (it owns the key)."""
    try:
        out = subprocess.run(["bash", str(BUILD_SCRIPT), "--key"], capture_output=True, text=True, check=True, timeout=60)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise LocalClusterError(f"cannot locate the local-cluster build: {detail.strip().splitlines()[-1] if detail.strip() else e}") from None
    return Path(out.stdout.strip().splitlines()[-1])


def ensure_built(progress: Progress, *, build: bool = True) -> Path:
    """The build root with binaries and manifests, building them if allowed."""
    root = build_root()
    if (root / BUILD_STAMP).is_file():
        return root
    if not build:
        raise LocalClusterError(f"local-cluster binaries are not built in {root} — run scripts/build-local-cluster.sh (cold: ~25 min)")
    progress(f"building the local-cluster binaries into {root} (cold: ~25 min on 2 cores; cached afterwards)")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if proc.returncode != 0 or not (root / BUILD_STAMP).is_file():
        raise LocalClusterError(f"scripts/build-local-cluster.sh failed (exit {proc.returncode}); see its output above")
    return root


@dataclass
class Ports:
    etcd: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    controller_manager: int = 0
    scheduler: int = 0
    kwok: int = 0
    kueue_webhook: int = 0
    kueue_health: int = 0
    jobset_webhook: int = 0
    jobset_health: int = 0

    @classmethod
    def pick(cls) -> "Ports":
        chosen: set[int] = set()
        values = {}
        for name in cls.__dataclass_fields__:
            p = free_port()
            while p in chosen:
                p = free_port()
            chosen.add(p)
            values[name] = p
        return cls(**values)


@dataclass
class LocalCluster:
    state_dir: Path = field(default_factory=default_state_dir)
    progress: Progress = field(default=lambda msg: None)

    # ------------------------------------------------------------------ paths

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    def daemon(self, name: str) -> Daemon:
        return Daemon(name, self.state_dir)

    def _state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    @contextmanager
    def _lock(self) -> Iterator[None]:
        # Two `up`s (e.g. two pytest workers) must not start two control planes
        # on one state dir; the second waits and then finds the first one's.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def kube(self, who: str = "admin") -> Kube:
        st = self._state()
        if not st:
            raise LocalClusterError(f"no local cluster in {self.state_dir} — run 'python -m workloads local up'")
        pki = certs.Pki(self.state_dir / "pki")
        return Kube("127.0.0.1", st["ports"]["apiserver"], pki.ca_cert, pki.client_cert(who), pki.client_key(who))

    # ----------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        st = self._state() or {}
        daemons = {}
        for name in reversed(DAEMONS):
            d = self.daemon(name)
            pid = d.pid()
            daemons[name] = {"running": pid is not None, "pid": pid, "rss_mib": round(d.rss_bytes() / 2**20, 1), "log": str(d.log_file)}
        running = [n for n, v in daemons.items() if v["running"]]
        out: dict[str, Any] = {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig) if self.kubeconfig.is_file() else None,
            "daemons": daemons,
            "rss_mib_total": round(sum(v["rss_mib"] for v in daemons.values()), 1),
        }
        if not running:
            out["state"] = "down"
            return out
        if len(running) < len(DAEMONS):
            out["state"] = "degraded"
            out["stopped"] = [n for n in DAEMONS if n not in running]
            return out
        kube = self.kube()
        if not kube.healthy():
            out["state"] = "degraded"
            out["problem"] = "kube-apiserver /readyz is not ok"
            return out
        node_list = kube.list("v1", "Node")
        ready = sum(1 for n in node_list if _node_ready(n))
        out.update(
            state="up",
            server=f"https://127.0.0.1:{st['ports']['apiserver']}",
            version=kube.request("GET", "/version").get("gitVersion"),
            nodes=len(node_list),
            nodes_ready=ready,
            spec=st.get("spec"),
            started_at=st.get("started_at"),
        )
        return out

    # --------------------------------------------------------------------- up

    def up(self, spec: EnvSpec, *, spec_path: str, build: bool = True, timeout: float = 300.0) -> dict[str, Any]:
        with self._lock():
            current = self.status()
            if current["state"] == "up":
                self.progress(f"a healthy local cluster is already running in {self.state_dir}; reusing it")
                kube = self.kube()
                self._sync_nodes(kube, spec, timeout)
                self._apply_queue_objects(spec)
                st = self._state() or {}
                st["spec"] = spec_path
                self.state_file.write_text(json.dumps(st, indent=2))
                return {**self.status(), "reused": True}
            if current["state"] == "degraded":
                problem = current.get("problem") or f"{', '.join(current.get('stopped', []))} not running"
                raise LocalClusterError(
                    f"the local cluster in {self.state_dir} is partly running ({problem}) — run 'python -m workloads local down' first"
                )
            t0 = time.monotonic()
            root = ensure_built(self.progress, build=build)
            try:
                self._start(root, spec, spec_path, timeout)
            except BaseException:
                self.progress("start-up failed; stopping what was started (logs kept in " + str(self.state_dir / "logs") + ")")
                self._stop_all()
                raise
            self.progress(f"local cluster up in {time.monotonic() - t0:.1f}s; kubeconfig: {self.kubeconfig}")
            return {**self.status(), "reused": False, "up_seconds": round(time.monotonic() - t0, 1)}

    def _start(self, root: Path, spec: EnvSpec, spec_path: str, timeout: float) -> None:
        bin_dir, manifests = root / "bin", root / "manifests"
        sd = self.state_dir
        for sub in ("etcd", "run", "kueue", "jobset"):
            shutil.rmtree(sd / sub, ignore_errors=True)
        (sd / "logs").mkdir(parents=True, exist_ok=True)
        (sd / "config").mkdir(parents=True, exist_ok=True)
        pki = certs.ensure_pki(sd / "pki")
        ports = Ports.pick()
        state = {
            "ports": ports.__dict__,
            "bin_dir": str(bin_dir),
            "spec": spec_path,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.state_file.write_text(json.dumps(state, indent=2))
        self._write_kubeconfigs(pki, ports.apiserver)

        # etcd
        self.progress("starting etcd")
        self.daemon("etcd").start(
            [
                str(bin_dir / "etcd"),
                "--name=tgk-local",
                f"--data-dir={sd / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{ports.etcd}",
                f"--advertise-client-urls=http://127.0.0.1:{ports.etcd}",
                f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
                f"--initial-cluster=tgk-local=http://127.0.0.1:{ports.etcd_peer}",
                # A throwaway cluster: durability is not worth an fsync per write.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ]
        )
        self._wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{ports.etcd}/health", '"health":"true"'), timeout)

        # kube-apiserver
        self.progress("starting kube-apiserver")
        self.daemon("kube-apiserver").start(
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports.apiserver}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={certs.SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                # Admission stays at the defaults: MutatingAdmissionWebhook and
                # ValidatingAdmissionWebhook on, as in GKE.
                # No Endpoints for the `kubernetes` Service: nothing in-cluster dials it.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={sd / 'run'}",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
            ]
        )
        kube = Kube("127.0.0.1", ports.apiserver, pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin"))
        self._wait("kube-apiserver", kube.healthy, timeout)

        # controller-manager and scheduler: start both, then wait for both.
        self.progress("starting kube-controller-manager and kube-scheduler")
        sched_cfg = sd / "config" / "scheduler.yaml"
        sched_cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(sd / "config" / "scheduler.kubeconfig"), "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self.daemon("kube-controller-manager").start(
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={sd / 'config' / 'controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.controller_manager}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--cluster-name=tgk-local",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--concurrent-job-syncs=20",
                f"--cert-dir={sd / 'run' / 'kcm-certs'}",
            ]
        )
        self.daemon("kube-scheduler").start(
            [
                str(bin_dir / "kube-scheduler"),
                f"--config={sched_cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.scheduler}",
                f"--cert-dir={sd / 'run' / 'scheduler-certs'}",
            ]
        )
        self._wait("kube-controller-manager", lambda: _https_ok(ports.controller_manager, "/healthz"), timeout)
        self._wait("kube-scheduler", lambda: _https_ok(ports.scheduler, "/healthz"), timeout)

        # kwok with its stages
        self.progress("starting kwok")
        stages = addons.kwok_stages(addons.load_docs(manifests / "kwok-stages.yaml"))
        kwok_cfg = sd / "config" / "kwok.yaml"
        kwok_cfg.write_text(yaml.safe_dump_all(addons.kwok_config_docs(stages), sort_keys=False))
        self.daemon("kwok").start(
            [
                str(bin_dir / "kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_cfg}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={nodes.KWOK_SELECTOR}",
                # Leases keep the simulated nodes Ready exactly the way kubelets do.
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{ports.kwok}",
                "--cidr=10.64.0.0/14",
                "--node-ip=127.0.0.1",
            ]
        )

        # JobSet and Kueue: install objects first (their Secrets must exist
        # before the cert rotators start), then the processes.
        self.progress("installing JobSet and Kueue CRDs and webhook configurations")
        jobset_certs, kueue_certs = sd / "jobset" / "certs", sd / "kueue" / "certs"
        jobset_ca = certs.write_webhook_cert(pki, jobset_certs, f"{addons.JOBSET.service}.{addons.JOBSET.namespace}.svc")
        for addon, file, port, ca in (
            (addons.JOBSET, "jobset-install.yaml", ports.jobset_webhook, jobset_ca),
            (addons.KUEUE, "kueue-install.yaml", ports.kueue_webhook, None),
        ):
            for obj in addons.install_objects(addon, addons.load_docs(manifests / file), port, ca):
                kube.apply(obj, field_manager=FIELD_MANAGER)
        self.progress("starting JobSet and Kueue")
        env = {"KUBECONFIG": str(self.kubeconfig)}
        jcfg = sd / "config" / "jobset.yaml"
        jcfg.write_text(
            yaml.safe_dump(addons.jobset_config(webhook_port=ports.jobset_webhook, health_port=ports.jobset_health, cert_dir=jobset_certs))
        )
        kcfg = sd / "config" / "kueue.yaml"
        kcfg.write_text(
            yaml.safe_dump(addons.kueue_config(webhook_port=ports.kueue_webhook, health_port=ports.kueue_health, cert_dir=kueue_certs))
        )
        self.daemon("jobset").start([str(bin_dir / "jobset"), f"--config={jcfg}", "--zap-log-level=2"], env=env)
        self.daemon("kueue").start([str(bin_dir / "kueue"), f"--config={kcfg}", "--zap-log-level=2"], env=env)

        self._wait("kwok", lambda: _http_ok(f"http://127.0.0.1:{ports.kwok}/healthz", "ok"), timeout)
        self._sync_nodes(kube, spec, timeout)
        # Kueue's cert rotator fills its Secret and then waits for kubelet to
        # mount it into the cert dir; here we are the kubelet, so every poll
        # copies the current Secret to disk (the webhook server reloads changed files).
        def synced() -> bool:
            return _sync_cert_secret(kube, addons.KUEUE, kueue_certs)

        self._wait("JobSet readiness", lambda: _http_ok(f"http://127.0.0.1:{ports.jobset_health}/readyz", "ok"), timeout)
        self._wait(
            "Kueue readiness",
            lambda: synced() and _http_ok(f"http://127.0.0.1:{ports.kueue_health}/readyz", "ok"),
            timeout,
        )
        self._wait("JobSet and Kueue webhooks reachable from the apiserver", lambda: synced() and _webhooks_answer(kube), timeout)
        self._apply_queue_objects(spec)

    def _write_kubeconfigs(self, pki: certs.Pki, port: int) -> None:
        server = f"https://127.0.0.1:{port}"
        ca = base64.b64encode(pki.ca_cert.read_bytes()).decode()

        def doc(who: str) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": ca}}],
                "users": [
                    {
                        "name": f"{CONTEXT}-{who}",
                        "user": {
                            "client-certificate-data": base64.b64encode(pki.client_cert(who).read_bytes()).decode(),
                            "client-key-data": base64.b64encode(pki.client_key(who).read_bytes()).decode(),
                        },
                    }
                ],
                "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": f"{CONTEXT}-{who}"}}],
                "current-context": CONTEXT,
            }

        for who, path in (
            ("admin", self.kubeconfig),
            ("controller-manager", self.state_dir / "config" / "controller-manager.kubeconfig"),
            ("scheduler", self.state_dir / "config" / "scheduler.kubeconfig"),
        ):
            path.write_text(yaml.safe_dump(doc(who), sort_keys=False))
            path.chmod(0o600)

    def _sync_nodes(self, kube: Kube, spec: EnvSpec, timeout: float) -> None:
        wanted = nodes.node_objects(spec)
        names = {n["metadata"]["name"] for n in wanted}
        self.progress(f"creating {len(wanted)} simulated nodes from the spec ({len(wanted) - len(nodes.cpu_nodes(spec))} TPU VMs)")
        for n in kube.list("v1", "Node", labelSelector=f"{nodes.MANAGED_LABEL}=true"):
            if n["metadata"]["name"] not in names:
                kube.delete("v1", "Node", n["metadata"]["name"])
        existing = {n["metadata"]["name"] for n in kube.list("v1", "Node")}
        for n in wanted:
            if n["metadata"]["name"] in existing:
                # Status (capacity) is a subresource once the Node exists.
                kube.apply({k: v for k, v in n.items() if k != "status"}, field_manager=FIELD_MANAGER)
            else:
                kube.request("POST", "/api/v1/nodes", n)

        def all_ready() -> bool:
            got = {n["metadata"]["name"]: n for n in kube.list("v1", "Node")}
            return all(name in got and _node_ready(got[name]) for name in names)

        self._wait(f"{len(names)} nodes Ready (kwok)", all_ready, timeout)

    def _apply_queue_objects(self, spec: EnvSpec) -> None:
        """Hook: apply the spec's Kueue objects through the toolkit's own code path.

        ``workloads.render.kueue.queue_objects(spec)`` (the same objects `queues apply`
        applies) through ``workloads.cluster.client.Cluster.apply`` (server-side apply).
        Skipped with a message when that code is not in this checkout.
        """
        try:
            from workloads.render import kueue as kueue_objects
            from workloads.cluster.client import Cluster
        except ModuleNotFoundError as e:
            self.progress(f"skipping the spec's Kueue objects: {e.name} is not available")
            return
        objs = kueue_objects.queue_objects(spec)
        self.progress(f"applying {len(objs)} Kueue objects from the spec (workloads.render.kueue.queue_objects)")
        deadline = time.monotonic() + 60
        while True:
            try:
                Cluster.connect(self.kubeconfig, CONTEXT).apply(objs, field_manager="tpu-gke-toolkit")
                return
            except Exception as e:  # noqa: BLE001 - retried, then reported in one line
                # Right after start-up the default ServiceAccount admission or a
                # webhook CA rotation can still refuse a request for a moment.
                if time.monotonic() > deadline:
                    raise LocalClusterError(f"applying the spec's Kueue objects failed: {str(e).splitlines()[0]}") from None
                time.sleep(1)

    def _wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll ``check`` until true; fail early if a daemon died, with its log tail."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        last_note = t0
        self.progress(f"waiting for {what}")
        while True:
            try:
                if check():
                    self.progress(f"  {what}: ready after {time.monotonic() - t0:.1f}s")
                    return
            except LocalClusterError:
                pass
            for name in DAEMONS:
                d = self.daemon(name)
                if d.pid_file.exists() and not d.alive():
                    raise LocalClusterError(f"{name} exited during start-up: {d.log_tail(4) or 'no output'} (log: {d.log_file})")
            now = time.monotonic()
            if now > deadline:
                raise LocalClusterError(f"timed out after {timeout:.0f}s waiting for {what} (logs in {self.state_dir / 'logs'})")
            if now - last_note > 15:
                self.progress(f"  still waiting for {what} ({now - t0:.0f}s)")
                last_note = now
            time.sleep(0.25)

    # ------------------------------------------------------------------- down

    def down(self) -> list[str]:
        with self._lock():
            stopped = self._stop_all()
            shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
            self.state_file.unlink(missing_ok=True)
            return stopped

    def _stop_all(self) -> list[str]:
        stopped = []
        for name in DAEMONS:
            d = self.daemon(name)
            if d.stop():
                stopped.append(name)
                self.progress(f"stopped {name}")
        return stopped


def _sync_cert_secret(kube: Kube, addon: addons.Addon, cert_dir: Path) -> bool:
    """Write the addon's webhook cert Secret into its cert dir, as a kubelet volume would.

    True once the Secret holds a serving cert and the files match it. Each file
    is replaced atomically (write + rename); the key goes first so the webhook
    server's file watcher never pairs a new cert with an old key for long.
    """
    try:
        sec = kube.get("v1", "Secret", addon.secret, addon.namespace)
    except ApiError:
        return False
    data = (sec or {}).get("data") or {}
    if not data.get("tls.crt") or not data.get("tls.key"):
        return False
    cert_dir.mkdir(parents=True, exist_ok=True)
    for key in sorted(data, key=lambda k: (k != "tls.key", k)):
        raw = base64.b64decode(data[key])
        path = cert_dir / key
        if path.is_file() and path.read_bytes() == raw:
            continue
        tmp = cert_dir / f".{key}.tmp"
        tmp.write_bytes(raw)
        tmp.chmod(0o600)
        os.replace(tmp, path)
    return True


def _node_ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", []))


def _http_ok(url: str, needle: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - loopback URL built here
            return r.status == 200 and needle in r.read().decode(errors="replace")
    except OSError:
        return False


def _https_ok(port: int, path: str) -> bool:
    # The controller-manager and scheduler serve with self-signed certs; their
    # health paths are unauthenticated. Only loopback is ever contacted.
    import http.client
    import ssl

    if not port_open(port):
        return False
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=3)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status == 200 and resp.read().decode().strip() == "ok"
    except OSError:
        return False
    finally:
        conn.close()


_PROBE_JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "tgk-webhook-probe", "namespace": "default"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "w",
                "replicas": 1,
                "template": {
                    "spec": {
                        "template": {
                            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                        }
                    }
                },
            }
        ]
    },
}
_PROBE_LOCALQUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "tgk-webhook-probe", "namespace": "default"},
    "spec": {"clusterQueue": "tgk-webhook-probe"},
}


def _webhooks_answer(kube: Kube) -> bool:
    """True once a dry-run create passes through the JobSet and Kueue webhooks.

    Both webhook configurations are failurePolicy Fail: until the apiserver can
    reach them with a trusted CA, these requests are refused. The v1beta1 list
    goes through Kueue's conversion webhook.
    """
    try:
        for obj in (_PROBE_JOBSET, _PROBE_LOCALQUEUE):
            kube.forget_discovery()
            path = kube.resource_path(obj["apiVersion"], obj["kind"], "default")
            kube.request("POST", path, obj, params={"dryRun": "All", "fieldManager": FIELD_MANAGER})
        kube.request("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues")
        return True
    except ApiError:
        return False
