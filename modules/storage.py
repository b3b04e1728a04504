"""GCS buckets for data, checkpoints and artifacts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cdktn import ITerraformDependable
from cdktn_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketHierarchicalNamespace,
    StorageBucketSoftDeletePolicy,
    StorageBucketVersioning,
)
from constructs import Construct

from modules._checkov import suppress

_DAY = 86400


@dataclass(frozen=True, kw_only=True)
class BucketProps:
    name: str
    location: str
    versioning: bool = False
    force_destroy: bool = False
    # 0 turns soft delete off (GCS accepts 0 or 7..90 days).
    soft_delete_days: int = 7
    # Hierarchical namespace (real folders): GKE's multi-tier checkpointing backs its RAM disks up only
    # to such a bucket. GCS sets it at creation only: changing it makes Terraform replace the bucket.
    hierarchical_namespace: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[ITerraformDependable, ...] = ()


class Bucket(Construct):
    bucket: StorageBucket

    def __init__(self, scope: Construct, id_: str, *, props: BucketProps) -> None:
        super().__init__(scope, id_)
        self.props = props
        self.bucket = StorageBucket(
            self,
            "bucket",
            name=props.name,
            location=props.location,
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=StorageBucketVersioning(enabled=props.versioning),
            soft_delete_policy=StorageBucketSoftDeletePolicy(retention_duration_seconds=props.soft_delete_days * _DAY),
            force_destroy=props.force_destroy,
            hierarchical_namespace=StorageBucketHierarchicalNamespace(enabled=True) if props.hierarchical_namespace else None,
            labels=dict(props.labels) or None,
            depends_on=list(props.depends_on) or None,
        )
        reasons = {
            # A usage-log bucket would itself fail this check (it cannot log to
            # itself usefully) and GCS usage logs are the legacy mechanism.
            "CKV_GCP_62": "object access is audited with Cloud Audit Logs (Data Access logs for storage.googleapis.com); legacy usage-log buckets are not used",
        }
        if not props.versioning:
            reasons["CKV_GCP_78"] = "versioning is off for this bucket in the spec (re-creatable data/artifacts); soft delete still protects against deletes"
        suppress(self.bucket, reasons)

    @property
    def name(self) -> str:
        return self.bucket.name
