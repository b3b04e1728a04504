"""Artifact Registry docker repository for training images."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.artifact_registry_repository import ArtifactRegistryRepository
from constructs import Construct

from modules._checkov import suppress


@dataclass(frozen=True, kw_only=True)
class RegistryProps:
    project: str
    location: str
    repository: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[ITerraformDependable, ...] = ()


class Registry(Construct):
    repository: ArtifactRegistryRepository

    def __init__(self, scope: Construct, id_: str, *, props: RegistryProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.repository = ArtifactRegistryRepository(
            self,
            "repo",
            project=props.project,
            location=props.location,
            repository_id=props.repository,
            format="DOCKER",
            description="training images (MaxText, TensorBoard uploader)",
            labels=dict(props.labels) or None,
            depends_on=list(props.depends_on) or None,
        )
        suppress(
            self.repository,
            {"CKV_GCP_84": "Google-managed encryption: a CMEK key ring is out of this toolkit's scope and would block destroy/recreate"},
        )

    @property
    def url(self) -> str:
        """Docker push/pull prefix, e.g. us-west4-docker.pkg.dev/<project>/<repo> (known after apply)."""
        return self.repository.registry_uri
