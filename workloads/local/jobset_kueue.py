"""JobSet and Kueue on the local control plane: installed, started as local processes, ready once the apiserver reaches their webhooks.

install     their CRDs, webhook-cert Secrets, Services and webhook configurations
            (``addons.install_objects``), before their processes start: the Secrets must
            exist before the cert rotators run; and GKE's ProvisioningRequest,
            ComputeClass and CheckpointConfiguration APIs (``addons``; with Ray, KubeRay's
            CRDs), before Kueue starts: it sets up only the integrations whose APIs
            exist at its start
start       the JobSet and Kueue controllers, Kueue with the spec's waitForPodsReady
            (``kueue.manager_settings``), its timeouts shrunk by the rehearsal time factor
wait_ready  GET /readyz of each; then a server-side dry-run create of a JobSet and of
            a Kueue LocalQueue goes through their mutating/validating webhooks (and
            Kueue's conversion webhook), i.e. the apiserver really reaches them
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from toolkit.errors import ClusterError
from toolkit.names import JOBSET_API, KUEUE_API, KUEUE_GROUP, TGK_LOCAL_FIELD_MANAGER
from toolkit.owned import write_atomic
from workloads.cluster.client import Cluster
from workloads.local import addons, certs, kuberay
from workloads.local.boot import Boot
from workloads.local.procs import http_ok
from workloads.render.kueue import merge_manager_config


def install(b: Boot, kube: Cluster, *, multi_tier_checkpointing: bool = False) -> None:
    """JobSet's and Kueue's CRDs, Secrets, Services and webhook configurations, and the GKE APIs Kueue looks for at its start.

    GKE's CheckpointConfiguration API is served only with ``multi_tier_checkpointing`` (a pool of the
    spec declares it): it is what GKE's HighScaleCheckpointing add-on installs, which ``infra deploy``
    turns on only then, and what ``submit``/``preflight`` look for before a multi-tier run.
    """
    b.daemons.progress("installing JobSet and Kueue CRDs and webhook configurations")
    jobset_ca = certs.write_webhook_cert(b.pki, b.jobset_certs, f"{addons.JOBSET.service}.{addons.JOBSET.namespace}.svc")
    for addon, file, port, ca in (
        (addons.JOBSET, "jobset-install.yaml", b.ports.jobset_webhook, jobset_ca),
        (addons.KUEUE, "kueue-install.yaml", b.ports.kueue_webhook, None),
    ):
        objs = addons.install_objects(addon, addons.load_docs(b.manifest(file)), port, ca)
        kube.apply(objs, field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)  # this tool owns them here
    # Before Kueue starts: its ProvisioningRequest admission check is set up only if the API exists then.
    b.daemons.progress("installing the ProvisioningRequest CRD (DWS queued provisioning)")
    for crd in (addons.PROVISIONING_REQUEST_CRD, addons.COMPUTE_CLASS_CRD, addons.SLICE_CRD):
        kube.apply(addons.load_docs(crd), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)
    if multi_tier_checkpointing:
        install_checkpointing_addon(b.daemons.progress, kube)
    if b.ray:  # before Kueue starts: it sets up only the integrations whose CRDs exist then
        b.daemons.progress(f"installing the KubeRay {kuberay.KUBERAY_VERSION} CRDs")
        kube.apply(kuberay.crd_objects(b.ray.root), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)


def install_checkpointing_addon(progress, kube: Cluster) -> None:
    """What GKE's multi-tier checkpointing add-on serves that the toolkit uses: the CheckpointConfiguration API."""
    progress("installing the CheckpointConfiguration CRD (multi-tier checkpointing)")
    kube.apply(addons.load_docs(addons.CHECKPOINT_CONFIGURATION_CRD), field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)


def start(b: Boot, settings: dict[str, Any], jobset_settings: dict[str, Any] | None = None) -> None:
    """The JobSet and Kueue controllers, as local processes; ``settings`` laid over Kueue's configuration,
    ``jobset_settings`` over JobSet's (its InPlaceRestart gate, ``workloads.render.inplace.jobset_settings``).

    Both read their Configuration once: a cluster reused with another spec keeps the settings it started with.
    """
    b.daemons.progress("starting JobSet and Kueue")
    ports = b.ports
    env = {"KUBECONFIG": str(b.kubeconfig)}
    jcfg, kcfg = b.config("jobset.yaml"), b.config("kueue.yaml")
    jobset_config = addons.jobset_config(webhook_port=ports.jobset_webhook, health_port=ports.jobset_health, cert_dir=b.jobset_certs)
    jcfg.write_text(yaml.safe_dump(merge_manager_config(jobset_config, jobset_settings or {})))
    kueue_config = addons.kueue_config(webhook_port=ports.kueue_webhook, health_port=ports.kueue_health, cert_dir=b.kueue_certs, settings=settings)
    kcfg.write_text(yaml.safe_dump(kueue_config))
    b.start("jobset", [b.bin("jobset"), f"--config={jcfg}", "--zap-log-level=2"], env=env)
    if b.ray:
        kcfg.write_text(yaml.safe_dump(kuberay.with_frameworks(yaml.safe_load(kcfg.read_text()))))
    b.start("kueue", [b.bin("kueue"), f"--config={kcfg}", "--zap-log-level=2"], env=env)


def wait_ready(b: Boot, kube: Cluster) -> None:
    """JobSet and Kueue ready, and their webhooks reachable from the apiserver."""
    ports = b.ports

    # Kueue's cert rotator fills its Secret and then waits for kubelet to
    # mount it into the cert dir; here we are the kubelet, so every poll
    # copies the current Secret to disk (the webhook server reloads changed files).
    def synced() -> bool:
        return sync_cert_secret(kube, addons.KUEUE, b.kueue_certs)

    b.wait("JobSet readiness", lambda: http_ok(f"http://127.0.0.1:{ports.jobset_health}/readyz", "ok"))
    b.wait("Kueue readiness", lambda: synced() and http_ok(f"http://127.0.0.1:{ports.kueue_health}/readyz", "ok"))
    b.wait("JobSet and Kueue webhooks reachable from the apiserver", lambda: synced() and webhooks_answer(kube))


def sync_cert_secret(kube: Cluster, addon: addons.Addon, cert_dir: Path) -> bool:
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


def webhooks_answer(kube: Cluster) -> bool:
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
