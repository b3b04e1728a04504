"""The Google APIs the environment needs, enabled and never disabled on destroy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdktn_provider_google.project_service import ProjectService
from constructs import Construct

DEFAULT_SERVICES: tuple[str, ...] = (
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
)


@dataclass(frozen=True, kw_only=True)
class ServicesProps:
    project: str
    services: Sequence[str] = DEFAULT_SERVICES


class Services(Construct):
    """``by_name[api]`` is the google_project_service enabling it."""

    by_name: dict[str, ProjectService]

    def __init__(self, scope: Construct, id_: str, *, props: ServicesProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.by_name = {}
        for api in props.services:
            # Other stacks in the same project may rely on these APIs: turning one
            # off on destroy would break them, so destroy leaves them enabled.
            self.by_name[api] = ProjectService(
                self,
                api.split(".")[0],
                project=props.project,
                service=api,
                disable_on_destroy=False,
                disable_dependent_services=False,
            )

    @property
    def all(self) -> list[ProjectService]:
        return list(self.by_name.values())
