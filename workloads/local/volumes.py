"""The team's Lustre on the local cluster: a directory per instance, mounted into pods as GKE's CSI driver would.

On GKE a pod that mounts the team's claim (``workloads.render.lustre``: a PersistentVolume of
the Managed Lustre CSI driver, ``volumeHandle`` <project>/<zone>/<instance>) sees the
instance's file system at its ``mountPath``. Here the claim and its volume are real API
objects — the PersistentVolume controller binds them, the scheduler places a pod only
once its claim is Bound — and the file system is a directory of the state dir,
``<state>/lustre/<volumeHandle>/``, one per instance, shared by every claim that names it.
The kwok nodes mount nothing, so the rehearsal daemon plays the kubelet's mount where a
pod's program touches files:

- a rehearsal worker of a run with ``--checkpoint-storage lustre`` saves and restores its
  checkpoints under the in-pod path MaxText would use (``/checkpoints/<namespace>/<run>/
  checkpoints/``), resolved through its own pod's mounts (``pod_mounts``);
- the toolkit's Lustre helper pod (``workloads.render.volume_helper``) has its request run by
  ``toolkit.dirops`` — the very program the pod carries, checked to be this checkout's —
  against the same directory (``play_helper``), its answer written to the pod's log, and the
  pod ended as a kubelet ends it when the container exits.

A claim that is not Bound, or a volume of another driver, mounts nothing: the helper's
answer says so, as a pod stuck on its mount would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit import dirops
from workloads.render.lustre import LUSTRE_CSI_DRIVER


def lustre_dir(state_dir: Path, volume_handle: str) -> Path:
    """The directory that plays one Managed Lustre instance (its ``volumeHandle``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", volume_handle)
    return state_dir / "lustre" / safe


def pod_mounts(kube: Any, state_dir: Path, pod: Mapping[str, Any]) -> dict[str, str]:
    """In-pod mount path -> local directory, for each of the pod's claims bound to a Managed Lustre volume."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    ns = meta.get("namespace")
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or [] if (v.get("persistentVolumeClaim") or {}).get("claimName")}
    if not claims:
        return {}
    out: dict[str, str] = {}
    pvc_info, pv_info = kube.resource("v1", "PersistentVolumeClaim"), kube.resource("v1", "PersistentVolume")
    for c in spec.get("containers") or []:
        for m in c.get("volumeMounts") or []:
            claim = claims.get(m.get("name"))
            if claim is None:
                continue
            pvc = kube.get(pvc_info, claim, ns) or {}
            if (pvc.get("status") or {}).get("phase") != "Bound":
                continue
            pv = kube.get(pv_info, (pvc.get("spec") or {}).get("volumeName") or "") or {}
            csi = (pv.get("spec") or {}).get("csi") or {}
            if csi.get("driver") != LUSTRE_CSI_DRIVER or not csi.get("volumeHandle"):
                continue
            local = lustre_dir(state_dir, str(csi["volumeHandle"]))
            local.mkdir(parents=True, exist_ok=True)
            out[str(m["mountPath"])] = str(local)
    return out


def local_path(mounts: Mapping[str, str], path: str) -> Path | None:
    """Where an in-pod path is on this machine, through the pod's mounts; None when no mount holds it."""
    for mount, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        root = mount.rstrip("/")
        if path == root or path.startswith(root + "/"):
            return Path(local + path[len(root) :])
    return None


def play_helper(kube: Any, state_dir: Path, pod: Mapping[str, Any], log_path: Path) -> str:
    """Run the helper pod's request against the directories its claims mount; write its log. The line it printed."""
    from workloads.render.volume_helper import request_of

    request = request_of(dict(pod))
    if request is None:
        line = dirops.result_line([{"error": "not the toolkit's dirops program: the local cluster runs only that"}])
    else:
        mounts = pod_mounts(kube, state_dir, pod)
        base = str(request.get("base") or "")
        if local_path(mounts, base) is None:
            n = len(request.get("ops") or [])
            line = dirops.result_line([{"error": f"{base} is not on a mounted Lustre claim"}] * max(1, n))
        else:
            line = dirops.result_line(dirops.handle(request, mounts))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as f:
        f.write(f"{cri_time(time.time())} stdout F {line}")  # one CRI record, as a kubelet's log file holds it
    return line


def cri_time(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
