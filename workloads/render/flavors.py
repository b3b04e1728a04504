"""The ResourceFlavors the spec makes, and a share of one as Kueue quota. Pure.

A pool with one capacity option shares a flavor with every pool of its shape; a pool
with a capacity list gets one flavor per option (``TpuPoolSpec.flavor_name``). The teams'
ClusterQueues (``kueue``) and xpk's (``xpk``) both quote these flavors, so they live
here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.catalog import QUOTA_FALLBACK_SIZE, SliceShape, machine_size
from infra.quotas import owned_slices
from infra.spec import EnvSpec, FlexStart
from toolkit.names import (
    GKE_COMPUTE_CLASS_LABEL,
    GKE_QUEUED_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    K8S_ZONE_LABEL,
    TGK_CAPACITY_LABEL,
    TGK_POOL_LABEL,
    TGK_RESERVATION_LABEL,
    TPU_RESOURCE,
)


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor and what its quota is made of.

    A pool with one capacity option shares a flavor with every pool of its shape
    (named by the shape, selecting accelerator and topology). A pool with a capacity
    list gets one flavor per option, in the list's order, selecting that option's
    node pools (pool, capacity mode, reservation) in the pool's zone: Kueue tries a
    resource group's flavors in order, so a run falls to the next option only when
    the one before it has no quota left.
    """

    name: str
    shape: SliceShape
    node_labels: dict[str, str]
    chips: int
    nodes: int
    slices: int
    queued: FlexStart | None = None  # set when Kueue asks GKE for this flavor's nodes (queued provisioning)
    compute_class: str | None = None  # set when GKE makes this flavor's nodes from a ComputeClass


def flavors(spec: EnvSpec) -> list[Flavor]:
    """Every ResourceFlavor of the spec, in spec order (the order ClusterQueues try them in)."""
    out: dict[str, Flavor] = {}
    for pool in spec.tpu_pools:
        shape = pool.shape
        nodes = pool.slices * shape.nodes
        if pool.class_name is not None:
            # GKE picks the class's priority; Kueue only needs the class's nodes, which GKE labels with its name.
            labels = {GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label, GKE_TPU_TOPOLOGY_LABEL: shape.topology, GKE_COMPUTE_CLASS_LABEL: pool.class_name}
            out[pool.class_name] = Flavor(pool.class_name, shape, labels, pool.total_chips, nodes, pool.slices, compute_class=pool.class_name)
            continue
        for option in pool.capacity_options():
            name = pool.flavor_name(option)
            queued = _queued(option.capacity)
            labels = {GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label, GKE_TPU_TOPOLOGY_LABEL: shape.topology}
            if pool.dynamic_slicing:
                # PROVISION_ONLY nodes carry no slice topology until a Slice on them is active: the pool's own nodes.
                labels = {GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label, TGK_POOL_LABEL: pool.name}
            if pool.has_fallback:
                labels |= {K8S_ZONE_LABEL: spec.pool_zone(pool), **_option_labels(pool.node_labels(option, 0))}
                if option.alternates:
                    # Which of the reservations deploy got is known only at deploy: the flavor selects the option's nodes by pool and capacity.
                    labels.pop(TGK_RESERVATION_LABEL, None)
            if queued:
                # A queued pool has its shape to itself (infra.spec checks it), so its flavor is its own.
                labels[GKE_QUEUED_LABEL] = "true"
            prev = out.get(name)  # one-option pools of one shape share its flavor and add up
            chips, n, slices = (prev.chips, prev.nodes, prev.slices) if prev else (0, 0, 0)
            out[name] = Flavor(name, shape, labels, chips + pool.total_chips, n + nodes, slices + pool.slices, queued)
    return list(out.values())


def _queued(capacity: object) -> FlexStart | None:
    return capacity if isinstance(capacity, FlexStart) and capacity.queued else None


def _option_labels(node_labels: dict[str, str]) -> dict[str, str]:
    """The node labels that tell one capacity option's node pools from another's."""
    keys = (TGK_POOL_LABEL, TGK_CAPACITY_LABEL, TGK_RESERVATION_LABEL)
    return {k: node_labels[k] for k in keys if k in node_labels}


def quota(f: Flavor, share: float) -> dict[str, Any]:
    """``share`` of a flavor's slices as Kueue quantities: their TPU chips, and their VMs' vCPU and memory.

    Whole slices (infra.quotas: the spec refuses shares that are not), so a quota never
    holds a fraction of a slice that no run could be admitted on.
    """
    size = machine_size(f.shape.machine_type, default=QUOTA_FALLBACK_SIZE)
    slices = owned_slices(share, f.slices)
    nodes = slices * f.shape.nodes
    return {
        TPU_RESOURCE: slices * f.shape.chips,
        "cpu": str(nodes * size.vcpu),
        "memory": f"{nodes * size.memory_gib}Gi",
    }
