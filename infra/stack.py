"""The Terraform stack of one environment, composed from an ``EnvSpec`` (or of a fleet's manager, from its ``FleetManager``).

This is the only place (with ``infra.app``) where the spec meets CDK Terrain:
modules know nothing of the spec, the spec knows nothing of CDK. Import it
lazily — loading cdktn starts the jsii node runtime.

An environment's stack is its cluster (network, identities, the GKE cluster, the CPU
pool) and what runs need (TPU pools, in ``infra.stack_tpu``; buckets, registry,
TensorBoard, CI trigger, Lustre).
A fleet's MultiKueue manager (``infra.fleet.FleetManager``) is a cluster without the
second part: ``build_manager_stack`` composes the same cluster constructs from it, and
the parts only an environment has are left out (``_Context.env`` is None).

Logical ids are construct paths built from spec names (pool, bucket, team
names), never from positions, so a re-synth after an edit diffs cleanly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The jsii runtime's environment (no token creation stacks; the provider's resource
# namespaces loaded on first use): must be set before the runtime starts.
from modules._jsii_env import configure as _configure_jsii  # noqa: E402

_configure_jsii()

from cdktn import App, GcsBackend, TerraformOutput, TerraformStack  # noqa: E402
from cdktn_provider_google.project_service import ProjectService  # noqa: E402
from cdktn_provider_google.provider import GoogleProvider  # noqa: E402
from constructs import Construct  # noqa: E402

from infra.access import bucket_role, node_tensorboard_roles, team_tensorboard_roles, tensorboard_name  # noqa: E402
from infra.fleet import FleetManager  # noqa: E402
from infra.gcp_names import fit_display_name  # noqa: E402
from infra.naming import service_account_id, team_service_account_id  # noqa: E402
from infra.spec import EnvSpec, TeamSpec  # noqa: E402
from infra.spec.ironwood import slice_controller_on  # noqa: E402
from infra.stack_tpu import tpu_pools  # noqa: E402  (after the jsii runtime's environment is set)
from modules.build_trigger import BuildTrigger, BuildTriggerProps  # noqa: E402
from modules.checkpointing import BackupGrantProps, MultiTierBackupGrant  # noqa: E402
from modules.cluster import AutoProvisioningProps, Cluster, ClusterProps, MaintenanceWindowProps, RayOperatorProps  # noqa: E402
from modules.cpu_pool import CpuPool, CpuPoolProps  # noqa: E402
from modules.iam import NODE_PROJECT_ROLES, BucketGrant, Identity, IdentityProps, TeamIdentity, TeamIdentityProps, bucket_roles  # noqa: E402
from modules.lustre import Lustre, LustreProps  # noqa: E402
from modules.network import DcnNetwork, DcnNetworkProps, Network, NetworkProps  # noqa: E402
from modules.registry import Registry, RegistryProps  # noqa: E402
from modules.services import DEFAULT_SERVICES, Services, ServicesProps  # noqa: E402
from modules.storage import Bucket, BucketProps  # noqa: E402
from modules.tensorboard import TensorBoard, TensorBoardProps  # noqa: E402
from modules.tpu_pool import TpuSlice, WorkloadPolicy  # noqa: E402
from toolkit.errors import SpecError  # noqa: E402
from toolkit.names import TGK  # noqa: E402


@dataclass
class EnvStack:
    """The constructs of one environment, for tests and callers that need handles."""

    stack: TerraformStack
    services: Services
    network: Network
    identity: Identity
    teams: dict[str, TeamIdentity]  # by team name
    cluster: Cluster
    cpu_pool: CpuPool
    tpu_slices: dict[str, list[TpuSlice]]
    workload_policies: dict[str, WorkloadPolicy]
    buckets: dict[str, Bucket]
    registry: Registry | None
    tensorboard: TensorBoard | None
    build_trigger: BuildTrigger | None


# What the cluster's constructs are built from: an environment, or a fleet's manager (which has no TPU pools).
ClusterEnv = EnvSpec | FleetManager


@dataclass(frozen=True)
class _Context:
    """What every part of the stack is built with."""

    stack: TerraformStack
    spec: ClusterEnv  # the cluster's settings: project, region, zones, network, cluster, CPU pool, teams
    env: EnvSpec | None  # the environment the runs use (TPU pools, buckets, ...); None for a fleet's manager
    labels: dict[str, str]  # on every resource (the provider's default labels)
    api: dict[str, ProjectService]  # the enabled Google APIs, for depends_on
    # pool name -> the reservation of its capacity list its node pools consume (infra.reservation_fallback's
    # choice at deploy); a pool not named consumes its first reservation
    reservations: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.cluster.name

    @property
    def lustre(self) -> bool:
        return self.env is not None and self.env.lustre is not None


def build_stack(scope: Construct, spec: EnvSpec, *, stack_id: str | None = None, reservations: Mapping[str, str] | None = None) -> EnvStack:
    """Every construct of the environment, created in a fixed order (the synthesized JSON keeps it)."""
    return _compose(scope, spec, spec, stack_id=stack_id, reservations=reservations)


def build_manager_stack(scope: Construct, manager: FleetManager) -> EnvStack:
    """A fleet's MultiKueue manager: its cluster and the teams' identities, no TPU pool, bucket or other run resource."""
    return _compose(scope, manager, None)


def _compose(
    scope: Construct, spec: ClusterEnv, env: EnvSpec | None, *, stack_id: str | None = None, reservations: Mapping[str, str] | None = None
) -> EnvStack:
    stack = TerraformStack(scope, stack_id or spec.cluster.name)
    labels = {**spec.labels, "managed-by": TGK, "tgk-cluster": spec.cluster.name}
    provider = GoogleProvider(stack, "google", project=spec.project, region=spec.region)
    # Set as written: through the typed argument cdktn turns a map's keys to snake case
    # ("managed-by" -> "managed_by"), and every resource would carry both spellings.
    provider.add_override("default_labels", labels)
    GcsBackend(stack, bucket=spec.state_bucket, prefix=spec.state_prefix)
    apis = (*DEFAULT_SERVICES, *(LUSTRE_SERVICES if env is not None and env.lustre else ()))
    services = Services(stack, "services", props=ServicesProps(project=spec.project, services=apis))
    ctx = _Context(stack=stack, spec=spec, env=env, labels=labels, api=services.by_name, reservations=dict(reservations or {}))

    network = _network(ctx)
    dcn = _dcn_network(ctx)
    buckets = _buckets(ctx)
    identity = _identity(ctx, buckets)
    cluster = _cluster(ctx, network, identity)
    teams = _team_identities(ctx, buckets, cluster)
    cpu_pool = _cpu_pool(ctx, cluster, identity)
    if env is not None:
        # Read once: every attribute read is a round trip to the jsii runtime, and the pools' loop runs once per slice.
        policies, slices = tpu_pools(
            ctx.stack, env, cluster_id=cluster.id, node_sa_email=identity.node_sa.email, api=ctx.api, labels=labels, reservations=ctx.reservations
        )
    else:
        policies, slices = {}, {}
    if dcn is not None:
        _attach_dcn(dcn, slices)
    registry = _registry(ctx)
    tensorboard = _tensorboard(ctx)
    trigger = _build_trigger(ctx, registry)
    lustre = _lustre(ctx, network)
    _multi_tier_backups(ctx, buckets)

    _outputs(ctx, cluster, identity, teams, registry, tensorboard, slices, lustre)
    return EnvStack(
        stack=stack,
        services=services,
        network=network,
        identity=identity,
        teams=teams,
        cluster=cluster,
        cpu_pool=cpu_pool,
        tpu_slices=slices,
        workload_policies=policies,
        buckets=buckets,
        registry=registry,
        tensorboard=tensorboard,
        build_trigger=trigger,
    )


# ------------------------------------------------------------------ network


def _network(ctx: _Context) -> Network:
    spec, cidrs = ctx.spec, ctx.spec.cidrs
    return Network(
        ctx.stack,
        "network",
        props=NetworkProps(
            name=spec.network_name,
            region=spec.region,
            nodes_cidr=cidrs.nodes,
            pods_cidr=cidrs.pods,
            services_cidr=cidrs.services,
            nat=spec.cluster.private_nodes,
            declared_firewall=ctx.lustre,
            depends_on=(ctx.api["compute.googleapis.com"],),
        ),
    )


def _dcn_network(ctx: _Context) -> DcnNetwork | None:
    """The second VPC for multislice DCN traffic (spec network.dcn): GKE multi-networking gives each TPU node an eth1 in it."""
    dcn = ctx.spec.network.dcn
    if dcn is None:
        return None
    return DcnNetwork(
        ctx.stack,
        "dcn-network",
        props=DcnNetworkProps(
            name=dcn.name or f"{ctx.spec.cluster.name}-dcn",
            region=ctx.spec.region,
            cidr=dcn.cidr,
            mtu=dcn.mtu,
            depends_on=(ctx.api["compute.googleapis.com"],),
        ),
    )


def _attach_dcn(dcn: DcnNetwork, slices: dict[str, list[TpuSlice]]) -> None:
    """Give every TPU node a second NIC in the DCN subnet (GKE's additional node network)."""
    network, subnet = dcn.network.name, dcn.subnet.name
    for pool_slices in slices.values():
        for s in pool_slices:
            # An escape hatch on the node pool resource, so modules/tpu_pool.py stays one concern.
            s.pool.add_override("network_config.additional_node_network_configs", [{"network": network, "subnetwork": subnet}])


# ------------------------------------------------------------------ storage


def _buckets(ctx: _Context) -> dict[str, Bucket]:
    spec = ctx.env
    if spec is None:
        return _fleet_buckets(ctx)
    # Multi-tier checkpointing's backup buckets: GKE backs the RAM disks up only to a bucket with
    # hierarchical namespace (GKE docs "Train ... with Multi-Tier Checkpointing").
    mtc_backups = {spec.mtc_bucket(p.multi_tier_checkpointing) for p in spec.tpu_pools if p.multi_tier_checkpointing is not None}
    return {
        b.name: Bucket(
            ctx.stack,
            f"bucket-{b.name}",
            props=BucketProps(
                name=b.name,
                location=spec.region.upper(),
                versioning=b.versioned,
                force_destroy=b.force_destroy,
                soft_delete_days=b.soft_delete_days,
                hierarchical_namespace=b.name in mtc_backups,
                labels={**ctx.labels, "purpose": b.purpose.value},
                depends_on=(ctx.api["storage.googleapis.com"],),
            ),
        )
        for b in spec.buckets
    }


def _fleet_buckets(ctx: _Context) -> dict[str, Bucket]:
    """A fleet manager's stack: the fleet's buckets, each granted to every worker's service accounts (``FleetManager.bucket_grants``).

    The workers' accounts are named, not referenced: they are other stacks' (each worker's),
    deployed before the manager's (``infra.fleet.members``).
    """
    m = ctx.spec
    if not isinstance(m, FleetManager) or not m.buckets:
        return {}
    made = {
        b.name: Bucket(
            ctx.stack,
            f"bucket-{b.name}",
            props=BucketProps(
                name=b.name,
                location=where,
                versioning=b.versioned,
                force_destroy=b.force_destroy,
                soft_delete_days=b.soft_delete_days,
                labels={**ctx.labels, "purpose": b.purpose.value},
                depends_on=(ctx.api["storage.googleapis.com"],),
            ),
        )
        for b, where in zip(m.buckets, m.bucket_locations, strict=True)
    }
    for g in m.bucket_grants:
        account = g.member.removeprefix("serviceAccount:").split("@", 1)[0]
        bucket_roles(ctx.stack, f"fleet-{g.worker}-{account}", g.member, (BucketGrant(key=g.bucket, bucket=made[g.bucket].name, role=g.role),))
    return made


# ----------------------------------------------------------------- identity


def _grants(spec: EnvSpec | None, buckets: dict[str, Bucket], team: TeamSpec, role_of: int) -> tuple[BucketGrant, ...]:
    """One grant per bucket of ``team``, with its purpose's role (``role_of``: 0 node SA, 1 team SA).

    A bucket's team SA gets the team role: its pods prepare data, write checkpoints and
    artifacts. The node SA gets the node role only on the buckets of teams that opted in
    to hostNetwork runs (whose pods act as it); those pods only read training data. The
    table is infra.access's bucket_role (BUCKET_ROLES; a data bucket holding a dataset is read-only to
    both), which the planner checks a run's writes against. A fleet's manager (``spec`` None) has no bucket.
    """
    if spec is None:
        return ()
    return tuple(BucketGrant(key=b.name, bucket=buckets[b.name].name, role=bucket_role(spec, b, role_of)) for b in spec.team_buckets(team))


def _identity(ctx: _Context, buckets: dict[str, Bucket]) -> Identity:
    """The node SA; it holds bucket roles only for the teams whose hostNetwork pods act as it."""
    spec, env = ctx.spec, ctx.env
    return Identity(
        ctx.stack,
        "identity",
        props=IdentityProps(
            project=spec.project,
            node_account_id=service_account_id(ctx.name, "nodes"),
            node_project_roles=(*NODE_PROJECT_ROLES, *(node_tensorboard_roles(env) if env else ())),
            node_bucket_grants=tuple(g for t in spec.teams if t.host_network for g in _grants(env, buckets, t, 0)),
            depends_on=(ctx.api["iam.googleapis.com"],),
            display_prefix=f"{ctx.name}: ",
        ),
    )


def _team_identities(ctx: _Context, buckets: dict[str, Bucket], cluster: Cluster) -> dict[str, TeamIdentity]:
    """Per team: a Google SA only the team's KSA may act as, granted only the team's buckets."""
    spec, env = ctx.spec, ctx.env
    return {
        t.name: TeamIdentity(
            ctx.stack,
            f"team-{t.name}",
            props=TeamIdentityProps(
                project=spec.project,
                account_id=team_service_account_id(ctx.name, t.name),
                namespace=t.ns,
                ksa=t.ksa,
                project_roles=team_tensorboard_roles(env) if env else (),
                bucket_grants=_grants(env, buckets, t, 1),
                # IAM caps a display name at 100 bytes: the long form names the KSA when it fits.
                display_name=fit_display_name(f"{ctx.name}: team {t.name} (Workload Identity of {t.ns}/{t.ksa})", f"{ctx.name}: team {t.name}"),
                depends_on=(ctx.api["iam.googleapis.com"],),
                binding_depends_on=(cluster.cluster,),
            ),
        )
        for t in spec.teams
    }


# ------------------------------------------------------------------ cluster


def _cluster(ctx: _Context, network: Network, identity: Identity) -> Cluster:
    spec, c = ctx.spec, ctx.spec.cluster
    w = c.maintenance_window
    return Cluster(
        ctx.stack,
        "cluster",
        props=ClusterProps(
            project=spec.project,
            name=c.name,
            region=spec.region,
            zones=tuple(spec.zones),
            network=network.network.id,
            subnetwork=network.subnet.id,
            pods_range_name=network.props.pods_range_name,
            services_range_name=network.props.services_range_name,
            release_channel=c.release_channel.value,
            min_master_version=spec.min_master_version,
            dataplane_v2=c.dataplane_v2,
            multi_networking=spec.network.dcn is not None,
            private_nodes=c.private_nodes,
            master_cidr=c.master_cidr,
            master_authorized_networks=tuple(c.master_authorized_networks),
            dns_endpoint=c.dns_endpoint,
            deletion_protection=c.deletion_protection,
            maintenance_window=MaintenanceWindowProps(start_time=w.start_time, end_time=w.end_time, recurrence=w.recurrence),
            gcs_fuse_csi=c.gcs_fuse_csi,
            lustre_csi=ctx.lustre,
            high_scale_checkpointing=ctx.env is not None and any(p.multi_tier_checkpointing is not None for p in ctx.env.tpu_pools),
            slice_controller=slice_controller_on(ctx.env) if ctx.env is not None else bool(c.slice_controller),
            ray_operator=RayOperatorProps(logging=c.ray.logging, monitoring=c.ray.monitoring) if c.ray.enabled else None,
            labels=ctx.labels,
            bootstrap_service_account=identity.node_sa.email,
            auto_provisioning=_auto_provisioning(ctx, identity),
            depends_on=(ctx.api["container.googleapis.com"],),
        ),
    )


def _auto_provisioning(ctx: _Context, identity: Identity) -> AutoProvisioningProps | None:
    """Node auto-provisioning for the ComputeClass pools: GKE creates their slices, within these caps."""
    env = ctx.env
    limits = env.auto_provisioning_limits() if env else None
    if env is None or limits is None:
        return None
    # The classes' pools' zones: a slice is made where its pool (and its reservations) live.
    zones = tuple(dict.fromkeys(env.pool_zone(p) for p in env.tpu_pools if p.compute_class is not None))
    return AutoProvisioningProps(limits=limits, service_account=identity.node_sa.email, locations=zones)


# -------------------------------------------------------------------- pools


def _cpu_pool(ctx: _Context, cluster: Cluster, identity: Identity) -> CpuPool:
    spec, cpu = ctx.spec, ctx.spec.cpu_pool
    return CpuPool(
        ctx.stack,
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
            resource_labels=ctx.labels,
        ),
    )


# ------------------------------------------- registry, TensorBoard, CI trigger


def _registry(ctx: _Context) -> Registry | None:
    spec = ctx.env
    if spec is None or not spec.artifact_registry.enabled:
        return None
    return Registry(
        ctx.stack,
        "registry",
        props=RegistryProps(
            project=spec.project,
            location=spec.region,
            repository=spec.artifact_registry.repository,
            labels=ctx.labels,
            depends_on=(ctx.api["artifactregistry.googleapis.com"],),
        ),
    )


def _tensorboard(ctx: _Context) -> TensorBoard | None:
    spec = ctx.env
    if spec is None or not spec.tensorboard.enabled:
        return None
    return TensorBoard(
        ctx.stack,
        "tensorboard",
        props=TensorBoardProps(
            project=spec.project,
            region=spec.tensorboard_region,
            display_name=tensorboard_name(spec),
            labels=ctx.labels,
            depends_on=(ctx.api["aiplatform.googleapis.com"],),
        ),
    )


def _build_trigger(ctx: _Context, registry: Registry | None) -> BuildTrigger | None:
    spec = ctx.env
    if spec is None or not spec.cloud_build.enabled:
        return None
    cb = spec.cloud_build
    if not (cb.github_owner and cb.github_repo):
        raise SpecError("cloud_build", "the trigger needs github_owner and github_repo", "set both or set enabled: false")
    return BuildTrigger(
        ctx.stack,
        "ci",
        props=BuildTriggerProps(
            project=spec.project,
            name=f"{ctx.name}-ci",
            github_owner=cb.github_owner,
            github_repo=cb.github_repo,
            branch_regex=cb.branch,
            filename=cb.filename,
            account_id=service_account_id(ctx.name, "ci"),
            state_bucket=spec.state_bucket,
            image_repository=(spec.region, registry.repository.name) if registry else None,
            depends_on=(ctx.api["cloudbuild.googleapis.com"], ctx.api["iam.googleapis.com"]),
        ),
    )


# ------------------------------------------------------------------ outputs


# ------------------------------------------------- multi-tier checkpointing


def _multi_tier_backups(ctx: _Context, buckets: dict[str, Bucket]) -> MultiTierBackupGrant | None:
    """GKE's checkpoint replicator may write every bucket a pool's RAM disks are backed up to (the number in its principal: the bucket's project_number)."""
    spec = ctx.env
    if spec is None:
        return None
    names = sorted({spec.mtc_bucket(p.multi_tier_checkpointing) or "" for p in spec.tpu_pools if p.multi_tier_checkpointing is not None} - {""})
    if not names:
        return None
    return MultiTierBackupGrant(
        ctx.stack, "multi-tier-checkpointing", props=BackupGrantProps(project=spec.project, buckets=tuple((n, buckets[n].bucket) for n in names))
    )


# ------------------------------------------------------------------ lustre

# Managed Lustre's API, and private services access (the peering its instances are reached through).
LUSTRE_SERVICES = ("lustre.googleapis.com", "servicenetworking.googleapis.com")


def _lustre(ctx: _Context, network: Network) -> Lustre | None:
    spec = ctx.env
    lu = spec.lustre if spec else None
    if spec is None or lu is None:
        return None
    zone = spec.lustre_zone
    assert zone is not None
    return Lustre(
        ctx.stack,
        "lustre",
        props=LustreProps(
            project=spec.project,
            name=lu.name,
            zone=zone,
            network=spec.network_name,
            network_id=network.network.id,
            capacity_gib=lu.capacity_gib,
            throughput=lu.throughput,
            filesystem=lu.filesystem,
            peering_cidr=lu.peering_cidr,
            depends_on=tuple(ctx.api[a] for a in LUSTRE_SERVICES),
        ),
    )


def _outputs(
    ctx: _Context,
    cluster: Cluster,
    identity: Identity,
    teams: dict[str, TeamIdentity],
    registry: Registry | None,
    tensorboard: TensorBoard | None,
    slices: dict[str, list[TpuSlice]],
    lustre: Lustre | None = None,
) -> None:
    spec, env = ctx.spec, ctx.env
    out = {
        "cluster_name": cluster.name,
        "cluster_endpoint": cluster.cluster.endpoint,
        "cluster_location": cluster.cluster.location,
        "node_service_account": identity.node_sa.email,
        "team_service_accounts": {name: team.service_account.email for name, team in teams.items()},
        # per team: {bucket: purpose} (names as the spec gives them: a bucket's name is its id)
        "buckets": {t.name: {b.name: b.purpose.value for b in env.team_buckets(t)} if env else _fleet_team_buckets(spec, t) for t in spec.teams},
        "tpu_node_pools": {pool: [s.name for s in group] for pool, group in slices.items()},
    }
    if registry:
        out["registry_url"] = registry.url
    if tensorboard:
        out["tensorboard_id"] = tensorboard.id
    if lustre:
        # "<ip>@tcp:/<filesystem>": the ip goes into the spec's lustre.ip (the PersistentVolumes name it).
        out["lustre_mount_point"] = lustre.mount_point
    for key, value in out.items():
        TerraformOutput(ctx.stack, key, value=value)


def _fleet_team_buckets(spec: ClusterEnv, team: TeamSpec) -> dict[str, str]:
    """A fleet manager's buckets of ``team`` ({bucket: purpose}), as an environment's output lists its own."""
    if not isinstance(spec, FleetManager):
        return {}
    return {b.name: b.purpose.value for b in spec.buckets if (b.team or spec.teams[0].name) == team.name}


def synth(spec: EnvSpec, outdir: Path, *, stack_id: str | None = None, reservations: Mapping[str, str] | None = None) -> Path:
    """Synthesize the spec's stack into ``outdir``; return the path of its cdk.tf.json.

    ``reservations``: pool name -> which reservation of its capacity list its node pools consume
    (``infra deploy``'s fallback; default each pool's first)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    app = App(outdir=str(outdir), stack_traces=False)
    env = build_stack(app, spec, stack_id=stack_id, reservations=reservations)
    app.synth()
    return outdir / "stacks" / env.stack.node.id / "cdk.tf.json"
