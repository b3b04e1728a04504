"""What GKE's multi-tier checkpointing add-on needs from the stack besides the add-on itself: its replicator may write the backup bucket.

The add-on backs the RAM disks up with a Kubernetes service account of its own
(``gke-managed-checkpointing/gke-checkpointing-multitier-node``); Workload Identity Federation
names it by a principal that holds the project *number*, here the bucket's own ``project_number``
attribute (a data source would need the API at plan time, which an offline plan must not). It gets
``roles/storage.objectUser`` (create, read, replace and delete objects, nothing on the bucket
itself) on each backup bucket, as xpk's MTC set-up grants it. The add-on (HighScaleCheckpointing)
has no field in the pinned provider: README "Training on your data" says how it is turned on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdktn import Token
from cdktn_provider_google.storage_bucket import StorageBucket
from cdktn_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from constructs import Construct

REPLICATOR_NAMESPACE = "gke-managed-checkpointing"
REPLICATOR_KSA = "gke-checkpointing-multitier-node"
BACKUP_ROLE = "roles/storage.objectUser"


@dataclass(frozen=True, kw_only=True)
class BackupGrantProps:
    project: str
    buckets: Sequence[tuple[str, StorageBucket]]  # (key for the logical id: the spec's bucket name, the bucket resource)


class MultiTierBackupGrant(Construct):
    members: list[StorageBucketIamMember]

    def __init__(self, scope: Construct, id_: str, *, props: BackupGrantProps) -> None:
        super().__init__(scope, id_)
        self.members = [
            StorageBucketIamMember(self, f"backup-{key}", bucket=bucket.name, role=BACKUP_ROLE, member=replicator(props.project, bucket))
            for key, bucket in props.buckets
        ]


def replicator(project: str, bucket: StorageBucket) -> str:
    number = Token.as_string(bucket.project_number)
    return (
        f"principal://iam.googleapis.com/projects/{number}/locations/global/workloadIdentityPools/"
        f"{project}.svc.id.goog/subject/ns/{REPLICATOR_NAMESPACE}/sa/{REPLICATOR_KSA}"
    )
