"""Vertex AI TensorBoard instance for training runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.vertex_ai_tensorboard import VertexAiTensorboard
from constructs import Construct

from modules._checkov import suppress


@dataclass(frozen=True, kw_only=True)
class TensorBoardProps:
    project: str
    region: str
    display_name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[ITerraformDependable, ...] = ()


class TensorBoard(Construct):
    tensorboard: VertexAiTensorboard

    def __init__(self, scope: Construct, id_: str, *, props: TensorBoardProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.tensorboard = VertexAiTensorboard(
            self,
            "tensorboard",
            project=props.project,
            region=props.region,
            display_name=props.display_name,
            labels=dict(props.labels) or None,
            depends_on=list(props.depends_on) or None,
        )
        suppress(
            self.tensorboard,
            {"CKV2_GCP_26": "Google-managed encryption: a CMEK key ring is out of this toolkit's scope and would block destroy/recreate"},
        )

    @property
    def id(self) -> str:
        return self.tensorboard.id
