"""Cloud Build CI trigger on pushes to a GitHub branch, run as its own SA.

CI runs tests, synth and ``terraform plan``: it reads everything the stack
manages (plan refreshes state) but changes nothing, except the state lock and
the images it pushes. So the build SA gets read-only roles, object access on
the state bucket and writer on the one image repository.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.artifact_registry_repository_iam_member import ArtifactRegistryRepositoryIamMember
from cdktn_provider_google.cloudbuild_trigger import (
    CloudbuildTrigger,
    CloudbuildTriggerGithub,
    CloudbuildTriggerGithubPush,
)
from cdktn_provider_google.service_account import ServiceAccount
from cdktn_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

from modules.iam import project_roles

# Read-only roles covering every resource type the stack manages (plan refreshes
# them all), and no basic roles.
CI_PROJECT_ROLES: tuple[str, ...] = (
    "roles/aiplatform.viewer",
    "roles/artifactregistry.reader",
    "roles/cloudbuild.builds.viewer",
    "roles/compute.viewer",
    "roles/container.viewer",
    "roles/iam.securityReviewer",
    "roles/iam.serviceAccountViewer",
    "roles/logging.logWriter",
    "roles/serviceusage.serviceUsageViewer",
    "roles/storage.bucketViewer",
)


@dataclass(frozen=True, kw_only=True)
class BuildTriggerProps:
    project: str
    name: str
    github_owner: str
    github_repo: str
    branch_regex: str
    filename: str
    account_id: str
    state_bucket: str
    # Repository the build pushes images to: (location, repository id).
    image_repository: tuple[str, str] | None = None
    project_roles: Sequence[str] = CI_PROJECT_ROLES
    substitutions: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[ITerraformDependable, ...] = ()


class BuildTrigger(Construct):
    service_account: ServiceAccount
    trigger: CloudbuildTrigger

    def __init__(self, scope: Construct, id_: str, *, props: BuildTriggerProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        p = props
        deps = list(p.depends_on) or None
        self.service_account = ServiceAccount(
            self, "sa", account_id=p.account_id, project=p.project, display_name="Cloud Build CI (plan only)", depends_on=deps
        )
        member = self.service_account.member
        self.project_members = project_roles(self, "ci", p.project, member, p.project_roles)
        # State bucket is bootstrapped outside this stack; plan takes the state lock.
        self.state_access = StorageBucketIamMember(self, "ci-state", bucket=p.state_bucket, role="roles/storage.objectAdmin", member=member)
        self.image_push = None
        if p.image_repository:
            location, repository = p.image_repository
            self.image_push = ArtifactRegistryRepositoryIamMember(
                self,
                "ci-image-push",
                project=p.project,
                location=location,
                repository=repository,
                role="roles/artifactregistry.writer",
                member=member,
            )
        self.trigger = CloudbuildTrigger(
            self,
            "trigger",
            name=p.name,
            project=p.project,
            description=f"CI on push to {p.github_owner}/{p.github_repo} {p.branch_regex}",
            github=CloudbuildTriggerGithub(owner=p.github_owner, name=p.github_repo, push=CloudbuildTriggerGithubPush(branch=p.branch_regex)),
            filename=p.filename,
            service_account=self.service_account.id,
            substitutions=dict(p.substitutions) or None,
            depends_on=deps,
        )
