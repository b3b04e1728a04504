"""Kueue's waitForPodsReady on the local cluster: a slice whose nodes never come back.

The spec's ``kueue.wait_for_pods_ready`` goes into the local Kueue's Configuration with
its timeouts scaled by the rehearsal time factor (default spec: 1200 s x 0.03 = 36 s).
A run is preempted and its slice's node pool is not replaced: the JobSet restarts, the
lost slice's new pods cannot be placed, and past ``recoveryTimeout`` Kueue must evict the
Workload (``PodsReadyTimeout``), give its quota back and requeue it with backoff —
the path of kueue#14811, where a Workload evicted this way was reported to keep its
quota and never be requeued.
"""

from __future__ import annotations

import json
import secrets
import time

import pytest

from tests.integration.test_rehearsal import NS, Recorder, _cond, wl
from tests.support.local_cluster import wait_for
from workloads.local.disrupt import Replacement, replacements_dir


@pytest.mark.usefixtures("tpu_quota")
def test_a_slice_that_never_comes_back_releases_quota_and_is_requeued(cluster, local_cluster, kubeconfig) -> None:
    run = f"wfpr-{secrets.token_hex(3)}"
    wl_info = cluster.kueue("Workload")
    seen = Recorder(cluster, wl_info, NS)
    record_path = None
    try:
        sub = wl("submit", "maxtext-6b", "--slices", "2", "--name", run, "--rehearse-seconds", "300", "--kubeconfig", str(kubeconfig))
        assert sub.returncode == 0, (sub.stdout, sub.stderr)
        wait_for(lambda: len([p for p in cluster.pods(NS, run) if p["status"].get("phase") == "Running"]) == 8 or None, 180, "all 8 workers Running")
        pre = wl("local", "preempt", run, "--slice", "1", "--replace-after", "900", "--state-dir", str(local_cluster.state_dir), "-o", "json")
        assert pre.returncode == 0, (pre.stdout, pre.stderr)
        record_path = replacements_dir(local_cluster.state_dir) / f"{json.loads(pre.stdout)['pool']}.json"
        t0 = time.monotonic()

        def evicted() -> dict | None:
            js = cluster.jobset(NS, run)
            w = cluster.workload_for(NS, js) if js else None
            c = _cond(w or {}, "Evicted")
            return w if c and c.get("status") == "True" and c.get("reason") == "PodsReadyTimeout" else None

        w = wait_for(evicted, 150, "Kueue to evict the Workload for PodsReadyTimeout")
        waited = time.monotonic() - t0
        # Not before the scaled recoveryTimeout (36 s); the wait_for above bounds how long after (a hang guard, not a speed test).
        assert waited > 30, waited
        uid = w["metadata"]["uid"]

        def requeued() -> dict | None:
            for _, obj in seen.history(uid):
                state = (obj.get("status") or {}).get("requeueState") or {}
                reserved = _cond(obj, "QuotaReserved")
                if state.get("count", 0) >= 1 and reserved and reserved.get("status") == "False":
                    return obj
            return None

        # Quota given back and a requeue counted: the run waits for its backoff, it does not hold 32 chips.
        wait_for(requeued, 60, "the evicted Workload to release its quota and count a requeue")
    finally:
        seen.stop()
        cluster.delete_jobset(NS, run)
        if record_path is not None:
            _bring_the_nodes_back(local_cluster.state_dir, record_path)


def _bring_the_nodes_back(state_dir, path) -> None:
    """Make the pending replacement due now, so later tests have the slice's nodes again."""
    wait_for(lambda: (not path.exists()) or Replacement.load(path).gone is not None or None, 90, "the node pool to be gone")
    if path.exists():
        record = Replacement.load(path)
        record.up_at = time.time()
        record.save(state_dir)
    wait_for(lambda: not path.exists() or None, 120, "the replacement nodes to be back")
