"""The MaxText mesh of a run: degrees per axis, resolved from the recipe's rule and ``--set``, then checked.

MaxText lays a run's devices out as a mesh of named axes (``maxtext_keys.MESH_AXES``), twice:
``ici_<axis>_parallelism`` inside a slice (their product is the slice's devices) and
``dcn_<axis>_parallelism`` across slices (their product is the slice count). One axis per
level may be ``-1`` (``FILL``): the devices the others leave. The recipe gives a rule
(``Parallelism``); a ``--set`` on one axis replaces that axis (an explicit value ends a fill).

A mesh that multiplies out can still be wrong for the model, and each way is refused here
with the flag or recipe field to blame, before any TPU is held:

* an axis product that does not divide a weight dimension it splits (``weight_dims``: the
  model's own dimensions and MaxText's sharding rules: heads, key/value heads and vocabulary
  over tensor; the embedding over fsdp, fsdp_transpose, context and expert; the MLP over
  fsdp_transpose and tensor; experts over expert; multi-head latent attention's ranks over the
  FSDP axes, so deepseek3-671b, whose key/value rank is 512, cannot take fsdp 1024: "global
  size of its dimension 0 should be divisible by 1024, but it is equal to 512"), after the
  slices are held; the fix puts the rest on the data axis;
* pipeline degrees that do not divide the layers, sequence x context that does not divide
  the sequence length;
* an ICI mesh MaxText cannot lay on the slice (``check_device_mesh``): a degree MaxText's
  ``mesh_axes`` have no axis for (sequence), or an axis JAX's ``create_device_mesh`` finds no
  whole physical axes for (``device_mesh``: tensor 8 on a v5e 4x4 slice), unless the run sets
  ``allow_split_physical_axes=true``.

A recipe tuned for one slice shape and run on another still runs (the mesh is re-derived):
``shape_warning`` names both shapes and the mesh the run gets.

Pure: the recipe, the checked ``--set`` values and the slice shape in, a ``Mesh`` or a
``PlanError`` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from infra.catalog import SliceShape
from toolkit.wording import listing
from workloads.planning.device_mesh import Unplaceable, key_axis, lay_out, maxtext_axes, maxtext_mesh, physical_mesh
from workloads.planning.errors import PlanError
from workloads.planning.images import MAXTEXT_VERSION
from workloads.planning.maxtext_keys import FILL, MESH_AXES, MODEL_KEYS, STRUCTURE_KEYS, mesh_key
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
    for key in sets.text.keys() & (MODEL_KEYS | STRUCTURE_KEYS.keys() | {"max_target_length"}):
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


# The mesh axes MaxText 0.2.5 splits each weight dimension over: its layers' kernel axes
# (``("embed_attn", "q_heads", "kv")`` for the query, ``("embed", "mlp")`` for an MLP input,
# ``("exp", "embed_moe", "mlp_moe")`` for the experts, ...) through base.yml's
# logical_axis_rules, which flax applies in order, each rule only while its mesh axes are
# free (so an MLP's embedding loses fsdp_transpose to its ``mlp`` dimension, ruled first).
# JAX refuses a sharding whose axes' product does not divide the dimension ("global size of
# its dimension 0 should be divisible by ..."), after the slices are held.
_TENSOR = ("tensor", "tensor_sequence", "autoregressive")
_EMBED = ("fsdp", "fsdp_transpose", "context", "context_usp_ulysses", "expert")  # attention, embeddings, MLA ranks
_EMBED_BESIDE_MLP = ("fsdp", "context", "context_usp_ulysses", "expert")
_EMBED_BESIDE_EXPERTS = ("fsdp", "context", "context_usp_ulysses")
_MLP = ("fsdp_transpose", *_TENSOR)


@dataclass(frozen=True)
class WeightDim:
    """A dimension of the model's weights and the mesh axes that split it."""

    what: str
    key: str  # the MaxText key that sets it (a --set on it is blamed by name)
    size: int
    axes: tuple[str, ...]


def weight_dims(m: ModelDims) -> list[WeightDim]:
    """Every weight dimension MaxText shards, for this model's structure (``ModelDims``)."""
    moe, dense = m.layer_counts()
    out = [
        WeightDim("the embedding dimension of the attention and embedding weights", "base_emb_dim", m.base_emb_dim, _EMBED),
        WeightDim("the query heads", "base_num_query_heads", m.base_num_query_heads, _TENSOR),
        WeightDim("the vocabulary", "vocab_size", m.vocab_size, _TENSOR),
    ]
    if not m.mla:  # latent attention's keys and values have the query's heads
        out.append(WeightDim("the key/value heads", "base_num_kv_heads", m.base_num_kv_heads, _TENSOR))
    if m.global_kv_heads and m.sliding_window:
        out.append(WeightDim("the global layers' key/value heads", "global_num_kv_heads", m.global_kv_heads, _TENSOR))
    if m.mla:
        out.append(WeightDim("the latent key/value rank of multi-head latent attention", "kv_lora_rank", m.kv_lora_rank, _EMBED))
        if m.q_lora_rank:
            out.append(WeightDim("the latent query rank of multi-head latent attention", "q_lora_rank", m.q_lora_rank, _EMBED))
    if dense:
        out.append(WeightDim("the embedding dimension of the MLP weights", "base_emb_dim", m.base_emb_dim, _EMBED_BESIDE_MLP))
        out.append(WeightDim("the MLP dimension", "base_mlp_dim", (m.dense_mlp_dim or m.base_mlp_dim) if moe else m.base_mlp_dim, _MLP))
    if moe:
        out.append(WeightDim("the experts", "num_experts", m.num_experts, ("expert",)))
        out.append(WeightDim("the experts' MLP dimension", "base_moe_mlp_dim", m.base_mlp_dim, _MLP))
        out.append(WeightDim("the embedding dimension of the expert weights", "base_emb_dim", m.base_emb_dim, _EMBED_BESIDE_EXPERTS))
    return out


def check_sharding(recipe: Recipe, model: ModelDims, seq: int, mesh: Mesh) -> None:
    """Every axis divides the model dimension it splits; the PlanError blames the --set or recipe field that made it."""
    where = _AxisBlame(recipe.name, mesh)
    totals = mesh.totals
    name = recipe.maxtext.model_name if recipe.maxtext is not None else recipe.name
    for w in weight_dims(model):
        split = math.prod(totals[a] for a in w.axes)
        if split > 1 and w.size % split:
            used = [a for a in w.axes if totals[a] > 1]
            set_dim = w.key if where.dim_set(w.key, *used) else None
            keys = " x ".join(used) + " (ici x dcn)"
            _check_divides(split, w.size, w.what, keys, where(*used, dim=w.key), set_dim=set_dim, model=name, fsdp="fsdp" in used)
    set_layers = "base_num_decoder_layers" if where.dim_set("base_num_decoder_layers", "pipeline") else None
    _check_divides(
        totals["pipeline"],
        model.base_num_decoder_layers,
        "the decoder layers",
        "pipeline parallelism",
        where("pipeline", dim="base_num_decoder_layers"),
        set_dim=set_layers,
    )
    set_seq = "max_target_length" if where.dim_set("max_target_length", "sequence", "context") else None
    seq_split = totals["sequence"] * totals["context"]
    _check_divides(
        seq_split, seq, "the sequence length", "sequence x context parallelism", where("sequence", "context", dim="max_target_length"), set_dim=set_seq
    )


def _check_divides(total: int, dim: int, what: str, keys: str, where: str, set_dim: str | None = None, model: str = "", fsdp: bool = False) -> None:
    """``set_dim``: the dimension's key when a --set changed it (and not the mesh): the message names it."""
    if total <= 1 or dim % total == 0:
        return
    if set_dim:
        lower = dim - dim % total
        near = f"{lower} or {lower + total}" if lower else str(total)
        raise PlanError(
            where,
            f"{set_dim}={dim} cannot be split by {keys} = {total} ({what})",
            f"use a {set_dim} that is a multiple of {total} (e.g. {near}), or a mesh that divides {dim}",
        )
    whose = f" of {model}" if model and model != "default" else ""
    most = max(d for d in range(1, total + 1) if dim % d == 0 and total % d == 0)
    fix = f"use a degree that divides {dim}"
    if fsdp and most > 1:
        fix = (
            f"split it at most {most} ways and put the rest on the data axis: --set ici_data_parallelism={total // most}"
            " (measured on tpu7x: ~45% less per-chip throughput), or run more slices of a smaller shape over DCN"
        )
    raise PlanError(where, f"{keys} = {total} cannot split {what}{whose} ({dim}); MaxText would fail on the weights' sharding after the slices are held", fix)


def check_device_mesh(recipe: Recipe, mesh: Mesh, shape: SliceShape, slices: int, run_args: Mapping[str, str]) -> None:
    """MaxText can build the run's device mesh on the slice: every degree has a MaxText mesh axis, every ICI axis whole physical axes.

    ``run_args``: the run's MaxText keys as text (recipe args, --set over them). Not judged: a run that sets
    ``allow_split_physical_axes=true`` (JAX then splits physical axes), a multislice ``custom_mesh`` (MaxText lays
    a fixed 16x16 mesh and reshapes it), a ``mesh_axes``/``custom_mesh_and_rule`` this MaxText would not read.
    """
    axes = maxtext_axes(run_args)
    if axes is None or (slices > 1 and run_args.get("custom_mesh", "").strip()):
        return
    where = _AxisBlame(recipe.name, mesh)
    mt = maxtext_mesh(axes, mesh.ici, mesh.dcn)
    if mt.dropped:
        level, axis, degree = mt.dropped[0]
        whole = f"the {shape.devices} devices of the slice" if level == "ici" else f"the {slices} slices"
        instead = (
            "MaxText splits the sequence over context: ici_context_parallelism"
            if axis == "sequence"
            else f"or put its {'stage' if axis == 'pipeline' else axis} axis in mesh_axes"
        )
        raise PlanError(
            where(axis),
            f"{level}_{axis}_parallelism={degree} is not in MaxText {MAXTEXT_VERSION}'s mesh (mesh_axes: {', '.join(axes)}), so its {level.upper()} mesh"
            f" would not hold {whole} and it stops at start",
            f"drop it ({instead})",
        )
    if run_args.get("allow_split_physical_axes", "false").strip().lower() == "true":
        return
    verdict = lay_out(physical_mesh(shape), mt.ici)
    if not isinstance(verdict, Unplaceable):
        return
    axis = key_axis(verdict.axis)
    key = f"ici_{axis}_parallelism"
    free = ", ".join(f"{n} {s}" for n, s in verdict.free if s > 1) or "none"
    took = [p for p in verdict.taken if p.physical and p.size > 1]
    after = "".join(f"; ici_{key_axis(p.axis)}_parallelism={p.size} took {listing(p.physical)}" for p in took)
    sizes = verdict.sizes
    instead = (
        f"use --set {key}={listing([str(s) for s in sizes], 'or')} (a product of the free physical axes)"
        if sizes
        else "no physical axis is left for it: lower the degrees that took them"
    )
    raise PlanError(
        where(axis, *(key_axis(p.axis) for p in took)),
        f"{key}={verdict.size} is not a product of the {shape.generation.name} {shape.topology} slice's free physical axes ({free}{after}):"
        " MaxText lays the ICI mesh out with JAX's create_device_mesh, which gives each axis whole physical axes and stops the run at start",
        f"{instead}, or --set allow_split_physical_axes=true (JAX then splits a physical axis between mesh axes)",
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
