"""The spec's networking sections: the VPC (``network``), its optional DCN network, and the team namespaces' NetworkPolicies.

Address ranges left empty here are sized from the node count by ``infra.spec.cidrs``.
The DCN network is GKE multi-networking: a second VPC whose subnet gives every TPU node a
second interface (eth1) for multislice traffic between slices (GKE docs "Set up
multi-network support for Pods",
https://cloud.google.com/kubernetes-engine/docs/how-to/setup-multinetwork-support-for-pods).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from infra.naming import GCE_NAME_MAX
from infra.spec.section import Section, any_cidr, private_cidr
from toolkit.names import DNS1035_LABEL, K8S_NAME_MAX


class DcnNetworkSpec(Section):
    """A second VPC for multislice DCN traffic (GKE multi-networking: each TPU node gets an eth1 in its subnet).

    Its presence turns on Dataplane V2 and multi-networking on the cluster, which GKE
    only accepts at cluster creation: adding it to a running cluster recreates it.
    """

    name: str | None = Field(None, pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX, description="second VPC name (default <cluster>-dcn)")
    gke_network: str = Field(
        "dcn", pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="the GKE Network object (networking.gke.io/v1) runs attach eth1 to"
    )
    cidr: str = Field("10.200.0.0/16", description="the second VPC's subnet; every TPU node gets an eth1 address in it")
    mtu: int = Field(8896, ge=1300, le=8896, description="the second VPC's MTU (8896: GCP's largest, fewer packets per DCN transfer)")
    tcp_rmem: str = Field(
        "4096 41943040 314572800",
        pattern=r"^[0-9]+ [0-9]+ [0-9]+$",
        description="net.ipv4.tcp_rmem the TCP-tuning DaemonSet sets on every TPU node "
        "(the receive buffers the multislice MaxText scripts of https://github.com/AI-Hypercomputer/tpu-recipes set)",
    )

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return private_cidr(v, "10.200.0.0/16")


class NetworkSpec(Section):
    """VPC-native networking. CIDRs left empty are derived from the node count."""

    name: str | None = Field(None, pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX, description="VPC name (default <cluster>-net)")
    nodes_cidr: str | None = Field(None, description="primary subnet range for node IPs")
    pods_cidr: str | None = Field(None, description="secondary range for pod IPs")
    services_cidr: str | None = Field(None, description="secondary range for Service IPs")
    tpu_max_pods_per_node: int = Field(15, ge=8, le=256, description="xpk's value; TPU VMs run few pods")
    cpu_max_pods_per_node: int = Field(110, ge=8, le=256)
    headroom: float = Field(2.0, ge=1.0, le=16.0, description="factor of spare address space for surge upgrades and growth")
    dcn: DcnNetworkSpec | None = Field(None, description="second VPC for multislice DCN traffic (GKE multi-networking); None = one network")

    @field_validator("nodes_cidr", "pods_cidr", "services_cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        return v if v is None else private_cidr(v, "10.0.0.0/20")


class NetworkPolicySpec(Section):
    """NetworkPolicies in every team namespace (workloads/render/netpol.py; GKE enforces them with Dataplane V2).

    With ``enabled``, a team's pods accept connections only from pods of their own
    namespace (a run's workers, coordinator and Ray head reach each other; other teams'
    pods cannot), and a Ray head's dashboard also from KubeRay's operator. Pods on the
    host network are outside any NetworkPolicy.
    """

    enabled: bool = Field(True, description="deny ingress into team namespaces from other namespaces; false leaves the pod network open")
    egress_cidrs: list[str] | None = Field(
        None,
        description="None: egress open (PyPI, Hugging Face, GCS...). A list: egress only to the namespace, cluster DNS, "
        "the GKE metadata server and these CIDRs",
    )
    ray_operator_namespaces: list[Annotated[str, Field(pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX)]] = Field(
        default_factory=lambda: ["kube-system", "ray-system"],
        description="namespaces whose pods may reach a Ray head's dashboard (8265): where KubeRay's operator runs",
    )

    @field_validator("egress_cidrs")
    @classmethod
    def _egress(cls, v: list[str] | None) -> list[str] | None:
        for c in v or ():
            any_cidr(c, "199.36.153.8/30")
        return v
