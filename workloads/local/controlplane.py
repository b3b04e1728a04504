"""Bring the local cluster up, report on it, take it down: the order of the steps, each in a module of its own.

Start order and what "ready" means for each step (every wait polls a real signal with a
generous deadline and fails at once when a daemon died: ``daemons.Daemons.wait``):

  etcd, kube-apiserver,    ``boot``: each binary of the build as a daemon, ready on its
  controller-manager,      health endpoint
  scheduler, kwok
  JobSet, Kueue            ``jobset_kueue``: installed, started, GET /readyz, then their
                           webhooks reached from the apiserver (a dry-run create)
  nodes, queues            ``spec_objects``: the spec's kwok nodes, every one Ready; the
                           spec's Kueue objects applied (workloads.render.kueue)
  gcs                      the local Cloud Storage server (``bucket``) answers; the spec's
                           buckets exist; the ConfigMap kube-public/tgk-local-storage says
                           where it is (``loopback``)
  logging                  the local Cloud Logging server (``cloudlogging``) answers;
                           kube-public/tgk-local-logging says where it is
  rehearsal                the rehearsal daemon (``rehearsald``) has finished its first
                           pass: it runs rehearsal pods for their planned time, writes
                           their logs, and replaces preempted slices' nodes
  provisioner              GKE's DWS queued provisioning, simulated (``provisioner``)
  (with Ray)               KubeRay and the stand-in Ray head (``kuberay``)

A fleet's member (``Role``, ``fleet``) skips the daemons its role does not need.

State lives in one directory (default ``$TGK_CACHE/local-cluster/state``; ``state`` says
whose it is): ``pki/``, ``etcd/`` (wiped by ``down``), ``logs/<daemon>.log``,
``run/<daemon>.pid``, ``kubeconfig``, ``cluster.json`` (ports, bin dir, spec, layout),
``pod-logs/`` (what rehearsal pods print: each pod its own attempt), ``cloud-logging/``
(every pod's lines, as GKE's logging agent keeps them), ``gcs/`` (the buckets: runs'
checkpoints and identities; wiped with etcd) and ``rehearsal/`` (the daemon's run books
and pending node replacements).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.spec import EnvSpec
from toolkit.owned import write_atomic
from toolkit.paths import script
from workloads.cluster.client import Cluster
from workloads.local import (
    LocalClusterError,
    boot,
    bucket,
    builds,
    certs,
    cloudlogging,
    jobset_kueue,
    kuberay,
    loopback,
    provisioner,
    rehearsal,
    rehearsald,
    spec_objects,
    state,
)
from workloads.local.daemons import Daemons, Ports, PortTaken, Progress
from workloads.local.procs import Daemon, locked
from workloads.local.state import default_state_dir
from workloads.render import inplace
from workloads.render import kueue as kueue_objects

BUILD_SCRIPT = script("build-local-cluster.sh")
BUILD_STAMP = ".complete-3"  # keep in step with scripts/build-local-cluster.sh
BUILD = builds.Build("local-cluster", "the local-cluster binaries", BUILD_SCRIPT, BUILD_STAMP, cold="~25 min", plural=True)
# Stop order; start order is the reverse, with the controllers last.
# KubeRay's (kuberay.DAEMONS) run only in a cluster started with Ray (cluster.json "ray").
DAEMONS = (
    *kuberay.DAEMONS,
    "provisioner",
    "rehearsal",
    cloudlogging.SERVICE.daemon,
    bucket.SERVICE.daemon,
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
# What `up` wipes in a state dir before a fresh start: all of it the toolkit's own.
FRESH_START_WIPES = ("etcd", "run", "kueue", "jobset", "pod-logs", "rehearsal", "provisioner", "gcs", "cloud-logging")
# Starts on fresh ports when a daemon found its port taken (procs.free_port says why that can happen).
PORT_ATTEMPTS = 3


def _multi_tier(spec: EnvSpec) -> bool:
    """A pool declares multi-tier checkpointing: GKE's add-on is on (``infra.stack`` turns it on then)."""
    return any(p.multi_tier_checkpointing is not None for p in spec.tpu_pools)


def build_root() -> Path:
    """The versioned cache dir the build script uses (it owns the key)."""
    return BUILD.root()


def ensure_built(progress: Progress, *, build: bool = True) -> Path:
    """The build root with binaries and manifests, building them if allowed."""
    return BUILD.ensure(progress, build=build)


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
    # Per bucket, the (role, member) pairs its policy holds, instead of what the spec's own stack grants
    # (a fleet manager's buckets are granted to the workers' identities: infra.fleet.Fleet.bucket_bindings).
    bucket_bindings: dict[str, list[tuple[str, str]]] | None = None


@dataclass
class LocalCluster:
    state_dir: Path = field(default_factory=default_state_dir)
    progress: Progress = field(default=lambda msg: None)
    role: Role = field(default_factory=Role)

    # ------------------------------------------------------------------ paths

    @property
    def kubeconfig(self) -> Path:
        return state.kubeconfig(self.state_dir)

    @property
    def state_file(self) -> Path:
        return state.state_file(self.state_dir)

    @property
    def daemons(self) -> Daemons:
        return Daemons(self.state_dir, DAEMONS, self.progress)

    def daemon(self, name: str) -> Daemon:
        return self.daemons.daemon(name)

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
        daemons = self.daemons.report(expected)
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
            "nodes_ready": sum(1 for n in node_list if spec_objects.node_ready(n)),
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
            ray = kuberay.prepare(self.progress, build=build) if with_ray else None
            try:
                self._start_on_free_ports(root, spec, spec_path, timeout, ray)
            except BaseException:
                self.progress("start-up failed; stopping what was started (logs kept in " + str(self.state_dir / "logs") + ")")
                self._stop_all()
                raise
            self.progress(f"local cluster up in {time.monotonic() - t0:.1f}s; kubeconfig: {self.kubeconfig}")
            return {**self.status(), "reused": False, "up_seconds": round(time.monotonic() - t0, 1)}

    def _reuse(self, spec: EnvSpec, spec_path: str, timeout: float) -> dict[str, Any]:
        """A healthy cluster is running: bring its nodes and queues in line with ``spec``."""
        self.progress(f"a healthy local cluster is already running in {self.state_dir}; reusing it")
        kube = self.client()
        if _multi_tier(spec):  # infra deploy would turn the add-on on for this spec
            jobset_kueue.install_checkpointing_addon(self.progress, kube)
        self._sync_nodes(kube, spec, timeout)
        self._apply_cluster_objects(kube, spec)
        st = self._state() or {}
        bucket.publish(kube, spec, self.role.gcs_url or loopback.url(st["ports"]["gcs"]), self.progress, self.role.bucket_bindings)
        if "logging" not in self.role.skip:
            cloudlogging.SERVICE.publish(kube, loopback.url(st["ports"]["logging"]))
        st["spec"] = spec_path
        if self.role.gcs_url:
            st["gcs_url"] = self.role.gcs_url
        write_atomic(self.state_file, json.dumps(st, indent=2))
        return {**self.status(), "reused": True}

    def _start_on_free_ports(self, root: Path, spec: EnvSpec, spec_path: str, timeout: float, ray: kuberay.RayBoot | None = None) -> None:
        """``_start``; again from the beginning on new ports when a daemon found its port taken."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(root, spec, spec_path, timeout, ray)
                return
            except PortTaken as e:
                if attempt == PORT_ATTEMPTS:
                    raise
                self.progress(f"{e}; starting again on new ports (attempt {attempt + 1} of {PORT_ATTEMPTS})")
                self._stop_all()

    def _start(self, root: Path, spec: EnvSpec, spec_path: str, timeout: float, ray: kuberay.RayBoot | None) -> None:
        """Start every component in order, each ready before the next that needs it."""
        b = self._prepare(root, spec_path, timeout, ray)
        boot.start_etcd(b)
        kube = boot.start_apiserver(b)
        boot.start_controllers(b)
        boot.start_kwok(b, kube)
        jobset_kueue.install(b, kube, multi_tier_checkpointing=_multi_tier(spec))
        # The spec's waitForPodsReady, its timeouts shrunk by the rehearsal time factor like every other duration here.
        settings = self.role.kueue_settings
        jobset_kueue.start(
            b,
            settings if settings is not None else kueue_objects.manager_settings(spec, time_scale=rehearsal.time_factor()),
            inplace.jobset_settings(spec),
        )
        boot.kwok_ready(b)
        self._sync_nodes(kube, spec, timeout)
        jobset_kueue.wait_ready(b, kube)
        self._apply_cluster_objects(kube, spec)
        skip, daemons = self.role.skip, self.daemons
        if "gcs" in skip:
            bucket.publish(kube, spec, self.role.gcs_url or "", self.progress, self.role.bucket_bindings)
        else:
            bucket.publish(kube, spec, bucket.start(daemons, b.ports.gcs, timeout), self.progress, self.role.bucket_bindings)
        if "logging" not in skip:
            cloudlogging.SERVICE.publish(kube, cloudlogging.start(daemons, b.ports.logging, timeout))
        if "rehearsal" not in skip:
            daemons.start_python("rehearsal", "workloads.local.rehearsald", rehearsald.ready_file(self.state_dir), "the rehearsal daemon", timeout)
        if "provisioner" not in skip:
            daemons.start_python(
                "provisioner",
                "workloads.local.provisioner",
                provisioner.ready_file(self.state_dir),
                "the provisioner",
                timeout,
                "the simulated DWS provisioner",
            )
        if ray:
            kuberay.start_daemons(daemons, ray, timeout)

    def _prepare(self, root: Path, spec_path: str, timeout: float, ray: kuberay.RayBoot | None) -> boot.Boot:
        """A clean state dir (pki kept), fresh ports, cluster.json and the kubeconfigs."""
        sd = self.state_dir
        state.claim(sd)
        for sub in FRESH_START_WIPES:
            shutil.rmtree(sd / sub, ignore_errors=True)
        (sd / "logs").mkdir(parents=True, exist_ok=True)
        (sd / "config").mkdir(parents=True, exist_ok=True)
        b = boot.Boot(root, self.daemons, certs.ensure_pki(sd / "pki"), Ports.pick(), timeout, ray)
        st = {
            "ports": b.ports.__dict__,
            "bin_dir": str(root / "bin"),
            "spec": spec_path,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "layout": LAYOUT,
            "role": self.role.name,
            "skip": list(self.role.skip),
            **({"gcs_url": self.role.gcs_url} if self.role.gcs_url else {}),
        }
        write_atomic(self.state_file, json.dumps(st, indent=2))
        boot.write_kubeconfigs(sd, b.pki, b.ports.apiserver)
        return b

    def _sync_nodes(self, kube: Cluster, spec: EnvSpec, timeout: float) -> None:
        spec_objects.sync_nodes(kube, spec, tpu_nodes=self.role.tpu_nodes, wait=self.daemons.wait, timeout=timeout, progress=self.progress)

    def _apply_cluster_objects(self, kube: Cluster, spec: EnvSpec) -> None:
        spec_objects.apply_cluster_objects(kube, spec, objects=self.role.objects, source=self.role.name, progress=self.progress)

    # ------------------------------------------------------------------- down

    def down(self) -> list[str]:
        with self._lock():
            stopped = self._stop_all()
            if state.is_ours(self.state_dir):  # never clean a directory that is not a state dir of the toolkit's
                shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
                shutil.rmtree(bucket.data_dir(self.state_dir), ignore_errors=True)
                self.state_file.unlink(missing_ok=True)
            return stopped

    def _stop_all(self) -> list[str]:
        return self.daemons.stop_all()
