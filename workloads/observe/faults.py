"""A run's failed attempts, which VM failed first in each, and whether one VM is the bad host. Pure, but for ``read``.

    read(cluster, logging, scope, pods) -> [AttemptFailures]      every worker's failures, by JobSet restart attempt
    bad_host(attempts, repeats=2)       -> Verdict                 the VM to name, or why none

Where the failures come from: every worker runs under the exit guard
(``workloads.render.exitguard``), which says each non-zero exit in one line,
``tgk-exit-guard: exit N on node NODE``. GKE's logging agent keeps those lines in Cloud
Logging, stamped with the pod's labels (the JobSet's restart attempt, slice and worker), after
JobSet has deleted the pods of a failed attempt; the failed pods still in the API (the newest
attempt, until JobSet replaces it) give the same facts from their container status.

**The bad host**, precisely: in a failed attempt, a *failure* is a workload container that
ended with a code other than 0, 143 (SIGTERM: the restart stopping the other workers, or a
drain), 137 (SIGKILL at the end of the grace period) and 124 (the exit guard's hang: every
worker of a hung collective reports it at about the same time, so it names no VM). The
attempt's *first failure* is the failure with the earliest time; a tie names no VM for that
attempt. A VM is the bad host when it is the first failure of each of the last ``repeats``
failed attempts. A VM that only shared a slice with it is never named: its workers end with
143 when the attempt is stopped, or fail after the culprit (a collective that broke when the
culprit's process died), never first in every attempt.

Not covered: a program bug that always crashes the same worker first while that worker's pod
lands on the same VM each attempt looks like a bad host; a program error (exit 1, 2, the
recipe's fatal codes) ends the run at once, so it never repeats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.names import JOBSET_JOB_INDEX_LABEL, K8S_COMPLETION_INDEX_LABEL
from workloads.cluster.run_list import epoch

RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
EXIT_LINE = re.compile(r"tgk-exit-guard: exit (\d{1,3}) on node (\S+)", re.ASCII)
HANG_LINE_TEXT = "tgk-exit-guard: no new step for"
STOPPED_CODES = frozenset({143, 137})  # the attempt's restart (or a drain) stopping a worker
HANG_CODE = 124
DEFAULT_REPEATS = 2


@dataclass(frozen=True)
class Failure:
    """One worker's container ended non-zero."""

    pod: str
    node: str
    exit_code: int
    at: float  # epoch seconds
    slice: int | None = None
    worker: int | None = None

    @property
    def kind(self) -> str:
        """stopped | hang | failed."""
        if self.exit_code in STOPPED_CODES:
            return "stopped"
        if self.exit_code == HANG_CODE:
            return "hang"
        return "failed"


@dataclass(frozen=True)
class AttemptFailures:
    """A JobSet restart attempt's failures."""

    attempt: int
    failures: tuple[Failure, ...]

    @property
    def failed(self) -> tuple[Failure, ...]:
        return tuple(f for f in self.failures if f.kind == "failed")

    @property
    def hung(self) -> bool:
        return any(f.kind == "hang" for f in self.failures)

    def first(self) -> Failure | None:
        """The earliest failure; None with none or a tie (two VMs at the same earliest time)."""
        failed = sorted(self.failed, key=lambda f: f.at)
        if not failed:
            return None
        if len(failed) > 1 and failed[1].at == failed[0].at and failed[1].node != failed[0].node:
            return None
        return failed[0]


@dataclass(frozen=True)
class Verdict:
    node: str | None  # the bad host, or None
    why: str  # one sentence
    evidence: tuple[Failure, ...] = ()  # its first failures, oldest first
    bystanders: tuple[str, ...] = ()  # VMs that failed in those attempts, never first: not named
    attempts: tuple[AttemptFailures, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "why": self.why,
            "evidence": [f.__dict__ for f in self.evidence],
            "bystanders": list(self.bystanders),
            "attempts": [{"attempt": a.attempt, "failures": [f.__dict__ for f in a.failures]} for a in self.attempts],
        }


def bad_host(attempts: Iterable[AttemptFailures], repeats: int = DEFAULT_REPEATS) -> Verdict:
    """The VM that failed first in each of the last ``repeats`` failed attempts (see the module docstring)."""
    every = tuple(sorted(attempts, key=lambda a: a.attempt))
    failed = [a for a in every if a.failed]
    if len(failed) < repeats:
        return Verdict(
            None,
            f"{len(failed)} failed attempt{'s' if len(failed) != 1 else ''} with a VM failing first, fewer than the {repeats} that name one",
            attempts=every,
        )
    last = failed[-repeats:]
    firsts = [a.first() for a in last]
    if any(f is None for f in firsts):
        return Verdict(
            None, f"attempt {next(a.attempt for a, f in zip(last, firsts, strict=True) if f is None)} has no single first failure (a tie)", attempts=every
        )
    nodes = {f.node for f in firsts if f is not None}
    if len(nodes) != 1:
        seq = ", ".join(f"{f.node} (attempt {a.attempt})" for a, f in zip(last, firsts, strict=True) if f is not None)
        return Verdict(None, f"the last {repeats} failed attempts failed first on different VMs: {seq}", attempts=every)
    node = nodes.pop()
    others = sorted({f.node for a in last for f in a.failed if f.node != node})
    evidence = tuple(f for f in firsts if f is not None)
    codes = ", ".join(str(f.exit_code) for f in evidence)
    return Verdict(
        node,
        f"its workload container failed first in each of the last {repeats} failed attempts (exit {codes})",
        evidence,
        tuple(others),
        every,
    )


# ------------------------------------------------------------------ sources


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def from_pods(pods: Iterable[Mapping[str, Any]], container: str) -> list[tuple[int, Failure]]:
    """(attempt, failure) of each pod in the API whose workload container ended non-zero."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") != container:
                continue
            t = (cs.get("state") or {}).get("terminated") or {}
            code = _int(t.get("exitCode"))
            at = epoch(t.get("finishedAt"))
            if not code or at is None:
                continue
            f = Failure(
                str(meta.get("name", "")),
                str((pod.get("spec") or {}).get("nodeName") or "?"),
                code,
                at,
                _int(labels.get(JOBSET_JOB_INDEX_LABEL)),
                _int(labels.get(K8S_COMPLETION_INDEX_LABEL)),
            )
            out.append((_int(labels.get(RESTART_ATTEMPT_LABEL)) or 0, f))
    return out


def _label(labels: Mapping[str, str], key: str) -> str | None:
    """A pod label as GKE's agent stamps it on an entry (``k8s-pod/<key, dots as underscores>``)."""
    return labels.get("k8s-pod/" + key.replace(".", "_"))


def from_history(lines: Iterable[str], pods: Iterable[str], times: Iterable[str], labels: Iterable[Mapping[str, str]]) -> list[tuple[int, Failure]]:
    """(attempt, failure) of each exit guard line in Cloud Logging entries (text, pod, timestamp, labels)."""
    out = []
    for text, pod, ts, lab in zip(lines, pods, times, labels, strict=True):
        m = EXIT_LINE.search(text)
        at = epoch(ts)
        if not m or at is None:
            continue
        f = Failure(pod, m.group(2), int(m.group(1)), at, _int(_label(lab, JOBSET_JOB_INDEX_LABEL)), _int(_label(lab, K8S_COMPLETION_INDEX_LABEL)))
        out.append((_int(_label(lab, RESTART_ATTEMPT_LABEL)) or 0, f))
    return out


def by_attempt(*sources: Iterable[tuple[int, Failure]]) -> list[AttemptFailures]:
    """The failures grouped by attempt, one per pod (the API's and Cloud Logging's view of a pod are the same failure)."""
    seen: dict[int, dict[str, Failure]] = {}
    for source in sources:
        for attempt, f in source:
            seen.setdefault(attempt, {}).setdefault(f.pod or f"{f.node}@{f.at}", f)
    return [AttemptFailures(k, tuple(sorted(v.values(), key=lambda f: f.at))) for k, v in sorted(seen.items())]


def exit_filter(base: str) -> str:
    """Cloud Logging's filter for every worker's exit guard lines of a run: the run's terms, any worker, the line's text."""
    return f'{base} AND textPayload:"tgk-exit-guard: exit"'
