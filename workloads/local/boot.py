"""The Kubernetes control plane of the local cluster, started on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, and the kubeconfigs that reach it.

Each step starts a binary of the build (scripts/build-local-cluster.sh) as a daemon and
waits for a real signal of readiness (``Daemons.wait``):

  etcd                     GET /health is {"health":"true"}
  kube-apiserver           GET /readyz is "ok" (admin client cert)
  controller-manager,      GET /healthz on their secure ports is "ok"
  scheduler
  kwok                     GET /healthz (awaited by ``controlplane`` once the add-ons
                           started); kwok plays every Node's kubelet and serves pod logs:
                           the apiserver reaches it as each Node's kubelet port, and
                           per-pod ``Logs`` objects name the files
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolkit.names import KWOK_NODE_SELECTOR, TGK_LOCAL_FIELD_MANAGER
from toolkit.owned import write_atomic
from workloads.cluster.client import Cluster
from workloads.local import CONTEXT, addons, certs, kuberay, state
from workloads.local.daemons import Daemons, Ports
from workloads.local.procs import http_ok, https_ok

KWOK_LOGS_CRD = "kwok/crd/bases/kwok.x-k8s.io_logs.yaml"  # under the build's manifests/


@dataclass(frozen=True)
class Boot:
    """What every start-up step needs: the build, the state dir's daemons, the PKI, the ports, the wait limit."""

    root: Path
    daemons: Daemons
    pki: certs.Pki
    ports: Ports
    timeout: float  # per wait
    ray: kuberay.RayBoot | None = None  # a start with Ray: KubeRay's build and the Ray venv

    @property
    def state_dir(self) -> Path:
        return self.daemons.state_dir

    @property
    def kubeconfig(self) -> Path:
        return state.kubeconfig(self.state_dir)

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

    def start(self, name: str, argv: list[str], **kwargs: Any) -> None:
        self.daemons.daemon(name).start(argv, **kwargs)

    def wait(self, what: str, check: Any) -> None:
        self.daemons.wait(what, check, self.timeout)


def start_etcd(b: Boot) -> None:
    b.daemons.progress("starting etcd")
    port, peer = b.ports.etcd, b.ports.etcd_peer
    b.start(
        "etcd",
        [
            b.bin("etcd"),
            "--name=tgk-local",
            f"--data-dir={b.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}",
            f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=tgk-local=http://127.0.0.1:{peer}",
            # A throwaway cluster: durability is not worth an fsync per write.
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )
    b.wait("etcd", lambda: http_ok(f"http://127.0.0.1:{port}/health", '"health":"true"'))


def start_apiserver(b: Boot) -> Cluster:
    """kube-apiserver, ready; returns the admin client."""
    b.daemons.progress("starting kube-apiserver")
    pki = b.pki
    b.start(
        "kube-apiserver",
        [
            b.bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{b.ports.etcd}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={b.ports.apiserver}",
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
            f"--cert-dir={b.state_dir / 'run'}",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            # kwok's Nodes report 127.0.0.1 and kwok's port (logs); never a host name.
            "--kubelet-preferred-address-types=InternalIP",
            # Container restart rules (a container's restartPolicyRules), which JobSet's in-place restart
            # needs: alpha in 1.34, beta and on from 1.35, where GKE offers them (infra.gke_features).
            "--feature-gates=ContainerRestartRules=true",
        ],
    )
    kube = state.client_on(b.state_dir, b.ports.apiserver)
    b.wait("kube-apiserver", kube.healthy)
    return kube


def start_controllers(b: Boot) -> None:
    """kube-controller-manager and kube-scheduler: start both, then wait for both."""
    b.daemons.progress("starting kube-controller-manager and kube-scheduler")
    pki, ports = b.pki, b.ports
    sched_cfg = b.config("scheduler.yaml")
    sched_cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(b.config("scheduler.kubeconfig")), "qps": 200, "burst": 400},
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    b.start(
        "kube-controller-manager",
        [
            b.bin("kube-controller-manager"),
            f"--kubeconfig={b.config('controller-manager.kubeconfig')}",
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
            f"--cert-dir={b.state_dir / 'run' / 'kcm-certs'}",
        ],
    )
    b.start(
        "kube-scheduler",
        [
            b.bin("kube-scheduler"),
            f"--config={sched_cfg}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.scheduler}",
            f"--cert-dir={b.state_dir / 'run' / 'scheduler-certs'}",
        ],
    )
    b.wait("kube-controller-manager", lambda: https_ok(ports.controller_manager, "/healthz"))
    b.wait("kube-scheduler", lambda: https_ok(ports.scheduler, "/healthz"))


def start_kwok(b: Boot, kube: Cluster) -> None:
    """kwok with its stages (its health is awaited by ``kwok_ready``, after the add-ons started).

    kwok is every Node's kubelet endpoint (``--node-port``: the apiserver asks it for
    pod logs) and serves each pod's log from the file its ``Logs`` object names
    (``--enable-crds=Logs``; the rehearsal daemon creates them).
    """
    b.daemons.progress("starting kwok")
    kube.apply(addons.load_docs(b.manifest(KWOK_LOGS_CRD)), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
    stages = addons.kwok_stages(addons.load_docs(b.manifest("kwok-stages.yaml")))
    if b.ray:
        stages = kuberay.kwok_stages(stages)
    kwok_cfg = b.config("kwok.yaml")
    kwok_cfg.write_text(yaml.safe_dump_all(addons.kwok_config_docs(stages), sort_keys=False))
    b.start(
        "kwok",
        [
            b.bin("kwok"),
            f"--kubeconfig={b.kubeconfig}",
            f"--config={kwok_cfg}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
            # Leases keep the simulated nodes Ready exactly the way kubelets do.
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{b.ports.kwok}",
            f"--node-port={b.ports.kwok}",
            "--enable-crds=Logs",
            "--cidr=10.64.0.0/14",
            "--node-ip=127.0.0.1",
        ],
    )


def kwok_ready(b: Boot) -> None:
    b.wait("kwok", lambda: http_ok(f"http://127.0.0.1:{b.ports.kwok}/healthz", "ok"))


def write_kubeconfigs(state_dir: Path, pki: certs.Pki, port: int) -> None:
    """The admin's kubeconfig and the controller-manager's and scheduler's, each with its own client cert."""
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
        ("admin", state.kubeconfig(state_dir)),
        ("controller-manager", state_dir / "config" / "controller-manager.kubeconfig"),
        ("scheduler", state_dir / "config" / "scheduler.kubeconfig"),
    ):
        # Private from the first byte (it holds a client key), and never half-written for a reader.
        write_atomic(path, yaml.safe_dump(doc(who), sort_keys=False), mode=0o600)
