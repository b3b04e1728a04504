"""The TPU pools of an environment's stack: one GKE node pool per slice and capacity option, and the workload policies placing them.

Called by ``infra.stack`` for an environment (a fleet's manager has no TPU pool). A pool's
node pools are named ``<pool>-<slice>`` (``<pool>-<tag>-<slice>`` in a capacity list) and
labelled with the toolkit's slice labels (``TpuPoolSpec.node_labels``); a capacity list's
reservations feed one option's node pools, the one ``infra deploy`` chose
(``reservations``, ``infra.reservation_fallback``) or else the first. tpu7x multi-host
pools are placed by a workload policy per topology, created once and shared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.catalog import Placement as CatalogPlacement
from infra.spec import CapacityOption, EnvSpec, FlexStart, Reservation, TpuPoolSpec
from modules.tpu_pool import Placement, TpuSlice, TpuSliceProps, WorkloadPolicy, WorkloadPolicyProps
from toolkit.names import CapacityMode

if TYPE_CHECKING:  # cdktn itself is imported by modules (whose package prepares the jsii runtime first)
    from cdktn import TerraformStack
    from cdktn_provider_google.project_service import ProjectService

_PLACEMENT = {
    CatalogPlacement.NONE: Placement.NONE,
    CatalogPlacement.COMPACT: Placement.COMPACT,
    CatalogPlacement.WORKLOAD_POLICY: Placement.WORKLOAD_POLICY,
}


def _capacity(spec: EnvSpec, cap: Any) -> tuple[CapacityMode, str | None]:
    """The node pool's capacity mode, and the reservation it consumes (``projects/<owner>/...`` when shared)."""
    if isinstance(cap, Reservation):
        shared = cap.project and cap.project != spec.project
        return CapacityMode.RESERVATION, f"projects/{cap.project}/reservations/{cap.name}" if shared else cap.name
    return CapacityMode(cap.mode), None


@dataclass(frozen=True)
class _Build:
    """What every TPU construct is built with (read from the jsii runtime once, not per slice)."""

    stack: TerraformStack
    env: EnvSpec
    cluster_id: str
    node_sa_email: str
    compute_api: ProjectService  # each workload policy depends on the Compute Engine API
    labels: dict[str, str]
    reservations: Mapping[str, str]


def tpu_pools(
    stack: TerraformStack,
    env: EnvSpec,
    *,
    cluster_id: str,
    node_sa_email: str,
    api: Mapping[str, ProjectService],
    labels: dict[str, str],
    reservations: Mapping[str, str],
) -> tuple[dict[str, WorkloadPolicy], dict[str, list[TpuSlice]]]:
    """Every TPU pool's slices (one node pool each), each pool after the workload policy it uses."""
    b = _Build(stack, env, cluster_id, node_sa_email, api["compute.googleapis.com"], labels, reservations)
    policies: dict[str, WorkloadPolicy] = {}
    slices: dict[str, list[TpuSlice]] = {}
    for pool in env.tpu_pools:
        policy_name = _workload_policy(b, pool, policies)
        # One node pool per slice and capacity option: Kueue's flavors (one per option) pick among them.
        slices[pool.name] = [
            _tpu_slice(b, pool, option, i, node_pool, policy_name)
            for option in pool.capacity_options()
            for i, node_pool in enumerate(pool.option_node_pool_names(option))
        ]
    return policies, slices


def _workload_policy(b: _Build, pool: TpuPoolSpec, policies: dict[str, WorkloadPolicy]) -> str | None:
    """The name of the workload policy placing ``pool`` (created on first use, shared per topology), else None."""
    shape = pool.shape
    if _PLACEMENT[shape.placement] is not Placement.WORKLOAD_POLICY:
        return None
    # The spec's name for it: the nodes carry it as a label the runs select (xpk's own name when xpk.enabled).
    pname = b.env.workload_policy_name(pool)
    assert pname is not None
    if pool.dynamic_slicing:
        return pname  # PROVISION_ONLY: made outside Terraform (infra.spec.ironwood.provision_only_policy says why), checked by `infra check`
    if pname not in policies:
        policies[pname] = WorkloadPolicy(
            b.stack,
            f"policy-{pname}",
            props=WorkloadPolicyProps(
                project=b.env.project,
                region=b.env.region,
                name=pname,
                topology=shape.topology,
                depends_on=(b.compute_api,),
            ),
        )
    return policies[pname].name


def _tpu_slice(b: _Build, pool: TpuPoolSpec, option: CapacityOption, index: int, node_pool: str, policy_name: str | None) -> TpuSlice:
    """Slice ``index`` of ``pool`` from capacity ``option``: the node pool ``node_pool``.

    Fallback options (after the first) scale from zero: their VMs exist only while a
    run Kueue placed on that option's flavor needs them.
    """
    spec, shape = b.env, pool.shape
    chosen = b.reservations.get(pool.name) if option.alternates else None
    capacity, reservation = _capacity(spec, option.reservation(chosen) if chosen else option.capacity)
    return TpuSlice(
        b.stack,
        f"tpu-{node_pool}",
        props=TpuSliceProps(
            cluster=b.cluster_id,
            location=spec.region,
            zone=spec.pool_zone(pool),
            name=node_pool,
            machine_type=shape.machine_type,
            topology=shape.topology,
            nodes=shape.nodes,
            service_account=b.node_sa_email,
            placement=_PLACEMENT[shape.placement],
            workload_policy=policy_name,
            capacity=capacity,
            reservation=reservation,
            autoscaling=pool.autoscaled(option),
            queued_provisioning=isinstance(option.capacity, FlexStart) and option.capacity.queued,
            max_run_seconds=option.capacity.max_run_seconds if isinstance(option.capacity, FlexStart) else None,
            max_pods_per_node=spec.network.tpu_max_pods_per_node,
            disk_size_gb=pool.disk_size_gb,
            gvnic=pool.gvnic_on,
            node_labels=pool.node_labels(option, index, chosen),
            resource_labels={**b.labels, "tpu-pool": pool.name},
        ),
    )
