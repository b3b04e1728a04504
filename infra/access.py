"""Who may write which of the spec's buckets and its TensorBoard: the one role table the stack grants and the planner checks.

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

from infra import naming
from infra.spec import BucketPurpose, BucketSpec, EnvSpec, TeamSpec

# Per bucket purpose: (node SA role, team SA role).
BUCKET_ROLES: dict[BucketPurpose, tuple[str, str]] = {
    BucketPurpose.DATA: ("roles/storage.objectViewer", "roles/storage.objectAdmin"),
    BucketPurpose.CHECKPOINTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
    BucketPurpose.ARTIFACTS: ("roles/storage.objectAdmin", "roles/storage.objectAdmin"),
}

# A data bucket that holds a dataset of the spec (datasets:) is read-only to the team's pods too:
# training only reads it, and a run (or anything else in the pod) must not be able to change or
# delete the data other runs train on. Uploads go through the user's own credentials
# (`workloads data upload`), not the pods'. A data bucket without a dataset keeps objectAdmin,
# where a team's pods may prepare data.
DATASET_BUCKET_ROLE = "roles/storage.objectViewer"


def bucket_role(spec: EnvSpec, bucket: BucketSpec, role_of: int) -> str:
    """The role on ``bucket`` of the node SA (``role_of`` 0) or of its team's SA (1)."""
    if bucket.purpose is BucketPurpose.DATA and any(d.bucket == bucket.name for d in spec.datasets):
        return DATASET_BUCKET_ROLE
    return BUCKET_ROLES[bucket.purpose][role_of]


# Predefined roles that can create and delete objects (a checkpointer writes new steps
# and prunes old ones: objectCreator alone cannot prune, so it does not count).
WRITE_ROLES = frozenset({"roles/storage.objectAdmin", "roles/storage.objectUser", "roles/storage.admin"})


# Vertex AI TensorBoard. A profiled run's MaxText lists the project's TensorBoards to find
# the spec's (by display name), creates the run's experiment and uploads to it;
# roles/aiplatform.user holds all three (Vertex AI's TensorBoard set-up guide grants it to
# training service accounts). It is project-wide: there is no per-instance TensorBoard IAM.
TENSORBOARD_ROLE = "roles/aiplatform.user"


def tensorboard_name(spec: EnvSpec) -> str:
    """The display name the stack gives the spec's TensorBoard (runs find it by this name)."""
    return spec.tensorboard.display_name or spec.cluster.name


def team_tensorboard_roles(spec: EnvSpec) -> tuple[str, ...]:
    """Project roles of every team SA: the TensorBoard role when the spec has a TensorBoard."""
    return (TENSORBOARD_ROLE,) if spec.tensorboard.enabled else ()


def node_tensorboard_roles(spec: EnvSpec) -> tuple[str, ...]:
    """Extra project roles of the node SA: hostNetwork pods act as it, so it may upload to
    the TensorBoard exactly when a team allows hostNetwork runs (as with the buckets)."""
    return (TENSORBOARD_ROLE,) if spec.tensorboard.enabled and any(t.host_network for t in spec.teams) else ()


def tensorboard_problem(spec: EnvSpec, team: TeamSpec, host_network: bool) -> str | None:
    """Why a run of ``team`` cannot upload to the spec's TensorBoard, or None when it can."""
    if not spec.tensorboard.enabled:
        return "the spec has no Vertex AI TensorBoard (tensorboard.enabled is false)"
    roles = node_tensorboard_roles(spec) if host_network else team_tensorboard_roles(spec)
    if TENSORBOARD_ROLE not in roles:
        return f"{identity(team, host_network)} holds no {TENSORBOARD_ROLE}"
    return None


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
        role = bucket_role(spec, bucket, 0)
    else:
        if bucket not in spec.team_buckets(team):
            return f"{who} holds no role on bucket {bucket.name}, which belongs to team {spec.bucket_owner(bucket).name}"
        role = bucket_role(spec, bucket, 1)
    if role not in WRITE_ROLES:
        return f"{who} can only read bucket {bucket.name} ({role})"
    return None


# Predefined roles that can list and read objects (a FUSE mount lists the prefix, Grain reads the files).
READ_ROLES = frozenset({"roles/storage.objectViewer", "roles/storage.objectUser", "roles/storage.objectAdmin", "roles/storage.admin"})


def team_member(spec: EnvSpec, team: TeamSpec) -> str:
    """The IAM member a team's pods act as through Workload Identity."""
    return f"serviceAccount:{naming.team_service_account_email(spec.project, spec.cluster.name, team.name)}"


def node_member(spec: EnvSpec) -> str:
    """The IAM member hostNetwork pods act as (the TPU nodes' service account)."""
    return f"serviceAccount:{naming.service_account_id(spec.cluster.name, 'nodes')}@{spec.project}.iam.gserviceaccount.com"


def run_member(spec: EnvSpec, team: TeamSpec, host_network: bool) -> str:
    return node_member(spec) if host_network else team_member(spec, team)


def bucket_bindings(spec: EnvSpec) -> dict[str, list[tuple[str, str]]]:
    """Per bucket, the (role, member) pairs the stack grants on it: what a bucket's IAM policy holds after a deploy.

    The local cluster writes these into its Cloud Storage server's bucket policies, so a
    check of "can this run's identity read the dataset" asks the same question there as on GCP.
    """
    out: dict[str, list[tuple[str, str]]] = {b.name: [] for b in spec.buckets}
    for team in spec.teams:
        for b in spec.team_buckets(team):
            out[b.name].append((bucket_role(spec, b, 1), team_member(spec, team)))
            if team.host_network:
                out[b.name].append((bucket_role(spec, b, 0), node_member(spec)))
    return out
