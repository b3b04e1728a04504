"""What `xpk workload create` reads from a cluster, rendered from the spec. Pure.

Read from xpk's source at v1.13.1 (the PyPI release ``scripts/setup-xpk.sh`` installs):

- ``core/resources.py``: ``kubectl get configmap <cluster>-resources-configmap`` (no
  ``-n``: the kube context's namespace) maps each device type (``tpu7x-256``,
  ``v5litepod-16``: ``SystemCharacteristics.device_type``) to the VMs of that type in
  the cluster; ``workload create`` refuses a device type that is not a key and more
  slices than ``VMs / vms_per_slice``. ``<cluster>-metadata-configmap`` carries
  ``xpk_version`` (a mismatch is only a warning) and ``capacity_type``
  (+ ``reservation_id``). xpk parses both as ``map[k:v k:v]``, so no value may hold a
  space or a colon.
- ``core/kueue_manager.py``: JobSets carry ``kueue.x-k8s.io/queue-name:
  multislice-queue``; that LocalQueue points at ClusterQueue ``cluster-queue``; the
  PriorityClasses are very-low 100, low 250, medium 500, high 750, very-high 1000 —
  the toolkit's own ``PRIORITY_CLASSES``, so ``queues apply`` already serves them.
- ``commands/workload.py``: the pods select ``cloud.google.com/gke-tpu-accelerator``,
  ``cloud.google.com/gke-tpu-topology`` and, for tpu7x multi-host,
  ``cloud.google.com/placement-policy-name: <device type>-<topology>-placement-policy``
  (the spec names its workload policy that way when ``xpk.enabled``); they run with
  ``hostNetwork: true`` in the context's namespace. xpk's own ResourceFlavor names
  (``<slices>x<device type>``) are never read by ``workload create``: Kueue matches
  flavors by node labels, and the toolkit's flavors select the same labels.

xpk's ClusterQueue joins the spec's cohort. With ``xpk.quota_share: 0`` (default) it
owns no chips and borrows what the teams leave idle; the teams reclaim them
(``reclaimWithinCohort: Any`` on theirs), so xpk users cannot take a team's quota.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec, Reservation
from toolkit.names import K8S_NAMESPACE_NAME_LABEL, K8S_PSA_ENFORCE_LABEL, K8S_PSA_WARN_LABEL, KUEUE_API, TPU_RESOURCE, CapacityMode
from workloads.render.flavors import Flavor, flavors, quota

XPK_VERSION = "1.13.1"  # the xpk release whose source this module follows; scripts/setup-xpk.sh pins it
CLUSTER_QUEUE = "cluster-queue"  # xpk core/kueue_manager.py CLUSTER_QUEUE_NAME
LOCAL_QUEUE = "multislice-queue"  # xpk core/kueue_manager.py LOCAL_QUEUE_NAME
# xpk core/capacity.py CapacityType names, by the spec's capacity mode.
CAPACITY_TYPES = {
    CapacityMode.ON_DEMAND: "ON_DEMAND",
    CapacityMode.SPOT: "SPOT",
    CapacityMode.FLEX_START: "FLEX_START",
    CapacityMode.RESERVATION: "RESERVATION",
}


def resources_configmap_name(spec: EnvSpec) -> str:
    return f"{spec.cluster.name}-resources-configmap"


def metadata_configmap_name(spec: EnvSpec) -> str:
    return f"{spec.cluster.name}-metadata-configmap"


def device_vms(spec: EnvSpec) -> dict[str, int]:
    """Device type -> TPU VMs of that type across every pool (xpk's resources ConfigMap data)."""
    out: dict[str, int] = {}
    for pool in spec.tpu_pools:
        key = pool.shape.accelerator_type
        out[key] = out.get(key, 0) + pool.slices * pool.shape.nodes
    return out


def _capacity(spec: EnvSpec) -> dict[str, str]:
    # One value per cluster in xpk; the first pool's first capacity option is what xpk adapt would have recorded.
    cap = spec.tpu_pools[0].capacity
    out = {"capacity_type": CAPACITY_TYPES[cap.mode]}
    if isinstance(cap, Reservation):
        out["reservation_id"] = cap.name
    return out


def configmaps(spec: EnvSpec) -> list[dict[str, Any]]:
    ns = spec.xpk.namespace
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": resources_configmap_name(spec), "namespace": ns},
            "data": {k: str(v) for k, v in device_vms(spec).items()},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": metadata_configmap_name(spec), "namespace": ns},
            "data": {"xpk_version": XPK_VERSION, **_capacity(spec)},
        },
    ]


def namespace(spec: EnvSpec) -> list[dict[str, Any]]:
    """xpk's namespace, unless a team owns it (then the team's Namespace, host_network: true, is the one applied)."""
    if any(t.ns == spec.xpk.namespace for t in spec.teams):
        return []
    labels = {K8S_PSA_ENFORCE_LABEL: "privileged", K8S_PSA_WARN_LABEL: "baseline"}  # xpk's TPU pods use hostNetwork
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.xpk.namespace, "labels": labels}}]


def cluster_queue(spec: EnvSpec) -> dict[str, Any]:
    share = spec.xpk.quota_share
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "cohortName": spec.cluster.name,
            "namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: spec.xpk.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            # xpk's own choice: never preempt other queues; within its queue, priorities apply.
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
            "resourceGroups": [
                {
                    "coveredResources": [TPU_RESOURCE, "cpu", "memory"],
                    "flavors": [{"name": f.name, "resources": _quota(f, share)} for f in flavors(spec)],
                }
            ],
        },
    }


def _quota(f: Flavor, share: float) -> list[dict[str, Any]]:
    """The share of one flavor's chips and of its VMs' CPU and memory, as the teams' queues count them."""
    return [{"name": r, "nominalQuota": q} for r, q in quota(f, share).items()]


def local_queue(spec: EnvSpec) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": spec.xpk.namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


def xpk_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Everything xpk reads, in apply order (after the spec's flavors, which the queue names). Empty unless xpk.enabled."""
    if not spec.xpk.enabled:
        return []
    return [*namespace(spec), *configmaps(spec), cluster_queue(spec), local_queue(spec)]
