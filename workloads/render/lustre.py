"""Each team namespace's claim on the spec's Managed Lustre instance (``lustre:``). Pure.

A statically provisioned PersistentVolume of GKE's Managed Lustre CSI driver per team (a
PersistentVolume binds one claim, and a claim lives in one namespace), each naming the same
instance (``volumeHandle`` <project>/<zone>/<instance>, ``ip`` and ``filesystem`` as the
driver's "access an existing instance" guide gives them), and the claim runs of the team mount
(``--checkpoint-storage lustre``). ``Retain``: deleting the objects never deletes checkpoints.
Rendered only once ``lustre.ip`` is known (after the deploy). Lustre has no per-team access
control here: each team writes under a directory of its own (the run's base_output_directory),
which keeps runs apart, not teams out of each other's files.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec
from toolkit import names
from workloads.planning.policy import LUSTRE_CLAIM

LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"


def volume_name(namespace: str) -> str:
    return f"{names.TGK}-lustre-{namespace}"


def lustre_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    lu = spec.lustre
    if lu is None or lu.ip is None:
        return []
    size = f"{lu.capacity_gib}Gi"
    labels = {names.K8S_MANAGED_BY_LABEL: names.TGK}
    out: list[dict[str, Any]] = []
    for team in spec.teams:
        pv = volume_name(team.ns)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv, "labels": labels},
                "spec": {
                    "storageClassName": "",
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "volumeMode": "Filesystem",
                    "claimRef": {"namespace": team.ns, "name": LUSTRE_CLAIM},
                    "csi": {
                        "driver": LUSTRE_CSI_DRIVER,
                        "volumeHandle": f"{spec.project}/{spec.lustre_zone}/{lu.name}",
                        "volumeAttributes": {"ip": lu.ip, "filesystem": lu.filesystem},
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": LUSTRE_CLAIM, "namespace": team.ns, "labels": labels},
                "spec": {"storageClassName": "", "accessModes": ["ReadWriteMany"], "volumeName": pv, "resources": {"requests": {"storage": size}}},
            }
        )
    return out
