"""Bring the local cluster up, report on it, take it down.

Start order and what "ready" means for each step (every wait polls a real
signal with a generous deadline; none is a fixed sleep):

  etcd                     GET /health is {"health":"true"}
  kube-apiserver           GET /readyz is "ok" (admin client cert)
  controller-manager,      GET /healthz on their secure ports is "ok"
  scheduler
  kwok                     GET /healthz; then every Node from the spec is Ready
                           (kwok also serves pod logs: the apiserver reaches it
                           as each Node's kubelet port, and per-pod ``Logs``
                           objects name the files)
  JobSet, Kueue            GET /readyz; then a server-side dry-run create of a
                           JobSet and of a Kueue LocalQueue goes through their
                           mutating/validating webhooks (and Kueue's conversion
                           webhook), i.e. the apiserver really reaches them
  queues                   the spec's Kueue objects are applied (workloads.render.kueue)
  gcs                      the local Cloud Storage server (workloads.local.bucket)
                           answers; the spec's buckets exist; the ConfigMap
                           kube-public/tgk-local-storage says where it is
  logging                  the local Cloud Logging server (workloads.local.cloudlogging)
                           answers; kube-public/tgk-local-logging says where it is
  rehearsal                the rehearsal daemon (workloads.local.rehearsald) has
                           finished its first pass: it runs rehearsal pods for
                           their planned time, writes their logs, and replaces
                           preempted slices' nodes

State lives in one directory (default ``$TGK_CACHE/local-cluster/state``):
``pki/``, ``etcd/`` (wiped by ``down``), ``logs/<daemon>.log``,
``run/<daemon>.pid``, ``kubeconfig``, ``cluster.json`` (ports, bin dir, spec,
layout), ``pod-logs/`` (what rehearsal pods print: each pod its own attempt),
``cloud-logging/`` (every pod's lines, as GKE's logging agent keeps them), ``gcs/`` (the buckets: runs'
checkpoints and identities; wiped with etcd) and ``rehearsal/`` (the daemon's run
books and pending node replacements). A state dir is the toolkit's once it holds
``STATE_MARKER``; a directory that holds anything else is refused, never cleaned.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.spec import EnvSpec
from toolkit.errors import ClusterError, ToolkitError
from toolkit.names import (
    JOBSET_API,
    KUEUE_API,
    KUEUE_GROUP,
    KWOK_NODE_SELECTOR,
    TGK_FIELD_MANAGER,
    TGK_LOCAL_FIELD_MANAGER,
    TGK_LOCAL_MANAGED_LABEL,
)
from toolkit.owned import write_atomic
from toolkit.paths import REPO_ROOT, cache_dir, script
from workloads.cluster.client import Cluster
from workloads.cluster.wait import WaitFailed, WaitTimeout, wait_for
from workloads.local import CONTEXT, LocalClusterError, addons, bucket, builds, certs, cloudlogging, kuberay, nodes, provisioner, rehearsal, rehearsald, state
from workloads.local.procs import Daemon, free_port, locked, port_open
from workloads.render import kueue as kueue_objects

BUILD_SCRIPT = script("build-local-cluster.sh")
BUILD_STAMP = ".complete-2"  # keep in step with scripts/build-local-cluster.sh
BUILD = builds.Build("local-cluster", "the local-cluster binaries", BUILD_SCRIPT, BUILD_STAMP, cold="~25 min", plural=True)
# Stop order; start order is the reverse, with the controllers last.
# KubeRay's (kuberay.DAEMONS) run only in a cluster started with Ray (cluster.json "ray").
DAEMONS = (
    *kuberay.DAEMONS,
    "provisioner",
    "rehearsal",
    "logging",
    "gcs",
    "kueue",
    "jobset",
    "kwok",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)
# What a running cluster was started with; `up` restarts a cluster of another layout
# (started by an older toolkit: no rehearsal daemon, no pod logs).
LAYOUT = 6  # 5: the local Cloud Storage server (gcs); 6: the local Cloud Logging server (logging)
# The file that marks a directory as a local cluster's state dir (what `up` may clean).
STATE_MARKER = ".tgk-local-state"
# What `up` wipes in a state dir before a fresh start: all of it the toolkit's own.
FRESH_START_WIPES = ("etcd", "run", "kueue", "jobset", "pod-logs", "rehearsal", "provisioner", "gcs", "cloud-logging")
# Written for this project from the published ProvisioningRequest API (see the file's header).
# Starts on fresh ports when a daemon found its port taken (procs.free_port says why that can happen).
PORT_ATTEMPTS = 3
PROVISIONING_REQUEST_CRD = Path(__file__).resolve().parent / "crds" / "provisioningrequests.yaml"
# GKE's ComputeClass API, so `queues apply` applies compute class pools' classes here too (crds/computeclasses.yaml).
COMPUTE_CLASS_CRD = Path(__file__).resolve().parent / "crds" / "computeclasses.yaml"
# GKE's multi-tier checkpointing API, so `queues apply` applies the pools' CheckpointConfigurations here too.
CHECKPOINT_CONFIGURATION_CRD = Path(__file__).resolve().parent / "crds" / "checkpointconfigurations.yaml"
KWOK_LOGS_CRD = "kwok/crd/bases/kwok.x-k8s.io_logs.yaml"  # under the build's manifests/

Progress = Callable[[str], None]


def default_state_dir() -> Path:
    return cache_dir() / "local-cluster" / "state"


def build_root() -> Path:
    """The versioned cache dir the build script uses (it owns the key)."""
    return BUILD.root()


def ensure_built(progress: Progress, *, build: bool = True) -> Path:
    """The build root with binaries and manifests, building them if allowed."""
    return BUILD.ensure(progress, build=build)


class PortTaken(LocalClusterError):
    """A daemon exited at start-up because another process had bound its port first."""


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
    gcs: int = 0
    logging: int = 0

    @classmethod
    def pick(cls) -> Ports:
        chosen: set[int] = set()
        values = {}
        for name in cls.__dataclass_fields__:
            p = free_port()
            while p in chosen:
                p = free_port()
            chosen.add(p)
            values[name] = p
        return cls(**values)


@dataclass(frozen=True)
class _Boot:
    """What every start-up step needs: the build, the state dir, the PKI, the ports, the wait limit."""

    root: Path
    state_dir: Path
    pki: certs.Pki
    ports: Ports
    timeout: float  # per wait

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def manifest(self, name: str) -> Path:
        return self.root / "manifests" / name

    def config(self, name: str) -> Path:
        return self.state_dir / "config" / name

    @property
    def jobset_certs(self) -> Path:
        return self.state_dir / "jobset" / "certs"

    @property
    def kueue_certs(self) -> Path:
        return self.state_dir / "kueue" / "certs"


@dataclass(frozen=True)
class Role:
    """What a fleet's member (``workloads.local.fleet``) does differently from a lone cluster.

    The defaults are the lone cluster's. A MultiKueue manager holds queues and never a pod:
    no TPU nodes and no rehearsal daemon; a worker reads the fleet's one Cloud Storage
    server (GCS is global: every region's run writes the same buckets) instead of its own.
    """

    name: str = "cluster"
    objects: tuple[dict[str, Any], ...] | None = None  # applied instead of kueue.cluster_objects(spec)
    kueue_settings: dict[str, Any] | None = None  # laid over Kueue's config instead of kueue.manager_settings(spec)
    tpu_nodes: bool = True
    skip: tuple[str, ...] = ()  # daemons this member does not run
    gcs_url: str | None = None  # with "gcs" skipped: the Cloud Storage server its buckets live in


@dataclass
class LocalCluster:
    state_dir: Path = field(default_factory=default_state_dir)
    progress: Progress = field(default=lambda msg: None)
    role: Role = field(default_factory=Role)
    _ray = None  # kuberay.RayBoot while a start with Ray is under way (not a dataclass field)

    # ------------------------------------------------------------------ paths

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return state.state_file(self.state_dir)

    def daemon(self, name: str) -> Daemon:
        return Daemon(name, self.state_dir)

    def _state(self) -> dict[str, Any] | None:
        return state.read_state(self.state_dir)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        # Two `up`s (e.g. two pytest workers) must not start two control planes
        # on one state dir; the second waits and then finds the first one's.
        with locked(self.state_dir / ".lock"):
            yield

    def client(self, who: str = "admin") -> Cluster:
        """The toolkit's cluster client on this cluster, speaking as ``who`` (a certs.CLIENTS identity)."""
        return state.client(self.state_dir, who)

    # ----------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        st = self._state() or {}
        expected = DAEMONS if st.get("ray") else tuple(n for n in DAEMONS if n not in kuberay.DAEMONS)
        expected = tuple(n for n in expected if n not in st.get("skip", ()))
        daemons = {}
        for name in reversed(DAEMONS):
            d = self.daemon(name)
            pid = d.pid()
            if name in expected or pid is not None:  # KubeRay's only where the cluster runs them
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
        elif any(n not in running for n in expected):
            out["state"] = "degraded"
            out["stopped"] = [n for n in expected if n not in running]
        else:
            out.update(self._api_status())
        return out

    def _api_status(self) -> dict[str, Any]:
        """What the apiserver says, once every daemon runs: health, version, nodes."""
        st = self._state() or {}
        kube = self.client()
        if not kube.healthy():
            return {"state": "degraded", "problem": "kube-apiserver /readyz is not ok"}
        node_list = kube.list(kube.resource("v1", "Node"))
        return {
            "state": "up",
            "server": f"https://127.0.0.1:{st['ports']['apiserver']}",
            "version": kube.server_version(),
            "nodes": len(node_list),
            "nodes_ready": sum(1 for n in node_list if _node_ready(n)),
            "spec": st.get("spec"),
            "started_at": st.get("started_at"),
        }

    # --------------------------------------------------------------------- up

    def up(self, spec: EnvSpec, *, spec_path: str, build: bool = True, timeout: float = 300.0, with_ray: bool = False) -> dict[str, Any]:
        with_ray = kuberay.wanted(spec, with_ray)
        with self._lock():
            current = self.status()
            layout = (self._state() or {}).get("layout")
            if current["state"] in ("up", "degraded") and layout != LAYOUT:
                self.progress(f"the running local cluster was started by an older toolkit (layout {layout}, now {LAYOUT}); restarting it")
                self._stop_all()
                current = self.status()
            if current["state"] in ("up", "degraded") and with_ray and not (self._state() or {}).get("ray"):
                # Kueue reads its integrations once, at its start: Ray needs a fresh start.
                self.progress("the running local cluster was started without Ray; restarting it with KubeRay")
                self._stop_all()
                current = self.status()
            if current["state"] == "up":
                return self._reuse(spec, spec_path, timeout)
            if current["state"] == "degraded":
                problem = current.get("problem") or f"{', '.join(current.get('stopped', []))} not running"
                raise LocalClusterError(f"the local cluster in {self.state_dir} is partly running ({problem}) — run 'python -m workloads local down' first")
            t0 = time.monotonic()
            root = ensure_built(self.progress, build=build)
            self._ray = kuberay.prepare(self.progress, build=build) if with_ray else None
            try:
                self._start_on_free_ports(root, spec, spec_path, timeout)
            except BaseException:
                self.progress("start-up failed; stopping what was started (logs kept in " + str(self.state_dir / "logs") + ")")
                self._stop_all()
                raise
            finally:
                self._ray = None
            self.progress(f"local cluster up in {time.monotonic() - t0:.1f}s; kubeconfig: {self.kubeconfig}")
            return {**self.status(), "reused": False, "up_seconds": round(time.monotonic() - t0, 1)}

    def _reuse(self, spec: EnvSpec, spec_path: str, timeout: float) -> dict[str, Any]:
        """A healthy cluster is running: bring its nodes and queues in line with ``spec``."""
        self.progress(f"a healthy local cluster is already running in {self.state_dir}; reusing it")
        kube = self.client()
        self._sync_nodes(kube, spec, timeout)
        self._apply_cluster_objects(kube, spec)
        st = self._state() or {}
        self._publish_bucket(kube, spec, self.role.gcs_url or bucket.endpoint(st["ports"]["gcs"]))
        if "logging" not in self.role.skip:
            kube.apply([cloudlogging.configmap(cloudlogging.endpoint(st["ports"]["logging"]))], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        st["spec"] = spec_path
        if self.role.gcs_url:
            st["gcs_url"] = self.role.gcs_url
        write_atomic(self.state_file, json.dumps(st, indent=2))
        return {**self.status(), "reused": True}

    def _start_on_free_ports(self, root: Path, spec: EnvSpec, spec_path: str, timeout: float) -> None:
        """``_start``; again from the beginning on new ports when a daemon found its port taken."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(root, spec, spec_path, timeout)
                return
            except PortTaken as e:
                if attempt == PORT_ATTEMPTS:
                    raise
                self.progress(f"{e}; starting again on new ports (attempt {attempt + 1} of {PORT_ATTEMPTS})")
                self._stop_all()

    def _start(self, root: Path, spec: EnvSpec, spec_path: str, timeout: float) -> None:
        """Start every component in order, each ready before the next that needs it."""
        boot = self._prepare(root, spec_path, timeout)
        self._start_etcd(boot)
        kube = self._start_apiserver(boot)
        self._start_controllers(boot)
        self._start_kwok(boot, kube)
        self._install_addons(boot, kube)
        self._start_addons(boot, spec)
        self._wait_ready(boot, kube, spec)
        skip = self.role.skip
        if "gcs" in skip:
            self._publish_bucket(kube, spec, self.role.gcs_url or "")
        else:
            self._start_gcs(boot, kube, spec)
        if "logging" not in skip:
            self._start_logging(boot, kube)
        if "rehearsal" not in skip:
            self._start_rehearsal(boot)
        if "provisioner" not in skip:
            self._start_provisioner(boot)
        if self._ray:
            kuberay.start_daemons(self, self._ray, boot.timeout)

    def _prepare(self, root: Path, spec_path: str, timeout: float) -> _Boot:
        """A clean state dir (pki kept), fresh ports, cluster.json and the kubeconfigs."""
        sd = self.state_dir
        self.claim_state_dir()
        for sub in FRESH_START_WIPES:
            shutil.rmtree(sd / sub, ignore_errors=True)
        (sd / "logs").mkdir(parents=True, exist_ok=True)
        (sd / "config").mkdir(parents=True, exist_ok=True)
        boot = _Boot(root, sd, certs.ensure_pki(sd / "pki"), Ports.pick(), timeout)
        st = {
            "ports": boot.ports.__dict__,
            "bin_dir": str(root / "bin"),
            "spec": spec_path,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "layout": LAYOUT,
            "role": self.role.name,
            "skip": list(self.role.skip),
            **({"gcs_url": self.role.gcs_url} if self.role.gcs_url else {}),
        }
        write_atomic(self.state_file, json.dumps(st, indent=2))
        self._write_kubeconfigs(boot.pki, boot.ports.apiserver)
        return boot

    def _start_etcd(self, boot: _Boot) -> None:
        self.progress("starting etcd")
        port, peer = boot.ports.etcd, boot.ports.etcd_peer
        self.daemon("etcd").start(
            [
                boot.bin("etcd"),
                "--name=tgk-local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{port}",
                f"--advertise-client-urls=http://127.0.0.1:{port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=tgk-local=http://127.0.0.1:{peer}",
                # A throwaway cluster: durability is not worth an fsync per write.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ]
        )
        self._wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{port}/health", '"health":"true"'), boot.timeout)

    def _start_apiserver(self, boot: _Boot) -> Cluster:
        """kube-apiserver, ready; returns the admin client."""
        self.progress("starting kube-apiserver")
        pki = boot.pki
        self.daemon("kube-apiserver").start(
            [
                boot.bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{boot.ports.etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={boot.ports.apiserver}",
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
                f"--cert-dir={self.state_dir / 'run'}",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
                # kwok's Nodes report 127.0.0.1 and kwok's port (logs); never a host name.
                "--kubelet-preferred-address-types=InternalIP",
            ]
        )
        kube = state.client_on(self.state_dir, boot.ports.apiserver)
        self._wait("kube-apiserver", kube.healthy, boot.timeout)
        return kube

    def _start_controllers(self, boot: _Boot) -> None:
        """kube-controller-manager and kube-scheduler: start both, then wait for both."""
        self.progress("starting kube-controller-manager and kube-scheduler")
        pki, ports = boot.pki, boot.ports
        sched_cfg = boot.config("scheduler.yaml")
        sched_cfg.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(boot.config("scheduler.kubeconfig")), "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self.daemon("kube-controller-manager").start(
            [
                boot.bin("kube-controller-manager"),
                f"--kubeconfig={boot.config('controller-manager.kubeconfig')}",
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
                f"--cert-dir={self.state_dir / 'run' / 'kcm-certs'}",
            ]
        )
        self.daemon("kube-scheduler").start(
            [
                boot.bin("kube-scheduler"),
                f"--config={sched_cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.scheduler}",
                f"--cert-dir={self.state_dir / 'run' / 'scheduler-certs'}",
            ]
        )
        self._wait("kube-controller-manager", lambda: _https_ok(ports.controller_manager, "/healthz"), boot.timeout)
        self._wait("kube-scheduler", lambda: _https_ok(ports.scheduler, "/healthz"), boot.timeout)

    def _start_kwok(self, boot: _Boot, kube: Cluster) -> None:
        """kwok with its stages (its health is awaited in _wait_ready, after the add-ons started).

        kwok is every Node's kubelet endpoint (``--node-port``: the apiserver asks it for
        pod logs) and serves each pod's log from the file its ``Logs`` object names
        (``--enable-crds=Logs``; the rehearsal daemon creates them).
        """
        self.progress("starting kwok")
        kube.apply(addons.load_docs(boot.manifest(KWOK_LOGS_CRD)), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        stages = addons.kwok_stages(addons.load_docs(boot.manifest("kwok-stages.yaml")))
        if self._ray:
            stages = kuberay.kwok_stages(stages)
        kwok_cfg = boot.config("kwok.yaml")
        kwok_cfg.write_text(yaml.safe_dump_all(addons.kwok_config_docs(stages), sort_keys=False))
        self.daemon("kwok").start(
            [
                boot.bin("kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_cfg}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                # Leases keep the simulated nodes Ready exactly the way kubelets do.
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{boot.ports.kwok}",
                f"--node-port={boot.ports.kwok}",
                "--enable-crds=Logs",
                "--cidr=10.64.0.0/14",
                "--node-ip=127.0.0.1",
            ]
        )

    def _install_addons(self, boot: _Boot, kube: Cluster) -> None:
        """JobSet's and Kueue's CRDs, Secrets, Services and webhook configurations.

        Installed before their processes start: their Secrets must exist before the cert rotators run.
        """
        self.progress("installing JobSet and Kueue CRDs and webhook configurations")
        jobset_ca = certs.write_webhook_cert(boot.pki, boot.jobset_certs, f"{addons.JOBSET.service}.{addons.JOBSET.namespace}.svc")
        for addon, file, port, ca in (
            (addons.JOBSET, "jobset-install.yaml", boot.ports.jobset_webhook, jobset_ca),
            (addons.KUEUE, "kueue-install.yaml", boot.ports.kueue_webhook, None),
        ):
            objs = addons.install_objects(addon, addons.load_docs(boot.manifest(file)), port, ca)
            kube.apply(objs, field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)  # this tool owns them here
        # Before Kueue starts: its ProvisioningRequest admission check is set up only if the API exists then.
        self.progress("installing the ProvisioningRequest CRD (DWS queued provisioning)")
        kube.apply(addons.load_docs(PROVISIONING_REQUEST_CRD), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        kube.apply(addons.load_docs(COMPUTE_CLASS_CRD), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        kube.apply(addons.load_docs(CHECKPOINT_CONFIGURATION_CRD), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        if self._ray:  # before Kueue starts: it sets up only the integrations whose CRDs exist then
            self.progress(f"installing the KubeRay {kuberay.KUBERAY_VERSION} CRDs")
            kube.apply(kuberay.crd_objects(self._ray.root), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)

    def _start_addons(self, boot: _Boot, spec: EnvSpec) -> None:
        """The JobSet and Kueue controllers, as local processes."""
        self.progress("starting JobSet and Kueue")
        ports = boot.ports
        env = {"KUBECONFIG": str(self.kubeconfig)}
        jcfg, kcfg = boot.config("jobset.yaml"), boot.config("kueue.yaml")
        jcfg.write_text(yaml.safe_dump(addons.jobset_config(webhook_port=ports.jobset_webhook, health_port=ports.jobset_health, cert_dir=boot.jobset_certs)))
        # The spec's waitForPodsReady, its timeouts shrunk by the rehearsal time factor like every
        # other duration here. Kueue reads its Configuration once: a cluster reused with
        # another spec keeps the settings it started with.
        settings = (
            self.role.kueue_settings if self.role.kueue_settings is not None else kueue_objects.manager_settings(spec, time_scale=rehearsal.time_factor())
        )
        kcfg.write_text(
            yaml.safe_dump(addons.kueue_config(webhook_port=ports.kueue_webhook, health_port=ports.kueue_health, cert_dir=boot.kueue_certs, settings=settings))
        )
        self.daemon("jobset").start([boot.bin("jobset"), f"--config={jcfg}", "--zap-log-level=2"], env=env)
        if self._ray:
            kcfg.write_text(yaml.safe_dump(kuberay.with_frameworks(yaml.safe_load(kcfg.read_text()))))
        self.daemon("kueue").start([boot.bin("kueue"), f"--config={kcfg}", "--zap-log-level=2"], env=env)

    def _wait_ready(self, boot: _Boot, kube: Cluster, spec: EnvSpec) -> None:
        """kwok and its Ready nodes, JobSet and Kueue with their webhooks reachable, then the spec's queues."""
        ports, timeout = boot.ports, boot.timeout
        self._wait("kwok", lambda: _http_ok(f"http://127.0.0.1:{ports.kwok}/healthz", "ok"), timeout)
        self._sync_nodes(kube, spec, timeout)

        # Kueue's cert rotator fills its Secret and then waits for kubelet to
        # mount it into the cert dir; here we are the kubelet, so every poll
        # copies the current Secret to disk (the webhook server reloads changed files).
        def synced() -> bool:
            return _sync_cert_secret(kube, addons.KUEUE, boot.kueue_certs)

        self._wait("JobSet readiness", lambda: _http_ok(f"http://127.0.0.1:{ports.jobset_health}/readyz", "ok"), timeout)
        self._wait("Kueue readiness", lambda: synced() and _http_ok(f"http://127.0.0.1:{ports.kueue_health}/readyz", "ok"), timeout)
        self._wait("JobSet and Kueue webhooks reachable from the apiserver", lambda: synced() and _webhooks_answer(kube), timeout)
        self._apply_cluster_objects(kube, spec)

    def claim_state_dir(self) -> None:
        """Make sure the state dir is the toolkit's before anything in it is wiped: new, empty,
        marked (``STATE_MARKER``) or the toolkit's own default under the cache; else refused."""
        sd = self.state_dir
        if not os.path.lexists(sd):
            sd.mkdir(parents=True)
        if os.path.islink(sd) or not sd.is_dir():
            raise LocalClusterError(f"--state-dir: {sd} is a symlink or a file — pass a directory of its own for the local cluster")
        marker = sd / STATE_MARKER
        # The lock file `up` holds is the only entry a fresh state dir has.
        if not self._ours() and any(p.name != ".lock" for p in sd.iterdir()):
            raise LocalClusterError(f"--state-dir: {sd} holds files the local cluster did not write (no {STATE_MARKER}) — pass an empty or new directory")
        if not marker.is_file():
            marker.write_text("a tpu-gke-toolkit local cluster's state: `local up` may wipe its subdirectories\n")

    def _start_gcs(self, boot: _Boot, kube: Cluster, spec: EnvSpec) -> None:
        """The local Cloud Storage server (workloads.local.bucket), the spec's buckets in it, its address published."""
        self.progress("starting the local Cloud Storage server")
        exe = bucket.executable()
        data = bucket.data_dir(self.state_dir)
        data.mkdir(parents=True, exist_ok=True)
        url = bucket.endpoint(boot.ports.gcs)
        self.daemon(bucket.DAEMON).start(bucket.argv(exe, boot.ports.gcs), env={"STORAGE_BASE": str(data)}, cwd=data)
        self._wait("the local Cloud Storage server", lambda: bucket.answers(url), boot.timeout)
        self._publish_bucket(kube, spec, url)

    def _publish_bucket(self, kube: Cluster, spec: EnvSpec, url: str) -> None:
        made = bucket.ensure_buckets(url, spec)
        if made:
            self.progress(f"  buckets created: {', '.join(made)}")
        bucket.grant_buckets(url, spec)
        kube.apply([bucket.configmap(url)], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)

    def _start_logging(self, boot: _Boot, kube: Cluster) -> None:
        """The local Cloud Logging server (workloads.local.cloudlogging), its address published."""
        self.progress("starting the local Cloud Logging server")
        url = cloudlogging.endpoint(boot.ports.logging)
        self.daemon(cloudlogging.DAEMON).start(cloudlogging.argv(boot.ports.logging, self.state_dir), env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
        self._wait("the local Cloud Logging server", lambda: cloudlogging.answers(url), boot.timeout)
        kube.apply([cloudlogging.configmap(url)], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)

    def _start_rehearsal(self, boot: _Boot) -> None:
        """The rehearsal daemon (workloads.local.rehearsald), ready once its first pass is done."""
        self._start_python_daemon(boot, "rehearsal", "workloads.local.rehearsald", rehearsald.ready_file(self.state_dir), "the rehearsal daemon")

    def _start_provisioner(self, boot: _Boot) -> None:
        """GKE's DWS queued provisioning, simulated (workloads.local.provisioner)."""
        self._start_python_daemon(
            boot, "provisioner", "workloads.local.provisioner", provisioner.ready_file(self.state_dir), "the provisioner", "the simulated DWS provisioner"
        )

    def _start_python_daemon(self, boot: _Boot, name: str, module: str, ready: Path, what: str, starting: str = "") -> None:
        """``python -m module --state-dir`` as daemon ``name``; up once it writes ``ready``."""
        self.progress(f"starting {starting or what}")
        ready.unlink(missing_ok=True)
        self.daemon(name).start([sys.executable, "-m", module, "--state-dir", str(self.state_dir)], env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
        self._wait(what, ready.is_file, boot.timeout)

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
            # Private from the first byte (it holds a client key), and never half-written for a reader.
            write_atomic(path, yaml.safe_dump(doc(who), sort_keys=False), mode=0o600)

    def _sync_nodes(self, kube: Cluster, spec: EnvSpec, timeout: float) -> None:
        wanted = nodes.node_objects(spec) if self.role.tpu_nodes else nodes.cpu_nodes(spec)
        names = {n["metadata"]["name"] for n in wanted}
        self.progress(f"creating {len(wanted)} simulated nodes from the spec ({len(wanted) - len(nodes.cpu_nodes(spec))} TPU VMs)")
        node_info = kube.resource("v1", "Node")
        for n in kube.list(node_info, label_selector=f"{TGK_LOCAL_MANAGED_LABEL}=true"):
            if n["metadata"]["name"] not in names:
                kube.delete(node_info, n["metadata"]["name"], propagation="Background")
        existing = {n["metadata"]["name"] for n in kube.list(node_info)}
        for n in wanted:
            if n["metadata"]["name"] in existing:
                # Status (capacity) is a subresource once the Node exists.
                kube.apply([{k: v for k, v in n.items() if k != "status"}], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
            else:
                kube.create(n, field_manager=TGK_LOCAL_FIELD_MANAGER)

        def all_ready() -> bool:
            got = {n["metadata"]["name"]: n for n in kube.list(node_info)}
            return all(name in got and _node_ready(got[name]) for name in names)

        self._wait(f"{len(names)} nodes Ready (kwok)", all_ready, timeout)

    def _apply_cluster_objects(self, kube: Cluster, spec: EnvSpec) -> None:
        """Apply the spec's cluster objects through the toolkit's own code path.

        ``workloads.render.kueue.cluster_objects(spec)`` (what `queues apply` and so the
        provision pipeline apply) through ``Cluster.apply`` (server-side apply, the
        toolkit's field manager). A spec with ``network.dcn`` first gets the GKE
        networking CRDs, which GKE serves on a cluster with multi-networking.
        """
        if spec.network.dcn is not None:
            self.progress("installing the GKE networking CRDs (network.dcn: GKENetworkParamSet, Network)")
            kube.apply(addons.gke_networking_crds(), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
        objs = list(self.role.objects) if self.role.objects is not None else kueue_objects.cluster_objects(spec)
        source = self.role.name if self.role.objects is not None else "workloads.render.kueue.cluster_objects"
        self.progress(f"applying {len(objs)} objects from the spec ({source})")
        errors: list[ToolkitError] = []

        def applied() -> bool:
            try:
                kube.apply(objs, field_manager=TGK_FIELD_MANAGER)
                return True
            except ToolkitError as e:
                # Right after start-up the default ServiceAccount admission or a
                # webhook CA rotation can still refuse a request for a moment.
                errors.append(e)
                kube.forget_discovery()
                return False

        try:
            wait_for(applied, timeout=60, what="the spec's cluster objects to apply", interval=1.0)
        except WaitTimeout:
            raise LocalClusterError(f"applying the spec's cluster objects failed: {str(errors[-1]).splitlines()[0]}") from None

    def _wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll ``check`` until true; fail early if a daemon died, with its log tail."""
        t0 = last_note = time.monotonic()
        self.progress(f"waiting for {what}")

        def ready() -> bool:
            nonlocal last_note
            try:
                if check():
                    return True
            except (LocalClusterError, ClusterError):
                pass  # not up yet
            now = time.monotonic()
            if now - last_note > 15:
                self.progress(f"  still waiting for {what} ({now - t0:.0f}s)")
                last_note = now
            return False

        try:
            wait_for(ready, timeout=timeout, what=what, interval=0.25, fail=lambda _: self._exited_daemon())
        except WaitFailed as e:
            taken = any(d.port_taken() for d in self._exited())
            raise (PortTaken if taken else LocalClusterError)(str(e)) from None
        except WaitTimeout:
            raise LocalClusterError(f"timed out after {timeout:.0f}s waiting for {what} (logs in {self.state_dir / 'logs'})") from None
        self.progress(f"  {what}: ready after {time.monotonic() - t0:.1f}s")

    def _exited(self) -> list[Daemon]:
        """The daemons that were started and are gone."""
        return [d for d in map(self.daemon, DAEMONS) if d.pid_file.exists() and not d.alive()]

    def _exited_daemon(self) -> str | None:
        """A daemon that was started and is gone, with its log tail; None while all run."""
        for d in self._exited():
            return f"{d.name} exited during start-up: {d.log_tail(4) or 'no output'} (log: {d.log_file})"
        return None

    # ------------------------------------------------------------------- down

    def down(self) -> list[str]:
        with self._lock():
            stopped = self._stop_all()
            if self._ours():  # never clean a directory that is not a state dir of the toolkit's
                shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
                shutil.rmtree(bucket.data_dir(self.state_dir), ignore_errors=True)
                self.state_file.unlink(missing_ok=True)
            return stopped

    def _ours(self) -> bool:
        sd = self.state_dir
        return (sd / STATE_MARKER).is_file() or sd.resolve().is_relative_to(cache_dir().resolve() / "local-cluster")

    def _stop_all(self) -> list[str]:
        stopped = []
        for name in DAEMONS:
            d = self.daemon(name)
            if d.stop():
                stopped.append(name)
                self.progress(f"stopped {name}")
        return stopped


def _sync_cert_secret(kube: Cluster, addon: addons.Addon, cert_dir: Path) -> bool:
    """Write the addon's webhook cert Secret into its cert dir, as a kubelet volume would.

    True once the Secret holds a serving cert and the files match it. Each file
    is replaced atomically (``write_atomic``); the key goes first so the webhook
    server's file watcher never pairs a new cert with an old key for long.
    """
    try:
        sec = kube.get(kube.resource("v1", "Secret"), addon.secret, addon.namespace)
    except ClusterError:
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
        write_atomic(path, raw, mode=0o600)
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
    "apiVersion": JOBSET_API,
    "kind": "JobSet",
    "metadata": {"name": "tgk-webhook-probe", "namespace": "default"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "w",
                "replicas": 1,
                "template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
            }
        ]
    },
}
_PROBE_LOCALQUEUE = {
    "apiVersion": KUEUE_API,
    "kind": "LocalQueue",
    "metadata": {"name": "tgk-webhook-probe", "namespace": "default"},
    "spec": {"clusterQueue": "tgk-webhook-probe"},
}


def _webhooks_answer(kube: Cluster) -> bool:
    """True once a dry-run create passes through the JobSet and Kueue webhooks.

    Both webhook configurations are failurePolicy Fail: until the apiserver can
    reach them with a trusted CA, these requests are refused. The v1beta1 list
    goes through Kueue's conversion webhook.
    """
    try:
        for obj in (_PROBE_JOBSET, _PROBE_LOCALQUEUE):
            kube.forget_discovery()  # the CRDs were just installed: what is served may still change
            kube.create(obj, field_manager=TGK_LOCAL_FIELD_MANAGER, dry_run=True)
        kube.request("GET", f"/apis/{KUEUE_GROUP}/v1beta1/clusterqueues")
        return True
    except ClusterError:
        return False
