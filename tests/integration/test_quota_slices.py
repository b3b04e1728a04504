"""Quotas in whole slices, against the real Kueue: no paid slice is stranded.

Two shapes of four 16-chip slices each and three teams. The module's cluster is built from
the accepted spec (shares 0.5/0.25/0.25: whole slices of both shapes).

* before: the ClusterQueues the toolkit rendered for shares 0.34/0.33/0.33 until now
  (``floor(share x chips)``: 21 + 21 + 21 = 63 of 64 chips per shape) are applied over
  them, and the teams submit four one-slice runs on one shape at once. Three are
  admitted and one stays pending for good: its team has 5 chips left, the cohort lends
  10, and a slice is 16. (Which one depends on Kueue's order: a team whose nominal quota
  another team borrowed reclaims it by preemption, and the one left out changes.) (The spec loader now refuses those shares.)
* after: the toolkit's own quotas are applied back (what ``queues apply`` applies), and
  the teams submit every slice of every shape at once, each team its own share's worth:
  all eight runs are admitted, each on its team's own quota.

The cluster is this module's own (``<test state>-quota``). Runs are rehearsals on kwok.
"""

from __future__ import annotations

import math
import secrets
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infra.catalog import QUOTA_FALLBACK_SIZE, machine_size
from infra.spec import load_spec, parse_spec
from tests.support.local_cluster import own_spec, start_own_cluster, wait_for
from toolkit.errors import SpecError
from toolkit.names import TPU_RESOURCE
from workloads import runs
from workloads.render.flavors import flavors
from workloads.render.kueue import cluster_objects, cluster_queues

TEAMS = ("a", "b", "c")
ACCEPTED = {"a": 0.5, "b": 0.25, "c": 0.25}
STRANDED = {"a": 0.34, "b": 0.33, "c": 0.33}
SPEC: dict[str, Any] = own_spec(
    "quota",
    tpu_pools=[
        {"name": "v5e", "type": "v5litepod-16", "slices": 4, "capacity": "spot"},
        {"name": "v6e", "type": "v6e-16", "slices": 4, "capacity": "spot"},
    ],
    teams=[{"name": t, "quota_share": ACCEPTED[t]} for t in TEAMS],
)
PENDING_FOR_S = 20  # how long the stranded run is watched staying pending (Kueue admits in about a second)


@pytest.fixture(scope="module")
def quota_cluster(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    yield from start_own_cluster("quota", SPEC, tmp_path_factory.mktemp("quota"))


def floored_cluster_queues(spec, shares: dict[str, float]) -> list[dict[str, Any]]:
    """The ClusterQueues as the toolkit rendered them before whole slices: floor(share x chips / vCPU / GiB) per flavor."""
    by_flavor = {f.name: f for f in flavors(spec)}
    out = cluster_queues(spec)
    for cq, team in zip(out, spec.teams, strict=True):
        share = shares[team.name]
        for entry in cq["spec"]["resourceGroups"][0]["flavors"]:
            f = by_flavor[entry["name"]]
            size = machine_size(f.shape.machine_type, default=QUOTA_FALLBACK_SIZE)
            old = {
                TPU_RESOURCE: math.floor(f.chips * share + 1e-9),
                "cpu": str(math.floor(f.nodes * size.vcpu * share + 1e-9)),
                "memory": f"{math.floor(f.nodes * size.memory_gib * share + 1e-9)}Gi",
            }
            entry["resources"] = [{"name": r, "nominalQuota": old[r]} for r in (TPU_RESOURCE, "cpu", "memory")]
    return out


def _admitted(kube, ns: str, run: str) -> dict | None:
    js = kube.jobset(ns, run)
    wl = kube.workload_for(ns, js) if js else None
    conds = {c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []}
    return wl if conds.get("Admitted", {}).get("status") == "True" else None


def _pending_reason(kube, ns: str, run: str) -> str:
    js = kube.jobset(ns, run)
    wl = kube.workload_for(ns, js) if js else None
    conds = {c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []}
    return str(conds.get("QuotaReserved", {}).get("message", ""))


def _submit_all(kube, spec, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Submit one-slice runs (team, pool) all at once; returns (namespace, run) per run."""
    tag = secrets.token_hex(2)

    def one(i: int, team: str, pool: str) -> tuple[str, str]:
        plan = runs.plan("hello-tpu", spec, runs.Overrides(name=f"q{tag}-{team}-{pool}-{i}", team=team, pool=pool, slices=1))
        runs.apply(kube, plan, rehearse_seconds=600)
        return plan.target.namespace, plan.name

    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        return list(pool.map(lambda args: one(*args), [(i, t, p) for i, (t, p) in enumerate(wanted)]))


def _delete(kube, submitted: list[tuple[str, str]]) -> None:
    for ns, run in submitted:
        kube.delete_run(ns, run)
    wait_for(lambda: all(kube.jobset(ns, run) is None for ns, run in submitted) or None, 120, "the runs to go")


def _tpu_reservations(kube) -> dict[str, dict[str, tuple[str, str]]] | None:
    """Per team ClusterQueue, per flavor: (chips reserved, chips borrowed), as Kueue reports them."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for t in TEAMS:
        cq = kube.get(kube.kueue("ClusterQueue"), f"{t}-cq") or {}
        for f in (cq.get("status") or {}).get("flavorsReservation") or []:
            for r in f.get("resources") or []:
                if r["name"] == TPU_RESOURCE:
                    out.setdefault(t, {})[f["name"]] = (str(r.get("total")), str(r.get("borrowed", "0")))
    return out


def test_stranded_shares_are_refused_by_the_loader() -> None:
    doc = {**SPEC, "teams": [{"name": t, "quota_share": STRANDED[t]} for t in TEAMS]}
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.field == "teams[0].quota_share" and "0.5/0.25/0.25" in e.value.fix


def test_floored_quotas_strand_a_slice_and_whole_slices_admit_every_one(quota_cluster) -> None:
    lc, spec_path = quota_cluster
    kube = lc.client()
    spec = load_spec(spec_path)
    cohort_chips = {f.name: f.chips for f in flavors(spec)}
    assert cohort_chips == {"v5e-4x4": 64, "v6e-4x4": 64}

    # ---- before: the floored quotas of 0.34/0.33/0.33, every team submitting at once
    kube.apply(floored_cluster_queues(spec, STRANDED))
    stored = {cq["metadata"]["name"]: cq for cq in kube.list(kube.kueue("ClusterQueue"))}
    assert [stored[f"{t}-cq"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] for t in TEAMS] == [21, 21, 21]
    before = _submit_all(kube, spec, [("a", "v5e"), ("b", "v5e"), ("c", "v5e"), ("a", "v5e")])
    try:

        def three_admitted() -> list[tuple[str, str]] | None:
            n = [r for r in before if _admitted(kube, *r)]
            return n if len(n) == 3 else None

        wait_for(three_admitted, 120, "three of the four runs admitted")
        # Which run is left out depends on the order Kueue took them in, and may change once:
        # when team a's two runs came first (a borrowing 11 chips), c reclaims its nominal
        # quota by preempting one of them (reclaimWithinCohort: Any). The slice stays
        # stranded either way: four runs are never admitted at once.
        t0 = time.monotonic()
        while time.monotonic() - t0 < PENDING_FOR_S:
            now = [r for r in before if _admitted(kube, *r)]
            assert len(now) <= 3, f"all four runs admitted on floored quotas: {now}"
            time.sleep(1)
        admitted = wait_for(three_admitted, 60, "three of the four runs admitted after the watch")
        (stranded,) = [r for r in before if r not in admitted]
        reason = _pending_reason(kube, *stranded)
        sys.stderr.write(f"stranded: {stranded[1]} pending {PENDING_FOR_S}s on floored quotas: {reason}\n")
        assert "insufficient" in reason.lower() or "couldn't assign flavors" in reason.lower(), reason
    finally:
        _delete(kube, before)

    # ---- after: the toolkit's whole-slice quotas; every slice of every shape, all teams at once
    kube.apply([o for o in cluster_objects(spec) if o["kind"] == "ClusterQueue"])
    wanted = [(t, pool) for pool in ("v5e", "v6e") for t in TEAMS for _ in range(int(ACCEPTED[t] * 4))]
    assert len(wanted) == 8  # 4 + 4 slices
    t1 = time.monotonic()
    after = _submit_all(kube, spec, wanted)
    try:
        wls = wait_for(lambda: (w := [_admitted(kube, *r) for r in after]) and all(w) and w, 120, "all eight runs admitted")
        # each team holds exactly its own share of each shape, and borrows nothing
        want = {t: {f: (str(int(ACCEPTED[t] * 64)), "0") for f in cohort_chips} for t in TEAMS}
        assert wait_for(lambda: (r := _tpu_reservations(kube)) == want and r, 30, "the ClusterQueues' reservations") == want
        sys.stderr.write(f"whole slices: all {len(after)} runs admitted {time.monotonic() - t1:.1f}s after submitting, none borrowing\n")
        flavors_used = sorted(w["status"]["admission"]["podSetAssignments"][0]["flavors"][TPU_RESOURCE] for w in wls)
        assert flavors_used == ["v5e-4x4"] * 4 + ["v6e-4x4"] * 4
    finally:
        _delete(kube, after)
