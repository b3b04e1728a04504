"""A node upgrade of a TPU slice's node pool, and announced host maintenance, done to kwok nodes as GKE does them.

``upgrade`` (``python -m workloads local upgrade --pool P [--version V]``): GKE upgrades a node
pool by draining its nodes and recreating their VMs from the pool's new template (surge
upgrade: https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies).
A multi-host TPU slice is one unit: every VM of the pool goes together
(https://cloud.google.com/kubernetes-engine/docs/concepts/tpus). Here:

1. Checks first, changing nothing on bad input: the pool exists and is not at ``V`` already.
2. Every Node of the pool is cordoned, and every pod on them is evicted through the Eviction
   API, as ``kubectl drain`` and GKE's drain do: a PodDisruptionBudget can refuse (429) and the
   eviction is tried again each round until the drain's wait is over; each evicted pod gets
   ``DisruptionTarget`` (``EvictionByEvictionAPI``) and its containers SIGTERM within its
   ``terminationGracePeriodSeconds`` (kwok's terminate stage, ``workloads.local.addons``).
3. The rehearsal daemon replaces the Nodes (``workloads.local.disrupt.advance``): NotReady, deleted,
   created again reporting kubelet ``V`` in ``status.nodeInfo.kubeletVersion`` (what an upgraded
   kubelet reports). The new VMs keep the old names here; GKE's surge VMs get new ones, which
   ``workloads maintain --watch`` follows too (the pool's Nodes it has not seen).

``announce`` (``python -m workloads local maintenance --node N --in 10m``): Compute Engine
announces host maintenance for a VM and GKE labels the node with the window's start
(``cloud.google.com/scheduled-maintenance-time``, epoch seconds; ``workloads.cluster.maintenance``).
A multi-host TPU slice is maintained as a unit (Cloud TPU: maintenance of a slice starts it for
every VM of it), so every Node of ``N``'s pool gets the label. At the window's start the rehearsal
daemon (``advance_maintenance``) does what GKE does: ``cloud.google.com/active-node-maintenance=ONGOING``
and the ``impending-node-termination`` taint, the nodes drained (as ``local preempt --maintenance``),
the VMs replaced; the new Nodes carry neither label (the maintenance is done). Only these labels
and taints reach the toolkit; the notification's type stays with Compute Engine, as on GKE.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import FieldError, NotFound, Rejected
from toolkit.names import GKE_NODEPOOL_LABEL
from toolkit.owned import write_atomic
from workloads.cluster import maintenance as mt
from workloads.cluster.client import Cluster
from workloads.local import disrupt

DEFAULT_REPLACE_AFTER_S = 5.0
DRAIN_WAIT_S = 30.0  # GKE waits up to an hour for a drain; the rehearsal, this long


def maintenance_dir(state_dir: Path) -> Path:
    return state_dir / "rehearsal" / "maintenance"


def _pool_nodes(kube: Cluster, pool: str) -> list[dict[str, Any]]:
    nodes = kube.list(kube.resource("v1", "Node"), None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}")
    return sorted(nodes, key=lambda n: n["metadata"]["name"])


def _known_pools(kube: Cluster) -> list[str]:
    return sorted({(n["metadata"].get("labels") or {}).get(GKE_NODEPOOL_LABEL, "") for n in kube.list(kube.resource("v1", "Node"))} - {""})


def _evict(kube: Cluster, nodes: list[dict[str, Any]]) -> list[str]:
    """One drain round: every live pod on the nodes evicted through the Eviction API (a budget's 429 is tried again later)."""
    out = []
    for n in nodes:
        for p in disrupt.pods_on(kube, n["metadata"]["name"]):
            meta = p["metadata"]
            if (p.get("status") or {}).get("phase") not in ("Pending", "Running") or meta.get("deletionTimestamp"):
                continue
            try:
                kube.evict(meta["namespace"], meta["name"])
                out.append(f"{meta['namespace']}/{meta['name']}")
            except (NotFound, Rejected):
                continue  # gone meanwhile, or its budget says not yet: the daemon's next round
    return out


def _without_maintenance(snap: dict[str, Any]) -> dict[str, Any]:
    labels = {k: v for k, v in snap["metadata"]["labels"].items() if k not in (mt.SCHEDULED_MAINTENANCE_LABEL, mt.ACTIVE_MAINTENANCE_LABEL)}
    return {**snap, "metadata": {**snap["metadata"], "labels": labels}}


@dataclass(frozen=True)
class UpgradeResult:
    pool: str
    nodes: tuple[str, ...]
    pods: tuple[str, ...]
    from_version: str
    to_version: str
    back_at: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "back_at": mt.iso(self.back_at)}


def control_plane_version(kube: Cluster) -> str:
    """The API server's version (GKE upgrades a pool's nodes to the control plane's)."""
    return str((kube.request("GET", "/version") or {}).get("gitVersion", ""))


def upgrade(kube: Cluster, state_dir: Path, pool: str, version: str | None = None, *, replace_after: float = DEFAULT_REPLACE_AFTER_S) -> UpgradeResult:
    """Upgrade one node pool as GKE's surge upgrade does (see the module docstring)."""
    nodes = _pool_nodes(kube, pool)
    if not nodes:
        known = _known_pools(kube)
        raise FieldError("--pool", f"no node pool {pool!r} on the local cluster", f"pass one of: {', '.join(known) or '(none)'}")
    target = version or control_plane_version(kube)
    current = sorted({str(((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")) for n in nodes})
    if current == [target]:
        raise FieldError("--version", f"node pool {pool} already runs kubelet {target}", "pass another version with --version")
    now = time.time()
    old = disrupt.replacements_dir(state_dir) / f"{pool}.json"
    if old.is_file():
        raise FieldError("--pool", f"node pool {pool} is being replaced already", "wait until `python -m workloads local status` shows it Ready again")
    record = disrupt.Replacement(
        pool=pool,
        nodes=[disrupt._snapshot(n) for n in nodes],
        preempted_at=now,
        down_at=now + disrupt.NOTREADY_AFTER_S,
        up_at=now + max(replace_after, disrupt.NOTREADY_AFTER_S),
        maintenance=True,
        kubelet_version=target,
        evict=True,
        down_wait=DRAIN_WAIT_S,
    )
    record.save(state_dir)  # first: whatever happens next, the daemon brings the nodes back
    node_info = kube.resource("v1", "Node")
    for n in nodes:
        disrupt.patch(kube, node_info.path(None, n["metadata"]["name"]), {"spec": {"unschedulable": True}})
    pods = _evict(kube, nodes)
    return UpgradeResult(pool, tuple(n["metadata"]["name"] for n in nodes), tuple(pods), ", ".join(current), target, record.up_at)


# ------------------------------------------------------------------ announced host maintenance


@dataclass
class Announcement:
    """A host maintenance Compute Engine announced for a pool's VMs, and whether the daemon has begun it."""

    pool: str
    nodes: list[str]
    window_start: float
    replace_after: float = DEFAULT_REPLACE_AFTER_S
    begun: bool = False

    def save(self, state_dir: Path) -> Path:
        d = maintenance_dir(state_dir)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{self.pool}.json"
        write_atomic(path, json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> Announcement:
        return cls(**json.loads(path.read_text()))


def announce(kube: Cluster, state_dir: Path, node: str, in_s: float, *, replace_after: float = DEFAULT_REPLACE_AFTER_S) -> Announcement:
    """Label ``node``'s whole pool with the window's start, ``in_s`` from now, and leave the window to the daemon."""
    got = kube.get(kube.resource("v1", "Node"), node)
    if got is None:
        raise FieldError("--node", f"no node {node!r} on the local cluster", "pick one from `python -m workloads status RUN --workers`")
    pool = (got["metadata"].get("labels") or {}).get(GKE_NODEPOOL_LABEL)
    if not pool:
        raise FieldError("--node", f"node {node} belongs to no GKE node pool", "pick a TPU node of the run")
    if (disrupt.replacements_dir(state_dir) / f"{pool}.json").is_file():
        raise FieldError("--node", f"node pool {pool} is being replaced right now", "announce maintenance once its nodes are Ready again")
    start = int(time.time() + in_s)
    nodes = _pool_nodes(kube, pool)
    node_info = kube.resource("v1", "Node")
    record = Announcement(pool, [n["metadata"]["name"] for n in nodes], float(start), replace_after)
    record.save(state_dir)
    for n in nodes:
        disrupt.patch(kube, node_info.path(None, n["metadata"]["name"]), {"metadata": {"labels": {mt.SCHEDULED_MAINTENANCE_LABEL: str(start)}}})
    return record


def pending_maintenance(state_dir: Path) -> list[Path]:
    d = maintenance_dir(state_dir)
    return sorted(d.glob("*.json")) if d.is_dir() else []


def advance_maintenance(kube: Cluster, state_dir: Path, record: Announcement, now: float) -> bool:
    """At the window's start, begin the maintenance: True once handed to the node replacement (the record is done)."""
    if now < record.window_start or (disrupt.replacements_dir(state_dir) / f"{record.pool}.json").is_file():
        return False  # not yet, or the pool's VMs are being replaced for another reason: after that
    node_info = kube.resource("v1", "Node")
    nodes = [n for n in _pool_nodes(kube, record.pool) if n["metadata"]["name"] in record.nodes]
    repl = disrupt.Replacement(
        pool=record.pool,
        nodes=[_without_maintenance(disrupt._snapshot(n)) for n in nodes],
        preempted_at=now,
        down_at=now + disrupt.NOTREADY_AFTER_S,
        up_at=now + max(record.replace_after, disrupt.NOTREADY_AFTER_S),
        maintenance=True,
        evict=True,
    )
    repl.save(state_dir)
    for n in nodes:
        taints = [t for t in (n.get("spec") or {}).get("taints") or [] if t.get("key") != mt.IMPENDING_TERMINATION_TAINT_KEY]
        taints.append(dict(disrupt.IMPENDING_TERMINATION_TAINT))
        disrupt.patch(
            kube,
            node_info.path(None, n["metadata"]["name"]),
            {
                "metadata": {"labels": {mt.SCHEDULED_MAINTENANCE_LABEL: None, mt.ACTIVE_MAINTENANCE_LABEL: mt.ACTIVE_MAINTENANCE_VALUE}},
                "spec": {"unschedulable": True, "taints": taints},
            },
        )
    _evict(kube, nodes)
    return True


def begin_due_maintenance(kube: Cluster, state_dir: Path, now: float, say) -> None:  # noqa: ANN001  (say: the daemon's log line)
    """The rehearsal daemon's step: every announced window that has come, begun (``advance_maintenance``)."""
    for path in pending_maintenance(state_dir):
        try:
            record = Announcement.load(path)
        except (OSError, ValueError, TypeError) as e:
            say(f"{path.name}: unreadable maintenance record ({e}); dropped")
            path.unlink(missing_ok=True)
            continue
        if advance_maintenance(kube, state_dir, record, now):
            say(f"node pool {record.pool}: host maintenance begun (ONGOING, drained, its VMs replaced)")
            path.unlink(missing_ok=True)
