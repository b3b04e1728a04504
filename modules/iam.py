"""Service accounts (no keys, ever), their roles, and Workload Identity bindings.

Identities:
- the **node** SA runs every node (CPU and TPU): logs, metrics, image pulls. A pod
  on the pod network never acts as it: on GKE_METADATA nodes the GKE metadata
  server answers pods with their KSA's identity. A ``hostNetwork`` pod reaches the
  node's own metadata server and *does* act as it ("Pods running on the host
  network don't use Workload Identity Federation for GKE", GKE docs,
  workload-identity#restrictions), so bucket roles go to the node SA only for
  buckets whose teams opted in to hostNetwork runs.
- one **team** SA per team (``TeamIdentity``): only that team's KSA may act as it
  (one Workload Identity binding), and it holds only the grants given for that team,
  so one team's pods cannot use another team's buckets.
- ``Identity`` can also make one shared **workload** SA for stacks that want one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdktn import ITerraformDependable
from cdktn_provider_google.project_iam_member import ProjectIamMember
from cdktn_provider_google.service_account import ServiceAccount
from cdktn_provider_google.service_account_iam_member import ServiceAccountIamMember
from cdktn_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

NODE_PROJECT_ROLES: tuple[str, ...] = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
)
WORKLOAD_PROJECT_ROLES: tuple[str, ...] = ("roles/aiplatform.user",)


@dataclass(frozen=True, kw_only=True)
class BucketGrant:
    """``role`` on ``bucket`` (a name or a bucket resource's name token).

    ``key`` names the grant in logical ids (use the bucket's spec name), so
    adding a bucket never renames the bindings of the others.
    """

    key: str
    bucket: str
    role: str


@dataclass(frozen=True, kw_only=True)
class KsaBinding:
    namespace: str
    service_account: str


@dataclass(frozen=True, kw_only=True)
class IdentityProps:
    project: str
    node_account_id: str
    workload_account_id: str | None = None  # no shared workload SA when None
    node_project_roles: Sequence[str] = NODE_PROJECT_ROLES
    workload_project_roles: Sequence[str] = WORKLOAD_PROJECT_ROLES
    node_bucket_grants: Sequence[BucketGrant] = ()
    workload_bucket_grants: Sequence[BucketGrant] = ()
    depends_on: Sequence[ITerraformDependable] = ()
    display_prefix: str = ""


class Identity(Construct):
    node_sa: ServiceAccount
    workload_sa: ServiceAccount | None
    project_members: list[ProjectIamMember]
    bucket_members: list[StorageBucketIamMember]

    def __init__(self, scope: Construct, id_: str, *, props: IdentityProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        p = props
        deps = list(p.depends_on) or None
        self.node_sa = ServiceAccount(
            self,
            "node",
            account_id=p.node_account_id,
            project=p.project,
            display_name=f"{p.display_prefix}GKE nodes (CPU and TPU)".strip(),
            depends_on=deps,
        )
        self.workload_sa = None
        if p.workload_account_id is not None:
            self.workload_sa = ServiceAccount(
                self,
                "workload",
                account_id=p.workload_account_id,
                project=p.project,
                display_name=f"{p.display_prefix}training workloads (Workload Identity)".strip(),
                depends_on=deps,
            )
        self.project_members = []
        self.project_members += project_roles(self, "node", p.project, self.node_sa.member, p.node_project_roles)
        self.bucket_members = []
        self.bucket_members += bucket_roles(self, "node", self.node_sa.member, p.node_bucket_grants)
        if self.workload_sa is not None:
            self.project_members += project_roles(self, "workload", p.project, self.workload_sa.member, p.workload_project_roles)
            self.bucket_members += bucket_roles(self, "workload", self.workload_sa.member, p.workload_bucket_grants)


@dataclass(frozen=True, kw_only=True)
class WorkloadIdentityProps:
    project: str
    service_account: str  # the GSA's resource name (projects/<p>/serviceAccounts/<email>)
    bindings: Sequence[KsaBinding]
    # The pool <project>.svc.id.goog exists only once a WI-enabled cluster does:
    # pass the cluster here or the first apply fails.
    depends_on: Sequence[ITerraformDependable] = ()


class WorkloadIdentity(Construct):
    """Lets each Kubernetes SA (namespace/name) impersonate one Google SA."""

    bindings: list[ServiceAccountIamMember]

    def __init__(self, scope: Construct, id_: str, *, props: WorkloadIdentityProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.bindings = [
            ServiceAccountIamMember(
                self,
                f"{b.namespace}-{b.service_account}",
                service_account_id=props.service_account,
                role="roles/iam.workloadIdentityUser",
                member=f"serviceAccount:{props.project}.svc.id.goog[{b.namespace}/{b.service_account}]",
                depends_on=list(props.depends_on) or None,
            )
            for b in props.bindings
        ]


@dataclass(frozen=True, kw_only=True)
class TeamIdentityProps:
    project: str
    account_id: str
    namespace: str  # the team's Kubernetes namespace
    ksa: str  # the team's Kubernetes service account: the one member that may act as this SA
    project_roles: Sequence[str] = WORKLOAD_PROJECT_ROLES
    bucket_grants: Sequence[BucketGrant] = ()
    display_name: str = ""
    depends_on: Sequence[ITerraformDependable] = ()  # before the SA (e.g. the IAM API)
    # The pool <project>.svc.id.goog exists only once a WI-enabled cluster does:
    # pass the cluster here or the first apply fails.
    binding_depends_on: Sequence[ITerraformDependable] = ()


class TeamIdentity(Construct):
    """One team's Google SA: its KSA is the only member that may act as it, and it holds only its grants."""

    service_account: ServiceAccount
    project_members: list[ProjectIamMember]
    bucket_members: list[StorageBucketIamMember]
    workload_identity: WorkloadIdentity

    def __init__(self, scope: Construct, id_: str, *, props: TeamIdentityProps) -> None:
        super().__init__(scope, id_)
        self.props = p = props
        self.service_account = ServiceAccount(
            self,
            "sa",
            account_id=p.account_id,
            project=p.project,
            display_name=p.display_name or None,
            depends_on=list(p.depends_on) or None,
        )
        member = self.service_account.member
        self.project_members = project_roles(self, "sa", p.project, member, p.project_roles)
        self.bucket_members = bucket_roles(self, "sa", member, p.bucket_grants)
        self.workload_identity = WorkloadIdentity(
            self,
            "wi",
            props=WorkloadIdentityProps(
                project=p.project,
                service_account=self.service_account.name,
                bindings=(KsaBinding(namespace=p.namespace, service_account=p.ksa),),
                depends_on=p.binding_depends_on,
            ),
        )


def project_roles(scope: Construct, who: str, project: str, member: str, roles: Sequence[str]) -> list[ProjectIamMember]:
    """Non-authoritative project bindings: other members of these roles are left alone."""
    return [ProjectIamMember(scope, f"{who}-{role.removeprefix('roles/')}", project=project, role=role, member=member) for role in roles]


def bucket_roles(scope: Construct, who: str, member: str, grants: Sequence[BucketGrant]) -> list[StorageBucketIamMember]:
    return [
        StorageBucketIamMember(scope, f"{who}-{g.key}-{g.role.removeprefix('roles/storage.')}", bucket=g.bucket, role=g.role, member=member) for g in grants
    ]
