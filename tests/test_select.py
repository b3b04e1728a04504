"""``select_pool``, the one pool selection, as ``preflight`` (and every other command) calls it."""

from __future__ import annotations

import pytest

from infra.spec import load_spec, parse_spec
from workloads.planning.recipes import load_recipe
from workloads.planning.select import PlanError, select_pool

SPEC = load_spec("examples/default.yaml")  # one pool: v5e-16 = 2 x v5litepod-16


def _spec(*pools: tuple[str, str, str, int]):
    """The default spec with these (name, generation, topology, slices) pools, in this order."""
    data = SPEC.model_dump(mode="json", exclude_none=True)
    data["tpu_pools"] = [{"name": n, "generation": g, "topology": t, "slices": s, "capacity": "spot"} for n, g, t, s in pools]
    return parse_spec(data)


# v6e first in the spec; gpt3-6b lists v5e-4x4 before v6e-4x4, llama3-8b lists v6e-4x4 only.
TWO = _spec(("v6e-a", "v6e", "4x4", 1), ("v5e-a", "v5e", "4x4", 1))


def test_by_name() -> None:
    assert select_pool(SPEC, None, pool="v5e-16").pool is SPEC.tpu_pools[0]
    choice = select_pool(TWO, load_recipe("maxtext-6b"), pool="v6e-a")
    assert choice.pool.name == "v6e-a" and choice.group == (choice.pool,) and choice.capacity == 1


def test_by_recipe_preference_not_spec_order() -> None:
    assert select_pool(TWO, load_recipe("gpt3-6b")).pool.name == "v5e-a"
    assert select_pool(TWO, load_recipe("llama3-8b")).pool.name == "v6e-a"


def test_a_preferred_pool_without_room_gives_way() -> None:
    spec = _spec(("v6e-a", "v6e", "4x4", 2), ("v5e-a", "v5e", "4x4", 1))
    assert select_pool(spec, load_recipe("gpt3-6b"), slices=1).pool.name == "v5e-a"
    assert select_pool(spec, load_recipe("gpt3-6b"), slices=2).pool.name == "v6e-a"


def test_unknown_pool_names_the_flag() -> None:
    with pytest.raises(PlanError, match=r"no TPU pool 'nope'") as e:
        select_pool(SPEC, None, pool="nope")
    assert e.value.field == "--pool" and "v5e-16" in e.value.fix
    assert str(e.value).startswith("--pool: ")


def test_a_pool_the_recipe_cannot_use_names_the_flag() -> None:
    small = _spec(("v5e-4", "v5e", "2x2", 1))  # 4 chips; llama3-8b needs 16 per slice
    with pytest.raises(PlanError, match="needs at least 16 chips per slice") as e:
        select_pool(small, load_recipe("llama3-8b"), pool="v5e-4")
    assert e.value.field == "--pool"
    with pytest.raises(PlanError, match="no pool in the spec can run recipe llama3-8b") as e:
        select_pool(small, load_recipe("llama3-8b"))
    assert e.value.field == "--pool"


def test_no_recipe_takes_the_first_pool() -> None:
    assert select_pool(TWO, None).pool.name == "v6e-a"
    assert select_pool(SPEC, None).pool is SPEC.tpu_pools[0]


def test_slices_beyond_the_spec_name_the_flag() -> None:
    with pytest.raises(PlanError, match="3 slices of v5e 4x4 asked for but the spec has 2") as e:
        select_pool(SPEC, None, slices=3)
    assert e.value.field == "--slices"
