"""Kueue MultiKueue objects of a fleet (``infra.fleet``): the manager's side and each worker's. Pure.

Checked against Kueue v0.17.1, served the same by v0.19.2 (``apis/kueue/v1beta2/multikueue_types.go``,
``pkg/controller/admissionchecks/multikueue/``):

- manager: the teams' ClusterQueues over every worker's flavors with one admission check,
  ``controllerName: kueue.x-k8s.io/multikueue``, whose parameters name a MultiKueueConfig
  listing one MultiKueueCluster per worker; each MultiKueueCluster reads its worker's
  kubeconfig from the Secret ``spec.clusterSource.kubeConfig`` names (``locationType:
  Secret``, key ``kubeconfig``) in Kueue's own namespace. Kueue refuses a kubeconfig with
  a token file, a CA file path, an exec plugin or no TLS check, so the Secret carries the
  token and the CA inline (``kubeconfig``).
- worker: what a single cluster gets (``kueue.cluster_objects``: the same namespaces and
  LocalQueues, flavors for its own pools) plus the identity the manager acts as there
  (``identity_objects``).

The worker's credentials travel over TLS only: ``kubeconfig`` refuses a server URL that is
not ``https://`` (the Secret holds the identity's long-lived token inline, and Kueue itself
checks only the host), and nothing here prints a token. The identity's token lives in a
``kubernetes.io/service-account-token`` Secret on the worker (``token_secret``), one per
credential: rotating it (``workloads.runs.fleet.rotate``) creates a new one, points the
manager's Secret at it, and deletes the old one, which revokes its token.

The identity's RBAC is what the manager's Kueue does on a worker and no more: it watches
and lists Workloads and every job kind it integrates (batch Jobs, JobSets) across the
cluster (its watches carry a label selector but no namespace, so that needs a
ClusterRole binding), and it creates, reads and deletes them — and patches Workload
status — only in the fleet's team namespaces (RoleBindings there). It cannot read
Secrets, pods or anything in another namespace.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import yaml

from infra.fleet import Fleet, Worker
from toolkit.errors import FieldError
from toolkit.names import JOBSET_GROUP, K8S_MANAGED_BY_LABEL, KUEUE_API, KUEUE_GROUP, TGK
from workloads.render import kueue

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_NAMESPACE = "kueue-system"
# What the manager's Kueue is on each worker (a ServiceAccount in Kueue's namespace there).
IDENTITY = "tgk-multikueue"
WATCH_ROLE = f"{IDENTITY}-watch"
WRITE_ROLE = f"{IDENTITY}-write"
# The label on each token Secret of the identity (its value: the identity), by which the flow finds the current one.
TOKEN_LABEL = "tpu-gke-toolkit/multikueue-token"
# The manager's kubeconfig Secret names the worker's token Secret its token came from.
TOKEN_SOURCE_ANNOTATION = "tpu-gke-toolkit/token-secret"
# The job kinds the manager's Kueue integrates, each watched on every worker.
JOB_RESOURCES = (("batch", "jobs"), (JOBSET_GROUP, "jobsets"))
RBAC_API = "rbac.authorization.k8s.io/v1"


def manager_objects(fleet: Fleet) -> list[dict[str, Any]]:
    """The manager's side, in an order the API server accepts (the Secrets are applied first, by the flow)."""
    spec = fleet.manager_env()  # the Kueue objects are rendered from an environment spec: the manager's (infra.fleet)
    check = {"admissionChecks": [{"name": fleet.admission_check}]}
    queues = []
    for cq in kueue.cluster_queues(spec):
        # The workers own their provisioning checks; here only the dispatch decides.
        cq["spec"]["admissionChecksStrategy"] = check
        queues.append(cq)
    return [
        *kueue.priority_classes(),
        *kueue.namespaces(spec),
        *kueue.resource_flavors(spec),
        *[multikueue_cluster(w) for w in fleet.workers],
        {"apiVersion": KUEUE_API, "kind": "MultiKueueConfig", "metadata": {"name": fleet.name}, "spec": {"clusters": [w.name for w in fleet.workers]}},
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": fleet.admission_check},
            "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": fleet.name}},
        },
        *queues,
        *kueue.local_queues(spec),
    ]


def multikueue_cluster(worker: Worker) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "MultiKueueCluster",
        "metadata": {"name": worker.name},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": Fleet.secret_name(worker.name)}}},
    }


def worker_objects(fleet: Fleet, worker: Worker) -> list[dict[str, Any]]:
    """A worker's side: its own cluster's objects, then the identity the manager uses there."""
    return [*kueue.cluster_objects(worker.spec), *identity_objects(fleet)]


def _rule(group: str, resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def identity_objects(fleet: Fleet) -> list[dict[str, Any]]:
    """The manager's identity on a worker: a ServiceAccount and the least RBAC MultiKueue needs.

    Its token Secret is not among them: the flow creates one only where none is current
    (``token_secret``), so applying again never revives a token a rotation deleted.
    """
    jobs = [_rule(g, [r], ["get", "list", "watch"]) for g, r in JOB_RESOURCES]
    watch = [_rule(KUEUE_GROUP, ["workloads"], ["get", "list", "watch"]), *jobs]
    write = [
        _rule(KUEUE_GROUP, ["workloads"], ["create", "delete", "get"]),
        _rule(KUEUE_GROUP, ["workloads/status"], ["get", "patch", "update"]),
        *[_rule(g, [r], ["create", "delete", "get"]) for g, r in JOB_RESOURCES],
        *[_rule(g, [f"{r}/status"], ["get"]) for g, r in JOB_RESOURCES],
    ]
    subject = [{"kind": "ServiceAccount", "name": IDENTITY, "namespace": KUEUE_NAMESPACE}]
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": IDENTITY, "namespace": KUEUE_NAMESPACE}, "automountServiceAccountToken": False},
        {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": WATCH_ROLE}, "rules": watch},
        {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": WRITE_ROLE}, "rules": write},
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": WATCH_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WATCH_ROLE},
            "subjects": subject,
        },
    ]
    for ns in sorted({t.ns for t in fleet.manager.teams}):
        out.append(
            {
                "apiVersion": RBAC_API,
                "kind": "RoleBinding",
                "metadata": {"name": WRITE_ROLE, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WRITE_ROLE},
                "subjects": subject,
            }
        )
    return out


def token_secret(name: str = IDENTITY) -> dict[str, Any]:
    """A long-lived token of the identity: the worker's token controller fills it; deleting it revokes the token."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": name,
            "namespace": KUEUE_NAMESPACE,
            "labels": {TOKEN_LABEL: IDENTITY, K8S_MANAGED_BY_LABEL: TGK},
            "annotations": {"kubernetes.io/service-account.name": IDENTITY},
        },
    }


def check_tls(worker: str, server: str, field: str) -> None:
    """A worker is reached over TLS only: the manager's Secret carries its long-lived token to ``server``."""
    url = urlsplit(server)
    # Scheme, host and port only: a user:password@ in the URL is not repeated.
    shown_url = f"{url.scheme}://{url.netloc.rpartition('@')[2]}"
    if url.scheme.lower() != "https" or not url.hostname:
        raise FieldError(
            field,
            f"worker {worker} is reached at {shown_url}, not https://: its long-lived token would cross the network in the clear",
            "reach the worker's API server over https (GKE's endpoints are), with its CA in the kubeconfig",
        )
    if "@" in url.netloc:
        raise FieldError(
            field,
            f"worker {worker}'s server URL {shown_url} carries a user name or password, which the manager's Secret would copy (and Kueue refuses)",
            "remove user:password@ from the cluster's server in the kubeconfig",
        )


def kubeconfig(worker: str, server: str, ca_pem: bytes, token: str, *, field: str = "") -> str:
    """The worker's kubeconfig as MultiKueue accepts it: CA and token inline, TLS checked, an ``https://`` server only."""
    check_tls(worker, server, field or f"worker {worker}")
    ctx = f"{worker}-multikueue"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": worker, "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": ctx, "user": {"token": token}}],
        "contexts": [{"name": ctx, "context": {"cluster": worker, "user": ctx}}],
        "current-context": ctx,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubeconfig_secret(worker: str, config: str, *, token_source: str = IDENTITY) -> dict[str, Any]:
    """The Secret on the manager a MultiKueueCluster names (key ``kubeconfig``, in Kueue's namespace), naming the worker's token Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": Fleet.secret_name(worker),
            "namespace": KUEUE_NAMESPACE,
            "labels": {K8S_MANAGED_BY_LABEL: TGK},
            "annotations": {TOKEN_SOURCE_ANNOTATION: token_source},
        },
        "data": {"kubeconfig": base64.b64encode(config.encode()).decode()},
    }


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def manager_settings(fleet: Fleet, *, time_scale: float = 1.0) -> dict[str, Any]:
    """The manager's Kueue Configuration: the spec's part (``kueue.manager_settings``) and ``multiKueue``.

    ``origin`` is the fleet's name (the label value a worker's objects carry, by which this
    manager's garbage collector finds its own); ``time_scale`` shrinks the lost-worker
    timeout for the rehearsal, as every other duration there.
    """
    mk = fleet.multikueue
    return {
        **kueue.manager_settings(fleet.manager_env(), time_scale=time_scale),
        "multiKueue": {
            "gcInterval": "0s" if mk.gc_interval_seconds == 0 else _duration(mk.gc_interval_seconds * time_scale),
            "origin": fleet.name,
            "workerLostTimeout": _duration(mk.worker_lost_timeout_seconds * time_scale),
        },
    }


# The run kinds whose spec.managedBy hands them to MultiKueue (JobSet >= 0.6, batch Job, KubeRay's RayJob).
_DISPATCHED_KINDS = ("JobSet", "Job", "RayJob")


def dispatched(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's objects as submitted to a fleet's manager: its run object ``managedBy`` MultiKueue.

    Kueue's webhook on the manager would default it only if it already knows the queue's
    admission check; set here, a run can never start on the manager itself (which has no TPU
    node) while that cache warms up.
    """
    out = []
    for o in objects:
        if o.get("kind") in _DISPATCHED_KINDS:
            o = {**o, "spec": {**o.get("spec", {}), "managedBy": MULTIKUEUE_CONTROLLER}}
        out.append(o)
    return out
