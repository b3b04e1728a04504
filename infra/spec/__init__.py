"""The environment spec: one YAML file, validated into typed models.

The spec is the single source of truth: the Terraform stack, the Kueue objects and run
planning are all derived from an ``EnvSpec``. Everything a consumer needs that can be
computed (slice shapes, node counts, CIDRs, the GKE version floor) is computed here once,
so the consumers cannot disagree. One module per concept:

    section     what every section shares: strict frozen models, FieldValueError, CIDR checks
    network     network (the VPC, its DCN network), network_policy
    cluster     cluster (version, endpoint, add-ons, maintenance window and exclusions), cpu_pool
    capacity    a TPU pool's capacity options (on-demand, spot, flex-start, reservations)
    tpu_pools   tpu_pools: shape, slices, capacity list, ComputeClass, multi-tier checkpointing
    teams       teams: namespace, queue, quota share, preemption, priorities (PRIORITY_CLASSES)
    storage     buckets, lustre
    project     artifact_registry, tensorboard, cloud_build, state
    kueue       versions, kueue (controller settings), xpk
    recovery    recovery: how runs restart (recreate, JobSet in-place)
    monitoring  monitoring: alert policies, notification channels, the TPU dashboard
    env         EnvFields: every field, and the values derived from them
    rules       the cross-field rules, in order (RULES)
    envspec     EnvSpec = EnvFields held to RULES
    cidrs       address-range sizing
    messages    a validation error as one line: field, problem, fix
    load        spec_path, read_document, parse_spec, load_spec

The GKE versions a feature needs are in ``infra.gke_features``, beside the TPU catalog;
the datasets section is ``infra.datasets``, the prices section ``infra.price_table``. Every
name below is importable from ``infra.spec`` itself, as before the package was split.

Importing this package must stay cheap: no CDK, no Kubernetes client.
"""

from __future__ import annotations

from infra.datasets import DatasetFormat, DatasetSpec, TokenizerType
from infra.gke_features import (
    COMPUTE_CLASS_MIN_GKE_VERSION,
    FLEX_START_GENERATIONS,
    FLEX_START_TPU_MIN_GKE_VERSION,
    LUSTRE_MIN_GKE_VERSION,
    MTC_GENERATIONS,
    MTC_MIN_GKE_VERSION,
    RAY_MIN_GKE_VERSION,
)
from infra.spec.capacity import FLEX_MAX_RUN_SECONDS, Capacity, CapacityOption, FlexStart, OnDemand, ProvisioningRetry, Reservation, Spot
from infra.spec.cidrs import Cidrs, derive_cidrs, pod_addresses_needed, pods_block_per_node
from infra.spec.cluster import ClusterSpec, CpuPoolSpec, MaintenanceExclusion, MaintenanceWindow, RayAddonSpec, ReleaseChannel
from infra.spec.env import STACK_LABEL_KEYS, EnvFields
from infra.spec.envspec import EnvSpec
from infra.spec.kueue import (
    DEFAULT_JOBSET_VERSION,
    DEFAULT_KUEUE_VERSION,
    KUEUE_MAX_FLAVORS_PER_GROUP,
    FairSharingSpec,
    KueueSpec,
    VersionsSpec,
    WaitForPodsReadySpec,
    XpkSpec,
)
from infra.spec.load import DEFAULT_SPEC_PATH, EXAMPLES_DIR, REPO_ROOT, SPEC_ENV_VAR, load_spec, parse_spec, read_document, spec_path
from infra.spec.messages import format_validation_error
from infra.spec.monitoring import AlertsSpec, MonitoringSpec, NotificationChannelSpec
from infra.spec.network import DcnNetworkSpec, NetworkPolicySpec, NetworkSpec
from infra.spec.project import ArtifactRegistrySpec, CloudBuildSpec, StateSpec, TensorBoardSpec
from infra.spec.recovery import IN_PLACE, IN_PLACE_RESTART_MIN_GKE_VERSION, IN_PLACE_RESTART_MIN_JOBSET, RECREATE, RESTART_PATHS, RecoverySpec
from infra.spec.section import FieldValueError
from infra.spec.storage import IPV4, LUSTRE_FILESYSTEM, LUSTRE_THROUGHPUTS, BucketPurpose, BucketSpec, LustreSpec
from infra.spec.teams import PRIORITY_CLASSES, BorrowWithinCohortSpec, TeamPreemptionSpec, TeamSpec
from infra.spec.tpu_pools import MAX_SLICES, TPU_POOL_NAME_MAX, ComputeClassSpec, MultiTierCheckpointingSpec, TpuPoolSpec
from toolkit.errors import SpecError
from toolkit.yamlfile import MAX_YAML_BYTES, YamlFileError, decode_text, load_yaml, read_capped

__all__ = [
    "COMPUTE_CLASS_MIN_GKE_VERSION",
    "DEFAULT_JOBSET_VERSION",
    "DEFAULT_KUEUE_VERSION",
    "DEFAULT_SPEC_PATH",
    "EXAMPLES_DIR",
    "FLEX_MAX_RUN_SECONDS",
    "FLEX_START_GENERATIONS",
    "FLEX_START_TPU_MIN_GKE_VERSION",
    "IN_PLACE",
    "IN_PLACE_RESTART_MIN_GKE_VERSION",
    "IN_PLACE_RESTART_MIN_JOBSET",
    "IPV4",
    "KUEUE_MAX_FLAVORS_PER_GROUP",
    "LUSTRE_FILESYSTEM",
    "LUSTRE_MIN_GKE_VERSION",
    "LUSTRE_THROUGHPUTS",
    "MAX_SLICES",
    "MAX_YAML_BYTES",
    "MTC_GENERATIONS",
    "MTC_MIN_GKE_VERSION",
    "PRIORITY_CLASSES",
    "RAY_MIN_GKE_VERSION",
    "RECREATE",
    "RESTART_PATHS",
    "REPO_ROOT",
    "SPEC_ENV_VAR",
    "STACK_LABEL_KEYS",
    "TPU_POOL_NAME_MAX",
    "AlertsSpec",
    "ArtifactRegistrySpec",
    "BorrowWithinCohortSpec",
    "BucketPurpose",
    "BucketSpec",
    "Capacity",
    "CapacityOption",
    "Cidrs",
    "CloudBuildSpec",
    "ClusterSpec",
    "ComputeClassSpec",
    "CpuPoolSpec",
    "DatasetFormat",
    "DatasetSpec",
    "DcnNetworkSpec",
    "EnvFields",
    "EnvSpec",
    "FairSharingSpec",
    "FieldValueError",
    "FlexStart",
    "KueueSpec",
    "LustreSpec",
    "MaintenanceExclusion",
    "MaintenanceWindow",
    "MonitoringSpec",
    "MultiTierCheckpointingSpec",
    "NetworkPolicySpec",
    "NetworkSpec",
    "NotificationChannelSpec",
    "OnDemand",
    "ProvisioningRetry",
    "RayAddonSpec",
    "RecoverySpec",
    "ReleaseChannel",
    "Reservation",
    "SpecError",
    "Spot",
    "StateSpec",
    "TeamPreemptionSpec",
    "TeamSpec",
    "TensorBoardSpec",
    "TokenizerType",
    "TpuPoolSpec",
    "VersionsSpec",
    "WaitForPodsReadySpec",
    "XpkSpec",
    "YamlFileError",
    "decode_text",
    "derive_cidrs",
    "format_validation_error",
    "load_spec",
    "load_yaml",
    "parse_spec",
    "pod_addresses_needed",
    "pods_block_per_node",
    "read_capped",
    "read_document",
    "spec_path",
]
