"""The CheckpointConfiguration of each TPU shape with multi-tier checkpointing (``tpu_pools[].multi_tier_checkpointing``). Pure.

GKE's multi-tier checkpointing add-on reads one cluster-scoped ``checkpointing.gke.io/v1``
CheckpointConfiguration per kind of node: ``nodeSelector`` picks the nodes, ``tolerations`` let
its node agents onto them (TPU nodes carry the ``google.com/tpu`` taint), ``inMemoryVolumeSize``
is the RAM disk every pod on them mounts through the add-on's CSI driver, and
``cloudStorageBucketName`` the bucket the RAM disks are backed up to. The nodes are selected by
the shape's GKE TPU labels (accelerator and topology), which every node pool of the shape has:
the spec refuses two pools of one shape with different settings. ``queues apply`` applies them.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec
from toolkit import names


def config_name(shape_key: str) -> str:
    return f"{names.TGK}-{shape_key}"


def checkpoint_configurations(spec: EnvSpec) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pool in spec.tpu_pools:
        m = pool.multi_tier_checkpointing
        if m is None or pool.shape.key in out:
            continue
        shape = pool.shape
        out[shape.key] = {
            "apiVersion": names.CHECKPOINTING_API,
            "kind": "CheckpointConfiguration",
            "metadata": {"name": config_name(shape.key), "labels": {names.K8S_MANAGED_BY_LABEL: names.TGK, names.TGK_POOL_LABEL: pool.name}},
            "spec": {
                "cloudStorageBucketName": spec.mtc_bucket(m),
                "nodeSelector": {names.GKE_TPU_ACCELERATOR_LABEL: shape.accelerator_label, names.GKE_TPU_TOPOLOGY_LABEL: shape.topology},
                "tolerations": [dict(names.TPU_TOLERATION)],
                "inMemoryVolumeSize": f"{m.ramdisk_gib}Gi",
            },
        }
    return list(out.values())
