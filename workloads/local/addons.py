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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolkit.names import TGK_LOCAL_PREFIX
from workloads.render.exitguard import SIGTERM_EXIT_CODE

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
# A rehearsal pod (``submit`` on the local cluster, workloads.local.rehearsal) carries
# this label and its plan as an annotation of the same name; it runs until the
# rehearsal daemon has written FINISH_AT_ANNOTATION (an RFC 3339 time) on it, and
# kwok's complete stage fires at that time, not before.
REHEARSAL_LABEL = f"{TGK_LOCAL_PREFIX}/rehearsal"
# On a Pathways run's pods beside the rehearsal facts: its elastic slices (workloads/local/pathways_rehearsal.py plays them).
PATHWAYS_ANNOTATION = f"{TGK_LOCAL_PREFIX}/pathways"
REHEARSAL_ANNOTATION = REHEARSAL_LABEL
# A Lustre helper pod (workloads.render.volume_helper) on the local cluster carries REHEARSAL_LABEL
# (it ends when the daemon writes FINISH_AT_ANNOTATION) and this annotation: the rehearsal
# daemon runs its request against the directory that plays the claim (workloads.local.volumes).
VOLUME_HELPER_ANNOTATION = f"{TGK_LOCAL_PREFIX}/volume-helper"
# On a RayJob: how long the stand-in Ray job runs (workloads/local/kuberay.py); set by
# ``submit`` on the local cluster from the rehearsal time, like REHEARSAL_ANNOTATION.
RAY_JOB_SECONDS_ANNOTATION = f"{TGK_LOCAL_PREFIX}/ray-job-seconds"
FINISH_AT_ANNOTATION = f"{TGK_LOCAL_PREFIX}/finish-at"
# A Node carrying this annotation is down (its VM is gone): kwok's node stages leave
# it alone, so the NotReady status `local preempt` gives it stays. kwok keeps the Node
# in its care otherwise (it sees the Node's deletion and takes the new one at once).
NODE_DOWN_ANNOTATION = f"{TGK_LOCAL_PREFIX}/node-down"


@dataclass(frozen=True)
class Addon:
    name: str  # kueue | jobset
    namespace: str
    service: str
    secret: str


KUEUE = Addon("kueue", "kueue-system", "kueue-webhook-service", "kueue-webhook-server-cert")
JOBSET = Addon("jobset", "jobset-system", "jobset-webhook-service", "jobset-webhook-server-cert")


# GKE's own APIs, which GKE serves itself, written for this project from their published
# definitions (each file's header says from what), so what the toolkit applies to GKE applies
# here too. The multi-networking CRDs take the DCN objects of a spec with network.dcn
# (workloads.render.multinetwork).
GKE_NETWORKING_CRDS = Path(__file__).parent / "crds" / "gke-networking.yaml"  # network.dcn: GKENetworkParamSet, Network
PROVISIONING_REQUEST_CRD = Path(__file__).parent / "crds" / "provisioningrequests.yaml"  # DWS queued provisioning
COMPUTE_CLASS_CRD = Path(__file__).parent / "crds" / "computeclasses.yaml"  # compute class pools' ComputeClasses
CHECKPOINT_CONFIGURATION_CRD = Path(__file__).parent / "crds" / "checkpointconfigurations.yaml"  # multi-tier checkpointing
SLICE_CRD = Path(__file__).parent / "crds" / "slices.yaml"  # dynamic slicing's Slice objects (workloads/local/slices.py)


def gke_networking_crds() -> list[dict[str, Any]]:
    return load_docs(GKE_NETWORKING_CRDS)


def load_docs(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def install_objects(addon: Addon, docs: Iterable[dict[str, Any]], port: int, ca_bundle: bytes | None = None) -> list[dict[str, Any]]:
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


def kueue_config(*, webhook_port: int, health_port: int, cert_dir: Path, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Kueue's Configuration for the local cluster; ``settings`` (the spec's part,
    ``workloads.render.kueue.manager_settings``) is laid over it, as the provision pipeline does on GKE."""
    from workloads.render.kueue import merge_manager_config

    return merge_manager_config(_kueue_base_config(webhook_port=webhook_port, health_port=health_port, cert_dir=cert_dir), settings or {})


def _kueue_base_config(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
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


def _terminated_status(exit_code: str, reason: str, phase: str) -> str:
    """A statusTemplate: every container terminated with ``exit_code`` (a template expression), the pod in ``phase``.

    kwok applies it as a strategic merge patch of the status: conditions it does not
    name (DisruptionTarget, set by whoever disrupted the pod) are kept.
    """
    return (
        "{{ $now := Now }}\n"
        "{{ $annotations := or .metadata.annotations dict }}\n"
        f"{{{{ $code := {exit_code} }}}}\n"
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
        f"      reason: {reason}\n"
        "      startedAt: {{ $now | Quote }}\n"
        "{{ end }}\n"
        f"phase: {phase}\n"
    )


def _pod_stage(name: str, match: list[dict[str, Any]], status_template: str, delay_from: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": match},
    }
    if delay_from:
        spec["delay"] = {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": delay_from}}
    spec["next"] = {"statusTemplate": status_template}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _key(expression: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": expression, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


# jq over a pod: true when something disrupted it (preemption, eviction, node shutdown, podgc).
_DISRUPTED = '[.status.conditions[]? | select(.type == "DisruptionTarget" and .status == "True")] | length > 0'
_NOT_DELETED = _key(".metadata.deletionTimestamp", "DoesNotExist")
_RUNNING = _key(".status.phase", "In", "Running")
_NOT_DISRUPTED = _key(_DISRUPTED, "In", "false")


def _fail_stage() -> dict[str, Any]:
    return _pod_stage(
        "tgk-pod-fail",
        [_key(f'.metadata.labels["{FAIL_LABEL}"]', "In", "true"), _NOT_DELETED, _RUNNING, _NOT_DISRUPTED],
        _terminated_status(f'or ( index $annotations "{FAIL_EXIT_CODE_ANNOTATION}" ) 1', "Error", "Failed"),
        delay_from='.metadata.annotations["pod-fail.stage.kwok.x-k8s.io/delay"]',
    )


def _terminate_stage() -> dict[str, Any]:
    """The kubelet's part when a pod is deleted or disrupted: stop its containers, phase Failed.

    Deletion (the Eviction API, a Job or JobSet deleting its pods, kubectl delete) and
    disruption (a DisruptionTarget condition, as the kubelet's node-shutdown manager sets
    it) both end with the containers terminated by SIGTERM and the pod Failed, its
    DisruptionTarget condition kept: what the Job controller's podFailurePolicy reads.
    The pod object then goes through the pod-delete stage, once its finalizers are gone.
    """
    deleted_or_disrupted = f"(.metadata.deletionTimestamp != null) or ({_DISRUPTED})"
    return _pod_stage(
        "tgk-pod-terminate",
        [_key(".status.phase", "In", "Pending", "Running"), _key(deleted_or_disrupted, "In", "true")],
        _terminated_status(str(SIGTERM_EXIT_CODE), "Error", "Failed"),
    )


def _rehearsal_complete_stage() -> dict[str, Any]:
    """A rehearsal pod succeeds at the time the rehearsal daemon wrote on it (never before it wrote one)."""
    return _pod_stage(
        "tgk-rehearsal-complete",
        [
            _key(f'.metadata.labels["{REHEARSAL_LABEL}"]', "In", "true"),
            _key(f'.metadata.annotations["{FINISH_AT_ANNOTATION}"]', "Exists"),
            _key(f'.metadata.labels["{FAIL_LABEL}"]', "DoesNotExist"),
            _NOT_DELETED,
            _RUNNING,
            _NOT_DISRUPTED,
        ],
        _terminated_status("0", "Completed", "Succeeded"),
        # An absolute time: kwok re-plans the stage on every pod update, and an RFC 3339
        # value keeps the same end whatever updates come in between.
        delay_from=f'.metadata.annotations["{FINISH_AT_ANNOTATION}"]',
    )


def kwok_stages(published: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kwok's published stages, made instant by default and kubelet-like, plus the toolkit's own.

    The general pod stages wait 1 s plus up to 5 s of random jitter at every
    step; that jitter would dominate the benchmarks. Their defaults are zeroed
    here; the per-pod annotations (``pod-complete.stage.kwok.x-k8s.io/delay``
    and friends) still set delays where a test wants a pod to keep running.
    Changes that make a kwok pod end the way a kubelet ends it:

    - pod-complete leaves alone pods labelled to fail, rehearsal pods (they complete
      at their finish time, ``tgk-rehearsal-complete``) and disrupted pods;
    - pod-delete removes only pods whose containers have stopped (``tgk-pod-terminate``
      stops them first), and at once: a kubelet removes a pod as soon as its containers
      have exited, not at the end of the grace period;
    - the node stages leave a Node marked down (``NODE_DOWN_ANNOTATION``) NotReady.
    """
    out = []
    for st in published:
        st = copy.deepcopy(st)
        spec = st.get("spec", {})
        is_pod = spec.get("resourceRef", {}).get("kind") == "Pod"
        is_node = spec.get("resourceRef", {}).get("kind") == "Node"
        delay = spec.get("delay")
        if is_pod and delay:
            delay["durationMilliseconds"] = 0
            delay.pop("jitterDurationMilliseconds", None)
        name = st["metadata"]["name"]
        if is_node:
            spec.setdefault("selector", {}).setdefault("matchExpressions", []).append(_key(f'.metadata.annotations["{NODE_DOWN_ANNOTATION}"]', "DoesNotExist"))
        if is_pod and name == "pod-complete":
            spec["selector"]["matchExpressions"] += [
                _key(f'.metadata.labels["{FAIL_LABEL}"]', "DoesNotExist"),
                _key(f'.metadata.labels["{REHEARSAL_LABEL}"]', "DoesNotExist"),
                _NOT_DISRUPTED,
            ]
        if is_pod and name == "pod-delete":
            if delay:
                delay.pop("jitterDurationFrom", None)
            spec["selector"]["matchExpressions"].append(_key(".status.phase", "NotIn", "Pending", "Running"))
        out.append(st)
    out += [_fail_stage(), _terminate_stage(), _rehearsal_complete_stage()]
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
                # The kubelet API (/containerLogs): pod logs through the apiserver.
                "enableDebuggingHandlers": True,
            },
        },
        *stages,
    ]
