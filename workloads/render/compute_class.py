"""The GKE custom ComputeClass of each pool that has one (``tpu_pools[].compute_class``). Pure.

``queues apply`` applies them with the Kueue objects: the pool's flavor selects the class
(``cloud.google.com/compute-class``), Kueue puts that selector on the run's pods when it
admits them, and GKE's node auto-provisioning makes a slice from the first priority that
has capacity, in the spec's capacity order. Fields as GKE's ComputeClass reference
(cloud.google.com/v1) writes them: ``priorities[].tpu`` {type, count (chips per VM),
topology}, ``reservations`` {affinity: Specific, specific: [{name, project}]}, ``spot``,
``flexStart`` {enabled}, ``maxRunDurationSeconds``, ``placement`` {policyName};
``nodePoolAutoCreation``, ``activeMigration`` {optimizeRulePriority},
``whenUnsatisfiable``, ``nodePoolConfig`` {serviceAccount}.
"""

from __future__ import annotations

from typing import Any

from infra import naming
from infra.spec import EnvSpec, FlexStart, Reservation, Spot, TpuPoolSpec
from toolkit.names import GKE_COMPUTE_CLASS_LABEL, K8S_MANAGED_BY_LABEL, TGK, TGK_POOL_LABEL

API = "cloud.google.com/v1"
# A taint GKE puts on a class's nodes; a ResourceFlavor carries the toleration to the admitted pods.
TAINT_KEY = GKE_COMPUTE_CLASS_LABEL


def toleration(name: str) -> dict[str, str]:
    return {"key": TAINT_KEY, "operator": "Equal", "value": name, "effect": "NoSchedule"}


def _priority(spec: EnvSpec, pool: TpuPoolSpec, cap: Any) -> dict[str, Any]:
    shape = pool.shape
    out: dict[str, Any] = {
        "machineType": shape.machine_type,
        "tpu": {"type": shape.accelerator_label, "count": shape.chips_per_vm, "topology": shape.topology},
    }
    if isinstance(cap, Reservation):
        out["reservations"] = {"affinity": "Specific", "specific": [{"name": cap.name, **({"project": cap.project} if cap.project else {})}]}
    elif isinstance(cap, Spot):
        out["spot"] = True
    elif isinstance(cap, FlexStart):
        out["flexStart"] = {"enabled": True}
        if cap.max_run_seconds is not None:
            out["maxRunDurationSeconds"] = cap.max_run_seconds
    policy = spec.workload_policy_name(pool)
    if policy is not None:  # tpu7x multi-host: the stack's workload policy places the slice
        out["placement"] = {"policyName": policy}
    return out


def compute_class(spec: EnvSpec, pool: TpuPoolSpec) -> dict[str, Any]:
    assert pool.compute_class is not None and pool.class_name is not None
    node_sa = f"{naming.service_account_id(spec.cluster.name, 'nodes')}@{spec.project}.iam.gserviceaccount.com"
    return {
        "apiVersion": API,
        "kind": "ComputeClass",
        "metadata": {"name": pool.class_name, "labels": {K8S_MANAGED_BY_LABEL: TGK, TGK_POOL_LABEL: pool.name}},
        "spec": {
            "priorities": [_priority(spec, pool, cap) for cap in pool.capacities],
            "nodePoolAutoCreation": {"enabled": True},
            "activeMigration": {"optimizeRulePriority": pool.compute_class.active_migration},
            # Only the listed priorities: never a default machine with no TPU.
            "whenUnsatisfiable": "DoNotScaleUp",
            "nodePoolConfig": {"serviceAccount": node_sa},
        },
    }


def compute_classes(spec: EnvSpec) -> list[dict[str, Any]]:
    return [compute_class(spec, p) for p in spec.tpu_pools if p.compute_class is not None]
