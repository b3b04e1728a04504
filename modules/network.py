"""VPC, subnet with pod/service secondary ranges, and NAT for private nodes; the optional DCN VPC."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.compute_firewall import ComputeFirewall, ComputeFirewallAllow, ComputeFirewallLogConfig
from cdktn_provider_google.compute_network import ComputeNetwork
from cdktn_provider_google.compute_router import ComputeRouter
from cdktn_provider_google.compute_router_nat import ComputeRouterNat, ComputeRouterNatLogConfig
from cdktn_provider_google.compute_subnetwork import (
    ComputeSubnetwork,
    ComputeSubnetworkLogConfig,
    ComputeSubnetworkSecondaryIpRange,
)
from constructs import Construct

from modules._checkov import suppress


@dataclass(frozen=True, kw_only=True)
class NetworkProps:
    """One VPC with one regional subnet sized by the caller.

    ``pods_range_name`` / ``services_range_name`` are the secondary-range names
    the cluster's IP allocation policy refers to.
    """

    name: str
    region: str
    nodes_cidr: str
    pods_cidr: str
    services_cidr: str
    pods_range_name: str = "pods"
    services_range_name: str = "services"
    # Private nodes have no external IPs, so they need NAT to pull public images.
    nat: bool = False
    flow_log_sampling: float = 0.5
    # Another construct declares a firewall rule on this VPC (modules.lustre's LNet rule): checkov sees it.
    declared_firewall: bool = False
    depends_on: Sequence[ITerraformDependable] = field(default_factory=tuple)


class Network(Construct):
    network: ComputeNetwork
    subnet: ComputeSubnetwork
    router: ComputeRouter | None
    nat: ComputeRouterNat | None

    def __init__(self, scope: Construct, id_: str, *, props: NetworkProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        deps = list(props.depends_on) or None
        self.network = ComputeNetwork(
            self,
            "vpc",
            name=props.name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            depends_on=deps,
        )
        if not props.declared_firewall:
            suppress(
                self.network,
                {
                    "CKV2_GCP_18": "GKE creates and owns this VPC's firewall rules (gke-<cluster>-*); beyond them the implied deny-ingress rule applies",
                },
            )
        self.subnet = ComputeSubnetwork(
            self,
            "subnet",
            name=props.name,
            network=self.network.id,
            region=props.region,
            ip_cidr_range=props.nodes_cidr,
            private_ip_google_access=True,
            secondary_ip_range=[
                ComputeSubnetworkSecondaryIpRange(range_name=props.pods_range_name, ip_cidr_range=props.pods_cidr),
                ComputeSubnetworkSecondaryIpRange(range_name=props.services_range_name, ip_cidr_range=props.services_cidr),
            ],
            log_config=ComputeSubnetworkLogConfig(
                aggregation_interval="INTERVAL_5_SEC",
                flow_sampling=props.flow_log_sampling,
                metadata="INCLUDE_ALL_METADATA",
            ),
        )
        self.router = None
        self.nat = None
        if props.nat:
            self.router = ComputeRouter(self, "router", name=f"{props.name}-router", region=props.region, network=self.network.id)
            self.nat = ComputeRouterNat(
                self,
                "nat",
                name=f"{props.name}-nat",
                router=self.router.name,
                region=props.region,
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
                log_config=ComputeRouterNatLogConfig(enable=True, filter="ERRORS_ONLY"),
            )


@dataclass(frozen=True, kw_only=True)
class DcnNetworkProps:
    """The second VPC of a tpu7x multislice cluster: every TPU node's second NIC (eth1) is in its subnet.

    Multislice DCN traffic (MegaScale gRPC between slices) runs host to host over it,
    away from the pod network and the control traffic on the first VPC.
    """

    name: str
    region: str
    cidr: str
    mtu: int = 8896
    flow_log_sampling: float = 0.5
    depends_on: Sequence[ITerraformDependable] = field(default_factory=tuple)


class DcnNetwork(Construct):
    network: ComputeNetwork
    subnet: ComputeSubnetwork
    firewall: ComputeFirewall

    def __init__(self, scope: Construct, id_: str, *, props: DcnNetworkProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.network = ComputeNetwork(
            self,
            "vpc",
            name=props.name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=props.mtu,
            depends_on=list(props.depends_on) or None,
        )
        # GKE names the multi-network subnet in GKENetworkParamSet.vpcSubnet: same name as the VPC.
        self.subnet = ComputeSubnetwork(
            self,
            "subnet",
            name=props.name,
            network=self.network.id,
            region=props.region,
            ip_cidr_range=props.cidr,
            private_ip_google_access=True,
            log_config=ComputeSubnetworkLogConfig(
                aggregation_interval="INTERVAL_5_SEC",
                flow_sampling=props.flow_log_sampling,
                metadata="INCLUDE_ALL_METADATA",
            ),
        )
        # GKE writes no firewall rules for an additional network; without this one the
        # implied deny-ingress rule would drop every DCN packet between slices.
        self.firewall = ComputeFirewall(
            self,
            "internal",
            name=f"{props.name}-internal",
            network=self.network.id,
            direction="INGRESS",
            source_ranges=[props.cidr],
            allow=[ComputeFirewallAllow(protocol="tcp"), ComputeFirewallAllow(protocol="udp"), ComputeFirewallAllow(protocol="icmp")],
            log_config=ComputeFirewallLogConfig(metadata="INCLUDE_ALL_METADATA"),
        )
