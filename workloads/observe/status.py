"""A run's status as ``status`` shows it, and the wait until it has finished.

    current(cluster, ns, run) -> RunStatus     the run, its Workload and pods (``Cluster.run_status``),
                                               with the last checkpoint step worker 0 logged
    current(..., wait_s=T, on_change=f)        first the wait until it succeeded or failed
                                               (``WaitTimeout`` after T seconds), each change of
                                               phase, running pods or restarts given to ``f``

On a fleet the run is read where its pods are (``cluster``, the worker it was dispatched
to) and waited for through the manager, whose copy is the one that stays: the worker's
goes once its status is mirrored back. Nothing here prints; a refused read of the log
(the last checkpoint) is one warning line on stderr, as the analysis' are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster
    from workloads.cluster.status import RunStatus

FINISHED = ("Succeeded", "Failed", "NotFound")  # the phases a wait ends on


def current(
    cluster: Cluster,
    ns: str,
    run: str,
    *,
    manager: Cluster | None = None,
    wait_s: float | None = None,
    on_change: Callable[[RunStatus], None] | None = None,
) -> RunStatus:
    """The run's status with its last checkpoint; with ``wait_s``, once it has finished (see the module docstring)."""
    if wait_s is not None:
        followed = manager or cluster
        st = wait_finished(followed, ns, run, timeout=wait_s, on_change=on_change)
        if cluster is not followed and cluster.find_run(ns, run) is not None:
            # The worker's copy has the detail; MultiKueue may remove it between the two reads.
            there = cluster.run_status(ns, run)
            st = there if there.phase.value != "NotFound" else st
    else:
        st = cluster.run_status(ns, run)
    return dataclasses.replace(st, last_checkpoint=last_checkpoint(cluster, ns, run))


def wait_finished(cluster: Cluster, ns: str, run: str, *, timeout: float, on_change: Callable[[RunStatus], None] | None = None) -> RunStatus:
    """Poll the run until it succeeded or failed (or is gone); ``WaitTimeout`` (with the last status) after ``timeout``."""
    from workloads.cluster.wait import wait_for

    return wait_for(
        lambda: cluster.run_status(ns, run),
        timeout=timeout,
        what=f"{ns}/{run} to finish",
        interval=1.0,
        until=lambda st: st.phase.value in FINISHED,
        on_change=on_change,
        key=lambda st: (st.phase.value, st.running, st.restarts),
    )


def last_checkpoint(cluster: Cluster, ns: str, run: str) -> int | None:
    """The last checkpoint step in worker 0's log, when the cluster can serve it (else unknown).

    A log the server cannot serve (no kubelet behind a simulated node, pod gone) leaves it
    unknown; so does one the identity may not read, with a warning line on stderr: the
    status itself was readable. No answer from the server fails the command (exit 3).
    """
    import sys

    from toolkit.errors import Forbidden, NotFound
    from workloads.cluster.api import LogsUnavailable
    from workloads.observe.goodput import last_checkpoint as logged_checkpoint

    try:
        pod = cluster.find_pod(ns, run)
        if pod is None:
            return None
        return logged_checkpoint("\n".join(cluster.logs(ns, pod["metadata"]["name"], tail_lines=2000)))
    except (LogsUnavailable, NotFound):
        return None
    except Forbidden as e:
        sys.stderr.write(f"warning: the last checkpoint is unknown: {e}\n")
        return None
