"""Planning, stage 2 of 4 — sizing: a MaxText run's model, mesh, batch, memory per device and step time.

    target -> sizing -> policy -> program        (workloads.planning.planner.plan_run)

From the ``Placement`` and the ``--set`` pairs (read once, ``maxtext_sets``), one frozen
``Sizing``: the model as it will run (the recipe's dimensions with any ``--set``), the mesh
(``mesh``: resolved and checked against the slice and the model), the per-device and global
batch, the parameter count, the HBM estimate checked against the device, and the
estimated step time. A plain-command recipe has nothing to size (``None``; a ``--set`` on
it is refused here, where ``--set`` is read).

The two estimates live here, and each is a model of its own:

Memory estimate (per device; deliberately a lower bound so it only rejects runs
that cannot fit, leaving the real verdict to MaxText's AOT compile):

    state       = 16 B x params / model_shards
                  (fp32 weights 4 + fp32 gradients 4 + Adam mu 4 + nu 4; sharded
                  over every mesh axis except data/diloco, which replicate)
    activations = layers x tokens x emb x 2 B / act_shards
                  (remat full keeps only each layer's bf16 input; tokens =
                  per_device_batch x seq; split by tensor/sequence/context)
    logits      = tokens x vocab x 4 B / tensor   (fp32 logits for the loss)

What published recipes use to fit (the tpu-recipes scripts imported by
scripts/bench_import_recipes.py), modelled from their MaxText keys:

    remat_policy=custom with decoder_layer_input=offload: each layer's saved input lives
        in host memory; HBM holds ~2 layers' worth (the one computed, the one fetched)
    num_vocab_tiling=N: the logits are computed N vocabulary tiles at a time (/ N)

Calibration (MaxText 0.2.5 AOT for the plan's topology; scripts/bench_hbm_calibration.py,
2026-11-24): the estimate came out low on every configuration compiled —

    maxtext-6b v5e-16 batch 2/4/8 (remat full)         -18% / -20% / -18% (8: HBM OOM)
    maxtext-6b v5e-16 batch 4/8, decoder input offload  -22% / -25%
    maxtext-6b v5e-16 batch 4, num_vocab_tiling=4       -23%
    llama3-8b v6e-16 batch 1                           -30%
    gpt3-6b v5p-128 batch 4                            -15%
    llama3-8b cut to 8 layers, batch 2, offload        -73%

(temporaries of the recomputed layer and XLA's buffers are left out on purpose). So the
error band is the largest measured error: ``HBM_ERROR_BAND`` (30%) for plans without host
offload, ``HBM_OFFLOAD_ERROR_BAND`` (75%) with it (one measured point; the offload
model is the least certain). A plan whose estimate is over the budget by more than its
band is refused; one over the budget inside the band plans with a warning that points at
``preflight --compile`` (the compiler's verdict), and so does one under the budget whose
estimate plus the band is over it (it may not fit: the estimate runs low). None of the
published recipes is refused by it (scripts/bench_import_recipes.py).

Step time (per step, the whole run; model FLOPs, as MFU is defined):

    flops = 6 x params x tokens                       (forward + backward of every weight)
          + 6 x layers x seq x query_heads x head_dim x tokens
                                                      (causal attention scores and values)
    step  = flops / (chips x catalog peak bf16 FLOP/s x ASSUMED_MFU)

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from infra.catalog import GIB, SliceShape
from workloads.planning import step_time
from workloads.planning.errors import PlanError
from workloads.planning.maxtext_keys import MESH_AXES, MODEL_KEYS
from workloads.planning.maxtext_numbers import PLAIN_INT
from workloads.planning.maxtext_sets import MaxTextSets, arg_text, parse_sets, read_sets
from workloads.planning.mesh import Mesh, check_sharding, resolve_mesh, shape_warning
from workloads.planning.model import HbmEstimate, MaxTextSizing
from workloads.planning.overrides import Overrides
from workloads.planning.recipe_model import Kind, MaxTextSpec, ModelDims, Recipe
from workloads.planning.step_time import StepEstimate
from workloads.planning.target import Placement

HBM_ERROR_BAND = 0.30  # the estimate's largest measured error without host offload (see the module doc)
HBM_OFFLOAD_ERROR_BAND = 0.75  # ... with decoder_layer_input=offload (one measured point, -73%)
_OFFLOADED_LAYERS = 2  # with layer inputs offloaded: the layer computed and the one being fetched
# --set keys that change the HBM estimate (beyond per_device_batch_size): a failed
# estimate names them, since the recipe fitted before the user changed them.
_HBM_KEYS = MODEL_KEYS | {"max_target_length"}


@dataclass(frozen=True)
class Sizing:
    """Stage 2's result: the numbers a MaxText run is given and checked by."""

    sets: MaxTextSets
    model: ModelDims
    mesh: Mesh
    seq: int  # max_target_length as the run has it
    per_device_batch: float
    global_batch: int
    params: int
    hbm: HbmEstimate
    step: StepEstimate
    warnings: tuple[str, ...]

    @property
    def step_seconds(self) -> float:
        return self.step.seconds

    def summary(self) -> MaxTextSizing:
        """The part the plan keeps (``Program.sizing``): the mesh as MaxText is given it, batch, parameters, HBM."""
        ici, dcn = self.mesh.ici, self.mesh.dcn
        return MaxTextSizing(
            ici=tuple((a, ici[a]) for a in MESH_AXES if ici[a] != 1 or a == "fsdp"),
            dcn=tuple((a, dcn[a]) for a in MESH_AXES if dcn[a] != 1 or a == "data"),
            per_device_batch_size=self.per_device_batch,
            global_batch_size=self.global_batch,
            params=self.params,
            hbm=self.hbm,
        )


def size_run(placed: Placement, o: Overrides) -> Sizing | None:
    """The run's sizing (None for a plain command); one PlanError naming the flag or recipe field otherwise."""
    recipe = placed.recipe
    if recipe.kind is Kind.COMMAND:
        if o.sets:
            raise PlanError("--set", f"recipe {recipe.name} runs a plain command, not MaxText; it takes no --set", "drop --set or pick a MaxText recipe")
        return None
    mt = recipe.maxtext
    assert mt is not None  # guaranteed by the recipe model
    sets = read_sets(recipe, mt, parse_sets(o.sets), placed.image)
    notes = list(sets.warnings)
    model = _model(mt, sets)
    shape = placed.target.shape
    mesh = resolve_mesh(recipe, mt, sets, shape, placed.target.slices)
    totals = mesh.totals
    tuned = shape_warning(recipe.name, recipe.shapes, shape.key, {a: mesh.ici[a] for a in MESH_AXES})
    notes += [tuned] if tuned else []
    seq = sets.ints.get("max_target_length", mt.args.get("max_target_length", model.max_target_length))
    check_sharding(recipe, model, seq, mesh)
    pdb, batch_where = _per_device_batch(recipe, mt, sets, shape)
    global_batch = _global_batch(pdb, batch_where, shape.devices * placed.target.slices, totals)
    params = model.params()
    run_args = {**{k: arg_text(v) for k, v in mt.args.items()}, **sets.text}
    hbm = _checked_hbm(model, params, pdb, seq, totals, shape, _hbm_blame(sets.text, batch_where), run_args, notes)
    step = step_time.estimate(model, global_batch * seq / placed.target.devices, seq, shape.generation, run_args, totals["expert"])
    return Sizing(sets, model, mesh, seq, pdb, global_batch, params, hbm, step, tuple(notes))


def _model(mt: MaxTextSpec, sets: MaxTextSets) -> ModelDims:
    """The model as it will run: recipe dims with any --set dims applied (each a positive int32, read by ``read_sets``)."""
    dims = mt.model.model_dump()
    dims.update({key: sets.ints[key] for key in MODEL_KEYS & sets.ints.keys()})
    return ModelDims.model_validate(dims)


def _per_device_batch(recipe: Recipe, mt: MaxTextSpec, sets: MaxTextSets, shape: SliceShape) -> tuple[float, str]:
    """--set wins, else the recipe's rule for this HBM size; returns (batch, where it came from)."""
    if sets.per_device_batch is not None:
        return sets.per_device_batch, "--set"
    hbm_gib = shape.hbm_bytes_per_device / GIB
    rule = mt.batch_for(hbm_gib)
    if rule is None:
        raise PlanError(
            "--pool",
            f"recipe {recipe.name} has no per_device_batch rule for {hbm_gib:g} GiB per {shape.generation.name} device",
            "pick a pool with more HBM or --set per_device_batch_size=N",
        )
    return rule, f"recipe {recipe.name} per_device_batch"


def _global_batch(pdb: float, where: str, devices: int, totals: dict[str, int]) -> int:
    global_batch = pdb * devices
    batch_split = totals["data"] * totals["fsdp"] * totals["fsdp_transpose"] * totals["expert"]
    if not float(global_batch).is_integer() or int(global_batch) % batch_split:
        raise PlanError(
            where,
            f"per_device_batch_size={pdb:g} x {devices} devices = global batch {global_batch:g}, which data x fsdp ({batch_split}) cannot split evenly",
            f"use a per_device_batch_size that makes the global batch a multiple of {batch_split}",
        )
    return int(global_batch)


# ------------------------------------------------------------------ HBM


def hbm_error_band(args: Mapping[str, str]) -> float:
    """The measured error band of the estimate for a run with these MaxText args."""
    return HBM_OFFLOAD_ERROR_BAND if any(v == "offload" for v in args.values()) else HBM_ERROR_BAND


def estimate_hbm(
    model: ModelDims, params: int, per_device_batch: float, seq: int, totals: dict[str, int], hbm_per_device: int, args: Mapping[str, str] | None = None
) -> HbmEstimate:
    """``args``: the run's MaxText keys as text (recipe args with --set over them), for offload and vocab tiling."""
    args = args or {}
    replicating = {"data", "diloco"}
    model_shards = math.prod(d for a, d in totals.items() if a not in replicating)
    act_shards = totals["tensor"] * totals["sequence"] * totals["context"]
    tokens = per_device_batch * seq
    offloaded = args.get("remat_policy") == "custom" and args.get("decoder_layer_input") == "offload"
    layers = min(_OFFLOADED_LAYERS, model.base_num_decoder_layers) if offloaded else model.base_num_decoder_layers
    tiling = args.get("num_vocab_tiling", "1")
    tiles = int(tiling) if PLAIN_INT.match(tiling) and 0 < len(tiling) < 6 and int(tiling) > 0 else 1
    return HbmEstimate(
        state_bytes=int(16 * params / model_shards),
        activation_bytes=int(layers * tokens * model.base_emb_dim * 2 / act_shards),
        logits_bytes=int(tokens * model.vocab_size * 4 / totals["tensor"] / tiles),
        available_bytes=hbm_per_device,
    )


def _hbm_blame(sets: Mapping[str, str], batch_where: str) -> tuple[str, str]:
    """(field, what changed): the --set keys that grew the model or sequence, else where the batch came from."""
    changed = [f"{k}={sets[k]}" for k in sorted(_HBM_KEYS & sets.keys())]
    if not changed:
        return batch_where, ""
    return "--set", ", ".join(changed) + (f" (with {batch_where})" if batch_where != "--set" else "")


def _checked_hbm(
    model: ModelDims,
    params: int,
    pdb: float,
    seq: int,
    totals: dict[str, int],
    shape: SliceShape,
    blame: tuple[str, str],
    args: Mapping[str, str],
    notes: list[str],
) -> HbmEstimate:
    """The estimate against the device's HBM and the estimate's error band: refused, a warning in ``notes``, or fine."""
    hbm = estimate_hbm(model, params, pdb, seq, totals, shape.hbm_bytes_per_device, args)
    band = hbm_error_band(args)
    if hbm.fits and hbm.total_bytes * (1 + band) > hbm.available_bytes:
        d = hbm.as_dict()
        notes.append(
            f"per_device_batch_size={pdb:g} is estimated at ~{d['estimate_gib']:g} GiB per device of a {shape.generation.name} device's"
            f" {d['available_gib']:g} GiB, and the estimate has run up to {band:.0%} low — check it with"
            " `python -m workloads preflight <recipe> --compile` before holding the slices"
        )
    elif not hbm.fits and hbm.total_bytes <= hbm.available_bytes * (1 + band):
        d = hbm.as_dict()
        notes.append(
            f"per_device_batch_size={pdb:g} is estimated at ~{d['estimate_gib']:g} GiB per device, over the {d['available_gib']:g} GiB of a"
            f" {shape.generation.name} device but inside the estimate's {band:.0%} error band — check it with"
            " `python -m workloads preflight <recipe> --compile` before holding the slices"
        )
    elif not hbm.fits:
        d = hbm.as_dict()
        where, changed = blame
        raise PlanError(
            where,
            (f"{changed}: " if changed else "")
            + f"per_device_batch_size={pdb:g} needs at least ~{d['estimate_gib']:g} GiB per device (params+Adam {d['state_gib']:g}, "
            f"activations {d['activations_gib']:g}, logits {d['logits_gib']:g}) but a {shape.generation.name} device has {d['available_gib']:g} GiB"
            f" (more than the estimate's {band:.0%} error band over)",
            ("shrink or drop those --set values, or " if changed else "")
            + "lower per_device_batch_size, shard more (bigger slice or more fsdp), or pick a pool with more HBM",
        )
    return hbm
