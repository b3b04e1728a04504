"""Two teams in one cohort on the local cluster: borrowing idle quota, and reclaiming it.

Team B's run needs both slices while its quota is one: it borrows team A's idle slice
and is admitted. Team A then submits a run within its own quota: Kueue (fair sharing on,
as with every spec of two or more teams) reclaims the slice by preempting B's run,
admits A's, and requeues B's. When A's run is done, B's is admitted again and resumes
from the checkpoint it saved (the rehearsal's MaxText log says which step).

The cluster is this module's own (``<test state>-teams``), built from the spec below.
Figures (borrow and reclaim times) are scripts/bench_capacity.py's, not asserted here.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.spec import load_spec
from tests.integration.test_capacity import admitted_flavor, finished, running_pods, wl_cli, workload
from tests.support.local_cluster import own_spec, start_own_cluster, wait_for
from toolkit.errors import ToolkitError

A, B = "team-a", "team-b"
TEAMS_SPEC: dict[str, Any] = own_spec(
    "teams",
    tpu_pools=[{"name": "v5e-16", "type": "v5litepod-16", "slices": 2, "capacity": "spot"}],
    teams=[
        {"name": A, "quota_share": 0.5, "fair_sharing_weight": 1},
        {"name": B, "quota_share": 0.5, "fair_sharing_weight": 1, "borrowing_limit": 0.5},
    ],
    buckets=[
        {"name": "my-tpu-project-teams-a-ckpt", "purpose": "checkpoints", "team": A},
        {"name": "my-tpu-project-teams-b-ckpt", "purpose": "checkpoints", "team": B},
    ],
)
RESTORED = re.compile(r"restoring from this run's directory step (\d+)")
SAVED = re.compile(r"(?:Started an asynchronous checkpoint save for step|Saved a checkpoint at step) (\d+)")


@pytest.fixture(scope="module")
def teams_cluster(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    yield from start_own_cluster("teams", TEAMS_SPEC, tmp_path_factory.mktemp("teams"))


def _submit(spec_path: Path, kubeconfig: Path, team: str, run: str, slices: int, seconds: float, *extra: str) -> None:
    r = wl_cli(
        "submit",
        "maxtext-6b",
        "--spec",
        str(spec_path),
        "--kubeconfig",
        str(kubeconfig),
        "--team",
        team,
        "--name",
        run,
        "--slices",
        str(slices),
        "--rehearse-seconds",
        str(seconds),
        "--no-wait",
        *extra,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)


def _condition(wl: dict | None, type_: str) -> dict | None:
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def _log(kube, ns: str, run: str) -> str:
    """Worker 0's log, or "" while it has none yet (a pod just started, or just replaced)."""
    try:
        pod = kube.find_pod(ns, run, slice_index=0, worker=0)
        return "\n".join(kube.logs(ns, pod["metadata"]["name"])) if pod else ""
    except ToolkitError:
        return ""


def test_b_borrows_as_idle_quota_and_a_reclaims_it(teams_cluster) -> None:
    lc, spec_path = teams_cluster
    kube = lc.client()
    spec = load_spec(spec_path)
    pool = spec.tpu_pools[0]
    n = pool.shape.nodes
    b_run, a_run = f"b-{secrets.token_hex(2)}", f"a-{secrets.token_hex(2)}"
    try:
        t0 = time.monotonic()
        # B's run needs both slices; B's own quota is one: it borrows A's idle one.
        _submit(spec_path, lc.kubeconfig, B, b_run, 2, 30, "--checkpoint-every", "1")
        assert wait_for(lambda: admitted_flavor(workload(kube, B, b_run)), 120, f"{b_run} borrowing its way in") == pool.shape.key
        t_borrow = time.monotonic() - t0

        def borrowed() -> str | None:
            cq_b = kube.get(kube.kueue("ClusterQueue"), f"{B}-cq") or {}
            for f in (cq_b.get("status") or {}).get("flavorsReservation") or []:
                for r in f.get("resources") or []:
                    if r["name"] == "google.com/tpu" and str(r.get("total")) != "0":
                        return str(r.get("borrowed"))
            return None

        # B's ClusterQueue reports (once its status catches up) that one slice's chips are A's
        assert wait_for(borrowed, 30, "B's ClusterQueue usage") == str(pool.shape.chips)
        wait_for(lambda: running_pods(kube, B, b_run, 2 * n), 120, f"{b_run} Running")
        # A save after step 0 before A reclaims, so the resume shows the counter going on (a loaded host saves later).
        saved = wait_for(lambda: [x for x in SAVED.findall(_log(kube, B, b_run)) if int(x) > 0] or None, 180, f"{b_run} saving a checkpoint after step 0")

        # A submits within its own quota: Kueue reclaims the lent slice by preempting B's run.
        t1 = time.monotonic()
        _submit(spec_path, lc.kubeconfig, A, a_run, 1, 4)
        assert wait_for(lambda: admitted_flavor(workload(kube, A, a_run)), 120, f"{a_run} reclaiming") == pool.shape.key
        t_reclaim = time.monotonic() - t1
        # preempted across the cohort (reclamation, or fair sharing's word for it), never within B's own queue
        preempted = wait_for(lambda: _condition(workload(kube, B, b_run), "Preempted"), 30, f"{b_run}'s Preempted condition")
        assert preempted["status"] == "True" and preempted["reason"] in ("InCohortReclamation", "InCohortFairSharing"), preempted
        assert admitted_flavor(workload(kube, B, b_run)) is None  # requeued, waiting for A's slice
        sys.stderr.write(f"borrow: admitted {t_borrow:.2f}s after submit; reclaim: A admitted {t_reclaim:.2f}s after submit\n")

        # A's run ends; B's is admitted again and resumes from its checkpoint.
        assert wait_for(lambda: finished(kube, A, a_run), 120, f"{a_run} to finish") == "Completed"
        assert wait_for(lambda: admitted_flavor(workload(kube, B, b_run)), 120, f"{b_run} re-admitted") == pool.shape.key
        restored = wait_for(lambda: RESTORED.findall(_log(kube, B, b_run)) or None, 120, f"{b_run} restoring its checkpoint")
        assert int(restored[-1]) > 0 and int(restored[-1]) >= int(saved[0])
        assert wait_for(lambda: finished(kube, B, b_run), 180, f"{b_run} to finish") == "Completed"
    finally:
        for team, run in ((A, a_run), (B, b_run)):
            wl_cli("delete", run, "--yes", "--team", team, "--spec", str(spec_path), "--kubeconfig", str(lc.kubeconfig))
