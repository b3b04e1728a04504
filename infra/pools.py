"""Between campaigns: scale autoscaling TPU node pools to zero, or delete TPU node pools.

Pure: the spec (and, for deletion, the synthesized stack) in, the exact commands out;
``python -m infra pools`` prints them with ``--dry-run`` and runs them otherwise.

- ``scale-to-zero`` resizes each node pool of the pools that scale (``autoscaling: true``
  or a flex-start option) to 0 with ``gcloud container clusters resize``. The stack
  gives such pools no ``node_count`` (only ``initial_node_count: 0`` and the autoscaler
  bounds), so Terraform does not fight the resize, and the autoscaler brings a slice
  back when a run is admitted for it. A fixed-size pool is refused: Terraform owns its
  node count and the next ``deploy`` would restore it.
- ``delete-tpu`` destroys the TPU node pools through Terraform (``plan -destroy
  -target=...``, then apply that plan), so the state stays true and the next
  ``python -m infra deploy`` recreates them. Deleting them by hand with gcloud would leave
  the state pointing at pools that no longer exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infra.spec import EnvSpec, TpuPoolSpec
from toolkit.errors import FieldError

NODE_POOL_TYPE = "google_container_node_pool"


@dataclass(frozen=True)
class NodePool:
    pool: str  # the spec's tpu_pools entry
    name: str  # the GKE node pool
    scales: bool


def node_pools(spec: EnvSpec) -> list[NodePool]:
    out = []
    for pool in spec.tpu_pools:
        for option in pool.capacity_options():
            scales = pool.scales_from_zero(option)
            out.extend(NodePool(pool.name, n, scales) for n in pool.option_node_pool_names(option))
    return out


def select(spec: EnvSpec, names: Iterable[str], *, declared: bool = False) -> list[TpuPoolSpec]:
    """The pools named with --pool (every pool when none is named; ``declared``: every pool with node pools the stack declares).

    With ``declared``, a ComputeClass pool named on the command line is refused: GKE creates and
    removes its node pools, so there is nothing of it to resize, delete or report.
    """
    names = list(names)
    known = {p.name: p for p in spec.tpu_pools}
    for n in names:
        if n not in known:
            raise FieldError("--pool", f"no TPU pool {n!r} in the spec", f"use one of {', '.join(known)}")
        if declared and known[n].compute_class is not None:
            raise FieldError(
                "--pool",
                f"{n} is a compute class pool: GKE's node auto-provisioning creates its node pools and removes them when idle",
                "leave it out (its slices cost nothing idle); `kubectl get computeclass` shows its state",
            )
    return [p for p in spec.tpu_pools if (not names or p.name in names) and not (declared and p.compute_class is not None)]


def scale_to_zero(spec: EnvSpec, pools: list[TpuPoolSpec], *, gcloud: str = "gcloud", explicit: bool = False) -> list[tuple[str, ...]]:
    """One resize per node pool that scales. ``explicit`` (pools named on the command line): a fixed-size one is an error."""
    wanted = {p.name for p in pools}
    nps = [n for n in node_pools(spec) if n.pool in wanted]
    fixed = sorted({n.pool for n in nps if not n.scales})
    if explicit and fixed:
        i = next(i for i, p in enumerate(spec.tpu_pools) if p.name == fixed[0])
        raise FieldError(
            "--pool",
            f"tpu_pools[{i}] ({fixed[0]}) has a fixed size: Terraform owns its node count and the next deploy would restore it",
            f"set tpu_pools[{i}].autoscaling: true and deploy, or remove its node pools with `python -m infra pools delete-tpu --pool {fixed[0]}`",
        )
    cmds = [
        (
            gcloud,
            "container",
            "clusters",
            "resize",
            spec.cluster.name,
            f"--node-pool={n.name}",
            "--num-nodes=0",
            f"--location={spec.region}",
            f"--project={spec.project}",
            "--quiet",
        )
        for n in nps
        if n.scales
    ]
    if not cmds:
        raise FieldError(
            "--pool",
            "none of the selected TPU pools scales (autoscaling: false, no flex-start option), so none can be scaled to zero",
            "set autoscaling: true on the pools and deploy, or delete them between campaigns with `python -m infra pools delete-tpu`",
        )
    return cmds


def targets(doc: dict[str, Any], spec: EnvSpec, pools: list[TpuPoolSpec]) -> list[str]:
    """Terraform addresses of the selected pools' node pools in the synthesized stack, in spec order."""
    wanted = [n.name for n in node_pools(spec) if n.pool in {p.name for p in pools}]
    by_name = {body.get("name"): f"{NODE_POOL_TYPE}.{rid}" for rid, body in ((doc.get("resource") or {}).get(NODE_POOL_TYPE) or {}).items()}
    missing = [n for n in wanted if n not in by_name]
    if missing:  # the stack and the spec disagree: a bug, not a user error
        raise RuntimeError(f"node pools {missing} are not in the synthesized stack")
    return [by_name[n] for n in wanted]


# ------------------------------------------------------------------ status

# GKE's NodePool.status values (container API v1) and what to do about each that is not RUNNING.
# A CREATE_NODE_POOL operation cannot be cancelled (it can take an hour for a TPU slice), and a
# node pool whose creation failed stays in ERROR and makes the next create answer 409 Already
# Exists until it is deleted.
HEALTHY = "RUNNING"


@dataclass(frozen=True)
class PoolStatus:
    pool: str  # the spec's tpu_pools entry
    node_pool: str
    status: str  # GKE's, or MISSING when the cluster has no such node pool
    message: str  # GKE's statusMessage
    recovery: str  # what to do ("" when RUNNING)

    @property
    def healthy(self) -> bool:
        return self.status == HEALTHY

    def line(self) -> str:
        text = f"{self.node_pool:<24} {self.status:<18} {self.message}".rstrip()
        return f"{text} — {self.recovery}" if self.recovery else text


def node_pools_request(spec: EnvSpec) -> Any:
    from infra.gcp_api import ApiRequest

    return ApiRequest(
        "container",
        f"/v1/projects/{spec.project}/locations/{spec.region}/clusters/{spec.cluster.name}/nodePools",
        f"node pools of {spec.cluster.name}: status, statusMessage",
    )


def _recovery(pool: str, status: str) -> str:
    recreate = f"`python -m infra pools delete-tpu --pool {pool}`, then `python -m infra deploy`"
    return {
        HEALTHY: "",
        "PROVISIONING": f"GKE is still creating it (a slice comes whole; the create cannot be cancelled): wait; if it ends in ERROR, {recreate}",
        "ERROR": f"its creation failed and the failed pool blocks a new one (409 Already Exists): {recreate} (a pool listing several reservations tries the next)",
        "RUNNING_WITH_ERROR": f"some of its nodes failed: GKE repairs them; if it stays, {recreate}",
        "RECONCILING": "an operation (upgrade, resize) is running on it: wait",
        "STOPPING": "GKE is deleting it: wait, then `python -m infra deploy` to recreate it",
        "MISSING": "not created: `python -m infra deploy`",
    }.get(status, f"unexpected status: check `gcloud container node-pools describe`, or {recreate}")


def status(spec: EnvSpec, answer: dict[str, Any], pools: list[TpuPoolSpec]) -> list[PoolStatus]:
    """Each TPU node pool of ``pools`` with GKE's status (from nodePools.list's ``answer``) and the way to recover."""
    by_name = {str(np.get("name")): np for np in answer.get("nodePools") or [] if isinstance(np, dict)}
    wanted = {p.name for p in pools}
    out = []
    for n in node_pools(spec):
        if n.pool not in wanted:
            continue
        np = by_name.get(n.name)
        st = "MISSING" if np is None else str(np.get("status") or "STATUS_UNSPECIFIED")
        msg = "" if np is None else str(np.get("statusMessage") or "")
        out.append(PoolStatus(n.pool, n.name, st, msg, _recovery(n.pool, st)))
    return out
