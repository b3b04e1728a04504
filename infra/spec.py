"""The environment spec: one YAML file, validated into typed models.

The spec is the single source of truth: the Terraform stack, the Kueue objects
and run planning are all derived from an ``EnvSpec``. Everything a consumer
needs that can be computed (slice shapes, node counts, CIDRs, the GKE version
floor) is computed here once, so the consumers cannot disagree.

Importing this module must stay cheap: no CDK, no Kubernetes client.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, field_validator, model_validator

from infra import catalog, gcp_names, identities, machine_types, naming, quotas, vertex_ai
from infra.datasets import DatasetFormat, DatasetSpec, TokenizerType  # noqa: F401  re-exported
from infra.naming import (
    BUCKET_NAME,
    GCE_NAME_MAX,
    GCP_ID,
    GCP_ID_MAX,
    GCP_ID_MIN,
    GKE_CLUSTER_NAME_MAX,
    GKE_NODE_POOL_NAME_MAX,
    REGION,
    ZONE,
)
from infra.price_table import PriceOverrides, Prices, load_table
from toolkit.errors import CatalogError, SpecError, shown
from toolkit.names import (
    DNS1035_LABEL,
    K8S_NAME_MAX,
    KUEUE_QUEUE_LABEL,
    TGK_ACCELERATOR_TYPE_LABEL,
    TGK_CAPACITY_LABEL,
    TGK_GROUP_SIZE_LABEL,
    TGK_POOL_LABEL,
    TGK_RESERVATION_LABEL,
    TGK_SLICE_INDEX_LABEL,
    TGK_TOPOLOGY_LABEL,
    CapacityMode,
)
from toolkit.yamlfile import MAX_YAML_BYTES, YamlFileError, decode_text, load_yaml, read_capped  # noqa: F401  re-exported
from toolkit.yamlfile import key_text as _key_text

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "examples"
DEFAULT_SPEC_PATH = EXAMPLES_DIR / "default.yaml"
SPEC_ENV_VAR = "TGK_SPEC"

# Pinned versions of the cluster add-ons the toolkit installs and renders for.
DEFAULT_KUEUE_VERSION = "v0.17.1"
DEFAULT_JOBSET_VERSION = "v0.10.1"

# Kueue v1beta2's ClusterQueue CRD: at most this many flavors in one resource group (maxItems).
KUEUE_MAX_FLAVORS_PER_GROUP = 16

# The de-facto PriorityClass names and values (shared with xpk).
PRIORITY_CLASSES: dict[str, int] = {
    "very-low": 100,
    "low": 250,
    "medium": 500,
    "high": 750,
    "very-high": 1000,
}

# Labels infra.stack puts on resources beside the spec's: managed-by and tgk-cluster everywhere,
# purpose on buckets, tpu-pool on TPU node pools.
STACK_LABEL_KEYS = ("managed-by", "tgk-cluster", "purpose", "tpu-pool")

_RELEASE = r"^v\d+\.\d+\.\d+$"  # an add-on's release tag
_MACHINE_TYPE = r"^[a-z0-9]+-[a-z0-9-]+$"
MAX_SLICES = 512
# A TPU pool's node pools are <name>-<slice index>; the longest index must still fit GKE's node pool names.
TPU_POOL_NAME_MAX = GKE_NODE_POOL_NAME_MAX - len(f"-{MAX_SLICES - 1}")


class FieldValueError(ValueError):
    """Raised by a model validator to name the offending field inside its model.

    pydantic reports model-validator errors at the model's own location; the field
    (relative to that model) is appended by ``format_validation_error``.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


def _refuse(found: tuple[str, str] | None) -> None:
    """Raise a field validator's ValueError ('problem; fix', split again by the error formatter) for a GCP rule broken."""
    if found is not None:
        raise ValueError(f"{found[0]}; {found[1]}")


class _Model(BaseModel):
    # Unknown keys are errors: a typo must not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------- network


def _overlap(a: str, b: str) -> bool:
    return ipaddress.ip_network(a, strict=False).overlaps(ipaddress.ip_network(b, strict=False))


def _private_cidr(v: str, example: str) -> str:
    """``v`` if it is a private IPv4 CIDR block, else a ValueError saying how to write one (like ``example``)."""
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"{v!r} is not a CIDR block ({e}); write it like {example}") from None
    if net.version != 4 or not net.is_private:
        raise ValueError(f"{v!r} is not a private IPv4 range (RFC 1918); use one like {example}")
    return v


class NetworkSpec(_Model):
    """VPC-native networking. CIDRs left empty are derived from the node count."""

    name: str | None = Field(None, pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX, description="VPC name (default <cluster>-net)")
    nodes_cidr: str | None = Field(None, description="primary subnet range for node IPs")
    pods_cidr: str | None = Field(None, description="secondary range for pod IPs")
    services_cidr: str | None = Field(None, description="secondary range for Service IPs")
    tpu_max_pods_per_node: int = Field(15, ge=8, le=256, description="xpk's value; TPU VMs run few pods")
    cpu_max_pods_per_node: int = Field(110, ge=8, le=256)
    headroom: float = Field(2.0, ge=1.0, le=16.0, description="factor of spare address space for surge upgrades and growth")
    dcn: DcnNetworkSpec | None = Field(None, description="second VPC for multislice DCN (tpu7x playbook); None = one network")

    @field_validator("nodes_cidr", "pods_cidr", "services_cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        return v if v is None else _private_cidr(v, "10.0.0.0/20")


class DcnNetworkSpec(_Model):
    """A second VPC for multislice DCN traffic (GKE multi-networking, as the TPU v7 playbook sets it up).

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
        pattern=r"^\d+ \d+ \d+$",
        description="net.ipv4.tcp_rmem the TCP-tuning DaemonSet sets on every TPU node (the playbook's value)",
    )

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return _private_cidr(v, "10.200.0.0/16")


class MaintenanceWindow(_Model):
    start_time: str = Field("2025-01-01T03:00:00Z", description="RFC 3339 start of the first window")
    end_time: str = Field("2025-01-01T11:00:00Z")
    recurrence: str = Field("FREQ=WEEKLY;BYDAY=SA,SU", description="RFC 5545 RRULE")

    @field_validator("start_time", "end_time")
    @classmethod
    def _rfc3339(cls, v: str) -> str:
        if not re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$", v):
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


class RayAddonSpec(_Model):
    """GKE's Ray operator add-on (KubeRay, managed by GKE), which ``submit --runtime ray`` needs.

    Off by default: only Ray runs use it. ``logging``/``monitoring`` send the RayClusters'
    logs and metrics to Cloud Logging and Managed Prometheus (GKE's options of the add-on).
    Turning it on needs the GCS FUSE CSI driver too (``cluster.gcs_fuse_csi``), which Ray
    runs use to mount buckets, as GKE's Ray-on-TPU tutorial does.
    """

    enabled: bool = False
    logging: bool = True
    monitoring: bool = True


class ClusterSpec(_Model):
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


# ----------------------------------------------------------------------- pools


class CpuPoolSpec(_Model):
    name: str = Field("cpu", pattern=DNS1035_LABEL, max_length=GKE_NODE_POOL_NAME_MAX)
    machine_type: str = Field("n2-standard-8", pattern=_MACHINE_TYPE, description="a Compute Engine machine type infra/machine_types.py knows")
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


class OnDemand(_Model):
    mode: Literal[CapacityMode.ON_DEMAND.value]


class Spot(_Model):
    mode: Literal[CapacityMode.SPOT.value]


class ProvisioningRetry(_Model):
    """How Kueue retries a refused ProvisioningRequest (its ProvisioningRequestConfig's retryStrategy)."""

    limit: int = Field(3, ge=0, le=100, description="retries before the admission check rejects the run (Kueue deactivates it)")
    base_seconds: int = Field(60, ge=1, le=86400, description="first backoff; it doubles per retry")
    max_seconds: int = Field(1800, ge=1, le=86400)

    @model_validator(mode="after")
    def _bounds(self) -> ProvisioningRetry:
        if self.max_seconds < self.base_seconds:
            raise FieldValueError("max_seconds", f"{self.max_seconds} is below base_seconds ({self.base_seconds})", "raise max_seconds")
        return self


# GKE: flex-start VMs live at most 7 days (the default, too).
FLEX_MAX_RUN_SECONDS = 7 * 24 * 3600
# DWS flex-start for TPUs (both modes) needs this GKE version (provisioning-model docs; see docs/architecture.md).
FLEX_START_TPU_MIN_GKE_VERSION = "1.33.0-gke.1712000"
# RayJob workers keep to one node pool per slice through pod-affinity matchLabelKeys and
# mismatchLabelKeys (workloads/render/rayjob.py): beta and on by default from Kubernetes 1.31,
# GA in 1.33 (KEP-3633); an older API server drops the fields and a slice may straddle pools.
# 1.31.2-gke.1115000 is the earliest 1.31 GKE version the catalog already cites (v6e's floor).
RAY_MIN_GKE_VERSION = "1.31.2-gke.1115000"
# Generations GKE offers flex-start TPUs in: not v4 (nor v3).
FLEX_START_GENERATIONS = ("v5e", "v5p", "v6e", "tpu7x")


class FlexStart(_Model):
    """DWS flex-start. Without ``queued`` (xpk's mode) the autoscaler adds a slice's VMs when
    pods wait for them; with ``queued`` a Kueue admission check asks GKE for the whole slice
    (a ProvisioningRequest) and admits the run only once it is there."""

    mode: Literal[CapacityMode.FLEX_START.value]
    queued: bool = Field(False, description="queued provisioning: a Kueue ProvisioningRequest admission check on this option's flavor")
    max_run_seconds: int | None = Field(
        None, ge=600, le=FLEX_MAX_RUN_SECONDS, description="how long GKE keeps the VMs (max_run_duration; GKE's default and cap: 7 days)"
    )
    retry: ProvisioningRetry = Field(default_factory=ProvisioningRetry, description="queued only: Kueue's retries of a refused request")

    @model_validator(mode="after")
    def _retry_needs_queue(self) -> FlexStart:
        if not self.queued and "retry" in self.model_fields_set:
            raise FieldValueError("retry", "only applies to queued provisioning", "set queued: true or remove retry")
        return self


class Reservation(_Model):
    mode: Literal[CapacityMode.RESERVATION.value]
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX)
    zone: str = Field(..., description="zone the reservation lives in; must be the pool's zone")
    project: str | None = Field(None, pattern=GCP_ID, description="owner project of a shared reservation (a GCP project id)")


Capacity = Annotated[Union[OnDemand, Spot, FlexStart, Reservation], Field(discriminator="mode")]


def _capacity_shorthand(v: Any) -> Any:
    # `capacity: spot` is allowed as shorthand for `capacity: {mode: spot}`.
    return {"mode": v} if isinstance(v, str) else v


_CAPACITY_ADAPTER: TypeAdapter[Any] = TypeAdapter(Capacity)
# Node-pool name tags of the capacity options of a pool with a fallback list.
_OPTION_TAGS = {CapacityMode.ON_DEMAND: "od", CapacityMode.SPOT: "spot", CapacityMode.FLEX_START: "flex"}
# Most interruption-prone first: a run that may land on any option is planned for the worst.
_RUN_MODE_ORDER = (CapacityMode.SPOT, CapacityMode.FLEX_START, CapacityMode.ON_DEMAND, CapacityMode.RESERVATION)


def _option_key(cap: Any) -> str:
    return f"reservation {cap.name}" if isinstance(cap, Reservation) else cap.mode


def _parse_capacity_list(items: list[Any]) -> list[Any]:
    """``capacity: [a, b, ...]``: each option validated, errors named ``capacity[k]...``, no repeats."""
    if not items:
        raise FieldValueError("capacity", "is an empty list", "list at least one option, e.g. [spot], or write capacity: spot")
    out = []
    for k, item in enumerate(items):
        try:
            out.append(_CAPACITY_ADAPTER.validate_python(_capacity_shorthand(item)))
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            problem, fix = _problem_and_fix({**err, "loc": ("capacity", *err["loc"])})
            where = _loc(("capacity", *err["loc"])).removeprefix("capacity")
            raise FieldValueError(f"capacity[{k}]{where}", problem, fix) from None
    seen: dict[str, int] = {}
    for k, cap in enumerate(out):
        key = _option_key(cap)
        if key in seen:
            raise FieldValueError(f"capacity[{k}]", f"repeats capacity[{seen[key]}] ({key})", "list each capacity option once")
        seen[key] = k
    return out


# GKE custom ComputeClasses (cloud.google.com/v1): "1.30.3-gke.1451000 and later" (About custom ComputeClasses).
COMPUTE_CLASS_MIN_GKE_VERSION = "1.30.3-gke.1451000"


class ComputeClassSpec(_Model):
    """GKE makes the pool's slices on demand from a custom ComputeClass instead of the stack declaring node pools.

    The class lists the pool's ``capacity`` options as its priorities, in order (each
    reservation, on-demand, flex-start, spot: GKE tries the next when one cannot be had);
    node auto-provisioning creates a slice's node pool when a run admitted to the pool's
    Kueue flavor needs it, and removes it when idle. ``active_migration`` moves running
    nodes back to a preferred priority when it frees up (GKE's ``optimizeRulePriority``).
    """

    name: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="the ComputeClass (default: the pool's name)")
    active_migration: bool = Field(True, description="GKE moves nodes back to a higher priority when it has capacity again")


def _compute_class_shorthand(v: Any) -> Any:
    # `compute_class: true` for the defaults; false is the same as leaving it out.
    if v is True:
        return {}
    return None if v is False else v


class CapacityOption(BaseModel):
    """One capacity option of a pool, in priority order: its node pools and its Kueue flavor."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    index: int
    capacity: Any  # one of OnDemand, Spot, FlexStart, Reservation
    tag: str  # "" for a pool with one option (its node pools keep the plain <pool>-<slice> names)
    # The later reservations of a capacity list, in order: the reservations are tried at pool
    # creation (infra.fallback), one at a time, for the same node pools and Kueue flavor.
    alternates: tuple[Any, ...] = ()

    @property
    def mode(self) -> str:
        return str(self.capacity.mode)

    @property
    def choices(self) -> tuple[Any, ...]:
        """What ``infra deploy`` may create this option's node pools from, in the order it tries them."""
        return (self.capacity, *self.alternates)

    def reservation(self, name: str | None = None) -> Any:
        """The reservation its node pools consume: ``name`` (one of ``choices``), default the first."""
        if name is None:
            return self.capacity
        return next(c for c in self.choices if isinstance(c, Reservation) and c.name == name)


# GKE's multi-tier checkpointing (GKE docs "Train large-scale machine learning models on GKE with
# Multi-Tier Checkpointing": version floor, Standard clusters only; MaxText's multi_tier_checkpointing
# guide: the TPU generations it supports). The toolkit only makes Standard clusters.
MTC_MIN_GKE_VERSION = "1.32.4-gke.1415000"
MTC_GENERATIONS = ("v4", "v5e", "v5p", "v6e")


class MultiTierCheckpointingSpec(_Model):
    """GKE's multi-tier checkpointing on a pool's TPU VMs: a RAM disk of ``ramdisk_gib`` per VM (the
    pool shape's CheckpointConfiguration, applied by ``queues apply``), backed up to ``bucket``."""

    ramdisk_gib: int = Field(..., ge=1, le=65536, description="RAM disk per TPU VM (inMemoryVolumeSize); `workloads submit --dry-run` prints what a run needs")
    bucket: str | None = Field(None, description="checkpoints bucket the add-on backs the RAM disks up to (default: the spec's first checkpoints bucket)")


# Google Cloud Managed Lustre (provider 7.43.0's google_lustre_instance; GKE docs "About the Managed
# Lustre CSI driver": the driver needs GKE 1.33.2-gke.1111000 and the instance in the cluster's VPC).
# The floor is the later 1.33.2-gke.4655000: from it the nodes' Lustre client uses LNet's own port
# (988) beside the GKE metadata server, so the instance needs no gke_support_enabled and the
# driver no legacy port 6988 (GKE API, LustreCsiDriverConfig.enable_legacy_lustre_port).
LUSTRE_MIN_GKE_VERSION = "1.33.2-gke.4655000"
LUSTRE_THROUGHPUTS = (125, 250, 500, 1000)  # MB/s per TiB, the performance tiers
LUSTRE_FILESYSTEM = r"^[A-Za-z0-9]{1,8}$"
IPV4 = r"^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}$"


class LustreSpec(_Model):
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
        return _private_cidr(v, "10.96.0.0/20")


class TpuPoolSpec(_Model):
    """A group of identical TPU slices: one GKE node pool per slice."""

    name: str = Field(..., pattern=DNS1035_LABEL, max_length=TPU_POOL_NAME_MAX, description="node pools are named <name>-<slice index>")
    type: str | None = Field(None, description="accelerator type, e.g. v5litepod-16, v6e-16, tpu7x-256")
    generation: str | None = Field(None, description="v4, v5e, v5p, v6e or tpu7x (with topology)")
    topology: str | None = Field(None, description="e.g. 4x4 or 4x4x8 (with generation)")
    chips_per_vm: int | None = Field(None, description="only to pick multi-host 2x4 (4) over single-host (8)")
    slices: int = Field(1, ge=1, le=MAX_SLICES, description="number of slices = node pools")
    capacity: Capacity = Field(default_factory=lambda: OnDemand(mode=CapacityMode.ON_DEMAND.value))
    zone: str | None = Field(None, description="defaults to the first of the spec's zones")
    autoscaling: bool = Field(False, description="scale each slice between 0 and its node count")
    disk_size_gb: int = Field(100, ge=10, le=65536)
    compute_class: ComputeClassSpec | None = Field(
        None, description="GKE creates the slices on demand from a ComputeClass of the capacity options (true, or {name, active_migration})"
    )
    multi_tier_checkpointing: MultiTierCheckpointingSpec | None = Field(
        None, description="GKE's multi-tier checkpointing on these VMs (runs opt in with --multi-tier-checkpointing)"
    )

    _shape: catalog.SliceShape = PrivateAttr()
    # capacity: [a, b, c] keeps a in `capacity` (what single-option code reads) and b, c here.
    _fallback: tuple[Any, ...] = PrivateAttr(default=())

    @field_validator("capacity", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _capacity_shorthand(v)

    @field_validator("compute_class", mode="before")
    @classmethod
    def _class_shorthand(cls, v: Any) -> Any:
        return _compute_class_shorthand(v)

    @property
    def class_name(self) -> str | None:
        """The pool's ComputeClass, or None for a pool of declared node pools."""
        if self.compute_class is None:
            return None
        return self.compute_class.name or self.name

    @model_validator(mode="wrap")
    @classmethod
    def _capacity_list(cls, data: Any, handler: Any) -> TpuPoolSpec:
        """``capacity`` may be a list of options in priority order (reservations first, then on-demand, spot, flex-start)."""
        options = data.get("capacity") if isinstance(data, dict) else None
        if not isinstance(options, list):
            return handler(data)
        parsed = _parse_capacity_list(options)
        pool = handler({**data, "capacity": parsed[0].model_dump()})
        pool._fallback = tuple(parsed[1:])
        return pool

    @model_validator(mode="after")
    def _resolve(self) -> TpuPoolSpec:
        if not self.type and not (self.generation and self.topology):
            missing = "topology" if self.generation else "generation" if self.topology else "type"
            raise FieldValueError(missing, "no TPU shape given", "give either type (e.g. v5litepod-16) or generation + topology (e.g. v6e + 4x4)")
        if self.type and self.generation:
            self._check_type_generation()
        if (self.generation is None) != (self.topology is None):
            # Only reachable with a type: without one, the check above names what is missing.
            given, missing = ("generation", "topology") if self.topology is None else ("topology", "generation")
            raise FieldValueError(
                given,
                f"is given with type {self.type!r} but without {missing}",
                f"drop {given} (the type names the shape) or add {missing}",
            )
        try:
            self._shape = catalog.resolve(self.type, generation=self.generation, topology=self.topology, chips_per_vm=self.chips_per_vm)
        except CatalogError as e:
            raise FieldValueError(self._shape_field(), *_split_problem(str(e), "pick a valid TPU shape")) from None
        if self.slices > 1 and not self.shape.multi_host:
            raise FieldValueError(
                "slices",
                f"{self.shape.accelerator_type} is single-host; multislice needs multi-host slices",
                f"use a multi-host type (e.g. {self.shape.generation.canonical_prefix}-{self.shape.chips * 2 * (2 if self.shape.generation.name_counts_cores else 1)}) or set slices: 1",
            )
        return self

    def _check_type_generation(self) -> None:
        """type and generation must name the same generation: one of them would silently lose."""
        assert self.type and self.generation
        try:
            named = catalog.accelerator_type(self.type)
        except CatalogError:
            return  # an unknown type is reported by resolve below
        gen = catalog.GENERATIONS.get(self.generation.strip().lower())
        if gen is None or gen is named.generation:
            return  # an unknown generation is reported by resolve below
        example = f"{gen.canonical_prefix}-{named.chips * (2 if gen.name_counts_cores else 1)}"
        try:
            catalog.accelerator_type(example)
        except CatalogError:
            example = f"{gen.canonical_prefix}-N"
        raise FieldValueError(
            "generation",
            f"{self.generation!r} contradicts type {self.type!r}, which is a {named.generation.name} type",
            f"drop generation (the type names it) or use a {gen.name} type such as {example}",
        )

    def _shape_field(self) -> str:
        """Which of type / generation / topology / chips_per_vm made the shape invalid."""
        if self.generation and self.generation.strip().lower() not in catalog.GENERATIONS:
            return "generation"
        if self.chips_per_vm is not None:
            try:
                catalog.resolve(self.type, generation=self.generation, topology=self.topology)
                return "chips_per_vm"  # valid without it: the VM size is what is wrong
            except CatalogError:
                pass
        if self.type and not self.topology:
            return "type"
        return "topology"

    @property
    def shape(self) -> catalog.SliceShape:
        return self._shape

    @property
    def capacities(self) -> tuple[Any, ...]:
        """The capacity options in priority order (one for a pool without a fallback list)."""
        return (self.capacity, *self._fallback)

    @property
    def has_fallback(self) -> bool:
        return bool(self._fallback)

    @property
    def queued(self) -> bool:
        """Some option is DWS flex-start with queued provisioning (Kueue asks GKE for its slices)."""
        return any(isinstance(c, FlexStart) and c.queued for c in self.capacities)

    @property
    def flex_start(self) -> bool:
        return any(isinstance(c, FlexStart) for c in self.capacities)

    @property
    def run_mode(self) -> str:
        """The capacity mode a run on this pool is planned for: the most interruption-prone of its options."""
        modes = {c.mode for c in self.capacities}
        return next(m.value for m in _RUN_MODE_ORDER if m in modes)

    def capacity_options(self) -> list[CapacityOption]:
        """The options that get node pools and a Kueue flavor, in priority order.

        The reservations of a capacity list are one option: the first reservation's, with the
        others as its ``alternates``. GKE creates a reservation's node pool whole or fails
        (RESOURCE_EXHAUSTED), so ``infra deploy`` tries them in order and keeps the first that
        succeeds (seed 003's flow); declaring a node pool per reservation would hold every one.
        """
        out: list[CapacityOption] = []
        reservations = [c for c in self.capacities if isinstance(c, Reservation)]
        if self.compute_class is not None:
            # GKE tries the class's priorities itself, reservations one by one: nothing to fold.
            return [CapacityOption(index=k, capacity=cap, tag=self._class_tag(cap)) for k, cap in enumerate(self.capacities)]
        for k, cap in enumerate(self.capacities):
            if isinstance(cap, Reservation) and cap is not reservations[0]:
                continue  # an alternate of the first reservation's option
            if not self.has_fallback:
                tag = ""
            elif isinstance(cap, Reservation):
                tag = "res"
            else:
                tag = _OPTION_TAGS[cap.mode]
            alternates = tuple(reservations[1:]) if isinstance(cap, Reservation) else ()
            out.append(CapacityOption(index=k, capacity=cap, tag=tag, alternates=alternates))
        return out

    @staticmethod
    def _class_tag(cap: Any) -> str:
        return f"res-{cap.name}" if isinstance(cap, Reservation) else _OPTION_TAGS[cap.mode]

    @property
    def reservation_choices(self) -> tuple[Any, ...]:
        """Every reservation the pool lists, in the order ``infra deploy`` tries them."""
        return tuple(c for c in self.capacities if isinstance(c, Reservation))

    def flavor_name(self, option: CapacityOption | None = None) -> str:
        """The Kueue ResourceFlavor of ``option`` (default: the first): the shape's, which every pool of that
        shape with one option shares, or ``<pool>-<tag>`` for an option of a capacity list."""
        if self.class_name is not None:
            return self.class_name  # one flavor for the class: GKE, not Kueue, picks the priority
        option = option or self.capacity_options()[0]
        return f"{self.name}-{option.tag}" if option.tag else self.shape.key

    def autoscaled(self, option: CapacityOption) -> bool:
        """The option's node pools have an autoscaler: the pool asks for one, and every fallback option after the first has one."""
        return self.autoscaling or option.index > 0 or self.compute_class is not None

    def scales_from_zero(self, option: CapacityOption) -> bool:
        """The option's node pools hold no VMs while idle (and cost nothing): autoscaled, or flex-start, which only
        the autoscaler obtains (modules.tpu_pool)."""
        return self.autoscaled(option) or option.mode == CapacityMode.FLEX_START

    def option_node_pool_names(self, option: CapacityOption) -> list[str]:
        """One GKE node pool per slice of one capacity option: <pool>-<slice>, or <pool>-<tag>-<slice> in a fallback list."""
        if self.compute_class is not None:
            return []  # GKE's node auto-provisioning names and creates them
        stem = f"{self.name}-{option.tag}" if option.tag else self.name
        return [f"{stem}-{i}" for i in range(self.slices)]

    def node_pool_names(self) -> list[str]:
        return [n for o in self.capacity_options() for n in self.option_node_pool_names(o)]

    def node_labels(self, option: CapacityOption, index: int, reservation: str | None = None) -> dict[str, str]:
        """The toolkit's labels on every node of slice ``index`` of ``option`` (its multislice group, its capacity;
        ``reservation``: the one of the option's choices its node pools were created from)."""
        labels = {
            TGK_POOL_LABEL: self.name,
            TGK_GROUP_SIZE_LABEL: str(self.slices),
            TGK_SLICE_INDEX_LABEL: str(index),
            TGK_ACCELERATOR_TYPE_LABEL: self.shape.accelerator_type,
            TGK_TOPOLOGY_LABEL: self.shape.topology,
            TGK_CAPACITY_LABEL: option.mode,
        }
        if isinstance(option.capacity, Reservation):
            labels[TGK_RESERVATION_LABEL] = option.reservation(reservation).name
        return labels

    @property
    def total_nodes(self) -> int:
        """Every VM the pool can hold: each capacity option has node pools for all its slices (a ComputeClass
        pool: its slices once, whichever priority GKE makes them from; Kueue admits at most that many)."""
        options = 1 if self.compute_class is not None else len(self.capacity_options())
        return self.slices * self.shape.nodes * options

    @property
    def total_chips(self) -> int:
        return self.slices * self.shape.chips


# ----------------------------------------------------------------------- teams


class BorrowWithinCohortSpec(_Model):
    """Kueue's borrowWithinCohort: may a run that borrows preempt lower-priority runs of other teams."""

    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = Field(
        None, ge=-(2**31), le=2**31 - 1, description="only runs at or below this priority value may be preempted (Kueue's int32)"
    )


class TeamPreemptionSpec(_Model):
    """The team's ClusterQueue preemption policies (Kueue v1beta2 ``spec.preemption``)."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority", description="a team's higher-priority run preempts its own lower-priority ones"
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any", description="the team takes back its lent quota by preempting the borrowers' runs"
    )
    borrow_within_cohort: BorrowWithinCohortSpec | None = None


class TeamSpec(_Model):
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=30)
    namespace: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="defaults to the team name")
    local_queue: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="defaults to <namespace>-queue")
    service_account: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="KSA bound to the workload GSA")
    quota_share: float = Field(
        1.0, ge=0, le=1.0, description="fraction of every TPU shape's slices this team owns (whole slices: infra.quotas); 0 = it only borrows"
    )
    priority: str = Field("medium", description="default priority class for the team's runs")
    borrowing_limit: float | None = Field(
        None, ge=0, le=1.0, description="fraction of every TPU shape's chips the team may borrow beyond its quota (None: no limit)"
    )
    lending_limit: float | None = Field(
        None, ge=0, le=1.0, description="fraction of every TPU shape's chips of its quota the team lends when idle (None: all of it)"
    )
    fair_sharing_weight: float | None = Field(None, ge=0, le=1000, description="Kueue fair sharing: a heavier team gets more of the idle quota")
    preemption: TeamPreemptionSpec = Field(default_factory=TeamPreemptionSpec)
    host_network: bool = Field(
        False,
        description="allow hostNetwork runs (more DCN throughput); they act as the TPU nodes' SA, which then gets this team's buckets",
    )
    priorities: list[str] | None = Field(
        None,
        min_length=1,
        description="the PriorityClasses the team's pods may use, enforced in the cluster by an admission policy (default: its priority and every lower one)",
    )
    run_as_user: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="run the team's pods as this non-root UID (runAsNonRoot), and enforce Pod Security restricted on its namespace; "
        "default: the image's user (the toolkit's MaxText image runs as root), under baseline",
    )

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: str) -> str:
        if v not in PRIORITY_CLASSES:
            raise ValueError(f"unknown priority {v!r}; use one of {', '.join(PRIORITY_CLASSES)}")
        return v

    @field_validator("priorities")
    @classmethod
    def _priorities(cls, v: list[str] | None) -> list[str] | None:
        for p in v or ():
            if p not in PRIORITY_CLASSES:
                raise ValueError(f"unknown priority {p!r}; use some of {', '.join(PRIORITY_CLASSES)}")
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"{v} names a priority twice; list each once")
        return v

    @model_validator(mode="after")
    def _default_priority_allowed(self) -> TeamSpec:
        if self.priorities is not None and self.priority not in self.priorities:
            raise FieldValueError(
                "priorities", f"does not include the team's own priority ({self.priority})", f"add {self.priority} to priorities, or change priority"
            )
        return self

    @property
    def allowed_priorities(self) -> tuple[str, ...]:
        """The PriorityClasses the team may use, lowest first (``priorities``, else up to its ``priority``)."""
        if self.priorities is not None:
            return tuple(p for p in PRIORITY_CLASSES if p in self.priorities)
        ceiling = PRIORITY_CLASSES[self.priority]
        return tuple(p for p, v in PRIORITY_CLASSES.items() if v <= ceiling)

    @model_validator(mode="after")
    def _lend_own(self) -> TeamSpec:
        if self.lending_limit is not None and self.lending_limit > self.quota_share + 1e-9:
            raise FieldValueError(
                "lending_limit", f"{self.lending_limit:g} is more than the team's quota_share ({self.quota_share:g})", "lend at most the quota_share"
            )
        return self

    @property
    def ns(self) -> str:
        return self.namespace or self.name

    @property
    def queue(self) -> str:
        return self.local_queue or f"{self.ns}-queue"

    @property
    def ksa(self) -> str:
        return self.service_account or "tpu-training"


# ------------------------------------------------------------------ artifacts


class BucketPurpose(str, Enum):
    DATA = "data"
    CHECKPOINTS = "checkpoints"
    ARTIFACTS = "artifacts"


class BucketSpec(_Model):
    name: str = Field(..., pattern=BUCKET_NAME)
    purpose: BucketPurpose
    team: str | None = Field(None, description="the team whose pods use it (default: the only team; required with several)")
    versioning: bool | None = Field(None, description="default: on for checkpoints")
    force_destroy: bool = False
    soft_delete_days: int = Field(7, ge=0, le=90)

    @field_validator("name")
    @classmethod
    def _gcs_name(cls, v: str) -> str:
        _refuse(gcp_names.bucket_name_problem(v))
        return v

    @property
    def versioned(self) -> bool:
        return self.purpose is BucketPurpose.CHECKPOINTS if self.versioning is None else self.versioning


class ArtifactRegistrySpec(_Model):
    enabled: bool = True
    repository: str = Field("tpu-training", pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX)


class TensorBoardSpec(_Model):
    enabled: bool = True
    display_name: str | None = Field(None, description="default: the cluster name")
    region: str | None = Field(
        None,
        pattern=REGION,
        description="Vertex AI region of the TensorBoard (default: the cluster's region when Vertex AI is offered there, "
        "else the nearest that has it: infra/vertex_ai.py)",
    )
    region_unlisted: bool = Field(False, description="accept a region infra/vertex_ai.py does not list (one Vertex AI added since the table was compiled)")

    @model_validator(mode="after")
    def _vertex_region(self) -> TensorBoardSpec:
        if self.region is not None and not self.region_unlisted and not vertex_ai.offered(self.region):
            raise FieldValueError(
                "region",
                f"{self.region!r} is not a Vertex AI region, so the TensorBoard cannot be created there",
                f"use {vertex_ai.nearest(self.region)} (the nearest that has Vertex AI), remove it to get that default, "
                "or set tensorboard.region_unlisted: true for a region Vertex AI added since infra/vertex_ai.py was compiled",
            )
        return self

    @field_validator("display_name")
    @classmethod
    def _display_name(cls, v: str | None) -> str | None:
        if v is not None:
            _refuse(gcp_names.tensorboard_display_name_problem(v))
        return v


class CloudBuildSpec(_Model):
    enabled: bool = False
    github_owner: str | None = None
    github_repo: str | None = None
    branch: str = Field("^main$", description="branch regex that triggers CI (RE2 syntax, as Cloud Build reads it)")
    filename: str = "cloudbuild/ci.yaml"

    @field_validator("branch")
    @classmethod
    def _re2(cls, v: str) -> str:
        _refuse(gcp_names.re2_problem(v))
        return v

    @field_validator("github_owner")
    @classmethod
    def _owner(cls, v: str | None) -> str | None:
        if v is not None and not re.match(gcp_names.GITHUB_OWNER, v):
            raise ValueError(f"{v!r} is not a GitHub user or organization name; use 1-39 letters, digits and single hyphens, not at either end")
        return v

    @field_validator("github_repo")
    @classmethod
    def _repo_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(gcp_names.GITHUB_REPO, v):
            raise ValueError(f"{v!r} is not a GitHub repository name; use 1-100 letters, digits, '.', '-' and '_'")
        return v

    @field_validator("filename")
    @classmethod
    def _filename(cls, v: str) -> str:
        _refuse(gcp_names.build_config_path_problem(v))
        return v

    @model_validator(mode="after")
    def _repo(self) -> CloudBuildSpec:
        if self.enabled and not (self.github_owner and self.github_repo):
            raise FieldValueError(
                "github_owner" if not self.github_owner else "github_repo",
                "the build trigger needs github_owner and github_repo",
                "set both, or set enabled: false",
            )
        return self


class StateSpec(_Model):
    bucket: str | None = Field(None, pattern=BUCKET_NAME, description="Terraform state bucket (default <project>-tf-state)")
    prefix: str | None = Field(None, description="default: tpu-gke-toolkit/<cluster>")

    @field_validator("bucket")
    @classmethod
    def _gcs_name(cls, v: str | None) -> str | None:
        if v is not None:
            _refuse(gcp_names.bucket_name_problem(v))
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        if v is not None:
            _refuse(gcp_names.state_prefix_problem(v))
        return v


class VersionsSpec(_Model):
    kueue: str = Field(DEFAULT_KUEUE_VERSION, pattern=_RELEASE)
    jobset: str = Field(DEFAULT_JOBSET_VERSION, pattern=_RELEASE)


class WaitForPodsReadySpec(_Model):
    """Kueue's all-or-nothing guard: a run whose pods are not all ready in time gives its quota back.

    ``timeout_seconds`` covers a first start (autoscaled TPU pools create their nodes
    only after admission, so it must exceed slice provisioning); ``recovery_timeout_seconds``
    covers a running run that lost pods (a preempted slice being recreated). Past either,
    Kueue evicts the Workload, suspends the job and requeues it with exponential backoff
    (``backoff_base_seconds`` doubling up to ``backoff_max_seconds``); ``requeue_limit``
    requeues before Kueue deactivates it (null: requeue until capacity returns).
    """

    enabled: bool = True
    # Ceilings: a week for a start or a recovery (flex-start's longest run); Kueue's int32 for the backoff and the count.
    timeout_seconds: int = Field(1200, ge=30, le=7 * 24 * 3600)
    recovery_timeout_seconds: int = Field(1200, ge=30, le=7 * 24 * 3600)
    backoff_base_seconds: int = Field(60, ge=1, le=2**31 - 1)
    backoff_max_seconds: int = Field(3600, ge=1, le=2**31 - 1)
    requeue_limit: int | None = Field(None, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def _backoff(self) -> WaitForPodsReadySpec:
        if self.backoff_max_seconds < self.backoff_base_seconds:
            raise FieldValueError(
                "backoff_max_seconds", f"{self.backoff_max_seconds} is below backoff_base_seconds ({self.backoff_base_seconds})", "raise backoff_max_seconds"
            )
        return self


class XpkSpec(_Model):
    """Make the cluster take `xpk workload create` unchanged (workloads/render/xpk.py renders the objects)."""

    enabled: bool = Field(False, description="render xpk's ConfigMaps, ClusterQueue cluster-queue and LocalQueue multislice-queue")
    namespace: str = Field(
        "default", pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="the namespace xpk's kubectl uses (its context's; xpk passes no -n)"
    )
    quota_share: float = Field(
        0.0, ge=0, le=1.0, description="fraction of every TPU shape's chips xpk's queue owns; 0 = it only borrows what the teams leave idle"
    )


class FairSharingSpec(_Model):
    """Kueue's fair sharing: idle quota in a cohort goes to teams by weight, and is reclaimed by share."""

    enabled: bool | None = Field(None, description="default: on when teams share a cohort (two or more teams)")
    preemption_strategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"], min_length=1
    )


class KueueSpec(_Model):
    """Settings of the Kueue controller itself (not of its queues)."""

    wait_for_pods_ready: WaitForPodsReadySpec = Field(default_factory=WaitForPodsReadySpec)
    fair_sharing: FairSharingSpec = Field(default_factory=FairSharingSpec)


def _any_cidr(v: str, example: str) -> str:
    try:
        ipaddress.ip_network(v, strict=True)
    except ValueError:
        raise ValueError(f"{v!r} is not a CIDR block; write it like {example}") from None
    return v


class NetworkPolicySpec(_Model):
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
            _any_cidr(c, "199.36.153.8/30")
        return v


# ------------------------------------------------------------------- the spec


def _flex_start_words(field: str, cap: FlexStart) -> tuple[str, str]:
    """The key a flex-start refusal names under capacity option ``field``, and what it calls the option."""
    if cap.queued:
        return f"{field}.queued", "queued provisioning (DWS flex-start)"
    return f"{field}.mode", "DWS flex-start"


def _option_field(i: int, pool: TpuPoolSpec, option: CapacityOption) -> str:
    """The spec path of capacity option ``option`` of ``tpu_pools[i]`` (indexed only in a capacity list)."""
    where = f"tpu_pools[{i}].capacity"
    return f"{where}[{option.index}]" if pool.has_fallback else where


class EnvSpec(_Model):
    """The whole environment."""

    project: str = Field(..., pattern=GCP_ID, description="GCP project id")
    region: str = Field(..., pattern=REGION)
    zones: list[Annotated[str, Field(pattern=ZONE)]] = Field(..., min_length=1)
    labels: dict[str, str] = Field(default_factory=dict, description="GCP resource labels added everywhere")
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    cluster: ClusterSpec
    cpu_pool: CpuPoolSpec = Field(default_factory=CpuPoolSpec)
    tpu_pools: list[TpuPoolSpec] = Field(..., min_length=1)
    # A spec without teams has one implicit team; with no other team to outrank, it may use every toolkit class.
    teams: list[TeamSpec] = Field(default_factory=lambda: [TeamSpec(name="default", namespace="default", priorities=list(PRIORITY_CLASSES))], min_length=1)
    buckets: list[BucketSpec] = Field(default_factory=list)
    datasets: list[DatasetSpec] = Field(default_factory=list, description="training data in the data buckets, named by runs (infra/datasets.py)")
    lustre: LustreSpec | None = Field(None, description="a Managed Lustre instance runs may checkpoint to (--checkpoint-storage lustre)")
    artifact_registry: ArtifactRegistrySpec = Field(default_factory=ArtifactRegistrySpec)
    tensorboard: TensorBoardSpec = Field(default_factory=TensorBoardSpec)
    cloud_build: CloudBuildSpec = Field(default_factory=CloudBuildSpec)
    state: StateSpec = Field(default_factory=StateSpec)
    versions: VersionsSpec = Field(default_factory=VersionsSpec)
    kueue: KueueSpec = Field(default_factory=KueueSpec)
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    xpk: XpkSpec = Field(default_factory=XpkSpec)
    prices: PriceOverrides | None = Field(None, description="USD per chip-hour rates that win over infra/prices.yaml (with the day they were taken)")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.match(gcp_names.LABEL_KEY, k) or not re.match(gcp_names.LABEL_VALUE, str(val)):
                raise ValueError(f"label {k}={val} is not a GCP label; use lowercase letters, digits, - and _")
            if k in STACK_LABEL_KEYS:
                raise ValueError(f"label {k} is one the stack sets itself (its value would be replaced); use another key")
        room = gcp_names.LABELS_MAX - len(STACK_LABEL_KEYS)
        if len(v) > room:
            raise ValueError(
                f"{len(v)} labels, and a GCP resource holds {gcp_names.LABELS_MAX}, {len(STACK_LABEL_KEYS)} of them the stack's own; list at most {room}"
            )
        return v

    # Cross-field checks, in this order. Each raises SpecError with the exact field path.
    @model_validator(mode="after")
    def _cross(self) -> EnvSpec:
        self._check_zones()
        self._check_pools()
        self._check_flavor_count()
        self._check_gke_version()
        self._check_teams()
        self._check_quotas()
        self._check_buckets_and_ci()
        self._check_datasets()
        self._check_fuse_for_datasets()
        self._check_multi_tier()
        self._check_lustre()
        self._check_derived_names()
        identities.check(self)
        self._check_network()
        self._check_prices()
        return self

    def _check_prices(self) -> None:
        """A spec with a ``prices:`` section owns its pricing: it must price every pool it runs.

        Without the section, a pool the public table has no figure for shows "no price"
        (a missing public figure never blocks provisioning). With it, a row for another
        region, a repeated row, or a pool option left without any price is a mistake in
        the section, and is refused.
        """
        if self.prices is None:
            return
        seen: dict[tuple[str, str], int] = {}
        for i, row in enumerate(self.prices.chip_hour):
            if row.region != self.region:
                raise SpecError(
                    f"prices.chip_hour[{i}].region",
                    f"{row.region!r} is not the spec's region ({self.region}), so this row would never apply",
                    f"set region: {self.region}",
                )
            for m in row.given():
                if (row.generation, m) in seen:
                    raise SpecError(
                        f"prices.chip_hour[{i}]",
                        f"repeats the {m} rate of {row.generation} given in prices.chip_hour[{seen[(row.generation, m)]}]",
                        "give each generation's rate for a mode once",
                    )
                seen[(row.generation, m)] = i
        prices = Prices(load_table(), self.prices)
        for i, pool in enumerate(self.tpu_pools):
            gen = pool.shape.generation.name
            for o in pool.capacity_options():
                if prices.rate(gen, self.region, o.mode) is None:
                    raise SpecError(
                        "prices.chip_hour",
                        f"has no {o.mode} rate for {gen} in {self.region}, and neither has the shipped table, "
                        f"but {_option_field(i, pool, o)} ({pool.name}) needs one",
                        f"add a row with generation: {gen}, region: {self.region} and {o.mode}: <USD per chip-hour>",
                    )

    def _check_zones(self) -> None:
        for i, z in enumerate(self.zones):
            if not z.startswith(self.region + "-"):
                raise SpecError(f"zones[{i}]", f"{z!r} is not in region {self.region!r}", f"use a zone like {self.region}-a")
        if len(set(self.zones)) != len(self.zones):
            raise SpecError("zones", "lists a zone twice", "list each zone once")

    def _check_pools(self) -> None:
        """Unique pool names, zones among the cluster's, reservations in the pool's zone, one machine per shape, CPU nodes."""
        seen: dict[str, str] = {}
        pool_names = {self.cpu_pool.name: "cpu_pool.name"}
        reservations: dict[tuple[str, str], str] = {}
        for i, pool in enumerate(self.tpu_pools):
            self._check_reservation_once(i, pool, reservations)
            where = f"tpu_pools[{i}]"
            if pool.name in pool_names or any(n in pool_names for n in pool.node_pool_names()):
                raise SpecError(f"{where}.name", f"{pool.name!r} clashes with {pool_names.get(pool.name, 'another pool')}", "give every pool a unique name")
            for n in pool.node_pool_names():
                pool_names[n] = f"{where}.name"
            pool_names[pool.name] = f"{where}.name"
            if pool.zone and pool.zone not in self.zones:
                raise SpecError(f"{where}.zone", f"{pool.zone!r} is not one of the cluster's zones {self.zones}", "add it to zones or pick one of them")
            self._check_capacity_options(i, pool)
            key = pool.shape.key
            if key in seen and seen[key] != pool.shape.machine_type:
                raise SpecError(
                    f"{where}.chips_per_vm",
                    f"{key} is both single-host and multi-host here; Kueue and the node labels cannot tell them apart",
                    "use one machine type per topology",
                )
            seen[key] = pool.shape.machine_type

        if self.cpu_pool.max_nodes * len(self.zones) < 1:
            raise SpecError("cpu_pool.max_nodes", "the CPU pool has no nodes", "set max_nodes >= 1")

    def _check_reservation_once(self, i: int, pool: TpuPoolSpec, seen: dict[tuple[str, str], str]) -> None:
        """A reservation feeds one pool: two pools drawing on it would each be planned for all of it.
        (Twice in one pool's list is refused as a repeated option when the list is parsed.)"""
        for k, cap in enumerate(pool.capacities):
            if not isinstance(cap, Reservation):
                continue
            field = f"tpu_pools[{i}].capacity" + (f"[{k}]" if pool.has_fallback else "")
            key = (cap.project or self.project, cap.name)
            if key in seen:
                raise SpecError(
                    f"{field}.name",
                    f"reservation {cap.name!r} is already listed by {seen[key]}",
                    "list each reservation in one pool only (one pool with a capacity list can try several)",
                )
            seen[key] = field

    def _check_capacity_options(self, i: int, pool: TpuPoolSpec) -> None:
        """Every reservation in the pool's zone; a fallback pool's node pool names fit GKE and its shape is its own."""
        where = f"tpu_pools[{i}]"
        zone = self.pool_zone(pool)
        for k, cap in enumerate(pool.capacities):  # every listed option: alternates included
            field = f"{where}.capacity[{k}]" if pool.has_fallback else f"{where}.capacity"
            if isinstance(cap, Reservation) and cap.zone != zone:
                raise SpecError(
                    f"{field}.zone",
                    f"reservation {cap.name!r} is in {cap.zone} but the pool runs in {zone}",
                    f"set the pool's zone to {cap.zone} (and list it in zones) or use a reservation in {zone}",
                )
            if isinstance(cap, FlexStart):
                self._check_flex_start(field, pool, cap)
        if pool.compute_class is not None:
            self._check_compute_class(i, pool)
            return
        if pool.queued and not pool.has_fallback:
            self._check_own_shape(f"{where}.capacity.queued", pool, "queued provisioning")
        if not pool.has_fallback:
            return
        longest = max(pool.node_pool_names(), key=len)
        if len(longest) > GKE_NODE_POOL_NAME_MAX:
            raise SpecError(
                f"{where}.name",
                f"makes the node pool name {longest!r}, {len(longest)} characters; GKE allows {GKE_NODE_POOL_NAME_MAX}",
                f"shorten the name by {len(longest) - GKE_NODE_POOL_NAME_MAX} characters",
            )
        self._check_own_shape(f"{where}.capacity", pool, "a capacity list")

    def _check_compute_class(self, i: int, pool: TpuPoolSpec) -> None:
        """What a ComputeClass cannot express, and a class name used twice."""
        where = f"tpu_pools[{i}]"
        for k, cap in enumerate(pool.capacities):
            field = f"{where}.capacity[{k}]" if pool.has_fallback else f"{where}.capacity"
            if isinstance(cap, FlexStart) and cap.queued:
                raise SpecError(
                    f"{field}.queued",
                    "queued provisioning asks GKE for node pools the stack declares, and a compute class pool has none",
                    "set queued: false (the class asks GKE's autoscaler for flex-start capacity itself) or remove compute_class",
                )
        if pool.autoscaling:
            raise SpecError(f"{where}.autoscaling", "is implied by compute_class (GKE creates and removes the slices)", "remove autoscaling")
        for j, other in enumerate(self.tpu_pools[:i]):
            if other.class_name == pool.class_name or other.name == pool.class_name:
                raise SpecError(
                    f"{where}.compute_class.name",
                    f"{pool.class_name!r} is already tpu_pools[{j}]'s " + ("ComputeClass" if other.class_name == pool.class_name else "name"),
                    "give each pool's class its own name",
                )

    def _check_flavor_count(self) -> None:
        """Every flavor goes into each team's one resource group, which Kueue caps: refused here, before anything is applied."""
        count = len(self.flavor_names())
        if count > KUEUE_MAX_FLAVORS_PER_GROUP:
            raise SpecError(
                "tpu_pools",
                f"{count} ResourceFlavors (distinct TPU shapes and capacity options), but a Kueue resource group holds at most {KUEUE_MAX_FLAVORS_PER_GROUP}",
                "use fewer distinct generation/topology combinations or shorter capacity lists",
            )

    def _check_own_shape(self, field: str, pool: TpuPoolSpec, what: str) -> None:
        """Its Kueue flavors select this pool's nodes only: no other pool may share the shape."""
        other = next((p for p in self.tpu_pools if p is not pool and p.compute_class is None and p.shape.key == pool.shape.key), None)
        if other is not None:
            raise SpecError(
                field,
                f"{what} needs its shape to itself, but pool {other.name!r} is also {pool.shape.key}",
                f"merge the two pools into one with a capacity list, or give {other.name!r} another shape",
            )

    def _check_flex_start(self, field: str, pool: TpuPoolSpec, cap: FlexStart) -> None:
        """DWS flex-start exists only for some TPU generations (and GKE versions: ``_gke_floors``)."""
        gen = pool.shape.generation.name
        if gen not in FLEX_START_GENERATIONS:
            key, what = _flex_start_words(field, cap)
            raise SpecError(
                key,
                f"{what} is not offered for TPU {gen}",
                f"use a {', '.join(FLEX_START_GENERATIONS)} pool, or on-demand, spot or a reservation for {gen}",
            )

    def _check_gke_version(self) -> None:
        mv = self.cluster.min_version
        for floor, why in self._gke_floors():
            if mv and catalog.gke_version_tuple(mv) < catalog.gke_version_tuple(floor):
                raise SpecError("cluster.min_version", f"{mv} is below {floor}, {why}", f"set it to {floor} or later, or remove it to use the floor")

    def _check_teams(self) -> None:
        ns_seen: dict[str, int] = {}
        queue_seen: set[str] = set()
        for i, t in enumerate(self.teams):
            if t.ns in ns_seen:
                raise SpecError(f"teams[{i}].namespace", f"namespace {t.ns!r} is already teams[{ns_seen[t.ns]}]'s", "give each team its own namespace")
            ns_seen[t.ns] = i
            if t.name in queue_seen:
                raise SpecError(f"teams[{i}].name", f"team {t.name!r} is listed twice", "give each team a unique name")
            queue_seen.add(t.name)
        for i, t in enumerate(self.teams):
            if t.fair_sharing_weight is not None and not self.fair_sharing:
                raise SpecError(
                    f"teams[{i}].fair_sharing_weight",
                    "has no effect while Kueue's fair sharing is off (it is on by default only with two or more teams)",
                    "remove it, or set kueue.fair_sharing.enabled: true",
                )
            if t.preemption.borrow_within_cohort is not None and self.fair_sharing:
                raise SpecError(
                    f"teams[{i}].preemption.borrow_within_cohort",
                    "is classical preemption, which Kueue does not use while fair sharing is on",
                    "remove it, or set kueue.fair_sharing.enabled: false",
                )
        total_share = sum(t.quota_share for t in self.teams)
        if total_share > 1.0 + 1e-9:
            raise SpecError("teams", f"quota shares add up to {total_share:g}, more than the chips that exist", "make the quota_share values sum to at most 1")
        self._check_xpk(ns_seen, total_share)

    def _check_xpk(self, team_namespaces: dict[str, int], team_share: float) -> None:
        """xpk's pods run on the host network, so its namespace must admit them."""
        if not self.xpk.enabled:
            return
        i = team_namespaces.get(self.xpk.namespace)
        if i is not None and not self.teams[i].host_network:
            raise SpecError(
                "xpk.namespace",
                f"{self.xpk.namespace!r} is teams[{i}]'s namespace, which refuses hostNetwork pods, and every xpk TPU pod uses hostNetwork",
                f"set teams[{i}].host_network: true or give xpk its own namespace (xpk.namespace, and the same namespace in the kube context xpk uses)",
            )
        if team_share + self.xpk.quota_share > 1.0 + 1e-9:
            raise SpecError(
                "xpk.quota_share",
                f"the teams' quota shares ({team_share:g}) plus xpk's ({self.xpk.quota_share:g}) add up to more than 1",
                "lower xpk.quota_share (0 lets xpk borrow idle chips only) or the teams' quota_share",
            )

    def flavor_slices(self) -> dict[str, int]:
        """Slices per Kueue ResourceFlavor, in flavor order (one-option pools of a shape share its flavor and add up)."""
        out: dict[str, int] = {}
        for p in self.tpu_pools:
            for o in p.capacity_options()[: 1 if p.class_name else None]:  # a class is one flavor, whatever its priorities
                name = p.flavor_name(o)
                out[name] = out.get(name, 0) + p.slices
        return out

    def quota_owners(self) -> list[quotas.QuotaOwner]:
        """Every ClusterQueue that owns a share of the flavors: the teams', then xpk's when enabled."""
        owners = [quotas.QuotaOwner(f"teams[{i}]", t.name, t.quota_share, t.borrowing_limit, t.lending_limit) for i, t in enumerate(self.teams)]
        if self.xpk.enabled:
            owners.append(quotas.QuotaOwner("xpk", "xpk", self.xpk.quota_share))
        return owners

    def _check_quotas(self) -> None:
        """Quotas in whole slices that add up to every flavor's slices (infra.quotas says why)."""
        quotas.check(self.quota_owners(), self.flavor_slices())

    def _check_buckets_and_ci(self) -> None:
        names = [b.name for b in self.buckets]
        for i, b in enumerate(self.buckets):
            if names.index(b.name) != i:
                raise SpecError(f"buckets[{i}].name", f"bucket {b.name!r} is listed twice", "bucket names are global; list each once")
            self._check_bucket_team(i, b)
        if self.cloud_build.enabled and not self.artifact_registry.enabled:
            raise SpecError("cloud_build.enabled", "CI builds push images but artifact_registry is disabled", "enable artifact_registry or disable cloud_build")

    def _check_datasets(self) -> None:
        names = [d.name for d in self.datasets]
        data = [b.name for b in self.buckets if b.purpose is BucketPurpose.DATA]
        for i, d in enumerate(self.datasets):
            if names.index(d.name) != i:
                raise SpecError(f"datasets[{i}].name", f"dataset {d.name!r} is listed twice", "give each dataset its own name")
            bucket = next((b for b in self.buckets if b.name == d.bucket), None)
            if bucket is None:
                fix = f"use one of {', '.join(data)}" if data else "add a bucket with purpose: data to buckets and name it here"
                raise SpecError(f"datasets[{i}].bucket", f"no bucket {shown(d.bucket)} in the spec's buckets", fix)
            if bucket.purpose is not BucketPurpose.DATA:
                raise SpecError(
                    f"datasets[{i}].bucket",
                    f"bucket {d.bucket!r} has purpose {bucket.purpose.value}, and runs mount only data buckets read-only",
                    f"use one of {', '.join(data)}" if data else "add a bucket with purpose: data",
                )

    def _check_multi_tier(self) -> None:
        """Where GKE's multi-tier checkpointing can run, a RAM disk the VM can hold, a checkpoints bucket to back up to."""
        by_shape: dict[str, tuple[int, MultiTierCheckpointingSpec]] = {}
        for i, pool in enumerate(self.tpu_pools):
            m = pool.multi_tier_checkpointing
            if m is None:
                continue
            where = f"tpu_pools[{i}].multi_tier_checkpointing"
            if not self.cluster.gcs_fuse_csi:
                raise SpecError(
                    "cluster.gcs_fuse_csi", "is off, and GKE's multi-tier checkpointing needs the GCS FUSE CSI driver", "set cluster.gcs_fuse_csi: true"
                )
            gen = pool.shape.generation.name
            if gen not in MTC_GENERATIONS:
                raise SpecError(
                    where,
                    f"GKE's multi-tier checkpointing supports TPU {', '.join(MTC_GENERATIONS)}, and pool {pool.name} is {gen}",
                    "remove it from this pool",
                )
            memory = catalog.machine_size(pool.shape.machine_type).memory_gib
            if m.ramdisk_gib > memory:
                raise SpecError(
                    f"{where}.ramdisk_gib",
                    f"{m.ramdisk_gib} GiB is more than the {memory} GiB of memory of a {pool.shape.machine_type} VM",
                    f"use at most {memory} (less, to leave the training program room)",
                )
            if self.mtc_bucket(m) is None:
                raise SpecError(
                    f"{where}.bucket",
                    "names no bucket and the spec has no bucket with purpose: checkpoints",
                    "add a checkpoints bucket to buckets and name it here",
                )
            bucket = next((b for b in self.buckets if b.name == self.mtc_bucket(m)), None)
            if bucket is None or bucket.purpose is not BucketPurpose.CHECKPOINTS:
                ckpt = [b.name for b in self.buckets if b.purpose is BucketPurpose.CHECKPOINTS]
                raise SpecError(
                    f"{where}.bucket", f"{shown(m.bucket)} is not a checkpoints bucket of the spec", f"use one of {', '.join(ckpt) or '(none: add one)'}"
                )
            seen = by_shape.get(pool.shape.key)
            if seen is not None and seen[1] != m:
                # The CheckpointConfiguration selects nodes by the shape's labels: one per shape.
                raise SpecError(
                    where,
                    f"differs from tpu_pools[{seen[0]}]'s of the same shape {pool.shape.key}",
                    "give every pool of one shape the same multi_tier_checkpointing",
                )
            by_shape[pool.shape.key] = (i, m)

    def mtc_bucket(self, m: MultiTierCheckpointingSpec) -> str | None:
        """The bucket multi-tier checkpointing backs up to: the one named, else the spec's first checkpoints bucket."""
        if m.bucket is not None:
            return m.bucket
        first = self.bucket_for(BucketPurpose.CHECKPOINTS)
        return first.name if first else None

    def _check_lustre(self) -> None:
        lu = self.lustre
        if lu is None:
            return
        if lu.zone is not None and lu.zone not in self.zones:
            raise SpecError(
                "lustre.zone", f"{lu.zone!r} is not one of the cluster's zones {self.zones}", "use one of them (the instance serves the TPU slices' zone)"
            )
        if self.network.dcn is not None and _overlap(lu.peering_cidr, self.network.dcn.cidr):
            raise SpecError("lustre.peering_cidr", f"{lu.peering_cidr} overlaps network.dcn.cidr {self.network.dcn.cidr}", "pick a range of its own")
        for what, cidr in (("nodes", self.cidrs.nodes), ("pods", self.cidrs.pods), ("services", self.cidrs.services)):
            if _overlap(lu.peering_cidr, cidr):
                raise SpecError(
                    "lustre.peering_cidr", f"{lu.peering_cidr} overlaps the cluster's {what} range {cidr}", "pick a private range the cluster does not use"
                )

    @property
    def lustre_zone(self) -> str | None:
        return None if self.lustre is None else (self.lustre.zone or self.zones[0])

    def _check_fuse_for_datasets(self) -> None:
        if self.datasets and not self.cluster.gcs_fuse_csi:
            raise SpecError(
                "cluster.gcs_fuse_csi",
                "is off, and runs read the spec's datasets through the GCS FUSE CSI driver",
                "set cluster.gcs_fuse_csi: true (the default)",
            )

    def dataset(self, name: str) -> DatasetSpec | None:
        return next((d for d in self.datasets if d.name == name), None)

    def unknown_dataset(self, name: str) -> tuple[str, str]:
        """(problem, fix) of a dataset name the spec does not declare."""
        declared = ", ".join(x.name for x in self.datasets)
        return (
            f"no dataset {name[:40]!r} in the spec" + (f" (it declares {declared})" if declared else " (it declares none)"),
            f"use one of {declared}" if declared else "declare it under datasets: in the spec (a prefix of a data bucket, its format and tokenizer)",
        )

    def dataset_team(self, d: DatasetSpec) -> TeamSpec:
        """The team whose identity may read ``d`` (its bucket's owner)."""
        return self.bucket_owner(next(b for b in self.buckets if b.name == d.bucket))

    def _check_derived_names(self) -> None:
        """Names made from the spec's names, against the limits of where they go.

        The names given directly are bounded by their fields' max_length; these are the
        ones a suffix or prefix is added to. (Team ClusterQueues, <name>-cq, fit: a team
        name has at most 30 characters. Node pools, <pool>-<slice>, fit GKE's 40: a pool
        name has at most 36 and slices at most 512.)
        """
        for i, t in enumerate(self.teams):
            if t.local_queue is None and len(t.queue) > K8S_NAME_MAX:
                src = "namespace" if t.namespace else "name"
                raise SpecError(
                    f"teams[{i}].{src}",
                    f"makes the LocalQueue name {t.ns[:12]}...-queue, {len(t.queue)} characters; runs carry it in the "
                    f"{KUEUE_QUEUE_LABEL} label, which holds at most {K8S_NAME_MAX}",
                    f"shorten the {src} to at most {K8S_NAME_MAX - len('-queue')} characters or set local_queue",
                )
        if self.cluster.private_nodes:
            for suffix in ("-router", "-nat"):  # the Cloud NAT private nodes reach the internet through
                name = f"{self.network_name}{suffix}"
                if len(name) > GCE_NAME_MAX:
                    raise SpecError(
                        "network.name",
                        f"makes the Cloud Router/NAT name {self.network_name[:12]}...{suffix}, {len(name)} characters; GCP allows {GCE_NAME_MAX}",
                        f"shorten network.name to at most {GCE_NAME_MAX - len('-router')} characters",
                    )
        accounts = ["nodes", "workload"] + (["ci"] if self.cloud_build.enabled else [])
        for suffix in accounts:
            account = naming.service_account_id(self.cluster.name, suffix)
            if not re.match(GCP_ID, account):
                raise SpecError(
                    "cluster.name",
                    f"makes the {suffix} service account id {account!r}, but GCP needs {GCP_ID_MIN}-{GCP_ID_MAX} characters",
                    f"use a cluster name of at least {GCP_ID_MIN - len(suffix) - 1} characters",
                )

    # ---------------------------------------------------------------- derived

    @property
    def fair_sharing(self) -> bool:
        """Kueue's fair sharing is on: as set, else when two or more teams share the cohort."""
        f = self.kueue.fair_sharing.enabled
        return len(self.teams) > 1 if f is None else f

    @property
    def multislice(self) -> bool:
        return any(p.slices > 1 for p in self.tpu_pools)

    def _gke_floors(self) -> list[tuple[str, str]]:
        """Each minimum GKE version this spec needs, with what needs it as a refusal words it (checked in this order)."""
        floors = []
        flex = next(((i, p, o) for i, p in enumerate(self.tpu_pools) for o in p.capacity_options() if isinstance(o.capacity, FlexStart)), None)
        if flex is not None:
            i, pool, option = flex
            key, what = _flex_start_words(_option_field(i, pool, option), option.capacity)
            floors.append((FLEX_START_TPU_MIN_GKE_VERSION, f"the first GKE version with {what} for TPUs ({key})"))
        if pools := catalog.gke_version_floor([p.shape for p in self.tpu_pools], self.multislice):
            floors.append((pools, "the minimum GKE version for these TPU pools"))
        classed = next((i for i, p in enumerate(self.tpu_pools) if p.compute_class is not None), None)
        if classed is not None:
            floors.append((COMPUTE_CLASS_MIN_GKE_VERSION, f"the first GKE version with custom ComputeClasses (tpu_pools[{classed}].compute_class)"))
        if self.lustre is not None:
            floors.append((LUSTRE_MIN_GKE_VERSION, "the first GKE version whose Lustre CSI driver needs no legacy port (lustre)"))
        mtc = next((i for i, p in enumerate(self.tpu_pools) if p.multi_tier_checkpointing is not None), None)
        if mtc is not None:
            floors.append((MTC_MIN_GKE_VERSION, f"the first GKE version with multi-tier checkpointing (tpu_pools[{mtc}].multi_tier_checkpointing)"))
        if self.cluster.ray.enabled:
            floors.append((RAY_MIN_GKE_VERSION, "the minimum GKE version for Ray runs (cluster.ray: their workers' pod affinity uses matchLabelKeys)"))
        return floors

    @property
    def gke_version_floor(self) -> str | None:
        floors = [v for v, _ in self._gke_floors()]
        return max(floors, key=catalog.gke_version_tuple) if floors else None

    @property
    def min_master_version(self) -> str | None:
        return self.cluster.min_version or self.gke_version_floor

    def auto_provisioning_limits(self) -> dict[str, int] | None:
        """Node auto-provisioning's cluster-wide caps when some pool is a ComputeClass (None otherwise).

        GKE's limits count every node of the cluster, declared or auto-created, so cpu and
        memory add up all of them at their largest; each TPU type gets the chips of every pool
        of it (a class's slices once: Kueue admits no more).
        """
        if not any(p.compute_class is not None for p in self.tpu_pools):
            return None
        cpu_size = catalog.machine_size(self.cpu_pool.machine_type, catalog.QUOTA_FALLBACK_SIZE)
        vcpu, mem = self.cpu_nodes * cpu_size.vcpu, self.cpu_nodes * cpu_size.memory_gib
        tpus: dict[str, int] = {}
        for p in self.tpu_pools:
            size = catalog.machine_size(p.shape.machine_type, catalog.QUOTA_FALLBACK_SIZE)
            vcpu, mem = vcpu + p.total_nodes * size.vcpu, mem + p.total_nodes * size.memory_gib
            label = p.shape.generation.accelerator_label
            tpus[label] = tpus.get(label, 0) + p.total_nodes * p.shape.chips_per_vm
        return {"cpu": vcpu, "memory": mem, **tpus}

    @property
    def tensorboard_region(self) -> str:
        """Where the TensorBoard lives: as set, else the cluster's region or the nearest with Vertex AI (us-central2 has none)."""
        return self.tensorboard.region or vertex_ai.nearest(self.region)

    @property
    def network_name(self) -> str:
        return self.network.name or f"{self.cluster.name}-net"

    @property
    def state_bucket(self) -> str:
        return self.state.bucket or f"{self.project}-tf-state"

    @property
    def state_prefix(self) -> str:
        return self.state.prefix or f"tpu-gke-toolkit/{self.cluster.name}"

    def workload_policy_name(self, pool: TpuPoolSpec) -> str | None:
        """The resource policy a tpu7x multi-host pool is placed by (None for other pools).

        GKE labels the nodes with it (cloud.google.com/placement-policy-name), so the
        stack, the JobSet's node selector and the local cluster's nodes read it here.
        """
        if pool.shape.placement is not catalog.Placement.WORKLOAD_POLICY:
            return None
        if self.xpk.enabled:
            # xpk's pods select this exact name (xpk 1.13 core/scheduling.py get_placement_policy_name).
            return f"{pool.shape.accelerator_type}-{pool.shape.topology}-placement-policy"
        return naming.workload_policy_name(self.cluster.name, pool.shape.generation.name, pool.shape.topology)

    def pool_zone(self, pool: TpuPoolSpec) -> str:
        return pool.zone or self.zones[0]

    @property
    def tpu_nodes(self) -> int:
        return sum(p.total_nodes for p in self.tpu_pools)

    @property
    def cpu_nodes(self) -> int:
        return self.cpu_pool.max_nodes * len(self.zones)

    @property
    def total_nodes(self) -> int:
        return self.tpu_nodes + self.cpu_nodes

    def shapes(self) -> dict[str, catalog.SliceShape]:
        """Distinct slice shapes by key, in spec order."""
        out: dict[str, catalog.SliceShape] = {}
        for p in self.tpu_pools:
            out.setdefault(p.shape.key, p.shape)
        return out

    def flavor_names(self) -> list[str]:
        """The Kueue ResourceFlavors of the spec, in the order ClusterQueues try them (workloads.render.flavors makes them)."""
        return list(dict.fromkeys(p.flavor_name(o) for p in self.tpu_pools for o in p.capacity_options()))

    def bucket_for(self, purpose: BucketPurpose, team: TeamSpec | None = None) -> BucketSpec | None:
        """The first bucket for ``purpose`` (of ``team``'s buckets, when given)."""
        pool = self.buckets if team is None else self.team_buckets(team)
        return next((b for b in pool if b.purpose is purpose), None)

    def _check_bucket_team(self, i: int, b: BucketSpec) -> None:
        """A bucket belongs to exactly one team: only that team's service account is granted it."""
        teams = [t.name for t in self.teams]
        if b.team is None and len(teams) > 1:
            raise SpecError(f"buckets[{i}].team", f"the spec has {len(teams)} teams and a bucket belongs to one", f"set team to one of {', '.join(teams)}")
        if b.team is not None and b.team not in teams:
            raise SpecError(f"buckets[{i}].team", f"no team {b.team!r} in the spec", f"use one of {', '.join(teams)}")

    def bucket_owner(self, bucket: BucketSpec) -> TeamSpec:
        """The team whose pods use ``bucket`` (the only team when the bucket names none)."""
        return self.teams[0] if bucket.team is None else next(t for t in self.teams if t.name == bucket.team)

    def team_buckets(self, team: TeamSpec) -> list[BucketSpec]:
        """The buckets ``team``'s service account is granted, in spec order."""
        return [b for b in self.buckets if self.bucket_owner(b).name == team.name]

    def team(self, name: str | None) -> TeamSpec:
        if name is None:
            return self.teams[0]
        for t in self.teams:
            if name in (t.name, t.ns):
                return t
        raise SpecError("--team", f"no team {name!r} in the spec", f"use one of {', '.join(t.name for t in self.teams)}")

    @cached_property
    def cidrs(self) -> Cidrs:
        return derive_cidrs(self)

    def _check_network(self) -> None:
        cidrs = derive_cidrs(self)  # raises SpecError when given ranges are too small or overlap
        self._check_dcn(cidrs)

    def _check_dcn(self, cidrs: Cidrs) -> None:
        """The DCN network needs Dataplane V2, room for every TPU node, and its own address space."""
        dcn = self.network.dcn
        if dcn is None:
            return
        if not self.cluster.dataplane_v2:
            raise SpecError(
                "network.dcn",
                "GKE multi-networking needs Dataplane V2, which cluster.dataplane_v2: false turns off",
                "set cluster.dataplane_v2: true or remove network.dcn",
            )
        net = ipaddress.ip_network(dcn.cidr)
        # GCP keeps 4 addresses of every subnet; each TPU node takes one for its eth1.
        if net.num_addresses - 4 < self.tpu_nodes:
            raise SpecError(
                "network.dcn.cidr", f"{dcn.cidr} has {net.num_addresses - 4} usable addresses for {self.tpu_nodes} TPU nodes", "use a larger range, e.g. a /16"
            )
        for what, cidr in (("nodes", cidrs.nodes), ("pods", cidrs.pods), ("services", cidrs.services)):
            if net.overlaps(ipaddress.ip_network(cidr)):
                raise SpecError(
                    "network.dcn.cidr", f"{dcn.cidr} overlaps the cluster's {what} range {cidr}", "pick a range outside the first VPC's, e.g. 10.200.0.0/16"
                )


# ---------------------------------------------------------------- CIDR sizing


class Cidrs(BaseModel):
    model_config = ConfigDict(frozen=True)
    nodes: str
    pods: str
    services: str


def pods_block_per_node(max_pods: int) -> int:
    """GKE gives each node a pod range with at least twice max_pods addresses, a power of two."""
    return 1 << math.ceil(math.log2(2 * max_pods))


def pod_addresses_needed(spec: EnvSpec) -> int:
    n = spec.network
    return spec.tpu_nodes * pods_block_per_node(n.tpu_max_pods_per_node) + spec.cpu_nodes * pods_block_per_node(n.cpu_max_pods_per_node)


def _prefix_for(addresses: int) -> int:
    return 32 - max(0, math.ceil(math.log2(max(addresses, 1))))


def derive_cidrs(spec: EnvSpec) -> Cidrs:
    """Given ranges are checked against the node count; missing ones are sized from it."""
    n = spec.network
    nodes_needed = spec.total_nodes + 4  # GCP reserves 4 addresses per subnet
    pods_needed = pod_addresses_needed(spec)

    def pick(field: str, given: str | None, needed: int, base: str, floor_prefix: int, what: str) -> str:
        if given:
            net = ipaddress.ip_network(given)
            if net.num_addresses < needed:
                want = _prefix_for(needed)
                raise SpecError(
                    f"network.{field}",
                    f"{given} holds {net.num_addresses} addresses but {what} need {needed}",
                    f"use a /{want} or larger, or remove it to derive one",
                )
            return given
        prefix = min(floor_prefix, _prefix_for(int(needed * n.headroom)))
        return str(ipaddress.ip_network(f"{base}/{prefix}", strict=False))

    tpu_block = pods_block_per_node(n.tpu_max_pods_per_node)
    cpu_block = pods_block_per_node(n.cpu_max_pods_per_node)
    cidrs = Cidrs(
        nodes=pick("nodes_cidr", n.nodes_cidr, nodes_needed, "10.0.0.0", 22, f"{spec.total_nodes} nodes"),
        pods=pick(
            "pods_cidr",
            n.pods_cidr,
            pods_needed,
            "10.64.0.0",
            18,
            f"{spec.tpu_nodes} TPU nodes x {tpu_block} and {spec.cpu_nodes} CPU nodes x {cpu_block} (per-node pod blocks)",
        ),
        services=pick("services_cidr", n.services_cidr, 1024, "10.128.0.0", 20, "Services"),
    )
    nets = {k: ipaddress.ip_network(v) for k, v in cidrs.model_dump().items()}
    if spec.cluster.private_nodes:
        nets["master"] = ipaddress.ip_network(spec.cluster.master_cidr)
    keys = list(nets)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if nets[a].overlaps(nets[b]):
                field = "cluster.master_cidr" if "master" in (a, b) else f"network.{b}_cidr"
                raise SpecError(field, f"{nets[b]} overlaps the {a} range {nets[a]}", "choose ranges that do not overlap")
    return cidrs


# --------------------------------------------------------------------- loading


_CAPACITY_MODES = tuple(m.value for m in CapacityMode)
_CAPACITY_WRAPPER = "function-after[_shorthand(), tagged-union[OnDemand,Spot,FlexStart,Reservation]]"


def _capacity_mode(loc: tuple[Any, ...]) -> str | None:
    """The capacity mode a location is inside of (pydantic puts the union tag after 'capacity')."""
    for prev, part in zip(loc, loc[1:], strict=False):
        if prev in ("capacity", _CAPACITY_WRAPPER) and part in _CAPACITY_MODES:
            return str(part)
    return None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    prev: Any = None
    for part in loc:
        after_union, prev = prev in ("capacity", _CAPACITY_WRAPPER), part
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == _CAPACITY_WRAPPER or (after_union and part in _CAPACITY_MODES):
            continue  # discriminated-union tags are not part of the user's path (a key named 'spot' is)
        else:
            out += f".{_key_text(part)}" if out else _key_text(part)
    return out


# Fixes for pattern-checked strings, by pattern: "use lowercase letters" is wrong advice for a version.
_PATTERN_FIXES: dict[str, str] = {
    DNS1035_LABEL: "use lowercase letters, digits and '-', starting with a letter",
    catalog.GKE_VERSION: "write it like 1.31.2-gke.1115000",
    _RELEASE: "write it like v0.17.1",
    GCP_ID: f"use a GCP project id: {GCP_ID_MIN}-{GCP_ID_MAX} lowercase letters, digits and '-', starting with a letter",
    REGION: "write it like us-central1",
    ZONE: "write it like us-central1-a",
    BUCKET_NAME: "use 3-63 lowercase letters, digits, '-', '_' and '.'",
    _MACHINE_TYPE: "write it like n2-standard-8",
    LUSTRE_FILESYSTEM: "use at most eight letters and digits, like ckpt",
    IPV4: "write the instance's IPv4 address, like 10.96.0.2 (python -m infra outputs: lustre_mount_point)",
}

_BOUND_TYPES = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def _split_problem(msg: str, default_fix: str) -> tuple[str, str]:
    """'problem; fix' -> (problem, fix); a message without '; ' gets the default fix."""
    problem, sep, fix = msg.partition("; ")
    return (problem, fix) if sep else (msg, default_fix)


def _problem_and_fix(err: dict[str, Any]) -> tuple[str, str]:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        mode = _capacity_mode(tuple(err.get("loc", ())))
        key = err["loc"][-1] if err.get("loc") else ""
        if mode is not None:
            takes = {CapacityMode.RESERVATION: "mode, name, zone and project", CapacityMode.FLEX_START: "mode, queued, max_run_seconds and retry"}.get(
                mode, "only mode"
            )
            also = f"; {key} is a capacity mode of its own, and a pool has one mode" if key in _CAPACITY_MODES else ""
            return f"{shown(key)} is not a key of capacity mode {mode}{also}", f"remove {key}: {mode} capacity takes {takes}"
        return f"unknown key {shown(key)}" if key else "unknown key", "remove it or fix its spelling (compare with examples/default.yaml)"
    if kind == "missing":
        return "is required", "add it (see examples/default.yaml)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return f"{shown(ctx.get('tag', value))} is not a capacity mode", f"use one of {', '.join(CapacityMode)}"
    if kind == "string_pattern_mismatch":
        return f"{shown(value)} is not allowed", _PATTERN_FIXES.get(str(ctx.get("pattern")), f"match {ctx.get('pattern')}")
    if kind == "enum":
        return f"{shown(value)} is not allowed", f"use one of {ctx.get('expected', '')}".replace("'", "")
    if kind == "literal_error":
        return f"{shown(value)} is not allowed", f"use {ctx.get('expected', '')}".replace("'", "")
    if kind in _BOUND_TYPES:
        key, words = _BOUND_TYPES[kind]
        return f"{shown(value)} is out of range", f"use a value {words} {ctx.get(key)}"
    if kind in ("string_too_long", "too_long"):
        return f"{shown(value)} is too long", f"use at most {ctx.get('max_length')} {'characters' if kind == 'string_too_long' else 'items'}"
    if kind == "too_short" and not ctx.get("actual_length"):
        n = ctx.get("min_length", 1)
        return "is an empty list", f"list at least {n} item{'s' if n != 1 else ''} (see examples/default.yaml)"
    if kind in ("string_too_short", "too_short"):
        return "is too short", f"give at least {ctx.get('min_length')} {'characters' if kind == 'string_too_short' else 'items'}"
    if kind in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        return f"{shown(value)} is not a number", "write a plain number"
    if kind in ("bool_parsing", "bool_type"):
        return f"{shown(value)} is not a boolean", "write true or false"
    if kind in ("string_type",):
        return f"{shown(value)} is not a string", "quote it or write text"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expects a mapping, got {type(value).__name__}", "write it as key: value lines (see examples/default.yaml)"
    if kind in ("list_type", "tuple_type"):
        return f"expects a list, got {type(value).__name__}", "write it as a YAML list ([a, b] or - items)"
    return _split_problem(msg, "see examples/default.yaml for a valid value")


def format_validation_error(e: ValidationError) -> SpecError:
    """First pydantic error as a SpecError (field path, problem, fix); the rest are counted."""
    errs = e.errors(include_url=False)
    first = errs[0]
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    where = _loc(first["loc"])
    if isinstance(inner, SpecError):
        spec_err = inner
    elif isinstance(inner, FieldValueError):
        field = f"{where}.{inner.field}" if where else inner.field
        spec_err = SpecError(field, inner.problem, inner.fix or "see examples/default.yaml")
    else:
        problem, fix = _problem_and_fix(first)
        spec_err = SpecError(where, problem, fix)
    if len(errs) > 1:
        return SpecError(spec_err.field, spec_err.problem, (spec_err.fix + " " if spec_err.fix else "") + f"(+{len(errs) - 1} more)")
    return spec_err


def parse_spec(data: Any, *, source: str = "spec") -> EnvSpec:
    if not isinstance(data, dict):
        raise SpecError("", f"{source}: the spec must be a YAML mapping, got {type(data).__name__}", "start from examples/default.yaml")
    try:
        return EnvSpec.model_validate(data)
    except ValidationError as e:
        err = format_validation_error(e)
        raise SpecError(err.field, err.problem, err.fix) from None
    except SpecError:
        raise


def spec_path(path: str | os.PathLike[str] | None = None) -> Path:
    """--spec, else $TGK_SPEC, else the repository's default example."""
    if path:
        return Path(path)
    env = os.environ.get(SPEC_ENV_VAR)
    return Path(env) if env else DEFAULT_SPEC_PATH


def read_document(p: Path, flag: str, missing_fix: str) -> Any:
    """The YAML document at ``p``; a file that is missing, unreadable or not YAML is one SpecError (``flag`` names it)."""
    try:
        return load_yaml(read_capped(p))
    except FileNotFoundError:
        raise SpecError(flag, f"{p} does not exist", missing_fix) from None
    except OSError as e:
        raise SpecError(flag, f"cannot read {p}: {e.strerror}", "check the path and permissions") from None
    except YamlFileError as e:
        if e.key_path:
            raise SpecError(e.key_path, e.problem, e.fix) from None
        raise SpecError("", f"{p}: {e.problem}", e.fix) from None


def load_spec(path: str | os.PathLike[str] | None = None) -> EnvSpec:
    p = spec_path(path)
    data = read_document(p, "--spec", "pass an existing file, e.g. examples/default.yaml")
    try:
        return parse_spec(data, source=str(p))
    except SpecError as e:
        raise SpecError(e.field, e.problem, e.fix) from None
