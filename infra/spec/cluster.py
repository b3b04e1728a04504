"""The cluster's own sections: the GKE cluster (``cluster``, with its maintenance window and the Ray add-on) and the CPU node pool.

The control plane's version, endpoint and access, the add-ons GKE runs, and the pool of
CPU nodes the system pods and each run's non-TPU pods run on. Secure by default: each
opt-out is one field here (README "Secure defaults").
"""

from __future__ import annotations

import ipaddress
import re
from enum import Enum

from pydantic import Field, field_validator, model_validator

from infra import catalog, machine_types
from infra.naming import GKE_CLUSTER_NAME_MAX, GKE_NODE_POOL_NAME_MAX
from infra.spec.section import MACHINE_TYPE, FieldValueError, Section
from toolkit.names import DNS1035_LABEL


class MaintenanceWindow(Section):
    start_time: str = Field("2025-01-01T03:00:00Z", description="RFC 3339 start of the first window")
    end_time: str = Field("2025-01-01T11:00:00Z")
    recurrence: str = Field("FREQ=WEEKLY;BYDAY=SA,SU", description="RFC 5545 RRULE")

    @field_validator("start_time", "end_time")
    @classmethod
    def _rfc3339(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", v):
            raise ValueError(f"{v!r} is not an RFC 3339 UTC time; write it like 2025-01-01T03:00:00Z")
        return v

    @field_validator("recurrence")
    @classmethod
    def _rrule(cls, v: str) -> str:
        if not v.startswith("FREQ="):
            raise ValueError(f"{v!r} is not an RRULE; write it like FREQ=WEEKLY;BYDAY=SA,SU")
        return v


class ReleaseChannel(str, Enum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


class RayAddonSpec(Section):
    """GKE's Ray operator add-on (KubeRay, managed by GKE), which ``submit --runtime ray`` needs.

    Off by default: only Ray runs use it. ``logging``/``monitoring`` send the RayClusters'
    logs and metrics to Cloud Logging and Managed Prometheus (GKE's options of the add-on).
    Turning it on needs the GCS FUSE CSI driver too (``cluster.gcs_fuse_csi``), which Ray
    runs use to mount buckets, as GKE's Ray-on-TPU tutorial does.
    """

    enabled: bool = False
    logging: bool = True
    monitoring: bool = True


class ClusterSpec(Section):
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=GKE_CLUSTER_NAME_MAX)
    release_channel: ReleaseChannel = ReleaseChannel.RAPID
    min_version: str | None = Field(None, pattern=catalog.GKE_VERSION, description="min_master_version; defaults to the floor the TPU pools need")
    dataplane_v2: bool = True
    # Secure by default; each opt-out is one of these fields (README "Secure defaults").
    private_nodes: bool = Field(
        True, description="nodes without external IPs: egress through Cloud NAT, Google APIs through Private Google Access; false gives every node a public IP"
    )
    master_cidr: str = Field("172.16.0.0/28", description="control-plane range when private_nodes is on")
    master_authorized_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs that may reach the control plane's IP endpoint (none by default; add yours, e.g. 203.0.113.7/32; 0.0.0.0/0 opens it to all)",
    )
    dns_endpoint: bool = Field(
        True,
        description="GKE's DNS-based control-plane endpoint: reachable from anywhere, every request checked by IAM "
        "(gcloud container clusters get-credentials --dns-endpoint); false leaves only the IP endpoint",
    )
    deletion_protection: bool = Field(True, description="GKE refuses to delete the cluster; `infra destroy` and the destroy pipeline refuse while it is on")
    maintenance_window: MaintenanceWindow = Field(default_factory=MaintenanceWindow)
    gcs_fuse_csi: bool = True
    ray: RayAddonSpec = Field(default_factory=RayAddonSpec)
    slice_controller: bool | None = Field(
        None, description="GKE's slice controller add-on (default: on with a multislice or dynamically sliced tpu7x pool; infra/spec/ironwood.py)"
    )

    @model_validator(mode="after")
    def _ray_needs_gcs_fuse(self) -> ClusterSpec:
        if self.ray.enabled and not self.gcs_fuse_csi:
            raise FieldValueError(
                "gcs_fuse_csi", "the Ray add-on is on but the GCS FUSE CSI driver is off", "set cluster.gcs_fuse_csi: true, or cluster.ray.enabled: false"
            )
        return self

    @field_validator("master_cidr")
    @classmethod
    def _master(cls, v: str) -> str:
        try:
            net = ipaddress.ip_network(v, strict=True)
        except ValueError:
            raise ValueError(f"{v!r} is not a CIDR block; write it like 172.16.0.0/28") from None
        if net.prefixlen != 28:
            raise ValueError(f"{v!r} is a /{net.prefixlen} but GKE needs a /28 for the control plane; use one like 172.16.0.0/28")
        return v

    @field_validator("master_authorized_networks")
    @classmethod
    def _authorized(cls, v: list[str]) -> list[str]:
        for c in v:
            try:
                ipaddress.ip_network(c, strict=True)
            except ValueError:
                raise ValueError(f"{c!r} is not a CIDR block; write it like 203.0.113.0/24") from None
        return v


class CpuPoolSpec(Section):
    name: str = Field("cpu", pattern=DNS1035_LABEL, max_length=GKE_NODE_POOL_NAME_MAX)
    machine_type: str = Field("n2-standard-8", pattern=MACHINE_TYPE, description="a Compute Engine machine type infra/machine_types.py knows")
    min_nodes: int = Field(1, ge=0, le=1000, description="per zone")
    max_nodes: int = Field(3, ge=1, le=1000, description="per zone")
    disk_size_gb: int = Field(200, ge=10, le=65536)
    machine_type_unlisted: bool = Field(
        False,
        description="accept a machine_type infra/machine_types.py does not list (one Compute Engine added since the table was compiled); "
        "a type that does not exist is then refused by GCP at apply, not here",
    )

    @model_validator(mode="after")
    def _machine_type(self) -> CpuPoolSpec:
        # The table is compiled by hand (infra/machine_types.py SOURCE): a typo is caught before any cloud
        # call, and a real type the table lacks has an explicit way through instead of a dead end.
        if not self.machine_type_unlisted and (found := machine_types.problem(self.machine_type)):
            problem, fix = found
            raise FieldValueError(
                "machine_type", problem, f"{fix} (or, for a type Compute Engine has that the table lacks, set cpu_pool.machine_type_unlisted: true)"
            )
        return self

    @model_validator(mode="after")
    def _bounds(self) -> CpuPoolSpec:
        if self.min_nodes > self.max_nodes:
            raise FieldValueError("min_nodes", f"{self.min_nodes} is above max_nodes ({self.max_nodes})", "lower min_nodes or raise max_nodes")
        return self
