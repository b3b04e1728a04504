"""Two faults GKE's own tools do not make, played on the local cluster: a bad host and a hang.

``python -m workloads local badhost NODE [--exit-code N] [--clear]``: every workload
container on NODE fails, attempt after attempt, the way a VM with a broken TPU host fails
(the TPU runtime aborts the program: exit 134, SIGABRT, by default). The node is annotated
(``BAD_HOST_ANNOTATION``); the rehearsal daemon (``rehearsald``) fails each rehearsal pod that
runs there ``FAIL_DELAY_S`` after the attempt's clock starts, through kwok's fail stage (phase
Failed, the container terminated with the code, as a kubelet reports it), and writes the exit
guard's line (``tgk-exit-guard: exit N on node NODE``) in the pod's log, which the local Cloud
Logging keeps. JobSet then restarts the run (a counted failure) and, with nothing else
changed, the slice lands on the same VMs and fails again: the loop ``badhost --cordon`` ends.

``python -m workloads local hang RUN [--slice S] [--worker W]``: that worker stops
stepping while its pod stays Running (a collective that never completes): the daemon stops
every worker's steps (they wait in the collective), keeps the pods Running past the run's
finish, and once the run's hang bound (``TGK_HANG_AFTER_S`` from the pod, on the rehearsal's
clock) has passed since the fault, plays the exit guard in every worker: the hang line, exit
124 (``workloads.render.exitguard``). JobSet restarts the run from its last checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.errors import FieldError
from toolkit.names import GKE_NODEPOOL_LABEL, TGK_LOCAL_PREFIX, WORKLOAD_CONTAINER
from workloads.cluster.client import Cluster
from workloads.local.addons import FAIL_EXIT_CODE_ANNOTATION, FAIL_LABEL
from workloads.render import exitguard

BAD_HOST_ANNOTATION = f"{TGK_LOCAL_PREFIX}/bad-host-exit-code"
HANG_ANNOTATION = f"{TGK_LOCAL_PREFIX}/hang"
DEFAULT_BAD_HOST_EXIT = 134  # SIGABRT: the TPU runtime aborting the program
FAIL_DELAY_S = 1.0  # the attempt's clock started -> the program fails (the TPU runtime's start)
NODE_LIST_S = 1.0  # how often the daemon reads the nodes' annotations
NEVER_S = 86400.0  # a hung run's pods never reach their finish time
RESERVED_CODES = {0: "success", exitguard.SIGTERM_EXIT_CODE: "SIGTERM, a stop", 137: "SIGKILL, a stop", exitguard.HANG_EXIT_CODE: "the exit guard's hang"}


@dataclass(frozen=True)
class FaultResult:
    what: str
    target: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _patch(kube: Cluster, path: str, body: dict[str, Any]) -> None:
    kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")


def bad_host(kube: Cluster, node: str, *, exit_code: int = DEFAULT_BAD_HOST_EXIT, clear: bool = False) -> FaultResult:
    """Mark (or ``clear``) NODE as a bad host; checked first, nothing changed on bad input."""
    if not clear and (exit_code in RESERVED_CODES or not 1 <= exit_code <= 255):
        why = RESERVED_CODES.get(exit_code, "not a process exit code")
        raise FieldError(
            "--exit-code", f"{exit_code} is {why}, not a failure", f"pass a code from 3 to 255 other than 124, 137, 143 (default {DEFAULT_BAD_HOST_EXIT})"
        )
    info = kube.resource("v1", "Node")
    obj = kube.get(info, node)
    if obj is None or GKE_NODEPOOL_LABEL not in ((obj.get("metadata") or {}).get("labels") or {}):
        raise FieldError("NODE", f"no TPU node {node!r} in the local cluster", "pick one from `kubectl get nodes -L cloud.google.com/gke-nodepool`")
    _patch(kube, info.path(None, node), {"metadata": {"annotations": {BAD_HOST_ANNOTATION: None if clear else str(exit_code)}}})
    return FaultResult("badhost", node, "cleared" if clear else f"every workload container on it fails with exit {exit_code}")


def hang(kube: Cluster, namespace: str, run: str, slice_index: int = 0, worker: int = 0) -> FaultResult:
    """Make one running worker of RUN stop stepping (its pod stays Running)."""
    from workloads.local.disrupt import running_worker

    name = running_worker(kube, namespace, run, slice_index, worker)["metadata"]["name"]
    _patch(kube, kube.resource("v1", "Pod").path(namespace, name), {"metadata": {"annotations": {HANG_ANNOTATION: "true"}}})
    return FaultResult("hang", f"{namespace}/{name}", "stops stepping; its pod stays Running until the exit guard's hang bound ends the attempt")


# ------------------------------------------------------------------ the daemon's part


def hang_bound_s(pod: dict[str, Any]) -> float | None:
    """The pod's TGK_HANG_AFTER_S (what the plan rendered), or None without a hang watch."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") != WORKLOAD_CONTAINER:
            continue
        for e in c.get("env") or []:
            if e.get("name") == "TGK_HANG_AFTER_S":
                try:
                    return float(e.get("value"))
                except (TypeError, ValueError):
                    return None
    return None


def _node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "unknown")


def exit_line(log: Any, t: float, code: int, node: str) -> str:
    return log.line(t, "exitguard.sh:0", exitguard.EXIT_LINE.format(code=code, node=node), "E")


class Faults:
    """What the rehearsal daemon does for the two faults (see the module docstring)."""

    def __init__(self, kube: Cluster) -> None:
        self.kube = kube
        self.bad: dict[str, int] = {}  # node -> exit code
        self._nodes_read = 0.0
        self.failed: set[str] = set()  # pod uids already failed here

    def _bad_nodes(self, now: float) -> dict[str, int]:
        if now - self._nodes_read >= NODE_LIST_S:
            self._nodes_read = now
            bad: dict[str, int] = {}
            for n in self.kube.list(self.kube.resource("v1", "Node"), None):
                code = ((n.get("metadata") or {}).get("annotations") or {}).get(BAD_HOST_ANNOTATION)
                if code and code.isdigit():
                    bad[n["metadata"]["name"]] = int(code)
            self.bad = bad
        return self.bad

    def _fail(self, pod: dict[str, Any], code: int) -> bool:
        meta = pod["metadata"]
        if meta.get("uid") in self.failed:
            return False
        path = self.kube.resource("v1", "Pod").path(meta["namespace"], meta["name"])
        try:
            _patch(self.kube, path, {"metadata": {"labels": {FAIL_LABEL: "true"}, "annotations": {FAIL_EXIT_CODE_ANNOTATION: str(code)}}})
        except Exception:  # gone meanwhile (a restart deleting it): nothing left to fail
            return False
        self.failed.add(meta.get("uid", ""))
        return True

    def attempt(self, clock: dict[str, Any], members: list[tuple[Any, dict[str, Any], str]], r: Any, now: float) -> bool:
        """One pass over a started attempt: a bad host's pods failed, a hang noted and, at its bound, ended. True while it is hung."""
        bad = self._bad_nodes(now)
        if bad and now >= float(clock["t0"]) + FAIL_DELAY_S:
            for w, pod, phase in members:
                node = _node_of(pod)
                if phase == "running" and node in bad and self._fail(pod, bad[node]):
                    w.write([exit_line(w.log, now, bad[node], node)])
        if "hung" not in clock:
            if not any(((pod["metadata"].get("annotations") or {}).get(HANG_ANNOTATION)) == "true" for _, pod, _ in members):
                return False
            clock["hung"] = now
        bound = hang_bound_s(members[0][1])
        if bound is None or not r.step_seconds:
            return True  # no watch: hung for good, as on GKE without one
        wall = bound * r.wall_step_seconds / r.step_seconds
        if now >= float(clock["hung"]) + wall:
            for w, pod, phase in members:
                if phase == "running" and self._fail(pod, exitguard.HANG_EXIT_CODE):
                    w.write(
                        [
                            w.log.line(
                                now,
                                "exitguard.sh:0",
                                exitguard.HANG_LINE.format(seconds=int(bound)) + "; ending the attempt with exit 124 to have it restarted",
                                "E",
                            ),
                            exit_line(w.log, now, exitguard.HANG_EXIT_CODE, _node_of(pod)),
                        ]
                    )
        return True


def never(now: float | None = None) -> float:
    """A hung run's finish time: never, in practice."""
    return (now or time.time()) + NEVER_S
