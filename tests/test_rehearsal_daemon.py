"""The rehearsal daemon's pass over pods, against a fake API server: what it plays for a pod it saw only part of.

The real daemon against kwok is tested in tests/integration/test_rehearsal.py; there a pod deleted
between two passes was a race a loaded host sometimes lost. Here it is made certain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workloads.local import rehearsald
from workloads.local.addons import REHEARSAL_ANNOTATION, REHEARSAL_LABEL
from workloads.local.rehearsal import Rehearsal


class _Resource:
    def path(self, ns: str, name: str, sub: str = "") -> str:
        return f"/api/v1/namespaces/{ns}/pods/{name}" + (f"/{sub}" if sub else "")


class _Kube:
    """Lists the pods the test holds; every write is accepted and recorded."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.current: list[dict[str, Any]] = []  # pods as a GET finds them when they changed since the list
        self.writes: list[tuple] = []

    def resource(self, *_: str) -> _Resource:
        return _Resource()

    def list(self, *_: Any, **__: Any) -> list[dict[str, Any]]:
        return list(self.pods)

    def get(self, _info: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The pod as it is now (``current``, else as listed)."""
        now = {p["metadata"]["name"]: p for p in [*self.pods, *self.current]}
        return now.get(name)

    def create(self, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.writes.append(("create", obj["kind"]))
        return obj

    def request(self, method: str, path: str, *_: Any, **__: Any) -> dict[str, Any]:
        self.writes.append((method, path))
        return {}


def _pod(r: Rehearsal, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "run-a-slice-job-0-0-x1",
            "namespace": "research",
            "uid": "pod-uid-1",
            "labels": {REHEARSAL_LABEL: "true", rehearsald.JOBSET_UID_LABEL: "js-uid", rehearsald.RESTART_ATTEMPT_LABEL: "0"},
            "annotations": {REHEARSAL_ANNOTATION: r.to_annotation()},
        },
        "spec": {"nodeName": "node-0", "containers": [{"name": "jax-tpu"}]},
        "status": {"phase": phase},
    }


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch):
    kube = _Kube()
    d = rehearsald.Rehearsals(tmp_path, kube)
    monkeypatch.setattr(d, "_cluster_stamp", lambda: ("p", "us-central1", "c"))
    uploads: list[tuple[str, str]] = []
    saves: list[int] = []
    monkeypatch.setattr(d.checkpoints, "upload_events", lambda directory, name, data: uploads.append((directory, name)))
    monkeypatch.setattr(d.checkpoints, "latest", lambda *a, **k: None)
    monkeypatch.setattr(d.checkpoints, "save", lambda uri, step, run, mounts=None: saves.append(step))
    monkeypatch.setattr(d.checkpoints, "begin", lambda *a, **k: None)
    return d, kube, uploads, saves


RUN = Rehearsal(
    run="run-a",
    kind="maxtext",
    workers=1,
    steps=100,
    wall_seconds=100.0,
    step_seconds=1.0,
    checkpoint_period=1000,
    autocheckpoint=True,
    checkpoint_dir="gs://ckpt/run-a/checkpoints/",
    output_dir="gs://out/run-a/",
)


def test_a_pod_deleted_between_two_passes_gets_its_sigterm_played(daemon) -> None:
    """kwok removes a deleted pod as soon as its containers stop, as the kubelet does; GKE's SIGTERM
    had its grace, so process 0's event file is written and the autocheckpoint save made."""
    d, kube, uploads, saves = daemon
    kube.pods = [_pod(RUN)]
    d.tick(1000.0)  # running: the attempt's clock starts
    d.tick(1010.5)  # steps 0..9 done (step 0 saved, as MaxText saves its first step)
    assert uploads == [] and saves == [0]
    kube.pods = []  # deleted, stopped and removed before the next pass
    d.tick(1011.0)
    assert uploads == [("gs://out/run-a/tensorboard/run-a/", "events.out.tfevents.1000.run-a-slice-job-0-0-x1")]
    assert saves == [0, 10]  # the step it reached when its SIGTERM came (the pass before it went saw 0..9)
    assert d.workers == {} and not d.busy
    d.tick(1012.0)  # played once
    assert len(uploads) == 1 and saves == [0, 10]


def test_a_pod_that_vanished_before_it_ever_ran_plays_nothing(daemon) -> None:
    d, kube, uploads, saves = daemon
    kube.pods = [_pod(RUN, phase="Pending")]
    d.tick(1000.0)
    kube.pods = []
    d.tick(1001.0)
    assert uploads == [] and saves == []


def test_a_pod_seen_stopping_is_played_once_not_again_when_it_goes(daemon) -> None:
    d, kube, uploads, saves = daemon
    kube.pods = [_pod(RUN)]
    d.tick(1000.0)
    stopping = _pod(RUN, phase="Failed")
    stopping["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 143}}}]
    kube.pods = [stopping]
    d.tick(1005.5)
    assert len(uploads) == 1 and saves == [0, 4]
    kube.pods = []
    d.tick(1006.0)
    assert len(uploads) == 1 and saves == [0, 4]


def _restarts_in_place(d, monkeypatch) -> None:
    """Every pod is an agent pod whose container's first incarnation runs its program (the barrier is down)."""
    from workloads.local import agents

    monkeypatch.setattr(agents, "is_agent_pod", lambda pod: True)
    monkeypatch.setattr(d.agents, "tick", lambda pods, t: None)
    monkeypatch.setattr(d.agents, "incarnation", lambda uid: (0, True))


def test_an_in_place_worker_takes_the_attempt_the_agent_wrote_not_the_listed_one(daemon, monkeypatch) -> None:
    """The agent writes the attempt, then lifts the barrier and starts the program; a pod listed just
    before that write has no attempt yet. Its worker fell into attempt "" while the others were in
    "0", and the run never started (CI: the in-place crash test, 300 s with no attempt joined)."""
    import copy

    from workloads.render.inplace import ATTEMPT_ANNOTATION

    d, kube, _, _ = daemon
    listed = _pod(RUN)
    now = copy.deepcopy(listed)
    now["metadata"]["annotations"][ATTEMPT_ANNOTATION] = "0"
    kube.pods, kube.current = [listed], [now]
    _restarts_in_place(d, monkeypatch)
    d.tick(1000.0)
    (w,) = d.workers.values()
    assert w.attempt == "in-place-0"
    assert list(d.books["js-uid"].attempts) == ["in-place-0"]  # the one worker of the run started the attempt


def test_an_in_place_pod_gone_before_it_is_read_again_makes_no_worker_yet(daemon, monkeypatch) -> None:
    d, kube, _, _ = daemon
    kube.pods = [_pod(RUN)]
    monkeypatch.setattr(kube, "get", lambda *a, **k: None)
    _restarts_in_place(d, monkeypatch)
    d.tick(1000.0)
    assert d.workers == {}
