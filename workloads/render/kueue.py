"""Kueue (and namespace/identity) objects derived from the environment spec.

Pure: an EnvSpec in, dicts out, applied by `python -m workloads queues apply`.
Rendered for Kueue v0.19.2's storage version ``kueue.x-k8s.io/v1beta2``, the only
version v0.20 serves (field names checked against its CRDs: ``cohortName``, ``namespaceSelector``,
``resourceGroups[].flavors[].resources[].nominalQuota``, LocalQueue
``clusterQueue``, ResourceFlavor ``nodeLabels``/``tolerations``).

Queue layout: one ClusterQueue per team, all in one cohort named after the
cluster. A team's nominal quota for each flavor is ``quota_share x its slices``,
in whole slices (``infra.quotas``: the spec refuses shares that strand a slice); inside the cohort an idle team's chips can be borrowed
and reclaimed (``reclaimWithinCohort: Any``), and within a team a higher
priority run preempts a lower one (``withinClusterQueue: LowerPriority``); the
team's spec can change both policies, add ``borrowWithinCohort``, cap what it
borrows and lends (``borrowingLimit``/``lendingLimit``) and weigh it for Kueue's
fair sharing. With one team this is just one queue owning everything. A pool with
a capacity list has a flavor per option, in the list's order; a queued flex-start
flavor carries a ProvisioningRequest admission check (``admissionChecksStrategy``). Each ClusterQueue admits only
its team's namespace, so a job cannot spend another team's quota by naming its
LocalQueue.

Identity and isolation: each team's KSA is annotated with that team's own Google
SA (``infra.naming.team_service_account_email``; the stack binds it to this KSA
only and grants it only the team's buckets). A pod on the host network would
bypass that and act as the TPU node's SA, so a team's Namespace enforces the Pod
Security Standard ``baseline`` (which forbids hostNetwork) unless the team opted
in with ``host_network: true``; only then are its buckets granted to the node SA.

CPU and memory are covered (a queue covering only google.com/tpu rejects pods
that request CPU or memory, e.g. through a LimitRange); their quota is the TPU
VMs' own size times nodes, from infra.catalog's machine table — finite, and never the
limiting resource for a TPU job.
"""

from __future__ import annotations

from typing import Any

from infra import recovery
from infra.gke_features import ML_DIAGNOSTICS_LABEL
from infra.naming import team_service_account_email
from infra.spec import FLEX_MAX_RUN_SECONDS, PRIORITY_CLASSES, EnvSpec, TeamSpec
from infra.spec.env import release_tuple
from toolkit.names import (
    GKE_QUEUED_LABEL,
    GKE_WORKLOAD_IDENTITY_ANNOTATION,
    K8S_NAMESPACE_NAME_LABEL,
    K8S_PSA_AUDIT_LABEL,
    K8S_PSA_ENFORCE_LABEL,
    K8S_PSA_WARN_LABEL,
    KUEUE_API,
    PRIORITY_CLASS_API,
    TGK_RUN_LABEL,
    TPU_RESOURCE,
    TPU_TOLERATION,
)
from workloads.render import checkpointing, compute_class, dynamic_slicing, inplace, lustre
from workloads.render.admission import admission_objects
from workloads.render.flavors import Flavor, flavors, quota
from workloads.render.multinetwork import network_objects
from workloads.render.netpol import network_policies
from workloads.render.xpk import xpk_objects

# The first Kueue whose waitForPodsReady is on without a block in its Configuration.
KUEUE_WAIT_FOR_PODS_READY_BY_DEFAULT = "v0.19.0"
# DWS queued provisioning (GKE): nodes of a queued node pool carry the gke-queued label and taint,
# so only pods admitted through a ProvisioningRequest (which get both from the flavor) land there.
QUEUED_TOLERATION = {"key": GKE_QUEUED_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
PROVISIONING_CLASS = "queued-provisioning.gke.io"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
# GKE names the provisioned node group in this ProvisioningRequest detail and labels the
# nodes with it; Kueue copies it into the pods' nodeSelector, so a run lands on its own slices.
GKE_PROVISIONING_REQUEST_LABEL = "autoscaling.gke.io/provisioning-request"
GKE_RESIZE_REQUEST_DETAIL = "ResizeRequestName"


def cluster_queue_name(team: TeamSpec) -> str:
    return f"{team.name}-cq"


def workload_gsa_email(spec: EnvSpec, team: TeamSpec) -> str:
    """The Google SA ``team``'s KSA acts as through Workload Identity (bound by the infra stack)."""
    return team_service_account_email(spec.project, spec.cluster.name, team.name)


def pod_security_labels(team: TeamSpec) -> dict[str, str]:
    """The Pod Security level a team's namespace enforces (and warns and audits at).

    ``restricted`` for a team whose pods run as a non-root UID (the default, ``TeamSpec.pod_user``):
    every pod the toolkit renders meets it (workloads/render/podsecurity.py). A team that opted
    into its image's user (``run_as_root``) gets ``baseline`` (no hostNetwork, hostPath,
    privileged...), warning and auditing at ``restricted``: the pods meet everything of it but
    runAsNonRoot. A team that opted in to hostNetwork runs gets ``privileged`` (hostNetwork is
    a baseline violation), warned at ``baseline``.
    """
    if team.host_network:
        return {K8S_PSA_ENFORCE_LABEL: "privileged", K8S_PSA_WARN_LABEL: "baseline"}
    if team.pod_user is not None:
        return {K8S_PSA_ENFORCE_LABEL: "restricted"}
    return {K8S_PSA_ENFORCE_LABEL: "baseline", K8S_PSA_WARN_LABEL: "restricted", K8S_PSA_AUDIT_LABEL: "restricted"}


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": PRIORITY_CLASS_API,
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "description": f"tpu-gke-toolkit priority {name} ({value}); Kueue orders and preempts TPU runs by it",
        }
        for name, value in PRIORITY_CLASSES.items()
    ]


def namespaces(spec: EnvSpec) -> list[dict[str, Any]]:
    """Each team's namespace: its Pod Security level, and GKE's managed ML Diagnostics label where the spec turns it on
    (its injection webhook adds the diagnostics metadata to the workloads of labelled namespaces)."""
    diagnostics = {ML_DIAGNOSTICS_LABEL: "true"} if spec.ml_diagnostics else {}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": t.ns, "labels": {**pod_security_labels(t), **diagnostics}}} for t in spec.teams]


def service_accounts(spec: EnvSpec) -> list[dict[str, Any]]:
    """Each team's KSA: its Google identity, and no token in the pods that use it unless a pod asks for one.

    The toolkit's pods say so themselves (workloads/render/podsecurity.py); this covers a
    pod someone else writes for the team's KSA, which gets no Kubernetes API token by default.
    """
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": t.ksa, "namespace": t.ns, "annotations": {GKE_WORKLOAD_IDENTITY_ANNOTATION: workload_gsa_email(spec, t)}},
            "automountServiceAccountToken": False,
        }
        for t in spec.teams
    ]


def resource_flavors(spec: EnvSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": f.name},
            "spec": {
                "nodeLabels": dict(f.node_labels),
                **({"topologyName": t} if (t := dynamic_slicing.flavor_topology(spec, f.name)) else {}),
                "tolerations": [dict(TPU_TOLERATION)]
                + ([dict(QUEUED_TOLERATION)] if f.queued else [])
                + ([compute_class.toleration(f.compute_class)] if f.compute_class else []),
            },
        }
        for f in flavors(spec)
    ]


def admission_check_name(flavor: Flavor) -> str:
    return f"{flavor.name}-dws"


def provisioning_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Per queued flavor: a ProvisioningRequestConfig (GKE's queued-provisioning class) and its AdmissionCheck.

    Kueue reserves quota, then creates a ProvisioningRequest for the run's TPU pods; GKE's
    DWS answers it by creating whole slices (the ``tpu-topology`` parameter, as Google's
    Cluster Toolkit TPU blueprints pass it), and only then is the run admitted.
    """
    out: list[dict[str, Any]] = []
    for f in flavors(spec):
        if f.queued is None:
            continue
        retry = f.queued.retry
        name = admission_check_name(f)
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ProvisioningRequestConfig",
                "metadata": {"name": name},
                "spec": {
                    "provisioningClassName": PROVISIONING_CLASS,
                    "managedResources": [TPU_RESOURCE],
                    "parameters": {
                        "tpu-topology": f.shape.topology,
                        "maxRunDurationSeconds": str(f.queued.max_run_seconds or FLEX_MAX_RUN_SECONDS),
                    },
                    "retryStrategy": {
                        "backoffLimitCount": retry.limit,
                        "backoffBaseSeconds": retry.base_seconds,
                        "backoffMaxSeconds": retry.max_seconds,
                    },
                    "podSetUpdates": {"nodeSelector": [{"key": GKE_PROVISIONING_REQUEST_LABEL, "valueFromProvisioningClassDetail": GKE_RESIZE_REQUEST_DETAIL}]},
                },
            }
        )
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {
                    "controllerName": PROVISIONING_CONTROLLER,
                    "parameters": {"apiGroup": KUEUE_API.split("/")[0], "kind": "ProvisioningRequestConfig", "name": name},
                },
            }
        )
    return out


def admission_checks_strategy(spec: EnvSpec) -> dict[str, Any] | None:
    """The provisioning checks, each only on its queued flavor: runs on other flavors do not wait for it."""
    rules = [{"name": admission_check_name(f), "onFlavors": [f.name]} for f in flavors(spec) if f.queued is not None]
    rules += dynamic_slicing.admission_check_rules(spec)
    return {"admissionChecks": rules} if rules else None


def _resource_quotas(f: Flavor, team: TeamSpec) -> list[dict[str, Any]]:
    """One flavor's quotas for a team: nominal, and the borrowing and lending limits it sets.

    The limits cover vCPU and memory in the same proportion as the chips: a borrowed
    chip comes with its VM's CPU and memory, or the run would not fit after all.
    """
    nominal = quota(f, team.quota_share)
    borrow = quota(f, team.borrowing_limit) if team.borrowing_limit is not None else None
    lend = quota(f, team.lending_limit) if team.lending_limit is not None else None
    out = []
    for r in (TPU_RESOURCE, "cpu", "memory"):
        q: dict[str, Any] = {"name": r, "nominalQuota": nominal[r]}
        if borrow is not None:
            q["borrowingLimit"] = borrow[r]
        if lend is not None:
            q["lendingLimit"] = lend[r]
        out.append(q)
    return out


def preemption(team: TeamSpec) -> dict[str, Any]:
    p = team.preemption
    out: dict[str, Any] = {"withinClusterQueue": p.within_cluster_queue, "reclaimWithinCohort": p.reclaim_within_cohort}
    if p.borrow_within_cohort is not None:
        b = p.borrow_within_cohort
        out["borrowWithinCohort"] = {"policy": b.policy}
        if b.max_priority_threshold is not None:
            out["borrowWithinCohort"]["maxPriorityThreshold"] = b.max_priority_threshold
    return out


def cluster_queues(spec: EnvSpec) -> list[dict[str, Any]]:
    """One ClusterQueue per team; every flavor in one resource group (infra.spec caps their number at Kueue's limit)."""
    out = []
    checks = admission_checks_strategy(spec)
    all_flavors = flavors(spec)
    for team in spec.teams:
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue_name(team)},
                "spec": {
                    "cohortName": spec.cluster.name,
                    "namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: team.ns}},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": preemption(team),
                    **({"fairSharing": {"weight": f"{team.fair_sharing_weight:g}"}} if team.fair_sharing_weight is not None else {}),
                    **({"admissionChecksStrategy": checks} if checks else {}),
                    "resourceGroups": [
                        {
                            "coveredResources": [TPU_RESOURCE, "cpu", "memory"],
                            "flavors": [{"name": f.name, "resources": _resource_quotas(f, team)} for f in all_flavors],
                        }
                    ],
                },
            }
        )
    return out


def local_queues(spec: EnvSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": t.queue, "namespace": t.ns},
            "spec": {"clusterQueue": cluster_queue_name(t)},
        }
        for t in spec.teams
    ]


def cluster_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Everything `queues apply` applies (and so the provision pipeline and `local up`): the Kueue objects, the team
    namespaces' NetworkPolicies and priority admission policies, JobSet's in-place restart agent's role and policy
    (where runs may restart in place), then the DCN network's."""
    return [*queue_objects(spec), *network_policies(spec), *admission_objects(spec), *inplace.team_objects(spec), *network_objects(spec)]


def queue_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """The Kueue side of `queues apply`, in an order the API server accepts (xpk's objects last, with ``xpk.enabled``)."""
    return [
        *priority_classes(),
        *namespaces(spec),
        *service_accounts(spec),
        *compute_class.compute_classes(spec),
        *checkpointing.checkpoint_configurations(spec),
        *lustre.lustre_objects(spec),
        *dynamic_slicing.queue_objects(spec),
        *resource_flavors(spec),
        *provisioning_objects(spec),
        *cluster_queues(spec),
        *local_queues(spec),
        *xpk_objects(spec),
    ]


def _duration(seconds: float) -> str:
    """A Go duration string (Kueue's config reads metav1.Duration)."""
    return f"{max(1, round(seconds))}s"


def manager_settings(spec: EnvSpec, *, time_scale: float = 1.0) -> dict[str, Any]:
    """The parts of Kueue's own Configuration (config.kueue.x-k8s.io/v1beta2) the spec decides.

    Merged into the controller's configuration by ``local up`` and by the Cloud Build
    provision pipeline (``python -m workloads queues manager-config``). ``time_scale``
    shrinks the timeouts for the local rehearsal, which runs GKE's timeline faster.
    In v1beta2 the block's presence turns the feature on; there is no ``enable`` field.
    From Kueue v0.19 it is on even when absent (30 min timeouts, ``apis/config/v1beta2/defaults.go``),
    so a spec that turns it off says so with Kueue's ``DisableWaitForPodsReady`` gate.
    The timeouts are the spec's or, by default, what its pools need (``EnvFields.wait_for_pods_ready``).
    """
    # The run label onto every Workload Kueue makes for a run: once the run is gone, its label is
    # the ownership ledger's proof that the Workload was a run of the toolkit's (toolkit.ledger.orphan_workload).
    out: dict[str, Any] = {"integrations": {"labelKeysToCopy": [TGK_RUN_LABEL]}}
    if spec.fair_sharing:
        out["fairSharing"] = {"preemptionStrategies": list(spec.kueue.fair_sharing.preemption_strategies)}
    w = spec.kueue.wait_for_pods_ready
    if not w.enabled:
        if release_tuple(spec.versions.kueue) >= release_tuple(KUEUE_WAIT_FOR_PODS_READY_BY_DEFAULT):
            out["featureGates"] = {"DisableWaitForPodsReady": True}
        return out
    timeout, recovery_timeout = spec.wait_for_pods_ready
    # The rehearsal's kube-controller-manager is the real one: the Job controller's backoff before it
    # replaces an in-place run's lost pods (infra.recovery.job_replacement_backoff) takes as long there
    # as on GKE, so that part of recoveryTimeout is not shrunk; shrunk, Kueue evicts a recovery GKE would wait for.
    real_time = recovery.JOB_POD_FAILURE_BACKOFF_MAX_S if spec.cluster_has_in_place_restart else 0.0
    recovery_timeout_here = max(recovery_timeout - real_time, 0.0) * time_scale + min(real_time, recovery_timeout)
    strategy: dict[str, Any] = {
        "timestamp": "Eviction",
        "backoffBaseSeconds": max(1, round(w.backoff_base_seconds * time_scale)),
        "backoffMaxSeconds": max(1, round(w.backoff_max_seconds * time_scale)),
    }
    if w.requeue_limit is not None:
        strategy["backoffLimitCount"] = w.requeue_limit
    return {
        **out,
        "waitForPodsReady": {
            "timeout": _duration(timeout * time_scale),
            "recoveryTimeout": _duration(recovery_timeout_here),
            # Admission of other runs goes on while one waits: TPU slices are independent.
            "blockAdmission": False,
            "requeuingStrategy": strategy,
        },
    }


def merge_manager_config(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``settings`` laid over it (nested maps merged, everything else replaced)."""
    out = dict(config)
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_manager_config(out[key], value)
        else:
            out[key] = value
    return out
