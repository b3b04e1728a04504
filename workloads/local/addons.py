"""The Kueue, JobSet and kwok pieces of the local cluster, as data.

Pure functions over the install sets rendered by scripts/build-local-cluster.sh
(``kustomize build config/default`` of each module zip). From each install set
only what a process outside the cluster needs is kept — Namespace, CRDs, the
webhook-cert Secret, the webhook Service and the webhook configurations — and
the Deployment, RBAC and visibility APIService are dropped (the controllers run
as local processes; Kueue's on-demand visibility API is switched off).

The webhook trick: the ``<name>-webhook-service`` Service becomes
``type: ExternalName, externalName: localhost`` and every webhook / CRD
conversion entry gets the local port. The apiserver then calls
``https://localhost:<port>`` while verifying the certificate for
``<svc>.<ns>.svc``, which is exactly the name each controller's own certificate
rotation issues — so their real cert management and caBundle injection run
unchanged. Kueue and JobSet get different ports and cert directories (both
default to 9443 and /tmp/k8s-webhook-server/serving-certs).
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from toolkit.names import TGK_LOCAL_PREFIX

KEEP_KINDS = {
    "Namespace",
    "CustomResourceDefinition",
    "Secret",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
# Kueue's batch/job and JobSet integrations are what the toolkit submits through.
KUEUE_FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset"]

# A pod carrying this label fails (phase Failed, exit code from the annotation,
# default 1) once Running: lets tests exercise JobSet restarts with kwok.
FAIL_LABEL = f"{TGK_LOCAL_PREFIX}/fail"
FAIL_EXIT_CODE_ANNOTATION = f"{TGK_LOCAL_PREFIX}/exit-code"


@dataclass(frozen=True)
class Addon:
    name: str  # kueue | jobset
    namespace: str
    service: str
    secret: str


KUEUE = Addon("kueue", "kueue-system", "kueue-webhook-service", "kueue-webhook-server-cert")
JOBSET = Addon("jobset", "jobset-system", "jobset-webhook-service", "jobset-webhook-server-cert")


def load_docs(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def install_objects(
    addon: Addon, docs: Iterable[dict[str, Any]], port: int, ca_bundle: bytes | None = None
) -> list[dict[str, Any]]:
    """The objects to apply for ``addon``, with its webhooks pointed at localhost:port.

    ``ca_bundle`` (PEM) is set on every webhook and CRD conversion entry when the
    serving cert is made here rather than by the controller's own rotator.
    Order matters: Namespace, Secret and Service first (the webhooks reference
    them), CRDs, then the webhook configurations.
    """
    out: list[dict[str, Any]] = []
    for doc in docs:
        kind = doc.get("kind")
        if kind not in KEEP_KINDS:
            continue
        obj = copy.deepcopy(doc)
        if kind == "Secret" and obj["metadata"]["name"] != addon.secret:
            continue
        if kind == "CustomResourceDefinition":
            conv = obj["spec"].get("conversion") or {}
            svc = ((conv.get("webhook") or {}).get("clientConfig") or {}).get("service")
            if svc:
                svc["port"] = port
                if ca_bundle:
                    conv["webhook"]["clientConfig"]["caBundle"] = base64.b64encode(ca_bundle).decode()
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj.get("webhooks", []):
                svc = hook.get("clientConfig", {}).get("service")
                if svc:
                    svc["port"] = port
                    if ca_bundle:
                        hook["clientConfig"]["caBundle"] = base64.b64encode(ca_bundle).decode()
        out.append(obj)
    out.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": addon.service, "namespace": addon.namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        }
    )
    order = {"Namespace": 0, "Secret": 1, "Service": 1, "CustomResourceDefinition": 2}
    return sorted(out, key=lambda o: order.get(o["kind"], 3))


def kueue_config(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE.namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # "0" switches the metrics server off: nothing scrapes it here.
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": KUEUE.service,
            "webhookSecretName": KUEUE.secret,
        },
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        # The aggregated visibility API would need the apiserver to proxy to a
        # Service endpoint; nothing in the toolkit reads it, so it is off.
        "featureGates": {"VisibilityOnDemand": False},
    }


def jobset_config(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        # JobSet v0.10's rotator waits for its certs in a fixed path
        # (/tmp/k8s-webhook-server/serving-certs) whatever certDir says, which two
        # local clusters on one machine would share: its serving cert comes from
        # the cluster CA instead (workloads.local.certs.write_webhook_cert).
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def _fail_stage() -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "tgk-pod-fail"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": f'.metadata.labels["{FAIL_LABEL}"]', "operator": "In", "values": ["true"]},
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                ]
            },
            "delay": {
                "durationMilliseconds": 0,
                "durationFrom": {"expressionFrom": '.metadata.annotations["pod-fail.stage.kwok.x-k8s.io/delay"]'},
            },
            "next": {
                "statusTemplate": (
                    "{{ $now := Now }}\n"
                    "{{ $annotations := or .metadata.annotations dict }}\n"
                    f'{{{{ $code := or ( index $annotations "{FAIL_EXIT_CODE_ANNOTATION}" ) 1 }}}}\n'
                    "containerStatuses:\n"
                    "{{ range $index, $item := .spec.containers }}\n"
                    "- image: {{ $item.image | Quote }}\n"
                    "  name: {{ $item.name | Quote }}\n"
                    "  ready: false\n"
                    "  restartCount: 0\n"
                    "  started: false\n"
                    "  state:\n"
                    "    terminated:\n"
                    "      exitCode: {{ $code }}\n"
                    "      finishedAt: {{ $now | Quote }}\n"
                    "      reason: Error\n"
                    "      startedAt: {{ $now | Quote }}\n"
                    "{{ end }}\n"
                    "phase: Failed\n"
                )
            },
        },
    }


def kwok_stages(published: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kwok's published stages, made instant by default, plus the fail stage.

    The general pod stages wait 1 s plus up to 5 s of random jitter at every
    step; that jitter would dominate the benchmarks. Their defaults are zeroed
    here; the per-pod annotations (``pod-complete.stage.kwok.x-k8s.io/delay``
    and friends) still set delays where a test wants a pod to keep running.
    Pods labelled to fail are kept away from the complete stage.
    """
    out = []
    for st in published:
        st = copy.deepcopy(st)
        spec = st.get("spec", {})
        is_pod = spec.get("resourceRef", {}).get("kind") == "Pod"
        delay = spec.get("delay")
        if is_pod and delay:
            delay["durationMilliseconds"] = 0
            delay.pop("jitterDurationMilliseconds", None)
        if is_pod and st["metadata"]["name"] == "pod-complete":
            spec["selector"]["matchExpressions"].append(
                {"key": f'.metadata.labels["{FAIL_LABEL}"]', "operator": "DoesNotExist"}
            )
        out.append(st)
    out.append(_fail_stage())
    return out


def kwok_config_docs(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "nodeLeaseParallelism": 4,
                "podPlayStageParallelism": 8,
                "nodePlayStageParallelism": 4,
            },
        },
        *stages,
    ]
