"""The security context of every pod a run renders (JobSet and Job workers, the RayJob's pods). Pure.

One place, so no runtime can fall behind the others. What every pod gets, and why it is safe:

- ``seccompProfile: RuntimeDefault`` (pod level): containerd's default syscall filter.
  GKE Autopilot applies it to every workload, TPU workloads included ("About seccomp in
  GKE", kubernetes-engine/docs/concepts/seccomp-in-gke), so libtpu and JAX run under it.
- ``allowPrivilegeEscalation: false`` and ``capabilities: {drop: [ALL]}`` (every
  container): nothing in a run gains privileges after start. No capability is added
  back: TPU chips are devices the kubelet's device plugin hands to the container (the
  cgroup allows them; the device files belong to the container's root), privileged mode
  was needed only before GKE 1.28 ("Required for GKE versions earlier than 1.28 to
  access TPUs", GKE's TPU manifests), and the ports are all above 1024 (no
  NET_BIND_SERVICE). containerd's default set never held IPC_LOCK either, so pinning
  memory for TPU DMA works as before.
- ``automountServiceAccountToken: false``: no run calls the Kubernetes API. Workload
  Identity does not need the token in the pod: the GKE metadata server answers the
  pod's credential requests itself (Google's own terraform-google-kubernetes-engine
  workload-identity module creates its KSAs with automount off). JAX's Kubernetes
  cluster detection (``jax._src.clusters.K8sCluster``) would need it, but it comes after
  the GKE TPU detection and needs the ``kubernetes`` package, which the MaxText image
  does not install; KubeRay's head needs it only for in-tree autoscaling, which the
  toolkit never turns on (the operator, not the head, talks to the API server).
- ``runAsNonRoot`` with ``runAsUser``, ``runAsGroup`` and ``fsGroup``: every team's UID
  (``TeamSpec.pod_user``: 10001 unless the team names another); root only when a team opts
  into its image's user (``run_as_root``). ``HOME`` points at ``/tmp`` (writable by anyone)
  unless the recipe sets it: a UID the image does not know has ``/`` as its home, where JAX
  and MaxText could not write their caches. What each mount needs of the UID:

  - ``/dev/shm`` and every other ``emptyDir``: world-writable, and given ``fsGroup``;
  - GCS FUSE (the dataset, ``--checkpoint-storage gcsfuse``): mounted with ``uid``/``gid``
    (``workloads.render.volumes``; the driver's documented way for a non-root pod);
  - the multi-tier checkpointing RAM disk and Lustre: ``fsGroup``, and ``fsGroupChangePolicy:
    OnRootMismatch`` so a large volume is not walked at every start. Lustre's CSI driver
    leaves ownership to the file system (its PersistentVolume is ReadWriteMany with no
    fsType), so the team's directory on the instance must be writable by the team's UID or
    GID: docs/data-and-checkpoints.md says how to set it once;
  - the TPU chips: the device plugin hands ``/dev/vfio/*`` (``/dev/accel*`` on v4) to the
    container with the node's ownership and mode. Cloud TPU VMs let an unprivileged user open
    them (their guides run JAX as the login user); that a non-root UID opens them inside a
    GKE TPU pod could not be checked without a TPU here. A team for which it does not hold
    sets ``run_as_root: true`` (docs/security.md).

Every pod then meets Pod Security ``restricted`` (tests/integration/test_secure_defaults.py
proves it against the real API server), and the team's namespace enforces it
(``workloads.render.kueue.pod_security_labels``).
"""

from __future__ import annotations

from typing import Any

RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}
NON_ROOT_HOME = "/tmp"


def container_security_context() -> dict[str, Any]:
    """What every container of a run carries (restricted's container-level rules)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_security_context(run_as_user: int | None, sysctls: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The pod-level securityContext: RuntimeDefault seccomp, the team's UID (also its GID and the volumes' group) unless
    it runs as its image's user (None), and ``sysctls``."""
    ctx: dict[str, Any] = {}
    if run_as_user is not None:
        ctx.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user, fsGroup=run_as_user, fsGroupChangePolicy="OnRootMismatch")
    ctx["seccompProfile"] = dict(RUNTIME_DEFAULT_SECCOMP)
    if sysctls:
        ctx["sysctls"] = sysctls
    return ctx


def home_env(run_as_user: int | None, env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``env`` with ``HOME=/tmp`` added for a UID the image may not know (kept as given when the recipe sets HOME)."""
    if run_as_user is None or any(e["name"] == "HOME" for e in env):
        return env
    return [*env, {"name": "HOME", "value": NON_ROOT_HOME}]
