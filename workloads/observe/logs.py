"""The log ``logs`` streams: one pod of a run, found by its place in the run.

With neither slice nor worker: the run's own log (a RayJob's driver, the submitter; else
worker 0 of slice 0, where MaxText prints its metrics); ``head``: a RayJob's Ray head.
No such pod is ``NotFound`` (exit 3), naming which one was looked for: the run may still
be queued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from toolkit.errors import NotFound

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster


def lines(
    cluster: Cluster,
    ns: str,
    run: str,
    *,
    slice_index: int | None = None,
    worker: int | None = None,
    head: bool = False,
    container: str | None = None,
    follow: bool = False,
) -> Iterator[str]:
    """The pod's log lines (``follow``: until its container exits); the pod is looked up before this returns."""
    pod = cluster.find_pod(ns, run, slice_index=slice_index, worker=worker, head=head)
    if pod is None:
        which = (
            "the head"
            if head
            else f"slice {slice_index or 0} worker {worker or 0}"
            if slice_index is not None or worker is not None
            else "the driver or worker 0"
        )
        raise NotFound(f"no pod for {which} of run {run!r} in namespace {ns!r} — the run may still be queued; see 'status {run}'")
    return cluster.logs(ns, pod["metadata"]["name"], container=container, follow=follow)
