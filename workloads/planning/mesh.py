"""The MaxText mesh of a run: degrees per axis, resolved from the recipe's rule and ``--set``, then checked.

MaxText lays a run's devices out as a mesh of named axes (``maxtext_keys.MESH_AXES``), twice:
``ici_<axis>_parallelism`` inside a slice (their product is the slice's devices) and
``dcn_<axis>_parallelism`` across slices (their product is the slice count). One axis per
level may be ``-1`` (``FILL``): the devices the others leave. The recipe gives a rule
(``Parallelism``); a ``--set`` on one axis replaces that axis (an explicit value ends a fill).

A mesh that multiplies out can still be wrong for the model, and each way is refused here
with the flag or recipe field to blame, before any TPU is held:

* an axis that does not divide the dimension it splits (tensor: query heads and MLP;
  fsdp x fsdp_transpose: the embedding; pipeline: layers; expert: experts; sequence x
  context: the sequence length) — MaxText would stop at its first sharded weight;
* an FSDP degree above what a model family's weights split into (``FSDP_LIMITS``):
  deepseek3-671b has a MoE weight dimension of 512, and MaxText fails on a larger
  ``fsdp x fsdp_transpose`` ("global size of its dimension 0 should be divisible by 1024,
  but it is equal to 512") after the slices are held; the fix puts the rest on the data axis.

A recipe tuned for one slice shape and run on another still runs (the mesh is re-derived):
``shape_warning`` names both shapes and the mesh the run gets.

Pure: the recipe, the checked ``--set`` values and the slice shape in, a ``Mesh`` or a
``PlanError`` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog import SliceShape
from workloads.planning.errors import PlanError
from workloads.planning.maxtext_keys import FILL, MESH_AXES, MODEL_KEYS, mesh_key
from workloads.planning.maxtext_sets import MaxTextSets
from workloads.planning.recipe_model import MaxTextSpec, ModelDims, Recipe


@dataclass(frozen=True)
class Mesh:
    """Degrees of every axis at both levels, and where each came from (flag or recipe field)."""

    ici: dict[str, int]
    dcn: dict[str, int]
    sources: dict[str, str]  # "<level>_<axis>_parallelism" (and --set model dimensions) -> "--set" or the recipe field

    @property
    def totals(self) -> dict[str, int]:
        """Each axis over the whole run: ICI x DCN."""
        return {a: self.ici[a] * self.dcn[a] for a in MESH_AXES}


def resolve_mesh(recipe: Recipe, mt: MaxTextSpec, sets: MaxTextSets, shape: SliceShape, slices: int) -> Mesh:
    """ICI and DCN degrees: the recipe's rule, then --set on single axes (an explicit value ends a fill)."""
    recipe_where = f"recipe {recipe.name}"
    sources: dict[str, str] = {}
    rules = {"ici": dict(mt.parallelism.ici), "dcn": dict(mt.parallelism.dcn)}
    for level in ("ici", "dcn"):
        for axis in rules[level]:
            sources[f"{level}_{axis}_parallelism"] = f"{recipe_where} parallelism.{level}.{axis}"
    for key in sets.text.keys() & (MODEL_KEYS | {"max_target_length"}):
        sources[key] = "--set"  # a model dimension the sharding checks may blame
    for key in sets.text:
        mk = mesh_key(key)
        if mk is None:
            continue
        level, axis = mk
        if axis not in MESH_AXES:  # reachable with an image whose keys the toolkit has not read
            raise PlanError("--set", f"{key}: {axis} is not a MaxText mesh axis", f"use one of {', '.join(MESH_AXES)}")
        rules[level][axis] = sets.ints[key]
        sources[key] = "--set"
    ici = _resolve_axes("ici", rules["ici"], shape.devices, f"devices of a {shape.generation.name} {shape.topology} slice", sources)
    dcn = _resolve_axes("dcn", rules["dcn"], slices, "slice(s)", sources)
    return Mesh(ici, dcn, sources)


def _resolve_axes(level: str, rule: dict[str, int], target: int, unit: str, sources: dict[str, str]) -> dict[str, int]:
    """Degrees for every axis of one level; the fill axis takes what the others leave."""
    degrees = {a: 1 for a in MESH_AXES}
    degrees.update(rule)
    fills = [a for a, d in degrees.items() if d == FILL]
    if len(fills) > 1:
        keys = ", ".join(f"{level}_{a}_parallelism" for a in fills)
        raise PlanError(sources.get(f"{level}_{fills[-1]}_parallelism", "--set"), f"{keys} are all -1", "leave at most one axis at -1 (fill)")
    fixed = math.prod(d for d in degrees.values() if d != FILL)
    set_keys = [f"{level}_{a}_parallelism={d}" for a, d in degrees.items() if d not in (1, FILL)]
    where = next((sources[k.split("=")[0]] for k in set_keys if k.split("=")[0] in sources), "--set")
    if level == "dcn" and target == 1 and fixed > 1:
        raise PlanError(
            where, f"DCN parallelism {' x '.join(set_keys)} needs {fixed} slices but the run has 1", f"pass --slices {fixed} or drop the dcn_* setting"
        )
    if fills:
        if target % fixed:
            raise PlanError(
                where,
                f"{' x '.join(set_keys) or '1'} = {fixed} does not divide the {target} {unit}",
                f"use {level} degrees whose product divides {target}",
            )
        degrees[fills[0]] = target // fixed
    elif fixed != target:
        raise PlanError(
            where,
            f"{level} mesh {' x '.join(set_keys) or '1'} = {fixed} but the run has {target} {unit}",
            f"make the {level}_*_parallelism product {target}, or set one axis to -1",
        )
    return degrees


# ------------------------------------------------------------------ sharding


@dataclass(frozen=True)
class _AxisBlame:
    """Which flag or recipe field a sharding error is blamed on.

    A --set that changed one of the axes wins; then a --set that changed the dimension
    being split (``dim``, e.g. base_emb_dim); then the recipe field that set the axis.
    """

    recipe: str
    mesh: Mesh

    def axis_set(self, *axes: str) -> bool:
        levels = {"ici": self.mesh.ici, "dcn": self.mesh.dcn}
        return any(self.mesh.sources.get(f"{level}_{a}_parallelism") == "--set" and degrees[a] != 1 for a in axes for level, degrees in levels.items())

    def dim_set(self, dim: str, *axes: str) -> bool:
        """The dimension, not the mesh, came from --set: the message names the dimension."""
        return self.mesh.sources.get(dim) == "--set" and not self.axis_set(*axes)

    def __call__(self, *axes: str, dim: str | None = None) -> str:
        sources = self.mesh.sources
        if self.axis_set(*axes) or (dim is not None and sources.get(dim) == "--set"):
            return "--set"
        for a in axes:
            for level in ("ici", "dcn"):
                key = f"{level}_{a}_parallelism"
                if key in sources:
                    return sources[key]
        return f"recipe {self.recipe}"


def check_sharding(recipe: Recipe, model: ModelDims, seq: int, mesh: Mesh) -> None:
    """Every axis divides the model dimension it splits; the PlanError blames the --set or recipe field that made it."""
    where = _AxisBlame(recipe.name, mesh)
    totals = mesh.totals

    def split(total: int, dim_key: str, dim: int, what: str, keys: str, *axes: str) -> None:
        set_dim = dim_key if where.dim_set(dim_key, *axes) else None
        _check_divides(total, dim, what, keys, where(*axes, dim=dim_key), set_dim=set_dim)

    tensor = totals["tensor"]
    split(tensor, "base_num_query_heads", model.base_num_query_heads, "the query heads", "tensor parallelism (ici x dcn)", "tensor")
    split(tensor, "base_mlp_dim", model.base_mlp_dim, "the MLP dimension", "tensor parallelism (ici x dcn)", "tensor")
    fsdp = totals["fsdp"] * totals["fsdp_transpose"]
    split(fsdp, "base_emb_dim", model.base_emb_dim, "the embedding dimension", "fsdp x fsdp_transpose (ici x dcn)", "fsdp", "fsdp_transpose")
    split(totals["pipeline"], "base_num_decoder_layers", model.base_num_decoder_layers, "the decoder layers", "pipeline parallelism", "pipeline")
    split(totals["expert"], "num_experts", model.num_experts, "the experts", "expert parallelism", "expert")
    seq_split = totals["sequence"] * totals["context"]
    split(seq_split, "max_target_length", seq, "the sequence length", "sequence x context parallelism", "sequence", "context")


def _check_divides(total: int, dim: int, what: str, keys: str, where: str, set_dim: str | None = None) -> None:
    """``set_dim``: the dimension's key when a --set changed it (and not the mesh): the message names it."""
    if total > 1 and dim % total:
        if set_dim:
            lower = dim - dim % total
            near = f"{lower} or {lower + total}" if lower else str(total)
            raise PlanError(
                where,
                f"{set_dim}={dim} cannot be split by {keys} = {total} ({what})",
                f"use a {set_dim} that is a multiple of {total} (e.g. {near}), or a mesh that divides {dim}",
            )
        raise PlanError(where, f"{keys} = {total} cannot split {what} ({dim})", f"use a degree that divides {dim}")


# ------------------------------------------------------------------ model families


@dataclass(frozen=True)
class FsdpLimit:
    """``fsdp x fsdp_transpose`` (ICI x DCN) must divide ``dimension``; ``source`` says why."""

    dimension: int
    source: str


_DEEPSEEK3 = "a 512-wide MoE weight dimension"
FSDP_LIMITS: dict[str, FsdpLimit] = {
    "deepseek3-671b": FsdpLimit(512, _DEEPSEEK3),
    "deepseek3-671b-2dfsdp": FsdpLimit(512, _DEEPSEEK3),
}


def check_fsdp_limit(model_name: str, totals: dict[str, int], where: str) -> None:
    """Refuse a mesh whose FSDP degree the model's weights cannot be split by."""
    limit = FSDP_LIMITS.get(model_name)
    if limit is None:
        return
    fsdp = totals.get("fsdp", 1) * totals.get("fsdp_transpose", 1)
    if limit.dimension % fsdp == 0:
        return
    over = fsdp // math.gcd(fsdp, limit.dimension)
    raise PlanError(
        where,
        f"{model_name} shards FSDP {fsdp} ways (fsdp x fsdp_transpose), but its weights split at most"
        f" {limit.dimension} ways ({limit.source}); MaxText would fail after the slices are held",
        f"put the rest on the data axis: --set ici_data_parallelism={over} (measured on tpu7x: ~45% less per-chip"
        f" throughput), or run more slices of a shape of at most {limit.dimension} devices over DCN",
    )


def shape_warning(recipe_name: str, tuned_shapes: list[str], run_shape: str, ici: dict[str, int]) -> str | None:
    """A recipe tuned for one slice shape, run on another: a warning naming both, and the mesh it gets."""
    if len(tuned_shapes) != 1 or tuned_shapes[0] == run_shape:
        return None
    mesh = ", ".join(f"{axis} {degree}" for axis, degree in ici.items() if degree != 1) or "fsdp 1"
    return (
        f"recipe {recipe_name} was tuned for {tuned_shapes[0]} slices; this run is on {run_shape} (ICI {mesh}):"
        " its tile sizes, XLA flags and batch were chosen for the other shape — check the step time, or run it on"
        f" a {tuned_shapes[0]} pool (--pool)"
    )
