"""What GKE does to a TPU slice when it is preempted or taken for maintenance, done to kwok nodes.

``preempt`` (``python -m workloads local preempt RUN [--slice N] [--maintenance]``):

1. Checks first, changing nothing on bad input: the run exists (``RUN``), the slice
   exists (``--slice``) and has pods on nodes.
2. The slice's node pool — every Node of it: GKE recreates a multi-host slice as a
   unit — is cordoned; a spot preemption also gets GKE's impending-node-termination
   taint.
3. The pods on those nodes are disrupted the way GKE disrupts them:
   - preemption: the kubelet's graceful node shutdown sets ``DisruptionTarget``
     (reason ``TerminationByKubelet``) on each pod;
   - ``--maintenance``: the node pool is drained through the Eviction API, as GKE's
     maintenance and ``kubectl drain`` do (``DisruptionTarget``, reason
     ``EvictionByEvictionAPI``, and the pod deleted).
   Either way kwok's ``tgk-pod-terminate`` stage then plays the kubelet: containers
   stopped by SIGTERM (exit 143), phase Failed, the condition kept — what the Job's
   podFailurePolicy matches — and a deleted pod removed once its Job let go of it.
   An eviction from outside (``kubectl drain``) goes through exactly that path.
4. A ``Replacement`` record is left for the rehearsal daemon (``rehearsald``), which
   replaces the nodes in the background (so ``preempt`` returns at once, like a
   preemption notice, and the nodes come back even if nobody waits for them):
   - down, once no pod runs on them (or ``DOWN_WAIT_S`` after the preemption): they go
     NotReady (``NodeStatusUnknown``, as the node lifecycle controller reports a node
     whose kubelet stopped; kwok's node stages leave a node marked down alone); a pod
     still there is finished as the pod GC finishes orphans (Failed,
     ``DeletionByPodGC``, deleted);
   - gone, ``NOTREADY_HOLD_S`` later: the Node objects and their leases are deleted (the
     VMs are gone);
   - up, ``replace_after`` seconds after the preemption (and at least ``RECREATE_GAP_S``
     after they went): the Nodes are created again with the same names, labels, taints
     and capacity, cordoned as a registering node is until it is Ready; kwok's node stage
     makes them Ready, and once kwok holds their new leases they are uncordoned. (A pod
     bound to a kwok node before kwok holds its lease is never played: kwok lists the
     node's pods once, when it takes the lease, and skips them if its lease cache is a
     moment behind; an old lease kwok renews just before it is deleted costs a whole
     renewal period, 10 s.)
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit.errors import Conflict, FieldError, NotFound, Rejected
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL, K8S_COMPLETION_INDEX_LABEL, KWOK_NODE_ANNOTATION
from toolkit.owned import write_atomic
from workloads.cluster.client import Cluster
from workloads.local.addons import NODE_DOWN_ANNOTATION

DEFAULT_REPLACE_AFTER_S = 5.0  # preemption -> the slice's nodes Ready again (GKE: minutes)
NOTREADY_AFTER_S = 1.0  # the earliest the nodes go NotReady after the preemption notice
DOWN_WAIT_S = 30.0  # the longest the nodes wait for their pods to stop before going NotReady anyway
NOTREADY_HOLD_S = 1.0  # NotReady -> the Node objects deleted
RECREATE_GAP_S = 1.0  # deleted -> created again, at the least: kwok's caches let go of the old ones
LEASE_SETTLE_S = 0.5  # a new node's lease is this old before the node takes pods
IMPENDING_TERMINATION_TAINT = {"key": "cloud.google.com/impending-node-termination", "value": "true", "effect": "NoSchedule"}
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
_LIVE = ("Pending", "Running")


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def replacements_dir(state_dir: Path) -> Path:
    return state_dir / "rehearsal" / "replacements"


# ------------------------------------------------------------------ API helpers


def patch(kube: Cluster, path: str, body: dict[str, Any], *, strategic: bool = False) -> dict[str, Any]:
    """PATCH ``path`` (a merge patch, or a strategic merge patch for built-in lists keyed by type); NotFound if it is gone."""
    kind = "application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
    return kube.request("PATCH", path, body=body, content_type=kind)


def force_delete(kube: Cluster, path: str) -> None:
    """DELETE with no grace period: gone as soon as no finalizer holds it (already gone is fine)."""
    try:
        kube.request("DELETE", path, query=[("gracePeriodSeconds", "0")])
    except NotFound:
        pass


def _condition(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
    now = _now_iso()
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}


def pods_on(kube: Cluster, node: str) -> list[dict[str, Any]]:
    return kube.list(kube.resource("v1", "Pod"), None, field_selector=f"spec.nodeName={node}")


# ------------------------------------------------------------------ preempt


@dataclass
class Replacement:
    """A slice's node pool being replaced: the Nodes as they were, and when each step is due."""

    pool: str
    nodes: list[dict[str, Any]]  # what to create again
    preempted_at: float
    down_at: float
    up_at: float
    maintenance: bool = False
    down: float | None = None  # when the nodes went NotReady
    gone: float | None = None  # when the Node objects (and leases) were deleted
    created: bool = False  # the Nodes exist again (cordoned until kwok holds their leases)
    kubelet_version: str | None = None  # an upgrade: the kubelet version the new Nodes report
    evict: bool = False  # a drain: pods still on the nodes are evicted again (a PodDisruptionBudget's 429) until down_wait
    down_wait: float = 0.0  # seconds the nodes wait for their pods before going NotReady anyway (0: DOWN_WAIT_S)

    def save(self, state_dir: Path) -> Path:
        d = replacements_dir(state_dir)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{self.pool}.json"
        write_atomic(path, json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> Replacement:
        return cls(**json.loads(path.read_text()))


def _snapshot(node: dict[str, Any]) -> dict[str, Any]:
    """A Node as `local up` created it: name, labels, kwok's annotations, taints, capacity."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    taints = [
        t for t in spec.get("taints") or [] if t.get("key") != IMPENDING_TERMINATION_TAINT["key"] and not t.get("key", "").startswith("node.kubernetes.io/")
    ]
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": meta["name"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": dict(status.get("capacity") or {}), "allocatable": dict(status.get("allocatable") or {})},
    }
    kubelet = (status.get("nodeInfo") or {}).get("kubeletVersion")
    if kubelet:  # a VM made again from the same template runs the same kubelet (an upgrade sets its own)
        out["status"]["nodeInfo"] = {"kubeletVersion": kubelet}
    return out


@dataclass(frozen=True)
class PreemptResult:
    namespace: str
    run: str
    slice: int
    how: str  # preemption | maintenance
    pool: str
    nodes: tuple[str, ...]
    pods: tuple[str, ...]
    back_at: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["back_at"] = datetime.fromtimestamp(self.back_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return d


def _slices(jobset: dict[str, Any]) -> int:
    # A Pathways run's head is not a slice (workloads.render.pathways).
    return sum(int(rj.get("replicas", 1)) for rj in (jobset.get("spec") or {}).get("replicatedJobs") or [] if rj.get("name") != "pathways-head")


def preempt(
    kube: Cluster,
    state_dir: Path,
    namespace: str,
    run: str,
    slice_index: int,
    *,
    maintenance: bool = False,
    replace_after: float = DEFAULT_REPLACE_AFTER_S,
) -> PreemptResult:
    """Preempt (or take for maintenance) one slice of a run; see the module docstring."""
    js = kube.jobset(namespace, run)
    if js is None:
        raise FieldError(
            "RUN",
            f"no run {run!r} in namespace {namespace!r} on the local cluster",
            "check the name with `python -m workloads status RUN` (or pass --namespace/--team)",
        )
    slices = _slices(js)
    if not 0 <= slice_index < slices:
        raise FieldError(
            "--slice", f"run {run!r} has {slices} slice{'s' if slices != 1 else ''} (0..{slices - 1}), not {slice_index}", f"pass --slice 0..{slices - 1}"
        )
    selector = f"{JOBSET_NAME_LABEL}={run},{JOBSET_JOB_INDEX_LABEL}={slice_index}"
    if (found := kube.find_run(namespace, run)) is not None and found[0].runtime == "pathways":
        selector += ",jobset.sigs.k8s.io/replicatedjob-name=worker"  # a slice is its workers; the head is on the CPU pool
    placed = [
        p
        for p in kube.list(kube.resource("v1", "Pod"), namespace, label_selector=selector)
        if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") in _LIVE and not p["metadata"].get("deletionTimestamp")
    ]
    if not placed:
        raise FieldError(
            "--slice",
            f"slice {slice_index} of run {run!r} has no pod on a node right now (queued, restarting or finished)",
            f"preempt it while it runs: see `python -m workloads status {run}`",
        )
    node_info = kube.resource("v1", "Node")
    all_nodes = {n["metadata"]["name"]: n for n in kube.list(node_info)}
    pools = sorted({(all_nodes.get(p["spec"]["nodeName"]) or {}).get("metadata", {}).get("labels", {}).get(GKE_NODEPOOL_LABEL, "") for p in placed} - {""})
    if len(pools) != 1:
        raise FieldError(
            "--slice",
            f"slice {slice_index} of run {run!r} is not on one GKE node pool ({', '.join(pools) or 'none'})",
            "preempt runs placed by the toolkit's JobSet (one slice per node pool)",
        )
    pool = pools[0]
    nodes = sorted((n for n in all_nodes.values() if n["metadata"].get("labels", {}).get(GKE_NODEPOOL_LABEL) == pool), key=lambda n: n["metadata"]["name"])

    now = time.time()
    old = replacements_dir(state_dir) / f"{pool}.json"
    snapshots = Replacement.load(old).nodes if old.is_file() else [_snapshot(n) for n in nodes]
    record = Replacement(
        pool=pool,
        nodes=snapshots,
        preempted_at=now,
        down_at=now + NOTREADY_AFTER_S,
        up_at=now + max(replace_after, NOTREADY_AFTER_S),
        maintenance=maintenance,
    )
    # Written first: whatever happens next, the daemon brings the nodes back.
    record.save(state_dir)

    # Cordon (and, for a spot preemption, GKE's termination taint): nothing new lands there.
    for n in nodes:
        taints = list((n.get("spec") or {}).get("taints") or [])
        if not maintenance and not any(t.get("key") == IMPENDING_TERMINATION_TAINT["key"] for t in taints):
            taints.append(dict(IMPENDING_TERMINATION_TAINT))
        patch(kube, node_info.path(None, n["metadata"]["name"]), {"spec": {"unschedulable": True, "taints": taints}})

    disrupted: list[str] = []
    pod_info = kube.resource("v1", "Pod")
    for n in nodes:
        for p in pods_on(kube, n["metadata"]["name"]):
            meta = p["metadata"]
            if (p.get("status") or {}).get("phase") not in _LIVE or meta.get("deletionTimestamp"):
                continue
            if maintenance:
                eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
                try:
                    kube.request("POST", pod_info.path(meta["namespace"], meta["name"], "eviction"), eviction)
                except NotFound:
                    continue  # gone meanwhile
            else:
                cond = _condition("DisruptionTarget", "True", "TerminationByKubelet", SHUTDOWN_MESSAGE)
                try:
                    patch(kube, pod_info.path(meta["namespace"], meta["name"], "status"), {"status": {"conditions": [cond]}}, strategic=True)
                except NotFound:
                    continue  # gone meanwhile
            disrupted.append(f"{meta['namespace']}/{meta['name']}")
    return PreemptResult(
        namespace=namespace,
        run=run,
        slice=slice_index,
        how="maintenance" if maintenance else "preemption",
        pool=pool,
        nodes=tuple(n["metadata"]["name"] for n in nodes),
        pods=tuple(disrupted),
        back_at=record.up_at,
    )


# ------------------------------------------------------------------ replacement (the daemon's part)


def advance(kube: Cluster, record: Replacement, now: float) -> bool:
    """Do the replacement steps that are due; True once the nodes are back (the record is done)."""
    node_info = kube.resource("v1", "Node")
    names = [n["metadata"]["name"] for n in record.nodes]
    if record.down is None:
        if now < record.down_at:
            return False
        left = {name: pods_on(kube, name) for name in names}
        running = any((p.get("status") or {}).get("phase") in _LIVE for pods in left.values() for p in pods)
        if running and now < record.preempted_at + (record.down_wait or DOWN_WAIT_S):
            if record.evict:
                _evict_again(kube, left)
            return False  # kwok (the kubelet) is still stopping them
        _take_down(kube, node_info, names, left)
        record.down = now
        return False
    if record.gone is None:
        if now < record.down + NOTREADY_HOLD_S:
            return False
        lease_info = kube.resource("coordination.k8s.io/v1", "Lease")
        for name in names:
            kube.delete(node_info, name, propagation="Background")
            kube.delete(lease_info, name, "kube-node-lease", propagation="Background")
        record.gone = now
        return False
    if not record.created:
        if now < max(record.up_at, record.gone + RECREATE_GAP_S):
            return False
        for snap in record.nodes:
            node = {**snap, "spec": {**snap.get("spec", {}), "unschedulable": True}}
            if record.kubelet_version:
                node["status"] = {**node.get("status", {}), "nodeInfo": {"kubeletVersion": record.kubelet_version}}
            try:
                kube.create(node, field_manager="tgk-local")
            except Conflict:
                pass  # created by an earlier pass that did not finish: it stays
        record.created = True
        return False
    for name in names:
        if not _kwok_holds(kube, node_info, name, now):
            return False
    for name in names:
        patch(kube, node_info.path(None, name), {"spec": {"unschedulable": None}})
    return True


def _evict_again(kube: Cluster, left: dict[str, list[dict[str, Any]]]) -> None:
    """A drain's next round: each pod still live on the nodes evicted again (a budget may allow it now)."""
    for pods in left.values():
        for p in pods:
            meta = p["metadata"]
            if (p.get("status") or {}).get("phase") not in _LIVE or meta.get("deletionTimestamp"):
                continue
            try:
                kube.evict(meta["namespace"], meta["name"])
            except (NotFound, Rejected):
                pass  # gone, or its budget still says no (429): the next round tries again


def _kwok_holds(kube: Cluster, node_info, name: str, now: float) -> bool:
    """True once the new node is Ready and kwok has held its lease for LEASE_SETTLE_S."""
    node = kube.get(node_info, name)
    if node is None:
        return False
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])
    if not ready:
        return False
    lease = kube.get(kube.resource("coordination.k8s.io/v1", "Lease"), name, "kube-node-lease")
    if lease is None:
        return False
    owners = {r.get("uid") for r in (lease.get("metadata") or {}).get("ownerReferences") or []}
    spec = lease.get("spec") or {}
    taken = spec.get("renewTime") or spec.get("acquireTime")
    if node["metadata"]["uid"] not in owners or not spec.get("holderIdentity") or not taken:
        return False
    try:
        held_since = datetime.fromisoformat(taken.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return now - held_since >= LEASE_SETTLE_S


def _take_down(kube: Cluster, node_info, names: list[str], left: dict[str, list[dict[str, Any]]]) -> None:
    pod_info = kube.resource("v1", "Pod")
    for name in names:
        # The node's kubelet is gone: kwok's node stages stop (it still holds the lease, so it
        # sees the Node's deletion and takes the new one at once), and the node says so.
        try:
            patch(kube, node_info.path(None, name), {"metadata": {"annotations": {NODE_DOWN_ANNOTATION: "true"}}})
            cond = _condition("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
            cond["lastHeartbeatTime"] = cond["lastTransitionTime"]
            patch(kube, node_info.path(None, name, "status"), {"status": {"conditions": [cond]}}, strategic=True)
        except NotFound:
            pass  # already gone: nothing to mark down
        # What the pod GC does to a pod whose node is gone: Failed, DisruptionTarget, deleted.
        for p in left.get(name) or []:
            meta = p["metadata"]
            path = pod_info.path(meta["namespace"], meta["name"])
            if (p.get("status") or {}).get("phase") in _LIVE:
                cond = _condition("DisruptionTarget", "True", "DeletionByPodGC", "PodGC: node no longer exists")
                try:
                    patch(kube, path + "/status", {"status": {"phase": "Failed", "conditions": [cond]}}, strategic=True)
                except (NotFound, Rejected):
                    pass  # gone meanwhile, or ended meanwhile (a finished pod's phase cannot change)
            force_delete(kube, path)


def pending(state_dir: Path) -> list[Path]:
    d = replacements_dir(state_dir)
    return sorted(d.glob("*.json")) if d.is_dir() else []


# ------------------------------------------------------------------ crash


@dataclass(frozen=True)
class CrashResult:
    namespace: str
    run: str
    slice: int
    worker: int
    pod: str
    exit_code: int
    how: str  # "in place" (the agent's container) | "pod failed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def running_worker(kube: Cluster, namespace: str, run: str, slice_index: int, worker: int) -> dict[str, Any]:
    """The running pod of one worker of RUN; a FieldError (``--worker``) when there is none."""
    selector = f"{JOBSET_NAME_LABEL}={run},{JOBSET_JOB_INDEX_LABEL}={slice_index},{K8S_COMPLETION_INDEX_LABEL}={worker}"
    pods = [
        p
        for p in kube.list(kube.resource("v1", "Pod"), namespace, label_selector=selector)
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    if not pods:
        raise FieldError(
            "--worker",
            f"worker {worker} of slice {slice_index} of run {run!r} is not running in namespace {namespace!r}",
            f"see `python -m workloads status {run}`",
        )
    return pods[0]


def crash(kube: Cluster, state_dir: Path, namespace: str, run: str, slice_index: int, worker: int = 0, *, exit_code: int = 137) -> CrashResult:
    """One worker's program fails with ``exit_code``; its VM stays (a hung collective, an OOM kill, a host error the VM survives).

    A pod that restarts in place has its program's stand-in end with the code (``workloads.local.agents``:
    the agent exits with it, and the container's restart rules decide); any other rehearsal pod fails as
    its kubelet would report it (kwok's fail stage: phase Failed, the container terminated with the code).
    """
    from workloads.local.addons import FAIL_EXIT_CODE_ANNOTATION, FAIL_LABEL
    from workloads.local.agents import is_agent_pod

    pod = running_worker(kube, namespace, run, slice_index, worker)
    meta = pod["metadata"]
    if is_agent_pod(pod):
        from workloads.local.agents import Container

        root = state_dir / "rehearsal" / "agents" / meta["uid"]
        markers = sorted(root.glob("worker-*.pid"), key=lambda f: int(f.name.split("-")[1].split(".")[0]))
        if not markers:
            raise FieldError("--worker", f"pod {meta['name']} has not started its program yet (its barrier is up)", "crash it once the run is training")
        c = Container(namespace, meta["name"], meta["uid"], root, restarts=int(markers[-1].name.split("-")[1].split(".")[0]))
        if not c.end_worker(exit_code):
            raise FieldError("--worker", f"pod {meta['name']}'s program is not running", "crash it once the run is training")
        how = "in place"
    else:
        path = kube.resource("v1", "Pod").path(namespace, meta["name"])
        patch(kube, path, {"metadata": {"labels": {FAIL_LABEL: "true"}, "annotations": {FAIL_EXIT_CODE_ANNOTATION: str(exit_code)}}})
        how = "pod failed"
    return CrashResult(namespace, run, slice_index, worker, meta["name"], exit_code, how)
