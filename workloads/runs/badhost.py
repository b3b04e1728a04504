"""A run's bad host named, cordoned and tainted, and in All Capacity mode reported: ``python -m workloads badhost RUN``.

    examine(cluster, ns, run, ...)        -> Examined       the failed attempts and the verdict (workloads.observe.faults)
    act(cluster, examined, cordon=, report=, dry_run=) -> [Action]

A VM whose workload container fails every attempt sends a JobSet into a restart loop, the
same slice rebuilt on the same VMs each time. Named (``faults.bad_host``: the VM that failed
first in each of the last ``--attempts`` failed attempts, never a VM that only shared its
slice), ``--cordon`` makes it unschedulable and gives it the ``BAD_HOST_TAINT`` (NoSchedule),
so the next attempt's pods cannot land on it, and labels every node of its node pool
``TGK_DEGRADED_SLICE_LABEL``, which every run's pods keep off (``workloads.render.jobset``): a
multi-host slice is one pool, and a first pod placed beside the cordoned VM would hold its
peers Pending. The slice is rebuilt on another node pool of the shape (Kueue's flavor may hold
several), or waits for one. Once the VM is repaired (or replaced: GKE's new Node has neither):
``kubectl uncordon NODE``, ``kubectl taint nodes NODE tpu-gke-toolkit.io/bad-host-`` and
``kubectl label nodes -l cloud.google.com/gke-nodepool=POOL tpu-gke-toolkit.io/degraded-slice-``.

``--report-faulty`` asks Compute Engine to repair the VM's host (``instances.reportHostAsFaulty``,
docs.cloud.google.com/tpu/docs/all-capacity-report-faulty-hosts: 10-12 min to report, 3-14 days
to repair, the VM stopped meanwhile), which only a VM in TPU All Capacity mode may do: the
toolkit asks it only of a VM its pools label as reserved capacity, through the one Google
client (``infra.gcp_api``), and ``--dry-run`` prints the request instead. The cordon and taint
are Kubernetes PATCHes; ``--dry-run`` shows them too and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import FieldError, Forbidden
from toolkit.names import (
    GKE_NODEPOOL_LABEL,
    K8S_ZONE_LABEL,
    TGK_CAPACITY_LABEL,
    TGK_DEGRADED_SLICE_LABEL,
    TGK_NODE_LABEL_PREFIX,
    WORKLOAD_CONTAINER,
    CapacityMode,
)
from workloads.observe import faults

BAD_HOST_TAINT_KEY = f"{TGK_NODE_LABEL_PREFIX}/bad-host"
FAULT_BEHAVIOR = "BEHAVIOR_UNSPECIFIED"  # neither PERFORMANCE nor SILENT_DATA_CORRUPTION: the container fails


@dataclass(frozen=True)
class Examined:
    namespace: str
    run: str
    verdict: faults.Verdict
    notes: tuple[str, ...] = ()  # what could not be read, and so is not in the verdict

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "run": self.run, **self.verdict.to_dict(), "notes": list(self.notes)}


@dataclass(frozen=True)
class Action:
    what: str  # cordon | report
    target: str
    request: str  # what is (or, with --dry-run, would be) sent
    done: bool
    answer: dict[str, Any] = field(default_factory=dict)


def examine(
    cluster: Any,
    ns: str,
    run: str,
    *,
    repeats: int = faults.DEFAULT_REPEATS,
    history: Callable[[dict[str, Any]], tuple[list[tuple[int, faults.Failure]], str | None]] | None = None,
) -> Examined:
    """The run's failed attempts (its failed pods in the API, and ``history``'s exit guard lines) and the verdict.

    ``history(run_object)`` gives Cloud Logging's failures and a note when it could not be read.
    """
    found = cluster.find_run(ns, run)
    if found is None:
        raise FieldError("RUN", f"no run {run!r} in namespace {ns!r}", "see `python -m workloads status RUN` (and --namespace/--team)")
    kind, obj = found
    if kind.kind != "JobSet":
        raise FieldError("RUN", f"{run!r} is a {kind.kind}: only a JobSet restarts every slice together, the loop a bad host makes", "")
    notes: list[str] = []
    api = faults.from_pods(cluster.pods(ns, run, kind), WORKLOAD_CONTAINER)
    logged: list[tuple[int, faults.Failure]] = []
    if history is not None:
        logged, note = history(obj)
        if note:
            notes.append(note)
    return Examined(ns, run, faults.bad_host(faults.by_attempt(api, logged), repeats), tuple(notes))


def cloud_logging_history(cluster: Any, spec: Any, ns: str, logging_client: Callable[[Any, str], Any]) -> Callable[[dict[str, Any]], tuple[list, str | None]]:
    """``examine``'s history: every worker's exit guard lines of the run from Cloud Logging (``workloads.observe.history``)."""

    def read_history(obj: dict[str, Any]) -> tuple[list[tuple[int, faults.Failure]], str | None]:
        from toolkit.inputfile import LOG
        from workloads.observe.history import HistoryUnavailable, LogScope, read, worker_filter

        meta = obj.get("metadata") or {}
        try:
            env = spec()
            scope = LogScope(env.project, env.region, env.cluster.name, ns, meta.get("name", ""), meta.get("uid"), meta.get("creationTimestamp"))
            hist = read(logging_client(cluster, env.project), scope, limit_bytes=LOG.limit, filter_=faults.exit_filter(worker_filter(scope, worker0=False)))
        except (HistoryUnavailable, Forbidden, FieldError) as e:
            return [], f"Cloud Logging not read ({e}): only the failed pods still in the API are counted"
        return faults.from_history(hist.lines, hist.line_pods, hist.line_times, hist.line_labels), None

    return read_history


def report_request(project: str, zone: str, instance: str, description: str) -> Any:
    """Compute Engine's ``instances.reportHostAsFaulty`` for a TPU VM (GKE names a node after its VM)."""
    from infra.gcp_api import ApiRequest

    body = {"disruptionSchedule": "IMMEDIATE", "faultReasons": [{"behavior": FAULT_BEHAVIOR, "description": description[:1000]}]}
    return ApiRequest(
        "compute",
        f"/compute/v1/projects/{project}/zones/{zone}/instances/{instance}/reportHostAsFaulty",
        "report the TPU VM's host as faulty (All Capacity mode): Compute Engine repairs it",
        body=body,
    )


def act(
    cluster: Any,
    examined: Examined,
    *,
    cordon: bool,
    report: bool,
    dry_run: bool,
    project: Callable[[], str] | None = None,
    google: Callable[[], Any] | None = None,
) -> list[Action]:
    """Cordon and taint the bad host, and report it as faulty; everything checked before anything is changed."""
    node_name = examined.verdict.node
    if node_name is None or not (cordon or report):
        return []
    nodes = cluster.resource("v1", "Node")
    node = cluster.get(nodes, node_name)
    if node is None:
        raise FieldError(
            "RUN",
            f"node {node_name} (the bad host of run {examined.run!r}) is gone: its VM was replaced",
            "nothing to cordon; see `status` for where the run is now",
        )
    labels = (node.get("metadata") or {}).get("labels") or {}
    actions: list[Action] = []
    request = None
    if report:
        capacity = labels.get(TGK_CAPACITY_LABEL, "")
        if capacity != CapacityMode.RESERVATION:
            raise FieldError(
                "--report-faulty",
                f"node {node_name} is {capacity or 'not labelled with its capacity'} capacity; reporting a faulty host is for TPU VMs in All Capacity mode (reserved)",
                "drop --report-faulty (--cordon moves the run off it)",
            )
        zone = labels.get(K8S_ZONE_LABEL)
        if not zone:
            raise FieldError(
                "--report-faulty",
                f"node {node_name} has no {K8S_ZONE_LABEL} label, so its VM's zone is unknown",
                "report it with gcloud compute instances report-host-as-faulty",
            )
        evidence = "; ".join(f"attempt failed first here with exit {f.exit_code} ({f.pod})" for f in examined.verdict.evidence)
        request = report_request(
            project() if project else "", zone, node_name, f"tpu-gke-toolkit: run {examined.namespace}/{examined.run}: {examined.verdict.why}. {evidence}"
        )
    if cordon:
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != BAD_HOST_TAINT_KEY]
        taint = {"key": BAD_HOST_TAINT_KEY, "value": examined.run[:63], "effect": "NoSchedule"}
        body = {"spec": {"unschedulable": True, "taints": [*taints, taint]}}
        path = nodes.path(None, node_name)
        shown = f"PATCH {path} {json.dumps(body, separators=(',', ':'))}"
        pool = labels.get(GKE_NODEPOOL_LABEL)
        # Its pool's nodes (a slice is one pool) labelled so run pods keep off the pool: labelled, not cordoned or blamed.
        peers = [n["metadata"]["name"] for n in cluster.list(nodes, None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}")] if pool else [node_name]
        label = {"metadata": {"labels": {TGK_DEGRADED_SLICE_LABEL: "true"}}}
        if not dry_run:
            cluster.request("PATCH", path, body=body, content_type="application/merge-patch+json")
            for peer in peers:
                cluster.request("PATCH", nodes.path(None, peer), body=label, content_type="application/merge-patch+json")
        actions.append(Action("cordon", f"node {node_name}" + (f" (pool {pool})" if pool else ""), shown, not dry_run))
        actions.append(
            Action("label", f"pool {pool or '?'} ({len(peers)} nodes)", f"PATCH /api/v1/nodes/<each> {json.dumps(label, separators=(',', ':'))}", not dry_run)
        )
    if request is not None:
        shown = request.render()
        answer: dict[str, Any] = {}
        if not dry_run:
            answer = (google() if google else _google()).post(request) or {}
        actions.append(Action("report", f"VM {node_name}", shown, not dry_run, answer))
    return actions


def _google() -> Any:
    from infra.gcp_api import Client, endpoint_override

    return Client(endpoint=endpoint_override())


def cordoned(cluster: Any, node: str) -> bool:
    """Whether ``badhost --cordon`` has been applied to the node (its taint is there)."""
    obj = cluster.get(cluster.resource("v1", "Node"), node) or {}
    return any(t.get("key") == BAD_HOST_TAINT_KEY for t in (obj.get("spec") or {}).get("taints") or [])


def status_lines(examined: Examined, run: str, *, done: bool = False) -> list[str]:
    """What ``status`` says of the run's failed attempts: hangs, and a bad host with the command that acts on it (``done``: already cordoned)."""
    out = []
    hung = [a.attempt for a in examined.verdict.attempts if a.hung]
    if hung:
        out.append(f"hangs  attempt{'s' if len(hung) != 1 else ''} {', '.join(map(str, hung))} ended by the exit guard: no new step within the plan's bound")
    v = examined.verdict
    if v.node:
        then = "cordoned and tainted" if done else f"python -m workloads badhost {run} --cordon"
        out.append(f"bad host  {v.node}: {v.why} — {then}")
    return out


def status_section(cluster: Any, ns: str, run: str, spec: Callable[[], Any], logging_client: Callable[[Any, str], Any]) -> list[str]:
    """``status_lines`` for a run that has restarted; a failure to read is one warning line on stderr, never the status's."""
    import sys

    from toolkit.errors import ToolkitError

    try:
        examined = examine(cluster, ns, run, history=cloud_logging_history(cluster, spec, ns, logging_client))
        return status_lines(examined, run, done=examined.verdict.node is not None and cordoned(cluster, examined.verdict.node))
    except ToolkitError as e:
        sys.stderr.write(f"warning: the run's failed attempts are unknown: {e}\n")
        return []
