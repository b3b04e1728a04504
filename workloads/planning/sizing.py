"""Planning, stage 2 of 4 — sizing: a MaxText run's model, mesh, batch, memory per device and step time.

    target -> sizing -> policy -> program        (workloads.planning.planner.plan_run)

From the ``Placement`` and the ``--set`` pairs (read once, ``maxtext_sets``), one frozen
``Sizing``: the model as it will run (the recipe's dimensions with any ``--set``), the mesh
(``mesh``: resolved and checked against the slice and the model), the per-device and global
batch, the parameter count, the HBM estimate checked against the device, and the
estimated step time. A plain-command recipe has nothing to size (``None``; a ``--set`` on
it is refused here, where ``--set`` is read).

The two estimates are models of their own, each measured against what it estimates:

- HBM per device (``workloads.planning.hbm``): what XLA allocates for the step, part by part
  (train state, gradients, what the remat policy keeps, one layer in flight, logits), with
  coefficients fitted to MaxText's own compiles (scripts/bench_hbm_calibration.py) and the
  error left per kind of run. Refused when even the least of that error would not fit;
  a warning pointing at ``preflight --compile`` when the most would not.
- Step time (``workloads.planning.step_time``): the work of the step at efficiencies fitted
  to the step times tpu-recipes publishes (scripts/bench_step_time.py), with the error left
  per kind of run.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.catalog import GIB, SliceShape
from workloads.planning import step_time
from workloads.planning.errors import PlanError
from workloads.planning.hbm import estimate_hbm
from workloads.planning.maxtext_keys import MESH_AXES, MODEL_KEYS, STRUCTURE_KEYS
from workloads.planning.maxtext_sets import MaxTextSets, arg_text, parse_sets, read_sets
from workloads.planning.mesh import Mesh, check_device_mesh, check_sharding, resolve_mesh, shape_warning
from workloads.planning.model import HbmEstimate, MaxTextSizing
from workloads.planning.overrides import Overrides
from workloads.planning.recipe_model import Kind, MaxTextSpec, ModelDims, Recipe
from workloads.planning.step_time import StepEstimate
from workloads.planning.target import Placement

# --set keys that change the HBM estimate (beyond per_device_batch_size): a failed
# estimate names them, since the recipe fitted before the user changed them.
_HBM_KEYS = MODEL_KEYS | STRUCTURE_KEYS.keys() | {"max_target_length", "num_vocab_tiling"}


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
    args: tuple[tuple[str, str], ...] = ()  # the run's MaxText keys as text (recipe args, --set over them)

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


def size_run(placed: Placement, o: Overrides, *, hbm_verdict: bool = True) -> Sizing | None:
    """The run's sizing (None for a plain command); one PlanError naming the flag or recipe field otherwise.

    ``hbm_verdict=False`` leaves the HBM verdict to the compiler (the estimate is still made): for the
    calibration benchmark, which compiles configurations on both sides of the line.
    """
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
    run_args = {**{k: arg_text(v) for k, v in mt.args.items()}, **sets.text}
    check_device_mesh(recipe, mesh, shape, placed.target.slices, run_args)
    pdb, batch_where = _per_device_batch(recipe, mt, sets, shape)
    global_batch = _global_batch(pdb, batch_where, shape.devices * placed.target.slices, totals)
    params = model.params()
    hbm = (
        _checked_hbm(model, pdb, seq, totals, shape, _hbm_blame(sets.text, batch_where), run_args, notes)
        if hbm_verdict
        else estimate_hbm(model, pdb, seq, totals, shape.hbm_bytes_per_device, run_args)
    )
    step = step_time.estimate(model, global_batch * seq / placed.target.devices, seq, shape.generation, run_args, totals["expert"])
    return Sizing(sets, model, mesh, seq, pdb, global_batch, params, hbm, step, tuple(notes), tuple(run_args.items()))


def _model(mt: MaxTextSpec, sets: MaxTextSets) -> ModelDims:
    """The model as it will run: recipe dims with any --set dims applied (each an int32 in its domain, read by ``read_sets``)."""
    dims = mt.model.model_dump()
    moe = dims.get("num_experts", 1) > 1 or sets.ints.get("num_experts", 1) > 1
    for key in (MODEL_KEYS | STRUCTURE_KEYS.keys()) & sets.ints.keys():
        field = STRUCTURE_KEYS[key][0] if key in STRUCTURE_KEYS else key
        if key == "base_mlp_dim" and moe:
            field = "dense_mlp_dim"  # MaxText's base_mlp_dim of a mixture of experts is its dense layers' (and the experts' is base_moe_mlp_dim)
        dims[field] = sets.ints[key]
    model = ModelDims.model_validate(dims)
    if model.num_experts_per_tok > model.num_experts and model.num_experts > 1:
        raise PlanError(
            "--set",
            f"num_experts_per_tok={model.num_experts_per_tok} is more than the model's {model.num_experts} experts",
            f"use a num_experts_per_tok of at most {model.num_experts}",
        )
    return model


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


def _hbm_blame(sets: Mapping[str, str], batch_where: str) -> tuple[str, str]:
    """(field, what changed): the --set keys that grew the model or sequence, else where the batch came from."""
    changed = [f"{k}={sets[k]}" for k in sorted(_HBM_KEYS & sets.keys())]
    if not changed:
        return batch_where, ""
    return "--set", ", ".join(changed) + (f" (with {batch_where})" if batch_where != "--set" else "")


def _checked_hbm(
    model: ModelDims,
    pdb: float,
    seq: int,
    totals: dict[str, int],
    shape: SliceShape,
    blame: tuple[str, str],
    args: Mapping[str, str],
    notes: list[str],
) -> HbmEstimate:
    """The estimate and its measured error against the device's HBM: refused when the floor (what no
    schedule of XLA's gives back) would not fit, a warning in ``notes`` when the measured range reaches over it."""
    hbm = estimate_hbm(model, pdb, seq, totals, shape.hbm_bytes_per_device, args)
    d = hbm.as_dict()
    device = f"a {shape.generation.name} device's {d['available_gib']:g} GiB"
    if hbm.floor_bytes > hbm.available_bytes:
        where, changed = blame
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in hbm.parts().items())
        raise PlanError(
            where,
            (f"{changed}: " if changed else "") + f"per_device_batch_size={pdb:g} needs ~{d['estimate_gib']:g} GiB per device ({parts} GiB), and at least"
            f" {hbm.floor_bytes / GIB:.1f} GiB whatever XLA schedules (the state, gradients, what the remat policy keeps and one copy of the logits),"
            f" more than {device}",
            ("shrink or drop those --set values, or " if changed else "")
            + "lower per_device_batch_size, keep less per layer (remat_policy=full, or offload with remat_policy=custom),"
            " shard more (a bigger slice, or more fsdp), or pick a pool with more HBM",
        )
    if max(hbm.high_bytes, hbm.total_bytes) > hbm.available_bytes:
        notes.append(
            f"per_device_batch_size={pdb:g} is estimated at ~{d['estimate_gib']:g} GiB per device of {device}, and"
            f" {hbm.range_text()} — it may not fit: check it with `python -m workloads preflight <recipe> --compile` before holding the slices"
        )
    return hbm
