"""The CPU node pool: system pods, Kueue/JobSet controllers, CPU jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdktn_provider_google.container_node_pool import (
    ContainerNodePool,
    ContainerNodePoolAutoscaling,
    ContainerNodePoolManagement,
    ContainerNodePoolNodeConfig,
    ContainerNodePoolNodeConfigShieldedInstanceConfig,
    ContainerNodePoolNodeConfigWorkloadMetadataConfig,
)
from constructs import Construct

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True, kw_only=True)
class CpuPoolProps:
    cluster: str  # cluster id (projects/<p>/locations/<l>/clusters/<name>) or name
    location: str
    name: str
    machine_type: str
    service_account: str  # email
    min_nodes_per_zone: int = 1
    max_nodes_per_zone: int = 3
    disk_size_gb: int = 100
    zones: Sequence[str] = ()  # empty: the cluster's node locations
    max_pods_per_node: int = 110
    node_labels: Mapping[str, str] = field(default_factory=dict)
    resource_labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.min_nodes_per_zone <= self.max_nodes_per_zone:
            raise ValueError(f"CPU pool {self.name}: need 0 <= min ({self.min_nodes_per_zone}) <= max ({self.max_nodes_per_zone})")


class CpuPool(Construct):
    pool: ContainerNodePool

    def __init__(self, scope: Construct, id_: str, *, props: CpuPoolProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        p = props
        self.pool = ContainerNodePool(
            self,
            "pool",
            name=p.name,
            cluster=p.cluster,
            location=p.location,
            node_locations=list(p.zones) or None,
            # At least one node from the start, so cluster add-ons can be installed right after apply.
            initial_node_count=max(p.min_nodes_per_zone, 1),
            autoscaling=ContainerNodePoolAutoscaling(min_node_count=p.min_nodes_per_zone, max_node_count=p.max_nodes_per_zone),
            max_pods_per_node=p.max_pods_per_node,
            management=ContainerNodePoolManagement(auto_repair=True, auto_upgrade=True),
            node_config=ContainerNodePoolNodeConfig(
                machine_type=p.machine_type,
                disk_size_gb=p.disk_size_gb,
                disk_type="pd-balanced",
                image_type="COS_CONTAINERD",
                service_account=p.service_account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                labels=dict(p.node_labels) or None,
                resource_labels=dict(p.resource_labels) or None,
                workload_metadata_config=ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
                shielded_instance_config=ContainerNodePoolNodeConfigShieldedInstanceConfig(enable_secure_boot=True, enable_integrity_monitoring=True),
            ),
        )

    @property
    def name(self) -> str:
        return self.pool.name
