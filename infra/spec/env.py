"""The environment: every section of the spec as one model, and the values derived from it.

``EnvFields`` holds the fields (in the order the spec is validated and its first error
reported) and everything computed from them that a consumer reads: slice and node counts,
flavors and their slices, address ranges, the GKE version floor, derived names, which team
owns which bucket. Computed here once, so the stack, the Kueue objects and run planning
cannot disagree. It is never validated alone: ``infra.spec.EnvSpec`` is these fields held
to the cross-field rules of ``infra.spec.rules``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, field_validator

from infra import catalog, gcp_names, naming, quotas, recovery, vertex_ai
from infra.datasets import DatasetSpec
from infra.gke_features import (
    COMPUTE_CLASS_MIN_GKE_VERSION,
    FLEX_START_TPU_MIN_GKE_VERSION,
    IN_PLACE_AGENT_IMAGE,
    IN_PLACE_RESTART_MIN_GKE_VERSION,
    IN_PLACE_RESTART_MIN_JOBSET,
    LUSTRE_MIN_GKE_VERSION,
    MTC_MIN_GKE_VERSION,
    RAY_MIN_GKE_VERSION,
)
from infra.naming import GCP_ID, REGION, ZONE
from infra.price_table import PriceOverrides
from infra.spec import ironwood
from infra.spec.capacity import FlexStart, flex_start_words
from infra.spec.cidrs import Cidrs, derive_cidrs
from infra.spec.cluster import ClusterSpec, CpuPoolSpec
from infra.spec.kueue import KueueSpec, VersionsSpec, XpkSpec
from infra.spec.network import NetworkPolicySpec, NetworkSpec
from infra.spec.project import ArtifactRegistrySpec, CloudBuildSpec, StateSpec, TensorBoardSpec
from infra.spec.recovery import RecoverySpec
from infra.spec.section import Section
from infra.spec.storage import BucketPurpose, BucketSpec, LustreSpec
from infra.spec.teams import PRIORITY_CLASSES, TeamSpec
from infra.spec.tpu_pools import MultiTierCheckpointingSpec, TpuPoolSpec, option_field
from toolkit.errors import SpecError
from toolkit.names import CapacityMode

# Labels infra.stack puts on resources beside the spec's: managed-by and tgk-cluster everywhere,
# purpose on buckets, tpu-pool on TPU node pools.
STACK_LABEL_KEYS = ("managed-by", "tgk-cluster", "purpose", "tpu-pool")


def cluster_floors(cluster: ClusterSpec) -> list[tuple[str, str]]:
    """The minimum GKE versions the cluster's own add-ons need, worded as ``EnvFields.gke_floors`` words them.

    Apart from the TPU pools' floors because a cluster without TPU pools (a fleet's
    MultiKueue manager, ``infra.fleet``) needs these too.
    """
    if cluster.ray.enabled:
        return [(RAY_MIN_GKE_VERSION, "the minimum GKE version for Ray runs (cluster.ray: their workers' pod affinity uses matchLabelKeys)")]
    return []


def release_tuple(tag: str) -> tuple[int, ...]:
    """``v0.12.0`` as (0, 12, 0): add-on release tags (``versions``) compared as numbers."""
    return tuple(int(x) for x in tag.removeprefix("v").split("."))


def highest(floors: list[tuple[str, str]]) -> str | None:
    """The highest of the floors' versions, or None."""
    versions = [v for v, _ in floors]
    return max(versions, key=catalog.gke_version_tuple) if versions else None


class ClusterDerived:
    """What follows from a cluster's own sections (``project``, ``zones``, ``network``, ``cluster``,
    ``cpu_pool``, ``state``), the same for an environment and for a fleet's manager (``infra.fleet``)."""

    if TYPE_CHECKING:  # the sections it reads: fields of the class it is mixed into, declared here for the type checker only
        project: str
        zones: Sequence[str]
        network: NetworkSpec
        cluster: ClusterSpec
        cpu_pool: CpuPoolSpec
        state: StateSpec

    @property
    def cpu_nodes(self) -> int:
        return self.cpu_pool.max_nodes * len(self.zones)

    @property
    def network_name(self) -> str:
        return self.network.name or f"{self.cluster.name}-net"

    @property
    def state_bucket(self) -> str:
        return self.state.bucket or f"{self.project}-tf-state"

    @property
    def state_prefix(self) -> str:
        return self.state.prefix or f"tpu-gke-toolkit/{self.cluster.name}"


class EnvFields(ClusterDerived, Section):
    """The whole environment's fields and derived values (validated only as ``EnvSpec``)."""

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
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    xpk: XpkSpec = Field(default_factory=XpkSpec)
    prices: PriceOverrides | None = Field(None, description="USD per chip-hour rates that win over infra/prices.yaml (with the day they were taken)")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.fullmatch(gcp_names.LABEL_KEY, k) or not re.fullmatch(gcp_names.LABEL_VALUE, str(val)):
                raise ValueError(f"label {k}={val} is not a GCP label; use lowercase letters, digits, - and _")
            if k in STACK_LABEL_KEYS:
                raise ValueError(f"label {k} is one the stack sets itself (its value would be replaced); use another key")
        room = gcp_names.LABELS_MAX - len(STACK_LABEL_KEYS)
        if len(v) > room:
            raise ValueError(
                f"{len(v)} labels, and a GCP resource holds {gcp_names.LABELS_MAX}, {len(STACK_LABEL_KEYS)} of them the stack's own; list at most {room}"
            )
        return v

    # ---------------------------------------------------------------- TPU pools and flavors

    @property
    def multislice(self) -> bool:
        return any(p.slices > 1 for p in self.tpu_pools)

    def pool_zone(self, pool: TpuPoolSpec) -> str:
        return pool.zone or self.zones[0]

    @property
    def tpu_nodes(self) -> int:
        return sum(p.total_nodes for p in self.tpu_pools)

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

    # ---------------------------------------------------------------- GKE version

    def gke_floors(self) -> list[tuple[str, str]]:
        """Each minimum GKE version this spec needs, with what needs it as a refusal words it (checked in this order)."""
        floors = []
        flex = next(((i, p, o) for i, p in enumerate(self.tpu_pools) for o in p.capacity_options() if isinstance(o.capacity, FlexStart)), None)
        if flex is not None:
            i, pool, option = flex
            key, what = flex_start_words(option_field(i, pool, option), option.capacity)
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
        if self.recovery.restart == recovery.IN_PLACE:
            floors.append(
                (IN_PLACE_RESTART_MIN_GKE_VERSION, "the first GKE version with container restart rules, which in-place restarts need (recovery.restart)")
            )
        return floors + ironwood.floors(self) + cluster_floors(self.cluster)

    @property
    def gke_version_floor(self) -> str | None:
        return highest(self.gke_floors())

    @property
    def min_master_version(self) -> str | None:
        return self.cluster.min_version or self.gke_version_floor

    # ---------------------------------------------------------------- recovery

    @property
    def jobset_has_in_place_restart(self) -> bool:
        return release_tuple(self.versions.jobset) >= release_tuple(IN_PLACE_RESTART_MIN_JOBSET)

    @property
    def cluster_has_in_place_restart(self) -> bool:
        """JobSet's in-place restart works on this spec's cluster: its JobSet has it and its GKE floor has container restart rules."""
        floor = self.min_master_version
        return (
            self.jobset_has_in_place_restart
            and floor is not None
            and catalog.gke_version_tuple(floor) >= catalog.gke_version_tuple(IN_PLACE_RESTART_MIN_GKE_VERSION)
        )

    @property
    def in_place_agent_image(self) -> str:
        """JobSet's in-place restart agent: ``recovery.agent_image``, else the image pipeline's build in the spec's registry."""
        if self.recovery.agent_image:
            return self.recovery.agent_image
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.artifact_registry.repository}/{IN_PLACE_AGENT_IMAGE}:{self.versions.jobset}"

    @property
    def restart_path(self) -> str:
        """How runs restart unless they say (``recovery.restart``; ``auto``: in-place where the cluster has it)."""
        r = self.recovery.restart
        if r == "auto":
            return recovery.IN_PLACE if self.cluster_has_in_place_restart else recovery.RECREATE
        return r

    def wait_for_pods_ready_needs(self) -> tuple[tuple[float, str], tuple[float, str]]:
        """(seconds, why) of the shortest Kueue timeout and recoveryTimeout the spec's pools allow (``infra.recovery``).

        A start needs slice provisioning only where the VMs are made after admission (a pool
        that scales from zero); every recovery may need a slice re-made (a preempted or repaired
        multi-host slice is recreated whole), then the restart path, then the pods' start.
        """
        path = self.restart_path
        start: tuple[float, str] = (recovery.POD_START.seconds, f"a pod's start ({recovery.POD_START.minutes:g} min)")
        back: tuple[float, str] = (0.0, "")
        for i, pool in enumerate(self.tpu_pools):
            for o in pool.capacity_options():
                prov = recovery.provisioning(o.mode)
                # A spot slice can be gone when a run is admitted (preempted, being recreated), whatever the pool's size.
                if pool.scales_from_zero(o) or o.mode == CapacityMode.SPOT:
                    s = recovery.start_seconds(o.mode)
                    if s > start[0]:
                        start = (
                            s,
                            f"tpu_pools[{i}] ({pool.name}, {o.mode}) may make a slice after admission: "
                            f"{prov.minutes:g} min to provision + {recovery.POD_START.minutes:g} min pod start",
                        )
                r = recovery.recovery_seconds(o.mode, path)
                if r > back[0]:
                    back = (
                        r,
                        f"tpu_pools[{i}] ({pool.name}, {o.mode}) re-made after a loss: {prov.minutes:g} min to provision "
                        f"+ {recovery.RESTART_PATH[path].minutes:g} min {path} restart + {recovery.POD_START.minutes:g} min pod start",
                    )
        return start, back

    @property
    def wait_for_pods_ready(self) -> tuple[int, int]:
        """Kueue's (timeout, recoveryTimeout) in seconds: the spec's, else what its pools need (``wait_for_pods_ready_needs``)."""
        w = self.kueue.wait_for_pods_ready
        (start, _), (back, _) = self.wait_for_pods_ready_needs()
        return (
            w.timeout_seconds if w.timeout_seconds is not None else math.ceil(start),
            w.recovery_timeout_seconds if w.recovery_timeout_seconds is not None else math.ceil(back),
        )

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

    # ---------------------------------------------------------------- network, names and places

    @cached_property
    def cidrs(self) -> Cidrs:
        """The node, pod and Service ranges (``infra.spec.cidrs``); raises SpecError when given ones are too small or overlap."""
        return derive_cidrs(self.network, self.cluster, tpu_nodes=self.tpu_nodes, cpu_nodes=self.cpu_nodes)

    def workload_policy_name(self, pool: TpuPoolSpec) -> str | None:
        """The resource policy a tpu7x multi-host pool is placed by (None for other pools).

        GKE labels the nodes with it (cloud.google.com/placement-policy-name), so the
        stack, the JobSet's node selector and the local cluster's nodes read it here.
        """
        if pool.shape.placement is not catalog.Placement.WORKLOAD_POLICY:
            return None
        if pool.dynamic_slicing:
            return ironwood.provision_only_policy(self.cluster.name)
        if self.xpk.enabled:
            # xpk's pods select this exact name (xpk 1.13 core/scheduling.py get_placement_policy_name).
            return f"{pool.shape.accelerator_type}-{pool.shape.topology}-placement-policy"
        return naming.workload_policy_name(self.cluster.name, pool.shape.generation.name, pool.shape.topology)

    @property
    def tensorboard_region(self) -> str:
        """Where the TensorBoard lives: as set, else the cluster's region or the nearest with Vertex AI (us-central2 has none)."""
        return self.tensorboard.region or vertex_ai.nearest(self.region)

    @property
    def lustre_zone(self) -> str | None:
        return None if self.lustre is None else (self.lustre.zone or self.zones[0])

    # ---------------------------------------------------------------- teams, buckets and datasets

    @property
    def fair_sharing(self) -> bool:
        """Kueue's fair sharing is on: as set, else when two or more teams share the cohort."""
        f = self.kueue.fair_sharing.enabled
        return len(self.teams) > 1 if f is None else f

    def team(self, name: str | None) -> TeamSpec:
        if name is None:
            return self.teams[0]
        for t in self.teams:
            if name in (t.name, t.ns):
                return t
        raise SpecError("--team", f"no team {name!r} in the spec", f"use one of {', '.join(t.name for t in self.teams)}")

    def bucket_for(self, purpose: BucketPurpose, team: TeamSpec | None = None) -> BucketSpec | None:
        """The first bucket for ``purpose`` (of ``team``'s buckets, when given)."""
        pool = self.buckets if team is None else self.team_buckets(team)
        return next((b for b in pool if b.purpose is purpose), None)

    def bucket_owner(self, bucket: BucketSpec) -> TeamSpec:
        """The team whose pods use ``bucket`` (the only team when the bucket names none)."""
        return self.teams[0] if bucket.team is None else next(t for t in self.teams if t.name == bucket.team)

    def team_buckets(self, team: TeamSpec) -> list[BucketSpec]:
        """The buckets ``team``'s service account is granted, in spec order."""
        return [b for b in self.buckets if self.bucket_owner(b).name == team.name]

    def mtc_bucket(self, m: MultiTierCheckpointingSpec) -> str | None:
        """The bucket multi-tier checkpointing backs up to: the one named, else the spec's first checkpoints bucket."""
        if m.bucket is not None:
            return m.bucket
        first = self.bucket_for(BucketPurpose.CHECKPOINTS)
        return first.name if first else None

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
