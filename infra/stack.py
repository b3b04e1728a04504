"""The Terraform stack of one environment, composed from an ``EnvSpec``.

This is the only place (with ``infra.app``) where the spec meets CDK Terrain:
modules know nothing of the spec, the spec knows nothing of CDK. Import it
lazily — loading cdktn starts the jsii node runtime.

Logical ids are construct paths built from spec names (pool, bucket, team
names), never from positions, so a re-synth after an edit diffs cleanly.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

# Token creation stacks cost a stack capture per token and are only useful when
# debugging cdktn itself; must be set before the jsii runtime starts.
os.environ.setdefault("CDKTN_DISABLE_CREATION_STACK", "1")

from cdktn import App, GcsBackend, TerraformOutput, TerraformStack  # noqa: E402
from cdktn_provider_google.provider import GoogleProvider  # noqa: E402
from constructs import Construct  # noqa: E402

from infra.catalog import Placement as CatalogPlacement  # noqa: E402
from toolkit.errors import SpecError  # noqa: E402
from infra.naming import (  # noqa: E402
    ACCELERATOR_TYPE_LABEL,
    CAPACITY_LABEL,
    GROUP_SIZE_LABEL,
    MANAGED_BY,
    POOL_LABEL,
    SLICE_INDEX_LABEL,
    TOPOLOGY_LABEL,
    service_account_id,
    workload_policy_name,
)
from infra.spec import BucketPurpose, EnvSpec, FlexStart, Reservation, Spot, TpuPoolSpec  # noqa: E402
from modules.build_trigger import BuildTrigger, BuildTriggerProps  # noqa: E402
from modules.cluster import Cluster, ClusterProps, MaintenanceWindowProps  # noqa: E402
from modules.cpu_pool import CpuPool, CpuPoolProps  # noqa: E402
from modules.iam import BucketGrant, Identity, IdentityProps, KsaBinding, WorkloadIdentity, WorkloadIdentityProps  # noqa: E402
from modules.network import Network, NetworkProps  # noqa: E402
from modules.registry import Registry, RegistryProps  # noqa: E402
from modules.services import Services, ServicesProps  # noqa: E402
from modules.storage import Bucket, BucketProps  # noqa: E402
from modules.tensorboard import TensorBoard, TensorBoardProps  # noqa: E402
from modules.tpu_pool import Capacity, Placement, TpuSlice, TpuSliceProps, WorkloadPolicy, WorkloadPolicyProps  # noqa: E402

_PLACEMENT = {
    CatalogPlacement.NONE: Placement.NONE,
    CatalogPlacement.COMPACT: Placement.COMPACT,
    CatalogPlacement.WORKLOAD_POLICY: Placement.WORKLOAD_POLICY,
}

# Per bucket purpose: (node SA role, workload SA role). TPU pods on hostNetwork
# act as the node SA and only read training data; data preparation runs on
# the pod network as the workload SA and writes it.
_BUCKET_ROLES: dict[BucketPurpose, tuple[str, str]] = {
    BucketPurpose.DATA: ("roles/storage.objectViewer", "roles/storage.objectAdmin"),
    BucketPurpose.CHECKPOINTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
    BucketPurpose.ARTIFACTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
}


def tpu_node_labels(pool: TpuPoolSpec, index: int) -> dict[str, str]:
    shape = pool.shape
    return {
        POOL_LABEL: pool.name,
        GROUP_SIZE_LABEL: str(pool.slices),
        SLICE_INDEX_LABEL: str(index),
        ACCELERATOR_TYPE_LABEL: shape.accelerator_type,
        TOPOLOGY_LABEL: shape.topology,
        CAPACITY_LABEL: pool.capacity.mode,
    }


def _capacity(spec: EnvSpec, pool: TpuPoolSpec) -> tuple[Capacity, str | None]:
    cap = pool.capacity
    if isinstance(cap, Spot):
        return Capacity.SPOT, None
    if isinstance(cap, FlexStart):
        return Capacity.FLEX_START, None
    if isinstance(cap, Reservation):
        shared = cap.project and cap.project != spec.project
        return Capacity.RESERVATION, f"projects/{cap.project}/reservations/{cap.name}" if shared else cap.name
    return Capacity.ON_DEMAND, None


@dataclass
class EnvStack:
    """The constructs of one environment, for tests and callers that need handles."""

    stack: TerraformStack
    services: Services
    network: Network
    identity: Identity
    workload_identity: WorkloadIdentity
    cluster: Cluster
    cpu_pool: CpuPool
    tpu_slices: dict[str, list[TpuSlice]]
    workload_policies: dict[str, WorkloadPolicy]
    buckets: dict[str, Bucket]
    registry: Registry | None
    tensorboard: TensorBoard | None
    build_trigger: BuildTrigger | None


def build_stack(scope: Construct, spec: EnvSpec, *, stack_id: str | None = None) -> EnvStack:
    stack = TerraformStack(scope, stack_id or spec.cluster.name)
    name = spec.cluster.name
    labels = {**spec.labels, "managed-by": MANAGED_BY, "tgk-cluster": name}

    GoogleProvider(stack, "google", project=spec.project, region=spec.region, default_labels=labels)
    GcsBackend(stack, bucket=spec.state_bucket, prefix=spec.state_prefix)

    services = Services(stack, "services", props=ServicesProps(project=spec.project))
    api = services.by_name

    cidrs = spec.cidrs
    network = Network(
        stack,
        "network",
        props=NetworkProps(
            name=spec.network_name,
            region=spec.region,
            nodes_cidr=cidrs.nodes,
            pods_cidr=cidrs.pods,
            services_cidr=cidrs.services,
            nat=spec.cluster.private_nodes,
            depends_on=(api["compute.googleapis.com"],),
        ),
    )

    buckets: dict[str, Bucket] = {}
    for b in spec.buckets:
        buckets[b.name] = Bucket(
            stack,
            f"bucket-{b.name}",
            props=BucketProps(
                name=b.name,
                location=spec.region.upper(),
                versioning=b.versioned,
                force_destroy=b.force_destroy,
                soft_delete_days=b.soft_delete_days,
                labels={**labels, "purpose": b.purpose.value},
                depends_on=(api["storage.googleapis.com"],),
            ),
        )

    node_grants, workload_grants = [], []
    for b in spec.buckets:
        node_role, workload_role = _BUCKET_ROLES[b.purpose]
        bucket_name = buckets[b.name].name
        node_grants.append(BucketGrant(key=b.name, bucket=bucket_name, role=node_role))
        workload_grants.append(BucketGrant(key=b.name, bucket=bucket_name, role=workload_role))
    identity = Identity(
        stack,
        "identity",
        props=IdentityProps(
            project=spec.project,
            node_account_id=service_account_id(name, "nodes"),
            workload_account_id=service_account_id(name, "workload"),
            node_bucket_grants=tuple(node_grants),
            workload_bucket_grants=tuple(workload_grants),
            depends_on=(api["iam.googleapis.com"],),
            display_prefix=f"{name}: ",
        ),
    )

    c = spec.cluster
    w = c.maintenance_window
    cluster = Cluster(
        stack,
        "cluster",
        props=ClusterProps(
            project=spec.project,
            name=name,
            region=spec.region,
            zones=tuple(spec.zones),
            network=network.network.id,
            subnetwork=network.subnet.id,
            pods_range_name=network.props.pods_range_name,
            services_range_name=network.props.services_range_name,
            release_channel=c.release_channel.value,
            min_master_version=spec.min_master_version,
            dataplane_v2=c.dataplane_v2,
            private_nodes=c.private_nodes,
            master_cidr=c.master_cidr,
            master_authorized_networks=tuple(c.master_authorized_networks),
            deletion_protection=c.deletion_protection,
            maintenance_window=MaintenanceWindowProps(start_time=w.start_time, end_time=w.end_time, recurrence=w.recurrence),
            gcs_fuse_csi=c.gcs_fuse_csi,
            labels=labels,
            bootstrap_service_account=identity.node_sa.email,
            depends_on=(api["container.googleapis.com"],),
        ),
    )
    workload_identity = WorkloadIdentity(
        stack,
        "workload-identity",
        props=WorkloadIdentityProps(
            project=spec.project,
            service_account=identity.workload_sa.name,
            bindings=tuple(KsaBinding(namespace=t.ns, service_account=t.ksa) for t in spec.teams),
            depends_on=(cluster.cluster,),
        ),
    )

    cpu = spec.cpu_pool
    cpu_pool = CpuPool(
        stack,
        f"cpu-{cpu.name}",
        props=CpuPoolProps(
            cluster=cluster.id,
            location=spec.region,
            name=cpu.name,
            machine_type=cpu.machine_type,
            service_account=identity.node_sa.email,
            min_nodes_per_zone=cpu.min_nodes,
            max_nodes_per_zone=cpu.max_nodes,
            disk_size_gb=cpu.disk_size_gb,
            max_pods_per_node=spec.network.cpu_max_pods_per_node,
            resource_labels=labels,
        ),
    )

    # Read once: every attribute read is a round trip to the jsii runtime, and
    # this loop runs once per slice (hundreds in large environments).
    cluster_id = cluster.id
    node_sa_email = identity.node_sa.email
    policies: dict[str, WorkloadPolicy] = {}
    slices: dict[str, list[TpuSlice]] = {}
    for pool in spec.tpu_pools:
        shape = pool.shape
        placement = _PLACEMENT[shape.placement]
        policy_name = None
        if placement is Placement.WORKLOAD_POLICY:
            pname = workload_policy_name(name, shape.generation.name, shape.topology)
            if pname not in policies:
                policies[pname] = WorkloadPolicy(
                    stack,
                    f"policy-{pname}",
                    props=WorkloadPolicyProps(
                        project=spec.project,
                        region=spec.region,
                        name=pname,
                        topology=shape.topology,
                        depends_on=(api["compute.googleapis.com"],),
                    ),
                )
            policy_name = policies[pname].name
        capacity, reservation = _capacity(spec, pool)
        slices[pool.name] = [
            TpuSlice(
                stack,
                f"tpu-{pool_name}",
                props=TpuSliceProps(
                    cluster=cluster_id,
                    location=spec.region,
                    zone=spec.pool_zone(pool),
                    name=pool_name,
                    machine_type=shape.machine_type,
                    topology=shape.topology,
                    nodes=shape.nodes,
                    service_account=node_sa_email,
                    placement=placement,
                    workload_policy=policy_name,
                    capacity=capacity,
                    reservation=reservation,
                    autoscaling=pool.autoscaling,
                    max_pods_per_node=spec.network.tpu_max_pods_per_node,
                    disk_size_gb=pool.disk_size_gb,
                    node_labels=tpu_node_labels(pool, i),
                    resource_labels={**labels, "tpu-pool": pool.name},
                ),
            )
            for i, pool_name in enumerate(pool.node_pool_names())
        ]

    registry = None
    if spec.artifact_registry.enabled:
        registry = Registry(
            stack,
            "registry",
            props=RegistryProps(
                project=spec.project,
                location=spec.region,
                repository=spec.artifact_registry.repository,
                labels=labels,
                depends_on=(api["artifactregistry.googleapis.com"],),
            ),
        )

    tensorboard = None
    if spec.tensorboard.enabled:
        tensorboard = TensorBoard(
            stack,
            "tensorboard",
            props=TensorBoardProps(
                project=spec.project,
                region=spec.region,
                display_name=spec.tensorboard.display_name or name,
                labels=labels,
                depends_on=(api["aiplatform.googleapis.com"],),
            ),
        )

    trigger = None
    cb = spec.cloud_build
    if cb.enabled:
        if not (cb.github_owner and cb.github_repo):
            raise SpecError("cloud_build", "the trigger needs github_owner and github_repo", "set both or set enabled: false")
        trigger = BuildTrigger(
            stack,
            "ci",
            props=BuildTriggerProps(
                project=spec.project,
                name=f"{name}-ci",
                github_owner=cb.github_owner,
                github_repo=cb.github_repo,
                branch_regex=cb.branch,
                filename=cb.filename,
                account_id=service_account_id(name, "ci"),
                state_bucket=spec.state_bucket,
                image_repository=(spec.region, registry.repository.name) if registry else None,
                depends_on=(api["cloudbuild.googleapis.com"], api["iam.googleapis.com"]),
            ),
        )

    _outputs(stack, spec, cluster, identity, buckets, registry, tensorboard, slices)
    return EnvStack(
        stack=stack,
        services=services,
        network=network,
        identity=identity,
        workload_identity=workload_identity,
        cluster=cluster,
        cpu_pool=cpu_pool,
        tpu_slices=slices,
        workload_policies=policies,
        buckets=buckets,
        registry=registry,
        tensorboard=tensorboard,
        build_trigger=trigger,
    )


def _outputs(
    stack: TerraformStack,
    spec: EnvSpec,
    cluster: Cluster,
    identity: Identity,
    buckets: dict[str, Bucket],
    registry: Registry | None,
    tensorboard: TensorBoard | None,
    slices: dict[str, list[TpuSlice]],
) -> None:
    out = {
        "cluster_name": cluster.name,
        "cluster_endpoint": cluster.cluster.endpoint,
        "cluster_location": cluster.cluster.location,
        "node_service_account": identity.node_sa.email,
        "workload_service_account": identity.workload_sa.email,
        "buckets": {b.purpose.value: buckets[b.name].name for b in spec.buckets},
        "tpu_node_pools": {pool: [s.name for s in group] for pool, group in slices.items()},
    }
    if registry:
        out["registry_url"] = registry.url
    if tensorboard:
        out["tensorboard_id"] = tensorboard.id
    for key, value in out.items():
        TerraformOutput(stack, key, value=value)


def synth(spec: EnvSpec, outdir: Path, *, stack_id: str | None = None) -> Path:
    """Synthesize the spec's stack into ``outdir``; return the path of its cdk.tf.json."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    app = App(outdir=str(outdir), stack_traces=False)
    env = build_stack(app, spec, stack_id=stack_id)
    app.synth()
    return outdir / "stacks" / env.stack.node.id / "cdk.tf.json"
