"""``maintain``: move a run off nodes GKE has announced host maintenance for, before the window, and note what disrupted it.

One pass (``maintain_once``), on whatever API server the kubeconfig names (GKE or the local cluster):

1. Nodes the toolkit cordoned for an earlier window (its annotation
   ``workloads.cluster.maintenance.CORDONED_FOR_ANNOTATION``) whose maintenance label GKE has
   since taken off are uncordoned; a node someone else cordoned is never touched.
2. ``plan_move``: the run's slices with a pod on a node whose announced window
   (``cloud.google.com/scheduled-maintenance-time``) starts within ``lead``. Their announced nodes
   are cordoned (so the restarted slice lands elsewhere) and the slices' pods are evicted through
   the Eviction API — PodDisruptionBudgets hold, the pod gets ``DisruptionTarget``, its program
   gets SIGTERM and ``terminationGracePeriodSeconds`` (MaxText with autocheckpoint saves its step
   on SIGTERM), and JobSet restarts the run without spending ``maxRestarts``. A window is thus
   met by a checkpoint taken when the toolkit chose, not by a kill inside the window.
3. With a ``Watch`` (``--watch``): the nodes the run's pods were on are remembered from pass to
   pass; one that comes back as a new Node is named (``maintenance.classify``: a new kubelet
   version is an upgrade, a maintenance label before is host maintenance, a kubelet shutdown is a
   preemption) and the disruption is recorded on the run's JobSet (annotation
   ``DISRUPTIONS_ANNOTATION``), which ``status`` shows. GKE keeps no such history itself: the old
   pods and Nodes are deleted, and Events expire after an hour.

``dry_run`` plans and changes nothing. Bad input (no such run) is a ``FieldError``; a refused
request is the cluster's error (exit 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.errors import FieldError, NotFound, Rejected
from workloads.cluster import maintenance as mt

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster


@dataclass
class Watch:
    """What a watching ``maintain`` remembers between passes: the run's nodes as last seen."""

    nodes: dict[str, mt.NodeSeen] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)  # node -> uid: moved off on purpose; what happens to it next is not the run's


@dataclass(frozen=True)
class MaintainResult:
    namespace: str
    run: str
    lead_s: float
    plan: mt.MovePlan
    dry_run: bool
    cordoned: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()  # evictions a PodDisruptionBudget refused for now (429): tried again next pass
    uncordoned: tuple[str, ...] = ()
    recorded: tuple[mt.Disruption, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "run": self.run,
            "lead_s": self.lead_s,
            "dry_run": self.dry_run,
            "due": [m.to_dict() for m in self.plan.due],
            "later": [m.to_dict() for m in self.plan.later],
            "slices": list(self.plan.slices),
            "cordon": list(self.plan.cordon),
            "cordoned": list(self.cordoned),
            "evicted": list(self.evicted),
            "blocked": list(self.blocked),
            "uncordoned": list(self.uncordoned),
            "recorded": [d.to_dict() for d in self.recorded],
        }


def _patch(cluster: Cluster, path: str, body: dict[str, Any]) -> None:
    cluster.request("PATCH", path, body=body, content_type="application/merge-patch+json")


def _reasons(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """node -> the DisruptionTarget reasons of the run's pods on it."""
    out: dict[str, list[str]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        for c in (p.get("status") or {}).get("conditions") or []:
            if node and c.get("type") == "DisruptionTarget" and str(c.get("status")) == "True":
                out.setdefault(node, []).append(str(c.get("reason") or ""))
    return out


def _seen_changes(watch: Watch, nodes: dict[str, dict[str, Any]], pods: list[dict[str, Any]], now: float) -> list[mt.Disruption]:
    """Nodes the run was on that came back as new Nodes, grouped by pool and named; the memory brought up to date."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (pool, kind) -> [(node, detail)]
    used = {(p.get("spec") or {}).get("nodeName") for p in pods} - {None}
    by_pool_now: dict[str, list[dict[str, Any]]] = {}
    for n in nodes.values():
        by_pool_now.setdefault(str((n["metadata"].get("labels") or {}).get(mt.GKE_NODEPOOL_LABEL, "?")), []).append(n)
    for name, before in list(watch.nodes.items()):
        if name not in watch.nodes:
            continue  # taken with its pool's event already
        after = nodes.get(name)
        if after is None:
            # Gone: a surge upgrade replaces a VM by a new one of another name. Once the pool has
            # Nodes the watcher has not seen, they are its replacements.
            fresh = [n for n in by_pool_now.get(before.pool, []) if n["metadata"]["name"] not in watch.nodes]
            if not fresh:
                continue
            after = fresh[0]
        kind = mt.classify(before, after)
        if kind is None:
            continue
        kubelet = str(((after.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))
        detail = f"kubelet {before.kubelet} -> {kubelet}" if kind == "upgrade" else ""
        if before.reasons:
            detail = ", ".join(x for x in (detail, f"pods {'/'.join(before.reasons)}") if x)
        found.setdefault((before.pool, kind), []).append((name, detail))
        del watch.nodes[name]
        # A pool's VMs go together (a multi-host slice is one unit): the rest of it is this same
        # event, whether its Nodes are back yet or not; one record, not one per pass.
        for other, seen in list(watch.nodes.items()):
            if seen.pool == before.pool and (nodes.get(other) is None or nodes[other]["metadata"].get("uid") != seen.uid):
                found[(before.pool, kind)].append((other, ""))
                del watch.nodes[other]
    reasons = _reasons(pods)
    for name in used:
        n = nodes.get(name)
        if n is None:
            continue
        if watch.left.get(name) == n["metadata"].get("uid"):
            continue  # the run's pods there are the ones moved off it
        watch.left.pop(name, None)
        old = watch.nodes.get(name)
        if old is None or old.uid == n["metadata"].get("uid"):
            merged = tuple(sorted(set(reasons.get(name, [])) | set(old.reasons if old else ())))
            watch.nodes[name] = mt.NodeSeen.of(n, merged)
    return [
        mt.Disruption(kind, mt.iso(now), pool, tuple(sorted(x for x, _ in items)), next((d for _, d in items if d), ""))
        for (pool, kind), items in sorted(found.items())
    ]


def _record(cluster: Cluster, info: Any, ns: str, run: str, items: list[mt.Disruption]) -> None:
    obj = cluster.get(info, run, ns)
    if obj is None:
        return
    for d in items:
        value = mt.with_disruption(obj, d)
        obj.setdefault("metadata", {}).setdefault("annotations", {})[mt.DISRUPTIONS_ANNOTATION] = value
    _patch(cluster, info.path(ns, run), {"metadata": {"annotations": {mt.DISRUPTIONS_ANNOTATION: obj["metadata"]["annotations"][mt.DISRUPTIONS_ANNOTATION]}}})


def maintain_once(
    cluster: Cluster, ns: str, run: str, *, lead_s: float, now: float | None = None, dry_run: bool = False, watch: Watch | None = None
) -> MaintainResult:
    """One pass of ``maintain`` over the run (see the module docstring)."""
    now = time.time() if now is None else now
    found = cluster.find_run(ns, run)
    if found is None:
        raise FieldError("RUN", f"no run {run!r} in namespace {ns!r}", "check the name with `python -m workloads status RUN` (or pass --namespace/--team)")
    kind, _ = found
    run_info = cluster.resource(kind.api_version, kind.kind)
    node_info = cluster.resource("v1", "Node")
    pods = cluster.pods(ns, run, kind)
    nodes = {n["metadata"]["name"]: n for n in cluster.list(node_info)}

    uncordoned: list[str] = []
    for name, n in nodes.items():
        ann = n["metadata"].get("annotations") or {}
        if mt.CORDONED_FOR_ANNOTATION in ann and mt.of_node(n) is None:
            uncordoned.append(name)
            if not dry_run:
                _patch(cluster, node_info.path(None, name), {"metadata": {"annotations": {mt.CORDONED_FOR_ANNOTATION: None}}, "spec": {"unschedulable": None}})

    plan = mt.plan_move(pods, nodes.values(), now, lead_s)
    cordoned: list[str] = []
    evicted: list[str] = []
    blocked: list[str] = []
    recorded: list[mt.Disruption] = []
    if plan.moves and not dry_run:
        windows = {m.node: m.window_start for m in plan.due}
        for name in plan.cordon:
            n = nodes.get(name) or {}
            if (n.get("spec") or {}).get("unschedulable") and mt.CORDONED_FOR_ANNOTATION not in (n.get("metadata", {}).get("annotations") or {}):
                continue  # cordoned by someone else: theirs to undo, not ours
            window = windows.get(name) or next(iter(windows.values()))
            _patch(
                cluster,
                node_info.path(None, name),
                {"metadata": {"annotations": {mt.CORDONED_FOR_ANNOTATION: str(int(window or 0))}}, "spec": {"unschedulable": True}},
            )
            cordoned.append(name)
        for full in plan.pods:
            pns, pname = full.split("/", 1)
            try:
                cluster.evict(pns, pname)
                evicted.append(full)
            except NotFound:
                continue  # gone meanwhile
            except Rejected as e:
                if e.status == 429:  # a PodDisruptionBudget says not now
                    blocked.append(full)
                    continue
                raise
        pools = sorted({m.pool for m in plan.due})
        first = min((m.window_start for m in plan.due if m.window_start is not None), default=now)
        recorded.append(
            mt.Disruption(
                "moved-ahead-of-maintenance",
                mt.iso(now),
                ",".join(pools),
                plan.cordon,
                f"window {mt.iso(first)} ({mt.in_words(first - now)}); slices {', '.join(map(str, plan.slices))} checkpointed and restarted elsewhere",
            )
        )
    if watch is not None:
        for name in plan.cordon if cordoned or evicted else ():
            watch.nodes.pop(name, None)
            watch.left[name] = str(nodes[name]["metadata"].get("uid", ""))
        recorded.extend(_seen_changes(watch, nodes, pods, now))
    if recorded and not dry_run:
        _record(cluster, run_info, ns, run, recorded)
    return MaintainResult(ns, run, lead_s, plan, dry_run, tuple(cordoned), tuple(evicted), tuple(blocked), tuple(uncordoned), tuple(recorded))


def watch_run(
    cluster: Cluster,
    ns: str,
    run: str,
    *,
    lead_s: float,
    interval_s: float,
    until: Callable[[], bool],
    on_pass: Callable[[MaintainResult], None],
    dry_run: bool = False,
) -> None:
    """``maintain_once`` every ``interval_s`` until ``until()`` (the run finished, or a deadline), each result to ``on_pass``."""
    memory = Watch()
    while True:
        on_pass(maintain_once(cluster, ns, run, lead_s=lead_s, dry_run=dry_run, watch=memory))
        if until():
            return
        time.sleep(interval_s)
