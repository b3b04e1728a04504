"""A Google Cloud Managed Lustre instance in the cluster's VPC, reachable from its nodes.

Managed Lustre serves a VPC through private services access: a reserved internal range
(``google_compute_global_address``, purpose VPC_PEERING) peered to Google's service producer
network (``google_service_networking_connection``), and a firewall rule letting the instance's
servers in that range reach the Lustre clients on the nodes (TCP 988, Lustre's LNet port), as
the GKE Managed Lustre guide sets the network up. The instance's ``mount_point`` output holds the
address the PersistentVolumes name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.compute_firewall import ComputeFirewall, ComputeFirewallAllow, ComputeFirewallLogConfig
from cdktn_provider_google.compute_global_address import ComputeGlobalAddress
from cdktn_provider_google.lustre_instance import LustreInstance
from cdktn_provider_google.service_networking_connection import ServiceNetworkingConnection
from constructs import Construct

LUSTRE_LNET_PORT = "988"


@dataclass(frozen=True, kw_only=True)
class LustreProps:
    project: str
    name: str  # instance id
    zone: str
    network: str  # the VPC's name
    network_id: str  # the VPC's id (a token)
    capacity_gib: int
    throughput: int  # MB/s per TiB
    filesystem: str
    peering_cidr: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[ITerraformDependable] = ()


class Lustre(Construct):
    instance: LustreInstance

    def __init__(self, scope: Construct, id_: str, *, props: LustreProps) -> None:
        super().__init__(scope, id_)
        net = ipaddress.ip_network(props.peering_cidr)
        deps = list(props.depends_on) or None
        self.range = ComputeGlobalAddress(
            self,
            "peering-range",
            name=f"{props.name}-psa",
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            address=str(net.network_address),
            prefix_length=net.prefixlen,
            network=props.network_id,
            depends_on=deps,
        )
        self.peering = ServiceNetworkingConnection(
            self,
            "peering",
            network=props.network_id,
            service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[self.range.name],
            depends_on=deps,
        )
        self.firewall = ComputeFirewall(
            self,
            "lnet",
            name=f"{props.name}-lnet",
            network=props.network_id,
            direction="INGRESS",
            source_ranges=[props.peering_cidr],
            allow=[ComputeFirewallAllow(protocol="tcp", ports=[LUSTRE_LNET_PORT])],
            log_config=ComputeFirewallLogConfig(metadata="INCLUDE_ALL_METADATA"),
        )
        self.instance = LustreInstance(
            self,
            "instance",
            instance_id=props.name,
            location=props.zone,
            network=f"projects/{props.project}/global/networks/{props.network}",
            capacity_gib=str(props.capacity_gib),
            per_unit_storage_throughput=str(props.throughput),
            filesystem=props.filesystem,
            labels=dict(props.labels) or None,
            depends_on=[self.peering, *(deps or [])],
        )

    @property
    def mount_point(self) -> str:
        return self.instance.mount_point
