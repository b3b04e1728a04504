"""Quotas in whole slices (infra.quotas; no paid slice stranded): the rule, its refusals, and properties over generated specs.

The real Kueue side (a stranded slice reproduced, every slice admitted) is
tests/integration/test_quota_slices.py.
"""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra import quotas
from infra.quotas import QuotaOwner
from infra.spec import parse_spec
from toolkit.errors import SpecError
from toolkit.names import TPU_RESOURCE
from workloads.render.flavors import flavors, quota
from workloads.render.kueue import cluster_queues

BASE = {
    "project": "my-tpu-project",
    "region": "us-west4",
    "zones": ["us-west4-a"],
    "cluster": {"name": "tpu-dev"},
    "tpu_pools": [{"name": "v5e-16", "type": "v5litepod-16", "slices": 4, "capacity": "spot"}],
}


def spec_with(teams, pools=None, **extra):
    d = copy.deepcopy(BASE)
    d["teams"] = teams
    if pools is not None:
        d["tpu_pools"] = pools
    d.update(extra)
    return parse_spec(d)


def team_chips(spec) -> dict[str, dict[str, int]]:
    """Per team, per flavor: the nominal TPU quota the toolkit renders."""
    out = {}
    for cq in cluster_queues(spec):
        out[cq["metadata"]["name"].removesuffix("-cq")] = {
            f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == TPU_RESOURCE) for f in cq["spec"]["resourceGroups"][0]["flavors"]
        }
    return out


# ------------------------------------------------------------------ the named instances


def test_thirds_of_four_slices_are_refused_with_shares_that_work():
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.34}, {"name": "b", "quota_share": 0.33}, {"name": "c", "quota_share": 0.33}])
    assert e.value.field == "teams[0].quota_share" and "1.36 slices" in e.value.problem
    assert "0.5/0.25/0.25 (a/b/c)" in e.value.fix
    # the fix works, and gives every slice to a team
    spec = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.25}, {"name": "c", "quota_share": 0.25}])
    assert team_chips(spec) == {"a": {"v5e-4x4": 32}, "b": {"v5e-4x4": 16}, "c": {"v5e-4x4": 16}}


def test_five_teams_at_a_fifth_are_refused_and_the_fix_has_a_borrow_only_team():
    with pytest.raises(SpecError) as e:
        spec_with([{"name": n, "quota_share": 0.2} for n in "abcde"])
    assert e.value.field == "teams[0].quota_share" and "0.8 slices" in e.value.problem
    assert "0.25/0.25/0.25/0.25/0 (a/b/c/d/e; a team with 0 only borrows idle slices)" in e.value.fix
    spec = spec_with([{"name": n, "quota_share": s} for n, s in zip("abcde", (0.25, 0.25, 0.25, 0.25, 0), strict=True)])
    assert [c["v5e-4x4"] for c in team_chips(spec).values()] == [16, 16, 16, 16, 0]


def test_shares_that_leave_slices_to_nobody_are_refused():
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.25}, {"name": "b", "quota_share": 0.25}])
    assert e.value.field == "teams" and "the other 2" in e.value.problem and "0.5/0.5" in e.value.fix


def test_a_single_team_with_a_part_share_is_refused():
    """One team at 0.5 used to own half and leave the rest to no queue at all."""
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.5}])
    assert e.value.field == "teams" and "1 (a)" in e.value.fix


@pytest.mark.parametrize("key", ["borrowing_limit", "lending_limit"])
def test_limits_are_whole_slices(key):
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.5, key: 0.3}, {"name": "b", "quota_share": 0.5}])
    assert e.value.field == f"teams[0].{key}" and e.value.fix.startswith("use 0.25 or 0.5")
    spec = spec_with([{"name": "a", "quota_share": 0.5, key: 0.25}, {"name": "b", "quota_share": 0.5}])
    camel = {"borrowing_limit": "borrowingLimit", "lending_limit": "lendingLimit"}[key]
    (tpu,) = [r for r in cluster_queues(spec)[0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == TPU_RESOURCE]
    assert tpu[camel] == 16


def test_two_shapes_need_shares_both_can_split():
    pools = [{"name": "v5e", "type": "v5litepod-16", "slices": 4}, {"name": "v6e", "type": "v6e-16", "slices": 2}]
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.75}, {"name": "b", "quota_share": 0.25}], pools)
    assert e.value.field == "teams[0].quota_share" and "v6e-4x4" in e.value.problem and "0.5/0.5 (a/b)" in e.value.fix
    spec = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}], pools)
    assert team_chips(spec)["a"] == {"v5e-4x4": 32, "v6e-4x4": 16}


def test_fallback_flavors_are_whole_slices_too():
    pools = [{"name": "v5e", "type": "v5litepod-16", "slices": 2, "capacity": ["spot", "on-demand"]}]
    spec = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.5}], pools)
    assert team_chips(spec)["b"] == {"v5e-spot": 16, "v5e-od": 16}


def test_xpk_share_counts_with_the_teams():
    xpk = {"enabled": True, "namespace": "xpk", "quota_share": 0.25}
    with pytest.raises(SpecError) as e:
        spec_with([{"name": "a", "quota_share": 0.5}], xpk=xpk)
    assert e.value.field == "teams" and "0.75/0.25 (a/xpk)" in e.value.fix
    spec_with([{"name": "a", "quota_share": 0.75}], xpk=xpk)


def test_cpu_and_memory_follow_the_slices():
    spec = spec_with([{"name": "a", "quota_share": 0.75}, {"name": "b", "quota_share": 0.25}])
    (f,) = flavors(spec)
    q = quota(f, 0.25)
    # one slice: 4 ct5lp-hightpu-4t VMs of 112 vCPU and 192 GiB
    assert q == {TPU_RESOURCE: 16, "cpu": "448", "memory": "768Gi"}


def test_thirds_written_as_decimals_are_whole():
    pools = [{"name": "v5e", "type": "v5litepod-16", "slices": 3}]
    spec = spec_with([{"name": "a", "quota_share": 0.6667}, {"name": "b", "quota_share": 0.3333}], pools)
    assert team_chips(spec) == {"a": {"v5e-4x4": 32}, "b": {"v5e-4x4": 16}}


# ------------------------------------------------------------------ properties

shares_st = st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=1, max_size=6)
slices_st = st.dictionaries(st.sampled_from(["f1", "f2", "f3"]), st.integers(min_value=1, max_value=64), min_size=1, max_size=3)


@given(weights=shares_st, units=st.integers(min_value=1, max_value=512))
def test_apportion_hands_out_exactly_the_units(weights, units):
    got = quotas.apportion(weights, units)
    assert sum(got) == units and all(n >= 0 for n in got)
    total = sum(weights)
    if total > 0:  # largest remainder: nobody is more than one unit from their exact share
        assert all(abs(n - w * units / total) < 1 + 1e-9 for n, w in zip(got, weights, strict=True))


@given(weights=shares_st, flavor_slices=slices_st)
def test_the_suggested_shares_always_pass_the_check(weights, flavor_slices):
    owners = [QuotaOwner(f"teams[{i}]", f"t{i}", w) for i, w in enumerate(weights)]
    text = quotas.suggested_shares(owners, flavor_slices)
    suggested = [float(x) for x in text.split(" (")[0].split("/")]
    assert math.isclose(sum(suggested), 1.0, abs_tol=1e-3)
    quotas.check([QuotaOwner(o.field, o.label, s) for o, s in zip(owners, suggested, strict=True)], flavor_slices)


@given(weights=shares_st, flavor_slices=slices_st)
def test_accepted_quotas_own_every_slice_in_whole_slices(weights, flavor_slices):
    owners = [QuotaOwner(f"teams[{i}]", f"t{i}", w) for i, w in enumerate(weights)]
    try:
        quotas.check(owners, flavor_slices)
    except SpecError:
        return
    for slices in flavor_slices.values():
        owned = [quotas.owned_slices(o.share, slices) for o in owners]
        assert sum(owned) == slices
        assert all(abs(o.share * slices - n) <= quotas.TOLERANCE for o, n in zip(owners, owned, strict=True))


pool_st = st.fixed_dictionaries({"type": st.sampled_from(["v5litepod-16", "v6e-16", "v5litepod-32"]), "slices": st.integers(min_value=1, max_value=8)}).map(
    lambda p: {**p, "name": p["type"].replace("litepod", "")}
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pools=st.lists(pool_st, min_size=1, max_size=3, unique_by=lambda p: p["type"]), units=st.lists(st.integers(0, 8), min_size=1, max_size=4))
def test_every_accepted_spec_renders_quotas_that_add_up_to_every_flavor(pools, units):
    """Whatever the spec loader accepts, the ClusterQueues' nominal quotas are whole slices that add up to each flavor's chips."""
    total = sum(units) or 1
    teams = [{"name": f"t{i}", "quota_share": round(u / total, 6)} for i, u in enumerate(units)]
    try:
        spec = spec_with(teams, pools)
    except SpecError as e:
        assert e.field.startswith("teams"), e
        return
    chips = team_chips(spec)
    for f in flavors(spec):
        per_team = [chips[t["name"]][f.name] for t in teams]
        assert sum(per_team) == f.chips
        assert all(c % f.shape.chips == 0 for c in per_team)


# ------------------------------------------------------------------ a live cluster with the old quotas


def test_preflight_warns_about_a_live_quota_that_is_not_whole_slices():
    """A cluster whose queues were applied before whole slices keeps floored quotas until `queues apply` runs again."""
    from workloads.observe import preflight as pf
    from workloads.render.kueue import queue_objects

    spec = spec_with([{"name": "a", "quota_share": 0.5}, {"name": "b", "quota_share": 0.25}, {"name": "c", "quota_share": 0.25}])
    objs = queue_objects(spec)
    cqs = [copy.deepcopy(o) for o in objs if o["kind"] == "ClusterQueue"]
    for cq in cqs:  # 0.34/0.33/0.33 as the toolkit floored them: 21 chips each
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 21
    snap = pf.Snapshot(
        True,
        tuple(o for o in objs if o["kind"] == "ResourceFlavor"),
        tuple(cqs),
        tuple(o for o in objs if o["kind"] == "LocalQueue" and o["metadata"]["namespace"] == "b"),
    )
    rep = pf.evaluate(spec, spec.tpu_pools[0], spec.teams[1], snap, slices=1)
    row = next(c for c in rep.checks if c.name == "cluster-queue-slices")
    assert row.result is pf.Result.WARN and "21" in row.detail and "5 of them can never run" in row.detail and "queues apply" in row.fix
    fresh = pf.evaluate(
        spec,
        spec.tpu_pools[0],
        spec.teams[1],
        pf.Snapshot(True, snap.resource_flavors, tuple(o for o in objs if o["kind"] == "ClusterQueue"), snap.local_queues),
        slices=1,
    )
    assert not any(c.name == "cluster-queue-slices" for c in fresh.checks)
