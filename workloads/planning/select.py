"""The one pool selection: which ``tpu_pools`` entry a run (or a check) uses.

``render``, ``submit``, ``preflight`` (live and ``--compile``), ``run-local`` and
anything that prices a run call ``select_pool``, so they cannot pick different
pools for the same request. Rules, in order:

1. ``--pool NAME``: that pool, if it exists and the recipe accepts its shape
   (generation and ``min_chips_per_slice``).
2. Otherwise the pools the recipe accepts, ranked by the recipe's preferred
   shapes (spec order breaks ties), and of those the first whose shape group has
   room for the slices asked for; if none has room, the best-ranked one (the
   slice check then says why the run cannot go there).

Then the slice count is checked against the shape: multislice needs multi-host
slices, and the spec must hold that many slices of the shape (summed over every
pool of the same shape: they form one Kueue flavor).
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog import SliceShape
from infra.spec import EnvSpec, TpuPoolSpec
from workloads.planning.errors import PlanError, suggest
from workloads.planning.recipe_model import Recipe


@dataclass(frozen=True)
class PoolChoice:
    """The chosen pool, the pools that share its shape, and how many slices they hold."""

    pool: TpuPoolSpec
    group: tuple[TpuPoolSpec, ...]

    @property
    def shape(self) -> SliceShape:
        return self.pool.shape

    @property
    def capacity(self) -> int:
        return sum(p.slices for p in self.group)

    @property
    def node_pools(self) -> tuple[str, ...]:
        return tuple(n for p in self.group for n in p.node_pool_names())


def describe_pools(spec: EnvSpec) -> str:
    return ", ".join(f"{p.name} ({p.shape.generation.name} {p.shape.topology} x{p.slices})" for p in spec.tpu_pools)


def why_not(recipe: Recipe | None, shape: SliceShape) -> str | None:
    """Why the recipe cannot use this shape, or None. No recipe accepts every shape."""
    if recipe is None:
        return None
    if shape.generation.name not in recipe.generations:
        return f"recipe {recipe.name} runs on {', '.join(recipe.generations)}, not {shape.generation.name}"
    if shape.chips < recipe.min_chips_per_slice:
        return f"recipe {recipe.name} needs at least {recipe.min_chips_per_slice} chips per slice; {shape.accelerator_type} has {shape.chips}"
    return None


def _group(spec: EnvSpec, pool: TpuPoolSpec) -> tuple[TpuPoolSpec, ...]:
    return tuple(p for p in spec.tpu_pools if p.shape.key == pool.shape.key)


def _named(spec: EnvSpec, recipe: Recipe | None, name: str) -> TpuPoolSpec:
    pool = next((p for p in spec.tpu_pools if p.name == name), None)
    if pool is None:
        names = [p.name for p in spec.tpu_pools]
        raise PlanError("--pool", f"no TPU pool {name!r} in the spec{suggest(name, names)}", f"use one of {describe_pools(spec)}")
    why = why_not(recipe, pool.shape)
    if why:
        raise PlanError("--pool", f"{pool.name} is {pool.shape.describe()}; {why}", "pick another pool or recipe")
    return pool


def _ranked(spec: EnvSpec, recipe: Recipe | None, slices: int) -> TpuPoolSpec:
    preferred = {k: i for i, k in enumerate(recipe.shapes)} if recipe else {}
    ranked = sorted(spec.tpu_pools, key=lambda p: preferred.get(p.shape.key, len(preferred)))  # stable: spec order otherwise
    usable = [p for p in ranked if why_not(recipe, p.shape) is None]
    if not usable:
        assert recipe is not None  # without a recipe every pool is usable, and a spec has at least one
        wanted = ", ".join(recipe.shapes) or f"{recipe.min_chips_per_slice}+ chips of {', '.join(recipe.generations)}"
        raise PlanError(
            "--pool",
            f"no pool in the spec can run recipe {recipe.name} (pools: {describe_pools(spec)})",
            f"add a tpu_pools entry with one of {wanted}",
        )
    return next((p for p in usable if sum(g.slices for g in _group(spec, p)) >= slices), usable[0])


def select_pool(spec: EnvSpec, recipe: Recipe | None, *, pool: str | None = None, slices: int = 1) -> PoolChoice:
    """The pool a run of ``recipe`` on ``slices`` slices uses; PlanError names the flag and the fix."""
    if slices < 1:
        raise PlanError("--slices", f"must be at least 1, got {slices}", "pass --slices 1 or more")
    chosen = _named(spec, recipe, pool) if pool is not None else _ranked(spec, recipe, slices)
    choice = PoolChoice(chosen, _group(spec, chosen))
    shape = choice.shape
    if slices > 1 and not shape.multi_host:
        raise PlanError("--slices", f"{shape.accelerator_type} is single-host; multislice needs multi-host slices", "pass --slices 1 or use a multi-host pool")
    if slices > choice.capacity:
        pools = ", ".join(f"{p.name} x{p.slices}" for p in choice.group)
        raise PlanError(
            "--slices",
            f"{slices} slices of {shape.generation.name} {shape.topology} asked for but the spec has {choice.capacity} ({pools})",
            f"pass --slices {choice.capacity} or fewer, or raise slices in the spec",
        )
    return choice
