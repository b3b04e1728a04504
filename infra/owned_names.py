"""What a stack creates under a name GCP holds only one of, derived from the spec without CDK. Pure.

A fleet is several stacks in one or more projects (``infra.fleet``). Two stacks that
create one GCP thing under the same name do not fail: the second ``terraform apply``
adopts, changes or deletes what the first made (one VPC, one service account acting for
two clusters, one Terraform state prefix whose plan deletes the other cluster). So every
member's names are listed here, each with the spec field that sets it, and the fleet
refuses at load two members that share one (``infra.fleet.check_distinct``).

``OwnedName.key`` is what makes the thing one thing in GCP: the Terraform state is a
bucket and a prefix; a bucket's name is global; service accounts, VPC networks and
clusters are per project (a cluster name is held per project, not per region, because
the stack derives project-wide names from it: its VPC and service accounts);
subnetworks, routers, workload policies, registries and TensorBoards per project and
region; a Lustre instance per project and zone. ``tf_type`` and ``name`` are how the
synthesized stack spells it: tests/test_fleet_synth.py checks that every named resource
a member's stack holds is listed here, so a new module's resource cannot slip past the
fleet's check.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from infra import naming
from infra.spec import BucketSpec, ClusterSpec, EnvSpec, NetworkSpec, StateSpec, TeamSpec


class Manager(Protocol):
    """What a fleet's manager (``infra.fleet.FleetManager``) has that its stack names: a cluster, and the fleet's buckets."""

    project: str
    region: str
    cluster: ClusterSpec
    network: NetworkSpec
    state: StateSpec
    teams: Sequence[TeamSpec]
    buckets: Sequence[BucketSpec]

    @property
    def network_name(self) -> str: ...
    @property
    def state_bucket(self) -> str: ...
    @property
    def state_prefix(self) -> str: ...


STATE = "terraform_backend_gcs"  # not a resource: the backend block of the stack


@dataclass(frozen=True)
class OwnedName:
    kind: str  # in words: "VPC network"
    tf_type: str  # the Terraform resource type the stack declares it as
    key: tuple[str, ...]  # what GCP holds one of
    name: str  # as the stack writes it (name, account_id, repository_id, display_name, instance_id)
    field: str  # the spec field that sets it (relative to the member's own file)

    @property
    def shown(self) -> str:
        if self.tf_type == STATE:
            return self.name
        where = [k for k in self.key[1:] if k != self.name]
        return f"{self.name} ({', '.join(where)})" if where else self.name


def _named(kind: str, tf_type: str, name: str, field: str, *scope: str) -> OwnedName:
    return OwnedName(kind, tf_type, (tf_type, *scope, name), name, field)


def _cluster_names(m: EnvSpec | Manager) -> Iterator[OwnedName]:
    """What every member's stack has: its state, VPC and its parts, cluster and service accounts."""
    p, r, c = m.project, m.region, m.cluster.name
    yield _named("GKE cluster", "google_container_cluster", c, "cluster.name", p)
    prefix_field = "state.prefix" if m.state.prefix else "cluster.name"
    yield OwnedName("Terraform state", STATE, (STATE, m.state_bucket, m.state_prefix), f"gs://{m.state_bucket}/{m.state_prefix}", prefix_field)
    net, net_field = m.network_name, "network.name" if m.network.name else "cluster.name"
    yield _named("VPC network", "google_compute_network", net, net_field, p)
    yield _named("subnetwork", "google_compute_subnetwork", net, net_field, p, r)
    yield _named("Cloud Router", "google_compute_router", f"{net}-router", net_field, p, r)
    yield _named("Cloud NAT", "google_compute_router_nat", f"{net}-nat", net_field, p, r)
    dcn = m.network.dcn
    if dcn is not None:
        name, field = dcn.name or f"{c}-dcn", "network.dcn.name" if dcn.name else "cluster.name"
        yield _named("VPC network", "google_compute_network", name, field, p)
        yield _named("subnetwork", "google_compute_subnetwork", name, field, p, r)
        yield _named("firewall rule", "google_compute_firewall", f"{name}-internal", field, p)
    yield _named("service account", "google_service_account", naming.service_account_id(c, "nodes"), "cluster.name", p)
    for i, t in enumerate(m.teams):
        yield _named("service account", "google_service_account", naming.team_service_account_id(c, t.name), f"teams[{i}].name", p)


def owned_names(member: EnvSpec | Manager) -> list[OwnedName]:
    """Every name ``member``'s stack (``infra.stack``) creates that GCP holds one of: an environment's, or a fleet manager's."""
    from infra.access import tensorboard_name

    out = list(_cluster_names(member))
    if not isinstance(member, EnvSpec):
        out += [_named("bucket", "google_storage_bucket", b.name, f"buckets[{i}].name") for i, b in enumerate(member.buckets)]
        return out
    s, p, r = member, member.project, member.region
    out += [_named("bucket", "google_storage_bucket", b.name, f"buckets[{i}].name") for i, b in enumerate(s.buckets)]
    # A dynamically sliced pool's PROVISION_ONLY policy is made outside the stack and only named by it (infra/stack_tpu.py).
    policies = {s.workload_policy_name(pool) for pool in s.tpu_pools if not pool.dynamic_slicing} - {None}
    out += [_named("workload policy", "google_compute_resource_policy", n, "cluster.name", p, r) for n in sorted(n for n in policies if n)]
    if s.artifact_registry.enabled:
        out.append(
            _named("Artifact Registry repository", "google_artifact_registry_repository", s.artifact_registry.repository, "artifact_registry.repository", p, r)
        )
    if s.tensorboard.enabled:
        field = "tensorboard.display_name" if s.tensorboard.display_name else "cluster.name"
        out.append(_named("Vertex AI TensorBoard", "google_vertex_ai_tensorboard", tensorboard_name(s), field, p, s.tensorboard_region))
    if s.cloud_build.enabled:
        out.append(_named("service account", "google_service_account", naming.service_account_id(s.cluster.name, "ci"), "cluster.name", p))
        out.append(_named("Cloud Build trigger", "google_cloudbuild_trigger", f"{s.cluster.name}-ci", "cluster.name", p))
    if s.lustre is not None:
        zone = s.lustre_zone or ""
        out.append(_named("Managed Lustre instance", "google_lustre_instance", s.lustre.name, "lustre.name", p, zone))
        out.append(_named("address range", "google_compute_global_address", f"{s.lustre.name}-psa", "lustre.name", p))
        out.append(_named("firewall rule", "google_compute_firewall", f"{s.lustre.name}-lnet", "lustre.name", p))
    return out
