"""Submitting under a name that already exists, against the real JobSet API (issue: a raw HTTP 422 before).

The same options again — while the run is there and after it finished — are a no-op that
reports the run; other options are one line naming --name, exit 2, and nothing applied.
"""

from __future__ import annotations

import secrets

import pytest

from tests.integration.test_rehearsal import NS, _finished, wl
from tests.support.local_cluster import wait_for


@pytest.mark.usefixtures("tpu_quota")
def test_resubmitting_the_same_run_is_a_noop_and_another_is_refused(cluster, kubeconfig) -> None:
    run = f"again-{secrets.token_hex(3)}"
    args = ["submit", "hello-tpu", "--name", run, "--kubeconfig", str(kubeconfig)]
    try:
        first = wl(*args, "--rehearse-seconds", "8")
        assert first.returncode == 0, first.stderr
        uid = cluster.jobset(NS, run)["metadata"]["uid"]
        rv = cluster.jobset(NS, run)["metadata"]["resourceVersion"]

        again = wl(*args, "--rehearse-seconds", "8")
        assert again.returncode == 0, again.stderr
        assert "already submitted with these options; nothing applied" in again.stderr
        live = cluster.jobset(NS, run)
        assert live["metadata"]["uid"] == uid

        changed = wl(*args, "--rehearse-seconds", "9")
        lines = [ln for ln in changed.stderr.splitlines() if ln.strip()]
        assert changed.returncode == 2 and len(lines) == 1, changed.stderr
        assert lines[0].startswith(f"error: --name: JobSet {NS}/{run} already exists with different options"), lines[0]
        assert cluster.jobset(NS, run)["metadata"]["uid"] == uid

        assert wait_for(lambda: _finished(cluster, run), 180, "the run to finish") == "Completed"
        done = wl(*args, "--rehearse-seconds", "8")
        assert done.returncode == 0, done.stderr
        assert "It is Succeeded" in done.stderr
        assert rv and cluster.jobset(NS, run)["metadata"]["uid"] == uid
    finally:
        cluster.delete_jobset(NS, run)
        wait_for(lambda: cluster.jobset(NS, run) is None or None, 120, "the JobSet to go")
