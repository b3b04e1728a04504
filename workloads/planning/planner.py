"""Run planning: recipe + overrides + environment spec -> a validated, frozen RunPlan.

Pure: no I/O, no clock, no randomness (the run service, ``workloads.runs``, passes ``now`` and a random
suffix in). Every check that can be made before a cloud call is made here, and
each failure is one ``PlanError`` line naming the flag or field and the fix:
the pool and slice count against the spec, the MaxText mesh against the slice's
devices, each sharding axis against the model dimension it splits, a memory
estimate against HBM, names against Kubernetes' length limits.

Memory estimate (per device; deliberately a lower bound so it only rejects runs
that cannot fit, leaving the real verdict to MaxText's AOT compile):

    state       = 16 B x params / model_shards
                  (fp32 weights 4 + fp32 gradients 4 + Adam mu 4 + nu 4; sharded
                  over every mesh axis except data/diloco, which replicate)
    activations = layers x tokens x emb x 2 B / act_shards
                  (remat full keeps only each layer's bf16 input; tokens =
                  per_device_batch x seq; split by tensor/sequence/context)
    logits      = tokens x vocab x 4 B / tensor   (fp32 logits for the loss)

What published recipes use to fit (issue 22), modelled from their MaxText keys:

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

Checkpointing (MaxText runs; on unless enable_checkpointing=false): every
``--checkpoint-every`` minutes (default by capacity mode, model.py), as a
``checkpoint_period`` in steps of the estimated step time, into
``<checkpoints bucket>/<run name>/checkpoints/``: the run name is stable, so a
restarted JobSet finds its own latest step and resumes there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from infra.access import tensorboard_name, tensorboard_problem, write_problem
from infra.catalog import GIB, SliceShape, machine_size
from infra.spec import MTC_GENERATIONS, PRIORITY_CLASSES, BucketPurpose, DatasetSpec, EnvSpec, TeamSpec
from toolkit import names
from workloads import ray as ray_pins
from workloads.planning import carry, mounts, playbook
from workloads.planning.dataset import maxtext_data_args
from workloads.planning.defaults import (
    AUTOCHECKPOINT_CAPACITY,
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PROFILE_START,
    DEFAULT_TTL_SECONDS,
    INT32_MAX,
    PROGRAM_ERROR_EXIT_CODES,
)
from workloads.planning.model import (
    ASSUMED_MFU,
    CHECKPOINT_STORAGES,
    RUNTIME_JOB,
    RUNTIME_JOBSET,
    RUNTIME_RAY,
    RUNTIMES,
    Checkpointing,
    CheckpointStorage,
    DcnNetwork,
    HbmEstimate,
    MaxTextSizing,
    MultiTierCheckpointing,
    Policy,
    Profiling,
    Program,
    RunPlan,
    Target,
)
from workloads.planning.overrides import Overrides
from workloads.planning.recipes import (
    FILL,
    MAXTEXT_IMAGE,
    MAXTEXT_TRAIN_MODULE,
    MAXTEXT_VERSION,
    MESH_AXES,
    MODEL_KEYS,
    PLAIN_INT,
    PLANNER_KEYS,
    RAY_IMAGE,
    Kind,
    MaxTextSpec,
    ModelDims,
    Recipe,
    image_problem,
    load_recipe,
    maxtext_keys,
    mesh_key,
    number_problem,
    numeric_keys,
    runs_pinned_maxtext,
    shown_path,
    suggest,
)
from workloads.planning.select import PlanError, PoolChoice, select_pool

__all__ = ["DEFAULT_TTL_SECONDS", "Overrides", "PlanError", "RunPlan", "name_budget", "parse_sets", "plan_run"]

REPLICATED_JOB = "slice"  # the JobSet's one replicated job: one child Job per slice
POD_NAME_RANDOM = len("-abcde")  # the Job controller's generateName suffix
RAYJOB_NAME_MAX = 47  # KubeRay v1.6.0 utils.MaxRayJobNameLength
DNS1035 = re.compile(names.DNS1035_LABEL)

_SET_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")


# ----------------------------------------------------------------- helpers


def name_budget(slices: int, nodes_per_slice: int, runtime: str = RUNTIME_JOBSET) -> int:
    """Longest run name whose objects and pods still have valid names.

    JobSet: the Job controller names pods ``<jobset>-<rjob>-<slice>-<worker>-<5 random>``
    and pod names must be DNS-1035 labels (<= 63); JobSet's webhook checks the
    same with the largest indexes. Job names and the headless Service are shorter.
    A plain Indexed Job: pods ``<job>-<worker>-<5 random>``. A RayJob: KubeRay refuses
    names over 47 characters (its RayCluster is ``<rayjob>-<5 random>``, at most 53).
    """
    if runtime == RUNTIME_RAY:
        return RAYJOB_NAME_MAX
    longest_tail = f"-{nodes_per_slice - 1}" if runtime == RUNTIME_JOB else f"-{REPLICATED_JOB}-{slices - 1}-{nodes_per_slice - 1}"
    return names.K8S_NAME_MAX - len(longest_tail) - POD_NAME_RANDOM


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_sets(sets: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--set key=value`` items, in order; syntax and duplicates are errors."""
    out: dict[str, str] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise PlanError("--set", f"{item!r} is not key=value", "write it like --set per_device_batch_size=2")
        if not _SET_KEY.match(key):
            raise PlanError("--set", f"{key!r} is not a MaxText key (lowercase letters, digits and _)", "write it like --set remat_policy=full")
        if key in out:
            raise PlanError("--set", f"{key} is given twice ({out[key]!r} and {value!r})", "give each key once")
        bad = carry.problem(value)
        if bad:
            raise PlanError("--set", f"the value of {key} {bad}", f"give {key} a value without it")
        out[key] = value
    return out


def _int(key: str, value: str, where: str) -> int:
    # Plain ASCII digits only: int() also takes ' 4', '4_0' and '٤', which reach MaxText as written.
    if not PLAIN_INT.match(value):
        raise PlanError(where, f"{key}={value!r} is not a plain integer", f"write it like {key}=4 (digits only)")
    if len(value.lstrip("-")) > len(str(INT32_MAX)):  # and int() refuses strings of 4300+ digits
        raise PlanError(where, f"{key}={value[:12]}... has {len(value)} digits, beyond any size MaxText can use", f"use a {key} of at most {INT32_MAX}")
    return int(value)


# The domain of every --set key the planner reads (the others go to MaxText as written).
# Sizes are int32 in MaxText's configs and JAX shapes (defaults.INT32_MAX); the bound also
# keeps the HBM estimate's floats finite.
_POSITIVE_INT_KEYS = MODEL_KEYS | {"max_target_length"}
_GCS_PATH = re.compile(r"^gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9](/\S*)?$")


def _check_domain(key: str, value: str) -> None:
    """A --set value in its domain (the keys the planner reads, and any number): one PlanError naming the key otherwise."""
    if key in _POSITIVE_INT_KEYS:
        n = _int(key, value, "--set")
        if n < 1:
            raise PlanError("--set", f"{key}={value} must be a positive integer", f"use a {key} of at least 1")
        if n > INT32_MAX:
            raise PlanError("--set", f"{key}={value} is beyond any size MaxText can use", f"use a {key} of at most {INT32_MAX}")
    elif key == "per_device_batch_size":
        try:
            pdb = float(value)
        except ValueError:
            raise PlanError("--set", f"per_device_batch_size={value!r} is not a number", "write it like per_device_batch_size=4") from None
        if not (math.isfinite(pdb) and pdb > 0):
            raise PlanError("--set", f"per_device_batch_size={value!r} must be a positive finite number", "use e.g. per_device_batch_size=1")
        if pdb > INT32_MAX:
            raise PlanError("--set", f"per_device_batch_size={value!r} is beyond any batch MaxText can use", f"use at most {INT32_MAX}")
    elif key == "override_model_config":
        if value.lower() not in ("true", "false"):
            raise PlanError("--set", f"override_model_config={value!r} is neither true nor false", "write override_model_config=true")
    elif key == "base_output_directory":
        if not _GCS_PATH.match(value):
            raise PlanError("--set", f"base_output_directory={value!r} is not a gs:// path", "use gs://BUCKET/PATH")
    elif mesh_key(key) is not None:
        degree = _int(key, value, "--set")
        if degree != FILL and degree < 1:
            raise PlanError("--set", f"{key}={degree} must be >= 1 or -1", "use a positive degree, or -1 for the rest")
        if degree > INT32_MAX:
            raise PlanError("--set", f"{key}={degree} is beyond any size MaxText can use", f"use a degree of at most {INT32_MAX}")
    elif key in numeric_keys():
        bad = number_problem(value)  # a numeric key the planner does not read goes to MaxText: as a number it can hold
        if bad:
            raise PlanError("--set", f"{key}={value[:20]} {bad}", f"give {key} a value MaxText can hold")


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


HBM_ERROR_BAND = 0.30  # the estimate's largest measured error without host offload (see the module doc)
HBM_OFFLOAD_ERROR_BAND = 0.75  # ... with decoder_layer_input=offload (one measured point, -73%)


def hbm_error_band(args: Mapping[str, str]) -> float:
    """The measured error band of the estimate for a run with these MaxText args."""
    return HBM_OFFLOAD_ERROR_BAND if any(v == "offload" for v in args.values()) else HBM_ERROR_BAND


_OFFLOADED_LAYERS = 2  # with layer inputs offloaded: the layer computed and the one being fetched


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


def _image(recipe: Recipe, spec: EnvSpec, image: str | None, runtime: str | None = None) -> str:
    if image is not None:
        bad = image_problem(image)
        if bad:
            raise PlanError("--image", f"{image[:300]!r} {bad}", "pin it, e.g. --image us-docker.pkg.dev/p/r/maxtext:0.2.5")
        return image
    if recipe.image.ref:
        return recipe.image.ref
    if not spec.artifact_registry.enabled:
        raise PlanError(
            "--image",
            f"recipe {recipe.name} uses {recipe.image.registry} from the spec's Artifact Registry, which is disabled",
            "pass --image REPO/NAME:TAG or enable artifact_registry in the spec",
        )
    registry = recipe.image.registry
    if runtime == RUNTIME_RAY and registry == MAXTEXT_IMAGE:
        registry = RAY_IMAGE  # the same MaxText with Ray and the JaxTrainer entrypoint
    return f"{spec.region}-docker.pkg.dev/{spec.project}/{spec.artifact_registry.repository}/{registry}"


def _run_name(recipe: Recipe, o: Overrides, budget: int, now: datetime, rand: str) -> str:
    if o.name is not None:
        name = o.name if o.suffix is None else f"{o.name}-{o.suffix}"
        flag = "--name" if o.suffix is None else "--name/--suffix"
        if not DNS1035.match(name):
            raise PlanError(flag, f"{name!r} is not a DNS-1035 label", "use lowercase letters, digits and '-', starting with a letter")
        if len(name) > budget:
            raise PlanError(flag, f"{name!r} is {len(name)} characters; pod names of this run allow at most {budget}", f"shorten it to {budget} characters")
        return name
    tail = f"-{now:%m%d-%H%M}-{rand}" if o.suffix is None else f"-{o.suffix}"
    base = re.sub(r"[^-a-z0-9]", "-", recipe.name)[: max(1, budget - len(tail))].rstrip("-")
    name = base + tail
    if not DNS1035.match(name) or len(name) > budget:
        raise PlanError(
            "--suffix", f"{name!r} is not a usable run name ({budget} characters at most, DNS-1035)", "use a short suffix of lowercase letters and digits"
        )
    return name


# ------------------------------------------------------------------ plan


def plan_run(
    recipe_name: str,
    spec: EnvSpec,
    overrides: Overrides | None = None,
    *,
    now: datetime | None = None,
    rand: str = "x0x",
) -> RunPlan:
    """Resolve and check a run. ``now``/``rand`` make generated names deterministic in tests."""
    o = overrides or Overrides()
    recipe = load_recipe(recipe_name)
    slices = _check_counts(recipe, o)
    bad = o.problem()  # every number within its declared bounds (overrides.Bounds)
    if bad:
        raise PlanError(*bad)
    runtime = _runtime(recipe, o, slices, spec)
    o = replace(o, runtime=runtime)
    team = spec.team(o.team)
    _check_host_network(o, team)
    priority = _priority(o, team)
    choice = select_pool(spec, recipe, pool=o.pool, slices=slices)
    name = _run_name(recipe, o, name_budget(slices, choice.shape.nodes, runtime), now or datetime(2000, 1, 1), rand)
    target = _target(spec, choice, slices, team, priority)
    if runtime == RUNTIME_RAY:
        _check_ray_shape(target, o)
    program, checkpoint, multi_tier, storage = _program(recipe, spec, o, target, name)
    _check_carried(program, runtime, "--set" if o.sets else f"recipe {recipe.name}")
    return RunPlan(
        name=name,
        target=target,
        program=program,
        policy=replace(_policy(recipe, o, target, checkpoint, runtime), multi_tier=multi_tier, checkpoint_storage=storage),
        labels=(
            (names.K8S_MANAGED_BY_LABEL, names.TGK),
            (names.K8S_APP_NAME_LABEL, recipe.name.replace(".", "-")),
            (names.TGK_RUN_LABEL, name),
        ),
        jobset_version=spec.versions.jobset,
        kueue_version=spec.versions.kueue,
        runtime=runtime,
    )


def _check_carried(program: Program, runtime: str, field: str) -> None:
    """Every word and env value the program gets can reach it (``carry``); the recipe and --set were checked as they were read."""
    for text in (*program.command, *program.args, *(v for _, v in program.env)):
        bad = carry.problem(text)
        if bad:
            raise PlanError(field, f"a program argument {bad}", "remove it")
    bad_command = carry.command_problem(program.command, program.args, ray=runtime == RUNTIME_RAY)
    if bad_command:
        raise PlanError(field, *bad_command)


def _runtime(recipe: Recipe, o: Overrides, slices: int, spec: EnvSpec) -> str:
    """--runtime, else the recipe's first; one that the recipe or the spec cannot carry is refused."""
    runtime = recipe.runtimes[0] if o.runtime is None else o.runtime
    if runtime not in RUNTIMES:
        raise PlanError("--runtime", f"unknown runtime {runtime!r}{suggest(runtime, list(RUNTIMES))}", f"use one of {', '.join(RUNTIMES)}")
    if runtime not in recipe.runtimes:
        raise PlanError(
            "--runtime",
            f"recipe {recipe.name} does not run on {runtime} (it runs on {', '.join(recipe.runtimes)})",
            f"use --runtime {recipe.runtimes[0]}, or add {runtime} to runtimes in {shown_path(recipe.name)}",
        )
    if runtime == RUNTIME_JOB and slices > 1:
        # One Job per slice would need JobSet's whole-run restart and multislice env; that is the jobset runtime.
        raise PlanError(
            "--slices",
            f"the job runtime runs one slice (a plain Job cannot restart {slices} slices together)",
            "use --runtime jobset for multislice, or --slices 1",
        )
    return runtime


def _check_ray_shape(target: Target, o: Overrides) -> None:
    """A Ray TPU worker group needs a TPU type Ray knows (its JaxTrainer's accelerator_type)."""
    gen = target.shape.generation.name
    if gen in ray_pins.RAY_ACCELERATOR_TYPES:
        return
    known = ", ".join(ray_pins.RAY_ACCELERATOR_TYPES)
    flag = "--pool" if o.pool else "--runtime"
    raise PlanError(
        flag,
        f"the Ray worker shape {target.pool} ({gen} {target.shape.topology}) has no Ray TPU accelerator type (Ray knows {known})",
        "pick a pool of one of those generations with --pool, or use --runtime jobset",
    )


def _check_host_network(o: Overrides, team: TeamSpec) -> None:
    """hostNetwork pods act as the TPU nodes' SA, not the team's: only for teams that opted in.

    Their namespace enforces Pod Security ``baseline`` (workloads.render.kueue), which
    would refuse the pods after Kueue admitted the run.
    """
    if o.host_network and not team.host_network:
        raise PlanError(
            "--host-network",
            f"team {team.name!r} keeps its own identity: hostNetwork pods would act as the TPU nodes' service account, and its namespace refuses them",
            "drop --host-network, or set host_network: true on the team in the spec (its buckets are then granted to the node service account)",
        )


def _check_counts(recipe: Recipe, o: Overrides) -> int:
    """The slice count; the flags that are plain numbers are checked first (each lower bound with its own fix;
    then every number against its declared ``Bounds`` in plan_run)."""
    if o.slices is not None and o.slices < 1:
        raise PlanError("--slices", f"must be at least 1, got {o.slices}", "pass --slices 1 or more")
    steps = recipe.steps if o.steps is None else o.steps
    if steps < 1:
        raise PlanError("--steps", f"must be at least 1, got {steps}", "pass a positive step count")
    if o.max_restarts is not None and o.max_restarts < 0:
        raise PlanError(
            "--max-restarts",
            f"must be >= 0, got {o.max_restarts}",
            "pass 0 to fail on the first non-disruption failure, or leave it out for the capacity mode's default",
        )
    if o.profile_steps is not None and o.profile_steps < 1:
        raise PlanError("--profile", f"must be at least 1 step, got {o.profile_steps}", "pass e.g. --profile 3")
    if o.profile_steps is not None and o.profile_start is not None and o.profile_start < 0:
        raise PlanError("--profile-start", f"must be >= 0, got {o.profile_start}", f"pass e.g. --profile-start {DEFAULT_PROFILE_START}")
    every = o.checkpoint_every
    if every is not None and not (math.isfinite(every) and every > 0):
        raise PlanError(
            "--checkpoint-every",
            f"must be a number of minutes above 0, got {every:g}",
            "pass e.g. --checkpoint-every 30, or leave it out for the capacity mode's default (turn checkpointing off with --set enable_checkpointing=false)",
        )
    return o.slices or recipe.slices


def _policy(recipe: Recipe, o: Overrides, target: Target, checkpoint: Checkpointing | None, runtime: str = RUNTIME_JOBSET) -> Policy:
    """Restarts by capacity mode unless --max-restarts; program errors = 1, 2 + the recipe's fatal codes.

    A plain Job cannot restart a whole run (workloads.render.job): its budget is 0, and asking for more is refused.
    """
    if runtime == RUNTIME_JOB:
        if o.max_restarts:
            raise PlanError(
                "--max-restarts",
                "a plain Job cannot restart the whole run (it fails on the first pod failure)",
                "use --runtime jobset for restarts, or drop --max-restarts",
            )
        max_restarts = 0
    else:
        max_restarts = DEFAULT_MAX_RESTARTS[target.capacity] if o.max_restarts is None else o.max_restarts
    return Policy(
        max_restarts=max_restarts,
        ttl_seconds=o.ttl_seconds,
        program_error_exit_codes=tuple(sorted({*PROGRAM_ERROR_EXIT_CODES, *recipe.fatal_exit_codes})),
        host_network=o.host_network,
        checkpoint=checkpoint,
    )


def _priority(o: Overrides, team: TeamSpec) -> str:
    priority = o.priority or team.priority
    if priority not in PRIORITY_CLASSES:
        raise PlanError("--priority", f"unknown priority {priority!r}{suggest(priority, list(PRIORITY_CLASSES))}", f"use one of {', '.join(PRIORITY_CLASSES)}")
    allowed = team.allowed_priorities
    if priority not in allowed:
        # The cluster refuses it too (workloads/render/admission.py): say so before anything is applied.
        raise PlanError(
            "--priority",
            f"team {team.name} may not use priority {priority} (the spec allows it {', '.join(allowed)})",
            f"use one of {', '.join(allowed)}, or add {priority} to team {team.name}'s priorities in the spec",
        )
    return priority


def _target(spec: EnvSpec, choice: PoolChoice, slices: int, team: TeamSpec, priority: str) -> Target:
    pool = choice.pool
    return Target(
        pool=pool.name,
        shape=pool.shape,
        slices=slices,
        node_pools=choice.node_pools,
        zone=spec.pool_zone(pool),
        capacity=pool.run_mode,  # a pool with a capacity list is planned for its most interruption-prone option
        placement_policy=spec.workload_policy_name(pool),
        team=team.name,
        namespace=team.ns,
        local_queue=team.queue,
        priority=priority,
        priority_value=PRIORITY_CLASSES[priority],
        service_account=team.ksa,
        cpu_pool=spec.cpu_pool.name,
        # Only across slices: DCN traffic is what the second network carries.
        dcn=DcnNetwork(spec.network.dcn.gke_network, spec.network.dcn.tcp_rmem) if spec.network.dcn and slices > 1 else None,
        run_as_user=team.run_as_user,
    )


def _program(
    recipe: Recipe, spec: EnvSpec, o: Overrides, target: Target, name: str
) -> tuple[Program, Checkpointing | None, MultiTierCheckpointing | None, CheckpointStorage | None]:
    """The program, how it checkpoints (None: it does not), through multi-tier checkpointing (None: not), to which storage (None: gcs)."""
    env: dict[str, str] = dict(recipe.env)
    flags = recipe.libtpu_flags(target.shape.generation.name)
    if flags:
        env["LIBTPU_INIT_ARGS"] = " ".join(flags)
    common = dict(
        recipe=recipe.name,
        kind=recipe.kind.value,
        image=_image(recipe, spec, o.image, o.runtime),
        env=tuple(env.items()),
        steps=recipe.steps if o.steps is None else o.steps,
    )
    if recipe.kind is Kind.COMMAND:
        if o.sets:
            raise PlanError("--set", f"recipe {recipe.name} runs a plain command, not MaxText; it takes no --set", "drop --set or pick a MaxText recipe")
        if o.checkpoint_every is not None:
            raise PlanError(
                "--checkpoint-every",
                f"recipe {recipe.name} runs a plain command, which saves no checkpoints",
                "drop --checkpoint-every or pick a MaxText recipe",
            )
        if o.profile_steps is not None or o.profile_start is not None:
            raise PlanError("--profile", f"recipe {recipe.name} runs a plain command, not MaxText's profiler", "drop --profile or pick a MaxText recipe")
        if o.dataset is not None:
            raise PlanError(
                "--dataset", f"recipe {recipe.name} runs a plain command, which reads no dataset through MaxText", "drop --dataset or pick a MaxText recipe"
            )
        if o.multi_tier_checkpointing:
            raise PlanError(
                "--multi-tier-checkpointing", f"recipe {recipe.name} runs a plain command, which saves no checkpoints", "drop it or pick a MaxText recipe"
            )
        if o.checkpoint_storage is not None:
            raise PlanError(
                "--checkpoint-storage", f"recipe {recipe.name} runs a plain command, which saves no checkpoints", "drop it or pick a MaxText recipe"
            )
        assert recipe.command is not None  # guaranteed by the recipe model
        return Program(command=tuple(recipe.command), args=(), **common), None, None, None
    return _maxtext_program(recipe, spec, o, target, name, common)


# ------------------------------------------------------------------ MaxText


def _maxtext_program(
    recipe: Recipe, spec: EnvSpec, o: Overrides, target: Target, name: str, common: dict[str, Any]
) -> tuple[Program, Checkpointing | None, MultiTierCheckpointing | None, CheckpointStorage | None]:
    mt = recipe.maxtext
    assert mt is not None  # guaranteed by the recipe model
    sets = parse_sets(o.sets)
    notes = _check_sets(recipe, mt, sets, common["image"])
    model = _model(mt, sets)
    shape, slices = target.shape, target.slices
    ici, dcn, sources = _mesh(recipe, mt, sets, shape, slices)
    totals = {a: ici[a] * dcn[a] for a in MESH_AXES}
    playbook.check_fsdp_limit(mt.model_name, totals, sources.get("ici_fsdp_parallelism", f"recipe {recipe.name}"))
    tuned = playbook.shape_warning(recipe.name, recipe.shapes, shape.key, {a: ici[a] for a in MESH_AXES})
    notes += [tuned] if tuned else []
    seq = _int("max_target_length", str(sets.get("max_target_length", mt.args.get("max_target_length", model.max_target_length))), "--set")
    _check_sharding(model, seq, totals, _AxisBlame(recipe, sources, ici, dcn))
    pdb, batch_where = _per_device_batch(recipe, mt, sets, shape)
    global_batch = _global_batch(pdb, batch_where, shape.devices * slices, totals)
    params = model.params()
    run_args = {**{k: _fmt(v) for k, v in mt.args.items()}, **sets}
    hbm = _hbm(model, params, pdb, seq, totals, shape, _hbm_blame(sets, batch_where), run_args, notes)
    step_s = estimate_step_seconds(model, global_batch * seq, seq, target)
    checkpoint = _checkpointing(recipe, mt, sets, o, target, step_s, common["steps"])
    if checkpoint is not None:
        _check_checkpoint_bucket(spec, sets, spec.team(target.team), o.host_network)
    base_out = _output_base(spec, sets, spec.team(target.team))
    args = _maxtext_args(mt, model, sets, name=name, base_out=base_out, pdb=pdb, steps=common["steps"], ici=ici, dcn=dcn, checkpoint=checkpoint)
    dataset = _dataset(recipe, spec, o, spec.team(target.team), sets)
    if dataset is not None:
        args.update(maxtext_data_args(dataset))
    multi_tier = _multi_tier(recipe, spec, o, target, params, checkpoint, sets, step_s)
    if multi_tier is not None:
        args.update(multi_tier.maxtext_args())
    storage = _checkpoint_storage(recipe, spec, o, spec.team(target.team), sets, base_out, multi_tier is not None)
    if o.host_network and (dataset is not None or (storage is not None and storage.kind == "gcsfuse")):
        # The driver mounts with the pod's Kubernetes service account (Workload Identity), which a
        # hostNetwork pod does not get without the driver's hostNetworkPodKSA opt-in; the toolkit does not set that up.
        raise PlanError(
            "--host-network",
            "GCS FUSE volumes (the dataset, gcsfuse checkpoints) mount with the pod's own identity, which hostNetwork pods do not have",
            "drop --host-network for this run",
        )
    if storage is not None:
        args["base_output_directory"] = storage.base_output
        if args.get("gcs_metrics") == "true":
            # MaxText uploads these with its GCS client to <base_output_directory>, which is now a mount path.
            args["gcs_metrics"] = "false"
            notes.append(
                f"--checkpoint-storage {storage.kind}: MaxText's gcs_metrics turned off (it uploads to a gs:// output only); step figures are in the logs"
            )
        if storage.kind == "lustre":
            notes.append(
                f"--checkpoint-storage lustre: the toolkit cannot read Lustre from here, so it does not check that {storage.location}{name}/ "
                "is this run's own (another run under this --name resumes from what is there)"
            )
    notes += mounts.check_paths(recipe, args, sets, dataset=dataset, storage=storage, multi_tier=multi_tier)
    profile = _profiling(spec, sets, o, spec.team(target.team), common["steps"])
    if profile is not None:
        args.update(profile.maxtext_args())
        common = {**common, "env": (*common["env"], *profile.env().items())}
    sizing = MaxTextSizing(
        ici=tuple((a, ici[a]) for a in MESH_AXES if ici[a] != 1 or a == "fsdp"),
        dcn=tuple((a, dcn[a]) for a in MESH_AXES if dcn[a] != 1 or a == "data"),
        per_device_batch_size=pdb,
        global_batch_size=global_batch,
        params=params,
        hbm=hbm,
    )
    return (
        Program(
            command=("python3", "-m", MAXTEXT_TRAIN_MODULE),
            args=(mt.config, *(f"{k}={v}" for k, v in args.items())),
            output_dir=None if storage is not None and storage.kind == "lustre" else f"{base_out}/{name}/",
            sizing=sizing,
            estimated_step_seconds=step_s,
            assumed_mfu=ASSUMED_MFU,
            profile=profile,
            dataset=dataset,
            warnings=tuple(notes),
            **common,
        ),
        checkpoint,
        multi_tier,
        storage,
    )


def _check_sets(recipe: Recipe, mt: MaxTextSpec, sets: dict[str, str], image: str) -> list[str]:
    """Refuses a bad --set; returns the warnings (keys passed through to an image the toolkit has not read)."""
    known = maxtext_keys()
    pinned = runs_pinned_maxtext(image)
    if pinned and recipe.image.ref and recipe.unknown_keys():
        # A recipe kept these keys for its own image; the pinned MaxText would stop at them.
        raise PlanError(
            "--image",
            f"recipe {recipe.name} sets {', '.join(recipe.unknown_keys())}, which MaxText {MAXTEXT_VERSION} ({image.rsplit('/', 1)[-1]}) does not have",
            f"run it with its own image ({recipe.image.ref}), or drop those keys from the recipe",
        )
    unknown = [k for k in sets if k not in known]
    for key, value in sets.items():
        if key not in known and pinned:
            raise PlanError(
                "--set",
                f"{key} is not a MaxText {MAXTEXT_VERSION} key{suggest(key, known)}",
                "check the spelling against MaxText's base.yml (another MaxText: pass --image)",
            )
        if key in PLANNER_KEYS:
            fix = {"run_name": "use --name", "steps": "use --steps", "num_slices": "use --slices"}.get(key, "the planner sets it from the target pool")
            raise PlanError("--set", f"{key} is set by the planner", fix)
        if key in MODEL_KEYS and mt.model_name != "default" and sets.get("override_model_config", "").lower() != "true":
            raise PlanError(
                "--set",
                f"{key} changes preset model {mt.model_name}, which MaxText refuses without override_model_config=true",
                "add --set override_model_config=true, or use a model_name=default recipe",
            )
        _check_domain(key, value)
    if unknown:
        return [f"--set {', '.join(unknown)}: not MaxText {MAXTEXT_VERSION} keys, passed as written to {image} (checked by that MaxText, not here)"]
    return []


def _model(mt: MaxTextSpec, sets: dict[str, str]) -> ModelDims:
    """The model as it will run: recipe dims with any --set dims applied."""
    dims = mt.model.model_dump()
    for key in MODEL_KEYS & sets.keys():
        dims[key] = _int(key, sets[key], "--set")
        if dims[key] <= 0:
            raise PlanError("--set", f"{key}={dims[key]} must be positive", f"use a positive {key}")
    return ModelDims.model_validate(dims)


def _mesh(recipe: Recipe, mt: MaxTextSpec, sets: dict[str, str], shape: SliceShape, slices: int) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """ICI and DCN degrees: the recipe's rule, then --set on single axes (an explicit value ends a fill)."""
    recipe_where = f"recipe {recipe.name}"
    sources: dict[str, str] = {}
    rules = {"ici": dict(mt.parallelism.ici), "dcn": dict(mt.parallelism.dcn)}
    for level in ("ici", "dcn"):
        for axis in rules[level]:
            sources[f"{level}_{axis}_parallelism"] = f"{recipe_where} parallelism.{level}.{axis}"
    for key in sets.keys() & _POSITIVE_INT_KEYS:
        sources[key] = "--set"  # a model dimension the sharding checks may blame
    for key, value in sets.items():
        mk = mesh_key(key)
        if mk is None:
            continue
        level, axis = mk
        if axis not in MESH_AXES:
            raise PlanError("--set", f"{key}: {axis} is not a MaxText mesh axis", f"use one of {', '.join(MESH_AXES)}")
        degree = _int(key, value, "--set")
        if degree != FILL and degree < 1:
            raise PlanError("--set", f"{key}={degree} must be >= 1 or -1", "use a positive degree")
        rules[level][axis] = degree
        sources[key] = "--set"
    ici = _resolve_axes("ici", rules["ici"], shape.devices, f"devices of a {shape.generation.name} {shape.topology} slice", sources)
    dcn = _resolve_axes("dcn", rules["dcn"], slices, "slice(s)", sources)
    return ici, dcn, sources


@dataclass(frozen=True)
class _AxisBlame:
    """Which flag or recipe field a sharding error is blamed on.

    A --set that changed one of the axes wins; then a --set that changed the dimension
    being split (``dim``, e.g. base_emb_dim); then the recipe field that set the axis.
    """

    recipe: Recipe
    sources: dict[str, str]
    ici: dict[str, int]
    dcn: dict[str, int]

    def axis_set(self, *axes: str) -> bool:
        levels = {"ici": self.ici, "dcn": self.dcn}
        return any(self.sources.get(f"{level}_{a}_parallelism") == "--set" and degrees[a] != 1 for a in axes for level, degrees in levels.items())

    def dim_set(self, dim: str, *axes: str) -> bool:
        """The dimension, not the mesh, came from --set: the message names the dimension."""
        return self.sources.get(dim) == "--set" and not self.axis_set(*axes)

    def __call__(self, *axes: str, dim: str | None = None) -> str:
        levels = {"ici": self.ici, "dcn": self.dcn}
        if self.axis_set(*axes) or (dim is not None and self.sources.get(dim) == "--set"):
            return "--set"
        for a in axes:
            for level in levels:
                key = f"{level}_{a}_parallelism"
                if key in self.sources:
                    return self.sources[key]
        return f"recipe {self.recipe.name}"


def _check_sharding(model: ModelDims, seq: int, totals: dict[str, int], where: _AxisBlame) -> None:
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


def _per_device_batch(recipe: Recipe, mt: MaxTextSpec, sets: dict[str, str], shape: SliceShape) -> tuple[float, str]:
    """--set wins, else the recipe's rule for this HBM size; returns (batch, where it came from)."""
    if "per_device_batch_size" in sets:
        try:
            pdb = float(sets["per_device_batch_size"])
        except ValueError:
            raise PlanError(
                "--set", f"per_device_batch_size={sets['per_device_batch_size']!r} is not a number", "write it like per_device_batch_size=4"
            ) from None
        if not pdb > 0:
            raise PlanError("--set", f"per_device_batch_size={pdb:g} must be positive", "use e.g. per_device_batch_size=1")
        return pdb, "--set"
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


# --set keys that change the HBM estimate (beyond per_device_batch_size): a failed
# estimate names them, since the recipe fitted before the user changed them.
_HBM_KEYS = MODEL_KEYS | {"max_target_length"}


def _hbm_blame(sets: dict[str, str], batch_where: str) -> tuple[str, str]:
    """(field, what changed): the --set keys that grew the model or sequence, else where the batch came from."""
    changed = [f"{k}={sets[k]}" for k in sorted(_HBM_KEYS & sets.keys())]
    if not changed:
        return batch_where, ""
    return "--set", ", ".join(changed) + (f" (with {batch_where})" if batch_where != "--set" else "")


def _hbm(
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


def _output_base(spec: EnvSpec, sets: dict[str, str], team: TeamSpec) -> str:
    """--set base_output_directory, else the team's checkpoints (or artifacts) bucket: the only ones its pods may write."""
    if "base_output_directory" in sets:
        return sets["base_output_directory"].rstrip("/")
    bucket = spec.bucket_for(BucketPurpose.CHECKPOINTS, team) or spec.bucket_for(BucketPurpose.ARTIFACTS, team)
    if bucket is None:
        raise PlanError(
            "buckets",
            f"the spec has no checkpoints or artifacts bucket of team {team.name} for MaxText's output",
            f"add a bucket with purpose: checkpoints (and team: {team.name} if the spec has several teams), or --set base_output_directory=gs://BUCKET/PATH",
        )
    return f"gs://{bucket.name}"


def _maxtext_args(
    mt: MaxTextSpec,
    model: ModelDims,
    sets: dict[str, str],
    *,
    name: str,
    base_out: str,
    pdb: float,
    steps: int,
    ici: dict[str, int],
    dcn: dict[str, int],
    checkpoint: Checkpointing | None = None,
) -> dict[str, str]:
    """Argument order: identity, model, recipe args, sizing, checkpointing, mesh; --set replaces in place or appends."""
    args: dict[str, str] = {"run_name": name, "base_output_directory": base_out, "model_name": mt.model_name}
    if mt.model_name == "default":
        for key in (
            "base_emb_dim",
            "base_num_query_heads",
            "base_num_kv_heads",
            "head_dim",
            "base_num_decoder_layers",
            "base_mlp_dim",
            "vocab_size",
            "max_target_length",
        ):
            args[key] = _fmt(getattr(model, key))
    for key, value in mt.args.items():
        args[key] = _fmt(value)
    args["per_device_batch_size"] = _fmt(pdb)
    args["steps"] = str(steps)
    # Always explicit: base.yml turns checkpointing on, and a recipe key keeps its place.
    args.update(checkpoint.maxtext_args() if checkpoint else {"enable_checkpointing": "false"})
    for level, degrees in (("ici", ici), ("dcn", dcn)):
        for axis in MESH_AXES:
            # base.yml defaults ici_fsdp and dcn_data to -1: always write them out.
            if degrees[axis] != 1 or (level, axis) in (("ici", "fsdp"), ("dcn", "data")):
                args[f"{level}_{axis}_parallelism"] = str(degrees[axis])
    for key, value in sets.items():
        if mesh_key(key) or key in MODEL_KEYS or key in CHECKPOINT_KEYS or key in ("per_device_batch_size", "base_output_directory"):
            continue  # already resolved above
        args[key] = value
    return args


# --------------------------------------------------------------- profiling

# MaxText keys --profile writes; a --set on one of them next to --profile is a conflict.
PROFILE_KEYS = (
    "profiler",
    "skip_first_n_steps_for_profiler",
    "profiler_steps",
    "use_vertex_tensorboard",
    "vertex_tensorboard_project",
    "vertex_tensorboard_region",
)


def _profiling(spec: EnvSpec, sets: dict[str, str], o: Overrides, team: TeamSpec, steps: int) -> Profiling | None:
    """--profile N [--profile-start K]: MaxText's xplane profiler for steps K..K+N-1, uploaded to the
    spec's Vertex AI TensorBoard as the pods' identity (the traces stay in the bucket without one)."""
    if o.profile_steps is None:
        if o.profile_start is not None:
            raise PlanError("--profile-start", "given without --profile", "add --profile STEPS (how many steps to record)")
        return None
    start = DEFAULT_PROFILE_START if o.profile_start is None else o.profile_start  # both checked by _check_counts
    if start + o.profile_steps > steps:
        raise PlanError(
            "--profile",
            f"steps {start}-{start + o.profile_steps - 1} are past the end of the run ({steps} steps)",
            f"pass --steps {start + o.profile_steps} or more, or a smaller --profile/--profile-start",
        )
    clash = next((k for k in PROFILE_KEYS if k in sets), None)
    if clash:
        raise PlanError("--set", f"{clash} is set by --profile", f"drop --set {clash}=..., or drop --profile")
    problem = tensorboard_problem(spec, team, o.host_network)
    if problem and spec.tensorboard.enabled:
        raise PlanError("--profile", f"the traces cannot be uploaded to the TensorBoard: {problem}", "run on the pod network (drop --host-network)")
    if problem:
        return Profiling(first_step=start, steps=o.profile_steps)
    return Profiling(first_step=start, steps=o.profile_steps, tensorboard=tensorboard_name(spec), project=spec.project, region=spec.tensorboard_region)


# ------------------------------------------------------------ checkpointing

# MaxText keys the planner writes from plan.policy.checkpoint; a recipe arg or --set on
# one of them is read into that policy (so the plan and the args cannot disagree).
CHECKPOINT_KEYS = ("enable_checkpointing", "async_checkpointing", "checkpoint_period", "max_num_checkpoints_to_keep", "enable_autocheckpoint")


def estimate_step_seconds(model: ModelDims, tokens: int, seq: int, target: Target) -> float:
    """Seconds per training step of the whole run (model FLOPs at ASSUMED_MFU; see the module doc).

    The FLOPs follow the parameters a token is active in, not all that HBM holds: a mixture
    of experts runs each token through a few of its experts.
    """
    return step_seconds(model, tokens, seq, target.chips, target.shape.peak_tflops_per_chip)


def step_flops(model: ModelDims, tokens: int, seq: int) -> float:
    """Model FLOPs of one training step: 6 x active parameters per token, plus causal attention's."""
    attention = 6 * model.base_num_decoder_layers * seq * model.base_num_query_heads * model.head_dim
    return float((6 * model.active_params() + attention) * tokens)


def step_seconds(model: ModelDims, tokens: int, seq: int, chips: int, peak_tflops_per_chip: float, mfu: float = ASSUMED_MFU) -> float:
    return step_flops(model, tokens, seq) / (chips * peak_tflops_per_chip * 1e12 * mfu)


def _checkpointing(recipe: Recipe, mt: MaxTextSpec, sets: dict[str, str], o: Overrides, target: Target, step_s: float, steps: int) -> Checkpointing | None:
    """--set wins over the recipe's args, which win over the capacity mode's defaults."""
    given = {k: _fmt(v) for k, v in mt.args.items() if k in CHECKPOINT_KEYS}
    where = {k: f"recipe {recipe.name} args.{k}" for k in given}
    for k in CHECKPOINT_KEYS:
        if k in sets:
            given[k], where[k] = sets[k], "--set"
    if not _flag(given, where, "enable_checkpointing", True):
        if o.checkpoint_every is not None:
            raise PlanError("--checkpoint-every", f"checkpointing is off ({where['enable_checkpointing']}: enable_checkpointing=false)", "drop one of the two")
        return None
    if "checkpoint_period" in given:
        if o.checkpoint_every is not None:
            raise PlanError(
                "--checkpoint-every",
                f"checkpoint_period={given['checkpoint_period']} ({where['checkpoint_period']}) also sets the period",
                "give one: --checkpoint-every MINUTES or checkpoint_period=STEPS",
            )
        period = _count(given, where, "checkpoint_period")
        if period > steps:
            raise PlanError(
                where["checkpoint_period"],
                f"checkpoint_period={period} is longer than the run ({steps} steps)",
                f"use at most {steps}, or --checkpoint-every MINUTES",
            )
        every = round(period * step_s / 60, 2)
    else:
        every = DEFAULT_CHECKPOINT_MINUTES[target.capacity] if o.checkpoint_every is None else o.checkpoint_every
        period = _period_steps(every, step_s, steps, explicit=o.checkpoint_every is not None)
    return Checkpointing(
        every_minutes=every,
        period_steps=period,
        keep=_count(given, where, "max_num_checkpoints_to_keep") if "max_num_checkpoints_to_keep" in given else DEFAULT_CHECKPOINTS_KEPT,
        async_save=_flag(given, where, "async_checkpointing", True),
        autocheckpoint=_flag(given, where, "enable_autocheckpoint", target.capacity in AUTOCHECKPOINT_CAPACITY),
    )


def _period_steps(every_minutes: float, step_s: float, steps: int, *, explicit: bool) -> int:
    """Whole steps in the period, rounded down (never less often than asked).

    A default is brought into [1, steps]; an explicit --checkpoint-every outside that
    range is an error (it asked for something the run cannot do).
    """
    raw = every_minutes * 60 / step_s
    if explicit and raw < 1:
        raise PlanError(
            "--checkpoint-every",
            f"{every_minutes:g} min is shorter than one step (~{step_s:.1f} s estimated at {ASSUMED_MFU:.0%} MFU)",
            f"pass at least {math.ceil(step_s / 60 * 100) / 100:g}",
        )
    run_minutes = steps * step_s / 60
    if explicit and math.floor(raw) > steps:
        raise PlanError(
            "--checkpoint-every",
            f"{every_minutes:g} min is longer than the whole run (~{run_minutes:.1f} min: {steps} steps x ~{step_s:.1f} s at {ASSUMED_MFU:.0%} MFU)",
            f"pass at most {math.floor(run_minutes * 100) / 100:g}, or leave it out (a run always saves its last step)",
        )
    return min(max(1, math.floor(raw)), steps)


def _flag(given: dict[str, str], where: dict[str, str], key: str, default: bool) -> bool:
    if key not in given:
        return default
    value = given[key].lower()
    if value not in ("true", "false"):
        raise PlanError(where[key], f"{key}={given[key]!r} is neither true nor false", f"write {key}=true or {key}=false")
    return value == "true"


def _count(given: dict[str, str], where: dict[str, str], key: str) -> int:
    n = _int(key, given[key], where[key])
    if n < 1:
        raise PlanError(where[key], f"{key}={given[key]!r} is not a whole number of at least 1", f"write it like {key}=3")
    if n > INT32_MAX:
        raise PlanError(where[key], f"{key}={n} is above {INT32_MAX}, the most MaxText's int32 step figures hold", f"use a {key} of at most {INT32_MAX}")
    return n


def _check_checkpoint_bucket(spec: EnvSpec, sets: dict[str, str], team: TeamSpec, host_network: bool) -> None:
    """Checkpoints need a bucket the run's pods can write: the team's checkpoints bucket.

    A --set base_output_directory outside the spec is the user's to vouch for.
    """
    if "base_output_directory" in sets:
        name = sets["base_output_directory"].removeprefix("gs://").split("/", 1)[0]
        bucket = next((b for b in spec.buckets if b.name == name), None)
        where = "--set"
    else:
        bucket = spec.bucket_for(BucketPurpose.CHECKPOINTS, team)
        where = "buckets"
        if bucket is None:
            raise PlanError(
                "buckets",
                f"checkpointing is on but team {team.name} has no bucket with purpose: checkpoints in the spec",
                f"add one (with team: {team.name} if the spec has several teams), or --set enable_checkpointing=false to run without checkpoints",
            )
    problem = None if bucket is None else write_problem(spec, bucket, team, host_network)
    if problem:
        raise PlanError(
            where, f"checkpoints cannot be saved: {problem}", "write them to a bucket of the run's team (buckets[].team), or --set enable_checkpointing=false"
        )


# ------------------------------------------------------------------ datasets

# MaxText keys --dataset writes (workloads.planning.dataset.maxtext_data_args); a --set on one of them beside it is a conflict.
DATASET_KEYS = tuple(maxtext_data_args(DatasetSpec(name="x", bucket="b", path="p", format="arrayrecord")))


def _dataset(recipe: Recipe, spec: EnvSpec, o: Overrides, team: TeamSpec, sets: dict[str, str]) -> DatasetSpec | None:
    """--dataset, else the recipe's dataset:; it must be the spec's and readable by the team's identity."""
    name, where = (o.dataset, "--dataset") if o.dataset is not None else (recipe.dataset, f"recipe {recipe.name} dataset")
    if name is None:
        return None
    d = spec.dataset(name)
    if d is None:
        raise PlanError(where, *spec.unknown_dataset(name))
    owner = spec.dataset_team(d)
    if owner.name != team.name:
        raise PlanError(
            where,
            f"dataset {d.name} is in bucket {d.bucket} of team {owner.name}, which team {team.name}'s identity cannot read",
            f"run it as --team {owner.name}, or copy the data to a data bucket of team {team.name} and declare it there",
        )
    clash = next((k for k in DATASET_KEYS if k in sets), None)
    if clash:
        raise PlanError("--set", f"{clash} is set by the dataset ({where}: {d.name})", f"drop --set {clash}=..., or train without the dataset")
    return d


# -------------------------------------------------- multi-tier checkpointing

# MaxText keys multi-tier checkpointing writes; a --set on one of them is a conflict (or MTC done by hand).
MULTI_TIER_KEYS = (
    "enable_multi_tier_checkpointing",
    "local_checkpoint_directory",
    "local_checkpoint_period",
    "multi_tier_checkpointing_backup_interval_minutes",
    "multi_tier_checkpointing_backup_interval_steps",
    "enable_emergency_checkpoint",
)
# Local (RAM disk) saves this often: cheap enough to take far more often than the GCS tier.
MTC_LOCAL_MINUTES = 5.0


def _multi_tier(
    recipe: Recipe, spec: EnvSpec, o: Overrides, target: Target, params: int, checkpoint: Checkpointing | None, sets: dict[str, str], step_s: float
) -> MultiTierCheckpointing | None:
    """--multi-tier-checkpointing (or the recipe's key): where GKE and MaxText support it, with a RAM disk the VM holds."""
    clash = next((k for k in MULTI_TIER_KEYS if k in sets), None)
    if not (o.multi_tier_checkpointing or recipe.multi_tier_checkpointing):
        if clash:
            raise PlanError("--set", f"{clash} is multi-tier checkpointing's, which the toolkit sets up", "use --multi-tier-checkpointing instead")
        return None
    where = "--multi-tier-checkpointing" if o.multi_tier_checkpointing else f"recipe {recipe.name} multi_tier_checkpointing"
    if clash:
        raise PlanError("--set", f"{clash} is set by {where}", f"drop --set {clash}=...")
    if checkpoint is None:
        raise PlanError(where, "checkpointing is off (enable_checkpointing=false)", "turn checkpointing on, or drop multi-tier checkpointing")
    if o.runtime != RUNTIME_JOBSET:
        raise PlanError(where, f"the RAM disk is mounted into JobSet pods only, and this run is a {o.runtime} run", "use --runtime jobset")
    shape = target.shape
    gen = shape.generation.name
    if gen not in MTC_GENERATIONS:
        raise PlanError(
            where,
            f"GKE's multi-tier checkpointing supports TPU {', '.join(MTC_GENERATIONS)}, not {gen} (pool {target.pool})",
            "drop it, or pick such a pool with --pool",
        )
    if target.slices < 2:
        raise PlanError(
            where, "MaxText's multi-tier checkpointing replicates each slice's RAM disk to a peer slice, and this run has 1 slice", "pass --slices 2 or more"
        )
    i, pool = next((i, p) for i, p in enumerate(spec.tpu_pools) if p.name == target.pool)
    memory = machine_size(shape.machine_type).memory_gib * GIB
    m = MultiTierCheckpointing(
        params=params,
        hosts_per_slice=shape.nodes,
        configured_bytes=(pool.multi_tier_checkpointing.ramdisk_gib * GIB) if pool.multi_tier_checkpointing else 0,
        vm_memory_bytes=memory,
        local_period_steps=min(checkpoint.period_steps, max(1, math.floor(MTC_LOCAL_MINUTES * 60 / step_s))),
        backup_minutes=max(1, math.ceil(checkpoint.every_minutes)),
    )
    need = math.ceil(m.ramdisk_bytes / GIB)
    rule = f"12 B x {params / 1e9:.2f}B params x 2 / {shape.nodes} hosts + 15%"
    if m.ramdisk_bytes > memory:
        raise PlanError(
            where,
            f"the RAM disk this model needs ({need} GiB per VM: {rule}) is larger than the {memory // GIB} GiB of memory of a {shape.machine_type} VM",
            "use a shape with more hosts per slice (a bigger slice shards the checkpoint further), a smaller model, or drop multi-tier checkpointing",
        )
    if pool.multi_tier_checkpointing is None:
        raise PlanError(
            where,
            f"pool {pool.name} declares no multi_tier_checkpointing in the spec (GKE's add-on and the pool's CheckpointConfiguration)",
            f"add tpu_pools[{i}].multi_tier_checkpointing: {{ramdisk_gib: {need}}} to the spec, deploy it and run `queues apply`",
        )
    bucket = next(b for b in spec.buckets if b.name == spec.mtc_bucket(pool.multi_tier_checkpointing))
    owner = spec.bucket_owner(bucket)
    if owner.name != target.team:
        raise PlanError(
            where,
            f"pool {pool.name}'s RAM disks are backed up to bucket {bucket.name} of team {owner.name}, and this is team {target.team}'s run",
            f"set tpu_pools[{i}].multi_tier_checkpointing.bucket to a checkpoints bucket of team {target.team}, or run without it",
        )
    if m.ramdisk_bytes > m.configured_bytes:
        raise PlanError(
            where,
            f"the RAM disk this model needs ({need} GiB per VM: {rule}) is larger than the {pool.multi_tier_checkpointing.ramdisk_gib} GiB the spec gives pool {pool.name}",
            f"set tpu_pools[{i}].multi_tier_checkpointing.ramdisk_gib to at least {need} and run `queues apply`",
        )
    return m


# --------------------------------------------------------- checkpoint storage

# What the team namespace's claim on the spec's Managed Lustre instance is called (workloads.render.lustre applies it).
LUSTRE_CLAIM = f"{names.TGK}-lustre"


def _checkpoint_storage(
    recipe: Recipe, spec: EnvSpec, o: Overrides, team: TeamSpec, sets: dict[str, str], base_out: str, multi_tier: bool
) -> CheckpointStorage | None:
    """--checkpoint-storage, else the recipe's: gcs (None), the team's bucket through GCS FUSE, or the spec's Lustre."""
    if o.checkpoint_storage is not None:
        kind, where = o.checkpoint_storage, "--checkpoint-storage"
    else:
        kind, where = recipe.checkpoint_storage, f"recipe {recipe.name} checkpoint_storage"
    if kind is None or kind == "gcs":
        return None
    if kind not in CHECKPOINT_STORAGES:
        raise PlanError(
            where, f"unknown checkpoint storage {kind[:20]!r}{suggest(kind, list(CHECKPOINT_STORAGES))}", f"use one of {', '.join(CHECKPOINT_STORAGES)}"
        )
    if "base_output_directory" in sets:
        raise PlanError("--set", f"base_output_directory is set by {where} {kind}", f"drop --set base_output_directory=..., or use {where} gcs")
    if sets.get("gcs_metrics", "").lower() == "true":
        raise PlanError(
            "--set", f"gcs_metrics=true uploads to a gs:// output, and {where} {kind} writes to a mount", f"drop --set gcs_metrics=true, or use {where} gcs"
        )
    if multi_tier:
        raise PlanError(
            where, f"{kind} and multi-tier checkpointing both choose where checkpoints go (the add-on backs them up to GCS itself)", "give one of the two"
        )
    if kind == "gcsfuse":
        bucket = base_out.removeprefix("gs://").split("/", 1)[0]
        return CheckpointStorage(kind="gcsfuse", base_output="/checkpoints", location=f"gs://{bucket}/", bucket=bucket)
    lu = spec.lustre
    if lu is None:
        raise PlanError(where, "the spec declares no lustre: instance", "add lustre: {name, capacity_gib} to the spec and deploy it, or use gcs or gcsfuse")
    if lu.ip is None:
        raise PlanError(
            where,
            f"lustre.ip is not set, and the team's PersistentVolume needs the address of instance {lu.name}",
            "after `python -m infra deploy`, copy the address of `python -m infra outputs` lustre_mount_point into lustre.ip and run `queues apply`",
        )
    return CheckpointStorage(kind="lustre", base_output=f"/checkpoints/{team.ns}", location=f"lustre:{lu.name}/{team.ns}/", claim=LUSTRE_CLAIM)
