"""Preflight rows from sample cluster objects (pure), and against what `queues apply` renders."""

from __future__ import annotations

import json

from infra.spec import load_spec, parse_spec
from workloads.observe import preflight as pf
from workloads.render.kueue import queue_objects

SPEC = load_spec("examples/default.yaml")  # 2 x v5litepod-16 (4 nodes each), team research, us-west4-a
POOL = SPEC.tpu_pools[0]
TEAM = SPEC.teams[0]


def _node(name: str, pool: str, *, zone="us-west4-a", topo="4x4", accel="tpu-v5-lite-podslice", tpus="4", ready=True) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {
                pf.ACCELERATOR_LABEL: accel,
                pf.TOPOLOGY_LABEL: topo,
                pf.NODEPOOL_LABEL: pool,
                pf.ZONE_LABEL: zone,
            },
        },
        "status": {"allocatable": {"google.com/tpu": tpus}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _nodes(pools=("v5e-16-0", "v5e-16-1"), **kw) -> tuple[dict, ...]:
    return tuple(_node(f"{p}-n{i}", p, **kw) for p in pools for i in range(4))


def _rendered(spec=SPEC, team=TEAM) -> dict[str, tuple[dict, ...]]:
    """What `queues apply` creates for ``spec``, as the Snapshot fields (``team``'s LocalQueue)."""
    objs = queue_objects(spec)
    by = lambda k: tuple(o for o in objs if o["kind"] == k)  # noqa: E731
    return {
        "resource_flavors": by("ResourceFlavor"),
        "cluster_queues": by("ClusterQueue"),
        "local_queues": tuple(o for o in by("LocalQueue") if o["metadata"]["namespace"] == team.ns),
    }


def _rows(rep: pf.Report) -> dict[str, pf.Result]:
    return {c.name: c.result for c in rep.checks}


def test_a_cluster_built_from_the_spec_passes() -> None:
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True, nodes=_nodes(), **_rendered()))
    assert rep.ok, rep.checks
    assert set(_rows(rep).values()) == {pf.Result.PASS}
    assert {"resource-flavor", "local-queue", "cluster-queue", "nodes", "zone"} <= set(_rows(rep))
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["ok"] is True and d["slices"] == 2 and d["checks"][0]["result"] == "pass"


def test_empty_cluster_fails_every_row_with_a_fix() -> None:
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True))
    rows = _rows(rep)
    assert not rep.ok
    for name in ("resource-flavor", "local-queue", "cluster-queue", "nodes", "zone"):
        assert rows[name] is pf.Result.FAIL, name
    assert all(c.fix for c in rep.checks if c.result is pf.Result.FAIL)


def test_kueue_not_installed() -> None:
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=False, nodes=_nodes()))
    assert _rows(rep)["kueue"] is pf.Result.FAIL and "Kueue v" in rep.checks[0].fix


def test_flavor_for_another_topology_does_not_count() -> None:
    r = _rendered()
    wrong = [{**f, "spec": {"nodeLabels": {pf.ACCELERATOR_LABEL: "tpu-v5-lite-podslice", pf.TOPOLOGY_LABEL: "2x4"}}} for f in r["resource_flavors"]]
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(True, tuple(wrong), r["cluster_queues"], r["local_queues"], _nodes()))
    assert _rows(rep)["resource-flavor"] is pf.Result.FAIL and "4x4" in rep.checks[0].detail


def test_a_flavor_named_by_someone_else_still_counts() -> None:
    # xpk names flavors like 1xv5litepod-16; matching is by node labels, not names.
    r = _rendered()
    flavors = tuple({**f, "metadata": {"name": "1xv5litepod-16"}} for f in r["resource_flavors"])
    cqs = json.loads(json.dumps(r["cluster_queues"]).replace('"name": "v5e-4x4"', '"name": "1xv5litepod-16"'))
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(True, flavors, tuple(cqs), r["local_queues"], _nodes()))
    assert rep.ok, rep.checks


def test_not_enough_quota_for_more_slices() -> None:
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True, nodes=_nodes(), **_rendered()), slices=3)
    row = next(c for c in rep.checks if c.name == "cluster-queue")
    assert row.result is pf.Result.FAIL and "32" in row.detail and "48" in row.detail
    assert _rows(rep)["nodes"] is pf.Result.FAIL  # 2 pools of 4 cannot hold 3 slices


def test_cohort_borrowing_is_a_warning() -> None:
    data = SPEC.model_dump(mode="json", exclude_none=True)
    two_teams = parse_spec(
        {
            **data,
            "teams": [{"name": "research", "quota_share": 0.5}, {"name": "prod", "quota_share": 0.5}],
            "buckets": [{**b, "team": "research"} for b in data.get("buckets", [])],  # with two teams a bucket names its team
        }
    )
    team = two_teams.teams[0]
    snap = pf.Snapshot(True, nodes=_nodes(), **_rendered(two_teams, team))
    rep = pf.evaluate(two_teams, two_teams.tpu_pools[0], team, snap)
    row = next(c for c in rep.checks if c.name == "cluster-queue")
    assert row.result is pf.Result.WARN and "cohort" in row.detail and rep.ok


def test_local_queue_missing_in_the_team_namespace() -> None:
    r = _rendered()
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(True, r["resource_flavors"], r["cluster_queues"], (), _nodes()))
    row = next(c for c in rep.checks if c.name == "local-queue")
    assert row.result is pf.Result.FAIL and TEAM.queue in row.detail and TEAM.ns in row.detail


def test_nodes_short_not_ready_or_without_tpus() -> None:
    r = _rendered()
    partial = _nodes()[:6] + (_node("v5e-16-1-n2", "v5e-16-1", ready=False), _node("v5e-16-1-n3", "v5e-16-1", tpus="0"))
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(True, nodes=partial, **r))
    rows = _rows(rep)
    assert rows["nodes"] is pf.Result.FAIL and rows["node-tpu-resource"] is pf.Result.FAIL
    assert "1 complete node pool" in next(c.detail for c in rep.checks if c.name == "nodes")


def test_zone_mismatch_is_caught() -> None:
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True, nodes=_nodes(zone="us-west4-b"), **_rendered()))
    row = next(c for c in rep.checks if c.name == "zone")
    assert row.result is pf.Result.FAIL and "us-west4-b" in row.detail and "us-west4-a" in row.detail


def test_flex_start_pools_without_nodes_only_warn() -> None:
    flex = load_spec("examples/flex-start.yaml")
    team = flex.teams[0]
    rep = pf.evaluate(flex, flex.tpu_pools[0], team, pf.Snapshot(True, **_rendered(flex, team)))
    assert _rows(rep)["nodes"] is pf.Result.WARN and rep.ok


def test_announced_host_maintenance_on_the_shapes_nodes_is_a_warning_that_names_them() -> None:
    from workloads.cluster import maintenance as mt

    nodes = _nodes()
    for n in nodes[4:]:
        n["metadata"]["labels"][mt.SCHEDULED_MAINTENANCE_LABEL] = "1800000600"
    rep = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True, nodes=nodes, **_rendered()), now=1_800_000_000)
    row = next(c for c in rep.checks if c.name == "maintenance")
    assert rep.ok and row.result is pf.Result.WARN and "maintain RUN --watch" in row.fix
    assert row.detail.startswith("4 node(s) with host maintenance announced: v5e-16-1-n0 (pool v5e-16-1): window starts 2027-01-15T08:10:00Z (in 10m)")
    clean = pf.evaluate(SPEC, POOL, TEAM, pf.Snapshot(kueue_served=True, nodes=_nodes(), **_rendered()))
    assert _rows(clean)["maintenance"] is pf.Result.PASS
