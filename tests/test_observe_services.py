"""workloads.observe.status and workloads.observe.logs: the services under `status` and `logs`, over fake clusters.

The commands themselves are exercised through the real client in tests/test_observe_cli.py; here the
parts a fake makes plain: which cluster a fleet's run is waited for on and read from, and
which pod's absence is named.
"""

from __future__ import annotations

import pytest

from toolkit.errors import NotFound
from workloads.cluster import status as st
from workloads.cluster.wait import WaitTimeout
from workloads.observe import logs, status


def _jobset(phase: str) -> dict:
    done = {"Succeeded": "Completed", "Failed": "Failed"}.get(phase)
    conditions = [{"type": done, "status": "True"}] if done else []
    return {"metadata": {"name": "r1", "namespace": "ns"}, "spec": {"replicatedJobs": []}, "status": {"conditions": conditions}}


class Fake:
    """A cluster whose run goes through ``phases`` (one per status read), with no pods and no log."""

    def __init__(self, *phases: str, has_run: bool = True) -> None:
        self.phases, self.has_run, self.reads = list(phases), has_run, 0

    def run_status(self, ns: str, run: str) -> st.RunStatus:
        self.reads += 1
        phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        return st.run_status(ns, run, _jobset(phase), None, [])

    def find_run(self, ns: str, run: str):
        return ("JobSet", {}) if self.has_run else None

    def find_pod(self, ns: str, run: str, **_):
        return None

    # The run's nodes (their announced host maintenance): none here.
    def resource(self, api_version: str, kind: str) -> str:
        return kind

    def list(self, info, *_, **__) -> list:
        return []

    def pods(self, ns: str, run: str, kind=None) -> list:
        return []


def test_the_status_without_a_wait_is_read_once_where_the_pods_are() -> None:
    worker, manager = Fake("Succeeded"), Fake("Running")
    got = status.current(worker, "ns", "r1", manager=manager)
    assert got.phase.value == "Succeeded" and got.last_checkpoint is None
    assert (worker.reads, manager.reads) == (1, 0)


def test_a_fleets_run_is_waited_for_on_the_manager_and_read_from_the_worker_while_it_is_there() -> None:
    manager, worker = Fake("Running", "Succeeded"), Fake("Failed")
    seen: list[str] = []
    got = status.current(worker, "ns", "r1", manager=manager, wait_s=30, on_change=lambda s: seen.append(s.phase.value))
    assert manager.reads == 2 and seen[-1] == "Succeeded"
    assert got.phase.value == "Failed" and worker.reads == 1  # the worker's copy, read after the wait
    gone = Fake("Failed", has_run=False)  # the worker's copy went once its status was mirrored back
    assert status.current(gone, "ns", "r1", manager=Fake("Succeeded"), wait_s=30).phase.value == "Succeeded"


def test_a_wait_that_runs_out_says_where_the_run_stood() -> None:
    with pytest.raises(WaitTimeout) as e:
        status.current(Fake("Running"), "ns", "r1", wait_s=0)
    assert e.value.last.phase.value == "Starting"  # a running JobSet with no pod yet: still starting, not finished


@pytest.mark.parametrize(
    ("where", "which"),
    [({}, "the driver or worker 0"), ({"slice_index": 2}, "slice 2 worker 0"), ({"worker": 3}, "slice 0 worker 3"), ({"head": True}, "the head")],
)
def test_no_pod_to_stream_names_the_one_looked_for(where: dict, which: str) -> None:
    with pytest.raises(NotFound) as e:
        logs.lines(Fake("Running"), "ns", "r1", **where)
    assert str(e.value) == f"no pod for {which} of run 'r1' in namespace 'ns' — the run may still be queued; see 'status r1'"
