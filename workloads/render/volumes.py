"""What a run's TPU pods mount beyond ``/dev/shm``: its dataset through GCS FUSE, its multi-tier checkpointing RAM disk. Pure.

The dataset is a CSI ephemeral volume of GKE's Cloud Storage FUSE driver, read-only, holding only
the dataset's prefix (``only-dir``) at ``workloads.planning.dataset.mount_dir``. Its mount options
follow Cloud Storage FUSE's performance guide for training reads, chosen because a run's dataset
does not change while it runs and the mount is read-only:

- ``implicit-dirs``: a prefix uploaded without directory placeholder objects still lists;
- ``metadata-cache:ttl-secs:-1`` and unlimited stat and type caches: every file's metadata is
  looked up once per mount, not again each minute (the default TTL is 60 s), which is what a
  data loader opening thousands of shards on every host pays for otherwise;
- ``file-system:kernel-list-cache-ttl-secs:-1``: directory listings (Grain expands the file
  glob on every host) are cached for the run too.

Checkpoints through GCS FUSE (``--checkpoint-storage gcsfuse``) mount the team's checkpoints
bucket read-write at ``/checkpoints`` with the guide's options for checkpointing, a write-to-new
workload: cached metadata for the run but no negative cache (``negative-ttl-secs:0``: a step
directory another host just created must be seen at once), no list cache, streaming writes (a
checkpoint shard is uploaded as it is written, not staged whole on the boot disk), and
``rename-dir-limit`` so Orbax's rename of a finished step directory works on a bucket without
hierarchical namespace. Lustre (``--checkpoint-storage lustre``) is the team namespace's claim on
the spec's instance (``workloads.render.lustre``), mounted at the same place.

No file cache: Grain reads each record once per epoch, so a cache on the VM's boot disk (the
sidecar's default cache volume) would hold data not read again before the next epoch, and could
fill the disk the node needs. The sidecar gets no CPU, memory or ephemeral-storage limit
(``"0"``, GKE Standard): a TPU VM has far more of each than a training pod asks for, and a
throttled or OOM-killed sidecar stalls or ends every worker. With ``run_as_user`` the mount is
owned by that UID (the driver's docs require ``uid``/``gid`` for a non-root pod).
"""

from __future__ import annotations

from typing import Any

from toolkit import names
from workloads.planning.dataset import mount_dir
from workloads.planning.model import RunPlan

DATASET_VOLUME = "dataset"
MTC_VOLUME = "local-checkpoints"
CHECKPOINT_VOLUME = "checkpoints"

TRAINING_READ_OPTIONS = (
    "implicit-dirs",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-system:kernel-list-cache-ttl-secs:-1",
)


CHECKPOINT_WRITE_OPTIONS = (
    "implicit-dirs",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-system:kernel-list-cache-ttl-secs:0",
    "write:enable-streaming-writes:true",
    "rename-dir-limit=200000",
)


def _owner(plan: RunPlan) -> list[str]:
    uid = plan.target.run_as_user
    return [] if uid is None else [f"uid={uid}", f"gid={uid}"]


def checkpoint_mount_options(plan: RunPlan) -> str:
    return ",".join([*CHECKPOINT_WRITE_OPTIONS, *_owner(plan)])


def dataset_mount_options(plan: RunPlan) -> str:
    """The FUSE mount options of the dataset's volume, as the driver takes them (comma-separated)."""
    d = plan.program.dataset
    assert d is not None
    return ",".join([*TRAINING_READ_OPTIONS, f"only-dir={d.path}", *_owner(plan)])


def uses_gcsfuse(plan: RunPlan) -> bool:
    st = plan.policy.checkpoint_storage
    return plan.program.dataset is not None or (st is not None and st.kind == "gcsfuse")


def pod_annotations(plan: RunPlan) -> dict[str, str]:
    """The sidecar injection and its limits when a volume is GCS FUSE's, else none."""
    if not uses_gcsfuse(plan):
        return {}
    return {names.GCSFUSE_VOLUMES_ANNOTATION: "true", **{a: "0" for a in names.GCSFUSE_SIDECAR_LIMIT_ANNOTATIONS}}


def volumes(plan: RunPlan) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    d = plan.program.dataset
    if d is not None:
        attributes = {"bucketName": d.bucket, "mountOptions": dataset_mount_options(plan)}
        out.append({"name": DATASET_VOLUME, "csi": {"driver": names.GCSFUSE_CSI_DRIVER, "readOnly": True, "volumeAttributes": attributes}})
    if plan.policy.multi_tier is not None:
        # The add-on's driver gives the RAM disk the size of the CheckpointConfiguration selecting the node.
        out.append({"name": MTC_VOLUME, "csi": {"driver": names.MTC_CSI_DRIVER}})
    st = plan.policy.checkpoint_storage
    if st is not None and st.kind == "gcsfuse":
        attributes = {"bucketName": st.bucket, "mountOptions": checkpoint_mount_options(plan)}
        out.append({"name": CHECKPOINT_VOLUME, "csi": {"driver": names.GCSFUSE_CSI_DRIVER, "volumeAttributes": attributes}})
    elif st is not None:
        out.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": st.claim}})
    return out


def volume_mounts(plan: RunPlan) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    d = plan.program.dataset
    if d is not None:
        out.append({"name": DATASET_VOLUME, "mountPath": mount_dir(d), "readOnly": True})
    if plan.policy.multi_tier is not None:
        out.append({"name": MTC_VOLUME, "mountPath": plan.policy.multi_tier.directory})
    st = plan.policy.checkpoint_storage
    if st is not None:
        out.append({"name": CHECKPOINT_VOLUME, "mountPath": st.mount_dir})
    return out
