"""Where runs keep data: Cloud Storage buckets (each with its purpose and owning team) and a Managed Lustre instance.

A bucket's purpose decides the roles its team gets (``infra.access``) and its defaults
(checkpoints buckets are versioned); a dataset (``infra.datasets``) names a data bucket.
Managed Lustre is the fast checkpoint store runs opt in to with ``--checkpoint-storage
lustre`` (the GKE version it needs: ``infra.gke_features``).
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, field_validator

from infra import gcp_names
from infra.naming import BUCKET_NAME, ZONE
from infra.spec.section import Section, private_cidr, refuse
from toolkit.names import DNS1035_LABEL


class BucketPurpose(str, Enum):
    DATA = "data"
    CHECKPOINTS = "checkpoints"
    ARTIFACTS = "artifacts"


class BucketSpec(Section):
    name: str = Field(..., pattern=BUCKET_NAME)
    purpose: BucketPurpose
    team: str | None = Field(None, description="the team whose pods use it (default: the only team; required with several)")
    versioning: bool | None = Field(None, description="default: on for checkpoints")
    force_destroy: bool = False
    soft_delete_days: int = Field(7, ge=0, le=90)

    @field_validator("name")
    @classmethod
    def _gcs_name(cls, v: str) -> str:
        refuse(gcp_names.bucket_name_problem(v))
        return v

    @property
    def versioned(self) -> bool:
        return self.purpose is BucketPurpose.CHECKPOINTS if self.versioning is None else self.versioning


LUSTRE_THROUGHPUTS = (125, 250, 500, 1000)  # MB/s per TiB, the performance tiers
LUSTRE_FILESYSTEM = r"^[A-Za-z0-9]{1,8}$"
IPV4 = r"^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}$"


class LustreSpec(Section):
    """One Managed Lustre instance in the cluster's VPC, for runs that checkpoint to it (``--checkpoint-storage lustre``).

    The stack creates it (with the private services access range and peering it needs) and turns the
    cluster's Lustre CSI driver on. Runs reach it through a PersistentVolume and claim per team
    namespace, which `queues apply` applies once ``ip`` (the instance's mount address, an output of
    `python -m infra outputs` after the deploy) is set.
    """

    # 58: the stack names the peering range and the firewall rule <name>-psa / <name>-lnet (GCE names: 63)
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=58, description="the instance id")
    capacity_gib: int = Field(..., ge=9000, le=7632000, description="storage in GiB; the tier sets the minimum and the step (Managed Lustre docs)")
    throughput: int = Field(500, ge=125, le=1000, description="MB/s per TiB: 125, 250, 500 or 1000 (per_unit_storage_throughput)")
    filesystem: str = Field("lustrefs", pattern=LUSTRE_FILESYSTEM, description="the file system's name (eight letters or digits at most)")
    zone: str | None = Field(None, pattern=ZONE, description="defaults to the first of the spec's zones (the TPU slices' zone)")
    ip: str | None = Field(None, pattern=IPV4, description="the instance's mount address once deployed (`python -m infra outputs`: lustre_mount_point)")
    peering_cidr: str = Field("10.96.0.0/20", description="the private services access range Google peers the instance into")

    @field_validator("throughput")
    @classmethod
    def _tier(cls, v: int) -> int:
        if v not in LUSTRE_THROUGHPUTS:
            raise ValueError(f"{v} is not a Managed Lustre tier; use one of {', '.join(map(str, LUSTRE_THROUGHPUTS))}")
        return v

    @field_validator("peering_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return private_cidr(v, "10.96.0.0/20")
