"""The project's resources beside the cluster: the image registry, the TensorBoard, the CI trigger and the Terraform state.

Each is one section of the spec and one construct of the stack (``infra.stack``); the
names they make are checked against GCP's rules here (``infra.gcp_names``), before any
cloud call.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from infra import gcp_names, vertex_ai
from infra.naming import BUCKET_NAME, GCE_NAME_MAX, REGION
from infra.spec.section import FieldValueError, Section, refuse
from toolkit.names import DNS1035_LABEL


class ArtifactRegistrySpec(Section):
    enabled: bool = True
    repository: str = Field("tpu-training", pattern=DNS1035_LABEL, max_length=GCE_NAME_MAX)


class TensorBoardSpec(Section):
    enabled: bool = True
    display_name: str | None = Field(None, description="default: the cluster name")
    region: str | None = Field(
        None,
        pattern=REGION,
        description="Vertex AI region of the TensorBoard (default: the cluster's region when Vertex AI is offered there, "
        "else the nearest that has it: infra/vertex_ai.py)",
    )
    region_unlisted: bool = Field(False, description="accept a region infra/vertex_ai.py does not list (one Vertex AI added since the table was compiled)")

    @model_validator(mode="after")
    def _vertex_region(self) -> TensorBoardSpec:
        if self.region is not None and not self.region_unlisted and not vertex_ai.offered(self.region):
            raise FieldValueError(
                "region",
                f"{self.region!r} is not a Vertex AI region, so the TensorBoard cannot be created there",
                f"use {vertex_ai.nearest(self.region)} (the nearest that has Vertex AI), remove it to get that default, "
                "or set tensorboard.region_unlisted: true for a region Vertex AI added since infra/vertex_ai.py was compiled",
            )
        return self

    @field_validator("display_name")
    @classmethod
    def _display_name(cls, v: str | None) -> str | None:
        if v is not None:
            refuse(gcp_names.tensorboard_display_name_problem(v))
        return v


class CloudBuildSpec(Section):
    enabled: bool = False
    github_owner: str | None = None
    github_repo: str | None = None
    branch: str = Field("^main$", description="branch regex that triggers CI (RE2 syntax, as Cloud Build reads it)")
    filename: str = "cloudbuild/ci.yaml"

    @field_validator("branch")
    @classmethod
    def _re2(cls, v: str) -> str:
        refuse(gcp_names.re2_problem(v))
        return v

    @field_validator("github_owner")
    @classmethod
    def _owner(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(gcp_names.GITHUB_OWNER, v):
            raise ValueError(f"{v!r} is not a GitHub user or organization name; use 1-39 letters, digits and single hyphens, not at either end")
        return v

    @field_validator("github_repo")
    @classmethod
    def _repo_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(gcp_names.GITHUB_REPO, v):
            raise ValueError(f"{v!r} is not a GitHub repository name; use 1-100 letters, digits, '.', '-' and '_'")
        return v

    @field_validator("filename")
    @classmethod
    def _filename(cls, v: str) -> str:
        refuse(gcp_names.build_config_path_problem(v))
        return v

    @model_validator(mode="after")
    def _repo(self) -> CloudBuildSpec:
        if self.enabled and not (self.github_owner and self.github_repo):
            raise FieldValueError(
                "github_owner" if not self.github_owner else "github_repo",
                "the build trigger needs github_owner and github_repo",
                "set both, or set enabled: false",
            )
        return self


class StateSpec(Section):
    bucket: str | None = Field(None, pattern=BUCKET_NAME, description="Terraform state bucket (default <project>-tf-state)")
    prefix: str | None = Field(None, description="default: tpu-gke-toolkit/<cluster>")

    @field_validator("bucket")
    @classmethod
    def _gcs_name(cls, v: str | None) -> str | None:
        if v is not None:
            refuse(gcp_names.bucket_name_problem(v))
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        if v is not None:
            refuse(gcp_names.state_prefix_problem(v))
        return v
