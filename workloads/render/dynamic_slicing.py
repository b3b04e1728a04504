"""What GKE's dynamic slicing needs from a run and from the cluster's Kueue objects. Pure.

The cluster side (``queue_objects``, applied by ``queues apply`` with the rest of Kueue's objects):

- a Kueue ``Topology`` per dynamically sliced pool, its levels the partition hierarchy of a
  tpu7x block: ``cloud.google.com/gce-topology-block``, then each partition label from the 4x4x4
  sub-block down to the 2x2x1 host (``cloud.google.com/gke-tpu-partition-<shape>-id``), then
  ``kubernetes.io/hostname`` (Cluster Toolkit's dynamic-slicing Kueue template has the block,
  4x4x4 and host levels for super-slices; sub-slices need the levels between, as llm-d's GKE
  guide lays them out);
- the pool's ResourceFlavor names that Topology (``topologyName``), so Kueue's topology-aware
  scheduling assigns its pods to domains;
- an ``AdmissionCheck`` whose controller is ``accelerator.gke.io/slice`` (the Kueue slice
  controller: it creates the ``Slice`` objects of ``accelerator.gke.io/v1beta1`` from the
  assignment, GKE activates them, and it admits the run once they are ACTIVE), required on the
  pool's flavor only (``admissionChecksStrategy``).

The run side (``pod_annotations``, ``affinity``, ``node_selector``): the pod template carries the
slice topology annotation, Kueue's slice annotations, a required node affinity to partitions whose
state is HEALTHY (what the slice controller's JobSet webhook adds when a template has none) and
selects only the accelerator: the nodes of a PROVISION_ONLY pool carry no topology of their own
until a Slice on them is active, and the slice controller's admission adds the topology selector
itself (its PodSetUpdates). The JobSet has no exclusive-placement annotation: slices share node
pools (sub-slices) or span several (super-slices), and Kueue places them.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec
from infra.spec.ironwood import SUB_BLOCK_TOPOLOGY
from toolkit import names
from workloads.planning.dynamic_slices import BLOCK_LABEL, SUB_SLICES, partition_id_label

SLICE_CONTROLLER = "accelerator.gke.io/slice"
SLICE_API = "accelerator.gke.io/v1beta1"
HEALTHY = "HEALTHY"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# Partition levels from the sub-block down, largest first (each nests in the one before).
PARTITION_LEVELS = (SUB_BLOCK_TOPOLOGY, *reversed(SUB_SLICES))


def topology_name(pool: Any) -> str:
    return f"{pool.name}-slices"


def admission_check_name(pool: Any) -> str:
    return f"{pool.name}-slice"


def dynamic_pools(spec: EnvSpec) -> list[Any]:
    return [p for p in spec.tpu_pools if p.dynamic_slicing]


def queue_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Per dynamically sliced pool: its Topology and its slice AdmissionCheck (before the flavors that name them)."""
    out: list[dict[str, Any]] = []
    for pool in dynamic_pools(spec):
        levels = [BLOCK_LABEL, *(partition_id_label(t) for t in PARTITION_LEVELS), names.K8S_HOSTNAME_LABEL]
        out.append(
            {
                "apiVersion": names.KUEUE_API,
                "kind": "Topology",
                "metadata": {"name": topology_name(pool)},
                "spec": {"levels": [{"nodeLabel": lv} for lv in levels]},
            }
        )
        out.append(
            {
                "apiVersion": names.KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": admission_check_name(pool)},
                "spec": {"controllerName": SLICE_CONTROLLER},
            }
        )
    return out


def flavor_topology(spec: EnvSpec, flavor_name: str) -> str | None:
    """The Topology a flavor names (its pool is dynamically sliced), else None."""
    pool = next((p for p in dynamic_pools(spec) if p.flavor_name() == flavor_name), None)
    return None if pool is None else topology_name(pool)


def admission_check_rules(spec: EnvSpec) -> list[dict[str, Any]]:
    """The slice check, each only on its pool's flavor: runs on other flavors do not wait for it."""
    return [{"name": admission_check_name(p), "onFlavors": [p.flavor_name()]} for p in dynamic_pools(spec)]


# ------------------------------------------------------------------ the run


def pod_annotations(plan: Any) -> dict[str, str]:
    d = plan.target.dynamic
    if d is None:
        return {}
    return {
        names.GKE_TPU_SLICE_TOPOLOGY_ANNOTATION: d.topology,
        KUEUE_REQUIRED: BLOCK_LABEL,
        KUEUE_SLICE_REQUIRED: d.level,
        KUEUE_SLICE_SIZE: str(d.pods_per_domain(plan.target.shape.nodes)),
    }


def affinity(plan: Any) -> dict[str, Any] | None:
    d = plan.target.dynamic
    if d is None:
        return None
    term = {"matchExpressions": [{"key": d.health_label, "operator": "In", "values": [HEALTHY]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def node_selector(plan: Any) -> dict[str, str]:
    return {names.GKE_TPU_ACCELERATOR_LABEL: plan.target.shape.accelerator_label}
