"""Who may write which of the spec's buckets: the one role table the stack grants and the planner checks.

Pure (no CDK): ``infra.stack`` turns ``BUCKET_ROLES`` into IAM bindings, and
``workloads.planning.planner`` asks ``can_write`` before it points a run's
checkpoints at a bucket, so a plan never relies on a grant the stack does not make.

A run's pods act as one of two Google service accounts. On the pod network, Workload
Identity maps the team's KSA to the team's service account, which holds the team role
on the team's buckets. On hostNetwork a pod reaches the node's metadata server and acts
as the *node* service account, which holds the node role on the buckets of the teams
that allow hostNetwork runs (``teams[].host_network``).
"""

from __future__ import annotations

from infra.spec import BucketPurpose, BucketSpec, EnvSpec, TeamSpec

# Per bucket purpose: (node SA role, team SA role).
BUCKET_ROLES: dict[BucketPurpose, tuple[str, str]] = {
    BucketPurpose.DATA: ("roles/storage.objectViewer", "roles/storage.objectAdmin"),
    BucketPurpose.CHECKPOINTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
    BucketPurpose.ARTIFACTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
}

# Predefined roles that can create and delete objects (a checkpointer writes new steps
# and prunes old ones: objectCreator alone cannot prune, so it does not count).
WRITE_ROLES = frozenset({"roles/storage.objectAdmin", "roles/storage.objectUser", "roles/storage.admin"})


def identity(team: TeamSpec, host_network: bool) -> str:
    """The service account a run's pods act as, in words."""
    return "the TPU nodes' service account (hostNetwork)" if host_network else f"team {team.name}'s service account"


def write_problem(spec: EnvSpec, bucket: BucketSpec, team: TeamSpec, host_network: bool) -> str | None:
    """Why a run of ``team`` cannot write ``bucket``, or None when it can."""
    who = identity(team, host_network)
    if host_network:
        granted = any(t.host_network and bucket in spec.team_buckets(t) for t in spec.teams)
        if not granted:
            return f"{who} holds no role on bucket {bucket.name} (its team does not allow hostNetwork runs)"
        role = BUCKET_ROLES[bucket.purpose][0]
    else:
        if bucket not in spec.team_buckets(team):
            return f"{who} holds no role on bucket {bucket.name}, which belongs to team {spec.bucket_owner(bucket).name}"
        role = BUCKET_ROLES[bucket.purpose][1]
    if role not in WRITE_ROLES:
        return f"{who} can only read bucket {bucket.name} ({role})"
    return None
