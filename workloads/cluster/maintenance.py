"""Host maintenance GKE announces on TPU nodes, and what disrupted a run, read from the cluster. Pure: no I/O.

What GKE publishes on a node (GKE ≥ 1.31.1-gke.2008000 for machines with GPUs or TPUs;
https://cloud.google.com/kubernetes-engine/docs/how-to/view-maintenance-events and
https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu):

- ``cloud.google.com/scheduled-maintenance-time``: the start of Compute Engine's upcoming
  maintenance window for the VM, in Unix epoch seconds, while the maintenance is scheduled
  but not active;
- ``cloud.google.com/active-node-maintenance=ONGOING``: the maintenance is under way (GKE is
  stopping the node's workloads), with the ``cloud.google.com/impending-node-termination``
  NoSchedule taint.

The node label carries the window's start only. The notification's other fields
(``maintenanceType`` SCHEDULED / UNSCHEDULED, ``windowEndTime``, ``canReschedule``) are
Compute Engine's (the instance's ``upcomingMaintenance``, the metadata server), not
GKE's node; nothing here claims them.

    announced(nodes) -> [NodeMaintenance]          every node with a window or an ongoing maintenance
    plan_move(pods, nodes, now, lead_s) -> MovePlan which of a run's slices to move before a window
    classify(before, after, reason) -> Disruption   a pool's nodes before/after a disruption, named
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL

SCHEDULED_MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
ACTIVE_MAINTENANCE_LABEL = "cloud.google.com/active-node-maintenance"
ACTIVE_MAINTENANCE_VALUE = "ONGOING"
IMPENDING_TERMINATION_TAINT_KEY = "cloud.google.com/impending-node-termination"
# What the toolkit writes, and only it removes: a node it cordoned ahead of a window (the
# window's epoch seconds), so that it uncordons that node once GKE has taken the label off.
CORDONED_FOR_ANNOTATION = "tpu-gke-toolkit.dev/cordoned-for-maintenance"
# The disruptions the toolkit saw happen to a run, newest last (JSON), on the run's JobSet.
DISRUPTIONS_ANNOTATION = "tpu-gke-toolkit.dev/disruptions"
MAX_DISRUPTIONS = 20  # an annotation stays small; the oldest go first
MAX_ANNOTATION_BYTES = 256 * 1024  # the API server's limit on all of an object's annotations together


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def in_words(seconds: float) -> str:
    """'in 9m 58s' / '2h 3m ago': how far a window is from now."""
    s = int(abs(seconds))
    units = [(s // 86400, "d"), (s % 86400 // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    lead = next((i for i, (v, _) in enumerate(units) if v), 3)  # the largest unit present, then the next one if not zero
    text = " ".join(f"{v}{u}" for v, u in units[lead : lead + 2] if v or u == units[lead][1])
    return f"in {text}" if seconds >= 0 else f"{text} ago"


@dataclass(frozen=True)
class NodeMaintenance:
    """One node's announced (or ongoing) host maintenance, as GKE labels it."""

    node: str
    pool: str
    window_start: float | None  # epoch seconds; None when only ongoing, or the label is unreadable
    ongoing: bool = False
    unreadable: str = ""  # the label's value when it is not epoch seconds

    def describe(self, now: float) -> str:
        if self.ongoing:
            return f"{self.node} (pool {self.pool}): maintenance ONGOING"
        if self.window_start is None:
            return f"{self.node} (pool {self.pool}): {SCHEDULED_MAINTENANCE_LABEL}={self.unreadable!r} is not epoch seconds"
        return f"{self.node} (pool {self.pool}): window starts {iso(self.window_start)} ({in_words(self.window_start - now)})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["window_start"] = iso(self.window_start) if self.window_start is not None else None
        return d


def of_node(node: Mapping[str, Any]) -> NodeMaintenance | None:
    """The node's maintenance from its labels, or None when GKE announced none."""
    labels = _meta(node).get("labels") or {}
    raw = labels.get(SCHEDULED_MAINTENANCE_LABEL)
    ongoing = labels.get(ACTIVE_MAINTENANCE_LABEL) == ACTIVE_MAINTENANCE_VALUE
    if raw is None and not ongoing:
        return None
    start: float | None = None
    bad = ""
    if raw is not None:
        try:
            start = float(int(str(raw).strip()))
        except ValueError:
            bad = str(raw)
    return NodeMaintenance(str(_meta(node).get("name", "")), str(labels.get(GKE_NODEPOOL_LABEL, "?")), start, ongoing, bad)


def announced(nodes: Iterable[Mapping[str, Any]]) -> list[NodeMaintenance]:
    """Every node with an announced window or an ongoing maintenance, soonest first."""
    found = [m for m in (of_node(n) for n in nodes) if m is not None]
    return sorted(found, key=lambda m: (not m.ongoing, m.window_start if m.window_start is not None else float("inf"), m.node))


def of_run(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> list[NodeMaintenance]:
    """The announced maintenance of the nodes the run's pods are on."""
    used = {(p.get("spec") or {}).get("nodeName") for p in pods} - {None}
    return announced(n for n in nodes if _meta(n).get("name") in used)


# ------------------------------------------------------------------ moving ahead of a window


@dataclass(frozen=True)
class MovePlan:
    """What to do now for a run: the slices to move (their pods evicted) and the announced nodes to cordon."""

    due: tuple[NodeMaintenance, ...] = ()  # windows that start within the lead (or are past and not yet done)
    later: tuple[NodeMaintenance, ...] = ()  # announced, further off than the lead
    slices: tuple[int, ...] = ()  # the run's slices with a pod on a due node
    pods: tuple[str, ...] = ()  # namespace/name of every live pod of those slices
    cordon: tuple[str, ...] = ()  # the due nodes (their whole announcement: every node GKE labelled for that window)

    @property
    def moves(self) -> bool:
        return bool(self.pods)


def plan_move(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], now: float, lead_s: float) -> MovePlan:
    """The run's slices to checkpoint and restart elsewhere now, because a window on one of their nodes starts within ``lead_s``.

    An ongoing maintenance is GKE's own to handle (it is already stopping the pods); a window
    already past whose label is still there counts as due (the maintenance has not begun).
    """
    pods = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", "Running") and not _meta(p).get("deletionTimestamp")]
    nodes = list(nodes)
    mine = of_run(pods, nodes)
    due = tuple(m for m in mine if not m.ongoing and m.window_start is not None and m.window_start - now <= lead_s)
    later = tuple(m for m in mine if not m.ongoing and m.window_start is not None and m.window_start - now > lead_s)
    due_nodes = {m.node for m in due}
    slices = sorted({int((_meta(p).get("labels") or {}).get(JOBSET_JOB_INDEX_LABEL, 0)) for p in pods if (p.get("spec") or {}).get("nodeName") in due_nodes})
    moving = tuple(
        sorted(
            f"{_meta(p).get('namespace')}/{_meta(p).get('name')}" for p in pods if int((_meta(p).get("labels") or {}).get(JOBSET_JOB_INDEX_LABEL, 0)) in slices
        )
    )
    windows = {m.window_start for m in due}
    cordon = tuple(sorted(m.node for m in announced(nodes) if not m.ongoing and m.window_start in windows and m.node))
    return MovePlan(due=due, later=later, slices=tuple(slices), pods=moving, cordon=cordon)


# ------------------------------------------------------------------ what disrupted a run


@dataclass(frozen=True)
class Disruption:
    """One disruption of a run, as the toolkit saw it on the cluster."""

    kind: str  # upgrade | maintenance | preemption | moved-ahead-of-maintenance | node-recreated
    at: str  # ISO time it was seen
    pool: str
    nodes: tuple[str, ...] = ()
    detail: str = ""

    def describe(self) -> str:
        return f"{self.at} {self.kind} of node pool {self.pool}: {self.detail}".rstrip(": ")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Disruption:
        return cls(str(d.get("kind", "")), str(d.get("at", "")), str(d.get("pool", "")), tuple(d.get("nodes") or ()), str(d.get("detail", "")))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}


@dataclass(frozen=True)
class NodeSeen:
    """What a watcher remembers of a node: enough to tell how it came back."""

    name: str
    uid: str
    pool: str
    kubelet: str
    maintenance: bool = False  # it carried a window or ONGOING when last seen
    reasons: tuple[str, ...] = field(default_factory=tuple)  # DisruptionTarget reasons of the run's pods on it

    @classmethod
    def of(cls, node: Mapping[str, Any], reasons: Iterable[str] = ()) -> NodeSeen:
        labels = _meta(node).get("labels") or {}
        return cls(
            name=str(_meta(node).get("name", "")),
            uid=str(_meta(node).get("uid", "")),
            pool=str(labels.get(GKE_NODEPOOL_LABEL, "?")),
            kubelet=str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
            maintenance=of_node(node) is not None,
            reasons=tuple(sorted(set(reasons))),
        )


def classify(before: NodeSeen, after: Mapping[str, Any]) -> str | None:
    """What happened to a node the run used, from how it was and how it is now; None if it is the same node.

    A node that comes back as a new Node running another kubelet version was upgraded (GKE
    recreates the VM from the pool's new template); one that carried a maintenance label was
    taken for host maintenance; one whose pods were stopped by the kubelet's node shutdown with
    neither was preempted; anything else recreated is named as such.
    """
    if _meta(after).get("uid") == before.uid:
        return None
    kubelet = str(((after.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))
    if before.kubelet and kubelet and kubelet != before.kubelet:
        return "upgrade"
    if before.maintenance:
        return "maintenance"
    if "TerminationByKubelet" in before.reasons:
        return "preemption"
    return "node-recreated"


def parse_disruptions(jobset: Mapping[str, Any] | None) -> list[Disruption]:
    """The disruptions recorded on the run's JobSet, oldest first (an unreadable record is skipped)."""
    from toolkit.jsontext import load_json

    raw = (_meta(jobset or {}).get("annotations") or {}).get(DISRUPTIONS_ANNOTATION)
    if not raw:
        return []
    try:
        items = load_json(raw, max_bytes=MAX_ANNOTATION_BYTES)  # anyone who may edit the JobSet may write it
    except ValueError:
        return []
    return [Disruption.from_dict(d) for d in items if isinstance(d, dict)] if isinstance(items, list) else []


def with_disruption(jobset: Mapping[str, Any], d: Disruption) -> str:
    """The annotation's new value: the recorded disruptions and ``d``, the newest MAX_DISRUPTIONS."""
    import json

    items = [x.to_dict() for x in parse_disruptions(jobset)] + [d.to_dict()]
    return json.dumps(items[-MAX_DISRUPTIONS:], separators=(",", ":"))
