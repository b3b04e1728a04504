"""Kueue (and namespace/identity) objects derived from the environment spec.

Pure: an EnvSpec in, dicts out, applied by `python -m workloads queues apply`.
Rendered for Kueue v0.17.1's storage version ``kueue.x-k8s.io/v1beta2``
(field names checked against its CRDs: ``cohortName``, ``namespaceSelector``,
``resourceGroups[].flavors[].resources[].nominalQuota``, LocalQueue
``clusterQueue``, ResourceFlavor ``nodeLabels``/``tolerations``).

Queue layout: one ClusterQueue per team, all in one cohort named after the
cluster. A team's nominal quota for each TPU shape is ``floor(quota_share x
chips of that shape)``; inside the cohort an idle team's chips can be borrowed
and reclaimed (``reclaimWithinCohort: Any``), and within a team a higher
priority run preempts a lower one (``withinClusterQueue: LowerPriority``). With
one team this is just one queue owning everything. Each ClusterQueue admits only
its team's namespace, so a job cannot spend another team's quota by naming its
LocalQueue.

CPU and memory are covered (a queue covering only google.com/tpu rejects pods
that request CPU or memory, e.g. through a LimitRange); their quota is the TPU
VMs' own size times nodes, from the machine table below — finite, and never the
limiting resource for a TPU job.
"""

from __future__ import annotations

import math
from typing import Any

from infra.catalog import SliceShape
from toolkit.errors import SpecError
from infra.naming import service_account_email
from infra.spec import PRIORITY_CLASSES, EnvSpec, TeamSpec
from toolkit.names import (
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    GKE_WORKLOAD_IDENTITY_ANNOTATION,
    K8S_NAMESPACE_NAME_LABEL,
    KUEUE_API,
    PRIORITY_CLASS_API,
    TPU_RESOURCE,
    TPU_TOLERATION,
)


# vCPU and memory (GiB) of each TPU VM type, from the Compute Engine machine pages.
# Only sizes the ClusterQueue's cpu/memory quota; a type missing here gets the
# fallback, which is at least as large as every listed 4-chip VM.
TPU_VM_SIZES: dict[str, tuple[int, int]] = {
    "ct4p-hightpu-4t": (240, 407),
    "ct5lp-hightpu-1t": (24, 48),
    "ct5lp-hightpu-4t": (112, 192),
    "ct5lp-hightpu-8t": (224, 384),
    "ct5p-hightpu-4t": (208, 448),
    "ct6e-standard-1t": (44, 176),
    "ct6e-standard-4t": (180, 720),
    "ct6e-standard-8t": (180, 1440),
    "tpu7x-standard-4t": (224, 960),
}
FALLBACK_VM_SIZE = (240, 1440)


def flavor_name(shape: SliceShape) -> str:
    return shape.key


def cluster_queue_name(team: TeamSpec) -> str:
    return f"{team.name}-cq"


def workload_gsa_email(spec: EnvSpec) -> str:
    """The Workload Identity GSA the team KSAs are bound to by the infra stack."""
    return service_account_email(spec.project, spec.cluster.name, "workload")


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
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": t.ns}} for t in spec.teams]


def service_accounts(spec: EnvSpec) -> list[dict[str, Any]]:
    email = workload_gsa_email(spec)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": t.ksa, "namespace": t.ns, "annotations": {GKE_WORKLOAD_IDENTITY_ANNOTATION: email}},
        }
        for t in spec.teams
    ]


def resource_flavors(spec: EnvSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(shape)},
            "spec": {
                "nodeLabels": {GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label, GKE_TPU_TOPOLOGY_LABEL: shape.topology},
                "tolerations": [dict(TPU_TOLERATION)],
            },
        }
        for shape in spec.shapes().values()
    ]


def _nodes_by_shape(spec: EnvSpec) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in spec.tpu_pools:
        out[p.shape.key] = out.get(p.shape.key, 0) + p.total_nodes
    return out


def team_quota(spec: EnvSpec, team: TeamSpec) -> dict[str, dict[str, Any]]:
    """Per flavor: nominal TPU chips, vCPU and memory for one team."""
    chips = spec.chips_by_shape()
    nodes = _nodes_by_shape(spec)
    out: dict[str, dict[str, Any]] = {}
    for key, shape in spec.shapes().items():
        vcpu, mem_gib = TPU_VM_SIZES.get(shape.machine_type, FALLBACK_VM_SIZE)
        share = team.quota_share
        out[key] = {
            TPU_RESOURCE: math.floor(chips[key] * share + 1e-9),
            "cpu": str(math.floor(nodes[key] * vcpu * share + 1e-9)),
            "memory": f"{math.floor(nodes[key] * mem_gib * share + 1e-9)}Gi",
        }
    return out


MAX_FLAVORS_PER_GROUP = 16  # Kueue v1beta2 CRD: resourceGroups[].flavors maxItems


def cluster_queues(spec: EnvSpec) -> list[dict[str, Any]]:
    if len(spec.shapes()) > MAX_FLAVORS_PER_GROUP:
        raise SpecError(
            "tpu_pools",
            f"{len(spec.shapes())} distinct TPU shapes, but a Kueue resource group holds at most {MAX_FLAVORS_PER_GROUP} flavors",
            "use fewer distinct generation/topology combinations",
        )
    out = []
    for team in spec.teams:
        quota = team_quota(spec, team)
        out.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue_name(team)},
                "spec": {
                    "cohortName": spec.cluster.name,
                    "namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: team.ns}},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                    "resourceGroups": [
                        {
                            "coveredResources": [TPU_RESOURCE, "cpu", "memory"],
                            "flavors": [
                                {
                                    "name": key,
                                    "resources": [{"name": r, "nominalQuota": q[r]} for r in (TPU_RESOURCE, "cpu", "memory")],
                                }
                                for key, q in quota.items()
                            ],
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


def queue_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Everything `queues apply` applies, in an order the API server accepts."""
    return [
        *priority_classes(),
        *namespaces(spec),
        *service_accounts(spec),
        *resource_flavors(spec),
        *cluster_queues(spec),
        *local_queues(spec),
    ]
