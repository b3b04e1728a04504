"""One TPU slice = one GKE node pool, and the workload policy tpu7x slices are placed by.

The construct knows TPU *mechanics* (placement kinds, capacity modes, node
counts per slice) but nothing about the catalog or the spec: the stack resolves
a slice shape and passes plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from cdktn import ITerraformDependable
from cdktn_provider_google.compute_resource_policy import ComputeResourcePolicy, ComputeResourcePolicyWorkloadPolicy
from cdktn_provider_google.container_node_pool import (
    ContainerNodePool,
    ContainerNodePoolAutoscaling,
    ContainerNodePoolManagement,
    ContainerNodePoolNodeConfig,
    ContainerNodePoolNodeConfigGvnic,
    ContainerNodePoolNodeConfigReservationAffinity,
    ContainerNodePoolNodeConfigShieldedInstanceConfig,
    ContainerNodePoolNodeConfigTaint,
    ContainerNodePoolNodeConfigWorkloadMetadataConfig,
    ContainerNodePoolPlacementPolicy,
    ContainerNodePoolQueuedProvisioning,
)
from constructs import Construct

from modules._checkov import suppress
from modules.cpu_pool import CLOUD_PLATFORM_SCOPE
from toolkit.names import TPU_TAINT as K8S_TPU_TAINT
from toolkit.names import CapacityMode

RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
# Terraform spells the Kubernetes taint effects as an enum of its own.
TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
# The taint GKE puts on TPU nodes, declared on the pool so Terraform agrees with GKE.
TPU_TAINT = ContainerNodePoolNodeConfigTaint(key=K8S_TPU_TAINT["key"], value=K8S_TPU_TAINT["value"], effect=TAINT_EFFECTS[K8S_TPU_TAINT["effect"]])


class Placement(str, Enum):
    NONE = "none"  # single host
    COMPACT = "compact"  # placement_policy {type = COMPACT, tpu_topology = ...}
    WORKLOAD_POLICY = "workload-policy"  # placement_policy {policy_name = <resource policy>}


@dataclass(frozen=True, kw_only=True)
class TpuSliceProps:
    cluster: str
    location: str  # the cluster's location (region)
    zone: str
    name: str
    machine_type: str
    topology: str
    nodes: int  # VMs in one slice
    service_account: str
    placement: Placement = Placement.NONE
    workload_policy: str | None = None  # resource-policy name, for Placement.WORKLOAD_POLICY
    capacity: CapacityMode = CapacityMode.ON_DEMAND
    # Name of a same-project reservation, or projects/<owner>/reservations/<name> for a shared one.
    reservation: str | None = None
    autoscaling: bool = False
    # Flex-start only: GKE creates the slice when a ProvisioningRequest asks (queued), and
    # releases the VMs after max_run_seconds (GKE's default: 7 days).
    queued_provisioning: bool = False
    max_run_seconds: int | None = None
    max_pods_per_node: int = 15
    disk_size_gb: int = 100
    gvnic: bool = False  # Google Virtual NIC (written only when on)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    resource_labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[ITerraformDependable, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"TPU pool {self.name}: a slice has at least one node, got {self.nodes}")
        if (self.placement is Placement.WORKLOAD_POLICY) != (self.workload_policy is not None):
            raise ValueError(f"TPU pool {self.name}: workload_policy goes with (and only with) Placement.WORKLOAD_POLICY")
        if (self.capacity is CapacityMode.RESERVATION) != (self.reservation is not None):
            raise ValueError(f"TPU pool {self.name}: reservation goes with (and only with) CapacityMode.RESERVATION")
        if self.placement is not Placement.NONE and self.nodes == 1:
            raise ValueError(f"TPU pool {self.name}: a single-host slice has nothing to place; use Placement.NONE")
        if (self.queued_provisioning or self.max_run_seconds is not None) and self.capacity is not CapacityMode.FLEX_START:
            raise ValueError(f"TPU pool {self.name}: queued_provisioning and max_run_seconds go with CapacityMode.FLEX_START only")

    @property
    def scales(self) -> bool:
        # Flex-start capacity is only ever obtained by the autoscaler.
        return self.autoscaling or self.capacity is CapacityMode.FLEX_START


class TpuSlice(Construct):
    pool: ContainerNodePool

    def __init__(self, scope: Construct, id_: str, *, props: TpuSliceProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        p = props
        flex = p.capacity is CapacityMode.FLEX_START
        self.pool = ContainerNodePool(
            self,
            "pool",
            name=p.name,
            cluster=p.cluster,
            location=p.location,
            node_locations=[p.zone],
            # A multi-host slice is atomic: it is all `nodes` VMs or none, so the
            # autoscaler bound is nodes per slice (never chips per VM).
            node_count=None if p.scales else p.nodes,
            initial_node_count=0 if p.scales else None,
            autoscaling=self._autoscaling() if p.scales else None,
            max_pods_per_node=p.max_pods_per_node,
            # Flex-start VMs are not repaired in place: a failed node returns the capacity.
            management=ContainerNodePoolManagement(auto_repair=not flex, auto_upgrade=True),
            placement_policy=self._placement(),
            queued_provisioning=ContainerNodePoolQueuedProvisioning(enabled=True) if p.queued_provisioning else None,
            node_config=ContainerNodePoolNodeConfig(
                machine_type=p.machine_type,
                disk_size_gb=p.disk_size_gb,
                image_type="COS_CONTAINERD",
                service_account=p.service_account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                labels=dict(p.node_labels) or None,
                resource_labels=dict(p.resource_labels) or None,
                taint=[TPU_TAINT],
                gvnic=ContainerNodePoolNodeConfigGvnic(enabled=True) if p.gvnic else None,
                spot=True if p.capacity is CapacityMode.SPOT else None,
                flex_start=True if flex else None,
                max_run_duration=f"{p.max_run_seconds}s" if p.max_run_seconds else None,
                reservation_affinity=self._reservation_affinity(),
                workload_metadata_config=ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
                shielded_instance_config=ContainerNodePoolNodeConfigShieldedInstanceConfig(enable_secure_boot=True, enable_integrity_monitoring=True),
            ),
            depends_on=list(p.depends_on) or None,
        )
        if flex:
            suppress(
                self.pool,
                {"CKV_GCP_9": "flex-start pools run with auto-repair off (GKE's flex-start setting): a broken VM is released, not repaired"},
            )

    def _autoscaling(self) -> ContainerNodePoolAutoscaling:
        if self.props.capacity is CapacityMode.FLEX_START:
            return ContainerNodePoolAutoscaling(total_min_node_count=0, total_max_node_count=self.props.nodes, location_policy="ANY")
        return ContainerNodePoolAutoscaling(min_node_count=0, max_node_count=self.props.nodes)

    def _placement(self) -> ContainerNodePoolPlacementPolicy | None:
        p = self.props
        if p.placement is Placement.COMPACT:
            return ContainerNodePoolPlacementPolicy(type="COMPACT", tpu_topology=p.topology)
        if p.placement is Placement.WORKLOAD_POLICY:
            # The provider requires `type` and COMPACT is its only value; the
            # topology lives in the workload policy, which replaces tpu_topology.
            return ContainerNodePoolPlacementPolicy(type="COMPACT", policy_name=p.workload_policy)
        return None

    def _reservation_affinity(self) -> ContainerNodePoolNodeConfigReservationAffinity | None:
        p = self.props
        if p.capacity is CapacityMode.RESERVATION:
            return ContainerNodePoolNodeConfigReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_NAME_KEY, values=[p.reservation]
            )
        if p.capacity is CapacityMode.FLEX_START:
            return ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")
        return None

    @property
    def name(self) -> str:
        return self.pool.name


@dataclass(frozen=True, kw_only=True)
class WorkloadPolicyProps:
    project: str
    region: str
    name: str
    topology: str
    depends_on: tuple[ITerraformDependable, ...] = ()


class WorkloadPolicy(Construct):
    """HIGH_THROUGHPUT workload policy: how tpu7x multi-host slices are co-located.

    One policy describes a topology, not a slice, so slices of the same
    topology in a region share it.
    """

    policy: ComputeResourcePolicy

    def __init__(self, scope: Construct, id_: str, *, props: WorkloadPolicyProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.policy = ComputeResourcePolicy(
            self,
            "policy",
            name=props.name,
            project=props.project,
            region=props.region,
            workload_policy=ComputeResourcePolicyWorkloadPolicy(type="HIGH_THROUGHPUT", accelerator_topology=props.topology),
            depends_on=list(props.depends_on) or None,
        )

    @property
    def name(self) -> str:
        return self.policy.name
