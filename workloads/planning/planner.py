"""Run planning: recipe + overrides + environment spec -> a validated, frozen RunPlan.

Pure: no I/O, no clock, no randomness (the CLI passes ``now`` and a random
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

Calibration (MaxText 0.2.5 AOT, maxtext-6b): v5e at batch 4 measured ~13.8 GiB,
estimate 11.3 GiB (fits); batch 16 failed CompileTimeHbmOom, estimate 20.3 GiB
(rejected). Temporaries of the layer being recomputed are left out on purpose.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from infra.catalog import GIB, SliceShape
from toolkit.errors import FieldError
from infra.spec import PRIORITY_CLASSES, BucketPurpose, EnvSpec, TpuPoolSpec
from workloads.planning.recipes import (
    FILL,
    MAXTEXT_TRAIN_MODULE,
    MESH_AXES,
    MODEL_KEYS,
    PLANNER_KEYS,
    Kind,
    ModelDims,
    Recipe,
    load_recipe,
    maxtext_keys,
    mesh_key,
    suggest,
)

MANAGED_BY = "tpu-gke-toolkit"
REPLICATED_JOB = "slice"  # the JobSet's one replicated job: one child Job per slice
POD_NAME_RANDOM = len("-abcde")  # the Job controller's generateName suffix
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MEGASCALE_PORT = 8080
TPU_RUNTIME_PORT = 8471
DEFAULT_TTL_SECONDS = 3 * 24 * 3600  # finished runs stay inspectable (logs, status) for 3 days

_SET_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
_IMAGE_TAGGED = re.compile(r"^[^\s@]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$")


class PlanError(FieldError):
    """A run that cannot work as asked. ``field`` is the flag or recipe field."""


@dataclass(frozen=True)
class Overrides:
    """What the user may change on the command line."""

    slices: int | None = None
    pool: str | None = None
    sets: tuple[str, ...] = ()
    steps: int | None = None
    image: str | None = None
    team: str | None = None
    priority: str | None = None
    name: str | None = None
    suffix: str | None = None
    host_network: bool = True
    max_restarts: int = 0
    ttl_seconds: int = DEFAULT_TTL_SECONDS


@dataclass(frozen=True)
class HbmEstimate:
    state_bytes: int
    activation_bytes: int
    logits_bytes: int
    available_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.activation_bytes + self.logits_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.available_bytes

    def as_dict(self) -> dict[str, float]:
        g = lambda b: round(b / GIB, 2)  # noqa: E731
        return {
            "estimate_gib": g(self.total_bytes),
            "state_gib": g(self.state_bytes),
            "activations_gib": g(self.activation_bytes),
            "logits_gib": g(self.logits_bytes),
            "available_gib": g(self.available_bytes),
        }


@dataclass(frozen=True)
class RunPlan:
    """Everything the manifests need, already checked. Immutable."""

    name: str
    recipe: str
    kind: str
    team: str
    namespace: str
    local_queue: str
    priority: str
    priority_value: int
    service_account: str
    image: str
    pool: str
    node_pools: tuple[str, ...]
    shape_key: str
    generation: str
    topology: str
    accelerator_label: str
    accelerator_type: str
    machine_type: str
    chips_per_vm: int
    nodes_per_slice: int
    chips_per_slice: int
    devices_per_slice: int
    slices: int
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    steps: int
    output_dir: str | None
    host_network: bool
    max_restarts: int
    ttl_seconds: int
    ici: tuple[tuple[str, int], ...] = ()
    dcn: tuple[tuple[str, int], ...] = ()
    per_device_batch_size: float | None = None
    global_batch_size: int | None = None
    params: int | None = None
    hbm: HbmEstimate | None = None
    jobset_version: str = ""
    kueue_version: str = ""
    labels: tuple[tuple[str, str], ...] = field(default=())
    placement_policy: str | None = None  # tpu7x: nodes carry cloud.google.com/placement-policy-name

    # Derived figures; properties so they can never disagree with the fields.
    @property
    def multislice(self) -> bool:
        return self.slices > 1

    @property
    def nodes(self) -> int:
        return self.nodes_per_slice * self.slices

    @property
    def chips(self) -> int:
        return self.chips_per_slice * self.slices

    @property
    def devices(self) -> int:
        return self.devices_per_slice * self.slices

    @property
    def tpu_per_pod(self) -> int:
        return self.chips_per_vm

    @property
    def coordinator_address(self) -> str:
        # Worker 0 of slice 0 through the JobSet's headless Service (subdomain = name).
        return f"{self.name}-{REPLICATED_JOB}-0-0.{self.name}"

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "recipe": self.recipe,
            "namespace": self.namespace,
            "local_queue": self.local_queue,
            "priority": self.priority,
            "service_account": self.service_account,
            "image": self.image,
            "pool": self.pool,
            "shape": f"{self.generation} {self.topology} ({self.accelerator_type})",
            "slices": self.slices,
            "nodes": self.nodes,
            "chips": self.chips,
            "devices": self.devices,
            "tpu_per_pod": self.tpu_per_pod,
            "steps": self.steps,
            "output_dir": self.output_dir,
            "host_network": self.host_network,
        }
        if self.ici:
            out["mesh"] = {"ici": dict(self.ici), "dcn": dict(self.dcn)}
            out["per_device_batch_size"] = self.per_device_batch_size
            out["global_batch_size"] = self.global_batch_size
        if self.hbm:
            out["hbm_per_device"] = self.hbm.as_dict()
        return out


# ----------------------------------------------------------------- helpers


def name_budget(slices: int, nodes_per_slice: int) -> int:
    """Longest run (JobSet) name whose pods still have valid names.

    The Job controller names pods ``<jobset>-<rjob>-<slice>-<worker>-<5 random>``
    and pod names must be DNS-1035 labels (<= 63); JobSet's webhook checks the
    same with the largest indexes. Job names and the headless Service are shorter.
    """
    longest_tail = f"-{REPLICATED_JOB}-{slices - 1}-{nodes_per_slice - 1}"
    return 63 - len(longest_tail) - POD_NAME_RANDOM


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _describe_pools(spec: EnvSpec) -> str:
    return ", ".join(f"{p.name} ({p.shape.generation.name} {p.shape.topology} x{p.slices})" for p in spec.tpu_pools)


def _accepts(recipe: Recipe, shape: SliceShape) -> str | None:
    """Why the recipe cannot use this shape, or None."""
    if shape.generation.name not in recipe.generations:
        return f"recipe {recipe.name} runs on {', '.join(recipe.generations)}, not {shape.generation.name}"
    if shape.chips < recipe.min_chips_per_slice:
        return f"recipe {recipe.name} needs at least {recipe.min_chips_per_slice} chips per slice; {shape.accelerator_type} has {shape.chips}"
    return None


def _capacity(spec: EnvSpec, shape: SliceShape) -> tuple[int, list[TpuPoolSpec]]:
    group = [p for p in spec.tpu_pools if p.shape.key == shape.key]
    return sum(p.slices for p in group), group


def _pick_pool(recipe: Recipe, spec: EnvSpec, o: Overrides, slices: int) -> TpuPoolSpec:
    if o.pool is not None:
        pool = next((p for p in spec.tpu_pools if p.name == o.pool), None)
        if pool is None:
            names = [p.name for p in spec.tpu_pools]
            raise PlanError("--pool", f"no TPU pool {o.pool!r} in the spec{suggest(o.pool, names)}", f"use one of {_describe_pools(spec)}")
        why = _accepts(recipe, pool.shape)
        if why:
            raise PlanError("--pool", f"{pool.name} is {pool.shape.describe()}; {why}", "pick another pool or recipe")
        return pool
    preferred = {k: i for i, k in enumerate(recipe.shapes)}
    ranked = sorted(spec.tpu_pools, key=lambda p: preferred.get(p.shape.key, len(preferred)))  # stable: spec order otherwise
    usable = [p for p in ranked if _accepts(recipe, p.shape) is None]
    if not usable:
        wanted = ", ".join(recipe.shapes) or f"{recipe.min_chips_per_slice}+ chips of {', '.join(recipe.generations)}"
        raise PlanError(
            "--pool",
            f"no pool in the spec can run recipe {recipe.name} (pools: {_describe_pools(spec)})",
            f"add a tpu_pools entry with one of {wanted}",
        )
    # Prefer a pool group with room for the slices asked for; else report on the best one.
    for p in usable:
        if _capacity(spec, p.shape)[0] >= slices:
            return p
    return usable[0]


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
        out[key] = value
    return out


def _int(key: str, value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise PlanError(where, f"{key}={value!r} is not an integer", f"write it like {key}=4") from None


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
        raise PlanError(where, f"DCN parallelism {' x '.join(set_keys)} needs {fixed} slices but the run has 1", f"pass --slices {fixed} or drop the dcn_* setting")
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


def _check_divides(total: int, dim: int, what: str, keys: str, where: str) -> None:
    if total > 1 and dim % total:
        raise PlanError(where, f"{keys} = {total} cannot split {what} ({dim})", f"use a degree that divides {dim}")


def estimate_hbm(model: ModelDims, params: int, per_device_batch: float, seq: int, totals: dict[str, int], hbm_per_device: int) -> HbmEstimate:
    replicating = {"data", "diloco"}
    model_shards = math.prod(d for a, d in totals.items() if a not in replicating)
    act_shards = totals["tensor"] * totals["sequence"] * totals["context"]
    tokens = per_device_batch * seq
    return HbmEstimate(
        state_bytes=int(16 * params / model_shards),
        activation_bytes=int(model.base_num_decoder_layers * tokens * model.base_emb_dim * 2 / act_shards),
        logits_bytes=int(tokens * model.vocab_size * 4 / totals["tensor"]),
        available_bytes=hbm_per_device,
    )


def _image(recipe: Recipe, spec: EnvSpec, image: str | None) -> str:
    if image is not None:
        if not _IMAGE_TAGGED.match(image) or image.rsplit("/", 1)[-1].startswith(":"):
            raise PlanError("--image", f"{image!r} has no tag or digest", "pin it, e.g. --image us-docker.pkg.dev/p/r/maxtext:0.2.5")
        return image
    if recipe.image.ref:
        return recipe.image.ref
    if not spec.artifact_registry.enabled:
        raise PlanError(
            "--image",
            f"recipe {recipe.name} uses {recipe.image.registry} from the spec's Artifact Registry, which is disabled",
            "pass --image REPO/NAME:TAG or enable artifact_registry in the spec",
        )
    return f"{spec.region}-docker.pkg.dev/{spec.project}/{spec.artifact_registry.repository}/{recipe.image.registry}"


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
        raise PlanError("--suffix", f"{name!r} is not a usable run name ({budget} characters at most, DNS-1035)", "use a short suffix of lowercase letters and digits")
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
    now = now or datetime(2000, 1, 1)

    if o.slices is not None and o.slices < 1:
        raise PlanError("--slices", f"must be at least 1, got {o.slices}", "pass --slices 1 or more")
    slices = o.slices or 1
    steps = recipe.steps if o.steps is None else o.steps
    if steps < 1:
        raise PlanError("--steps", f"must be at least 1, got {steps}", "pass a positive step count")
    if o.max_restarts < 0:
        raise PlanError("--max-restarts", f"must be >= 0, got {o.max_restarts}", "pass 0 to fail fast")

    team = spec.team(o.team)
    priority = o.priority or team.priority
    if priority not in PRIORITY_CLASSES:
        raise PlanError("--priority", f"unknown priority {priority!r}{suggest(priority, list(PRIORITY_CLASSES))}", f"use one of {', '.join(PRIORITY_CLASSES)}")

    pool = _pick_pool(recipe, spec, o, slices)
    shape = pool.shape
    capacity, group = _capacity(spec, shape)
    if slices > 1 and not shape.multi_host:
        raise PlanError("--slices", f"{shape.accelerator_type} is single-host; multislice needs multi-host slices", "pass --slices 1 or use a multi-host pool")
    if slices > capacity:
        pools = ", ".join(f"{p.name} x{p.slices}" for p in group)
        raise PlanError(
            "--slices",
            f"{slices} slices of {shape.generation.name} {shape.topology} asked for but the spec has {capacity} ({pools})",
            f"pass --slices {capacity} or fewer, or raise slices in the spec",
        )

    budget = name_budget(slices, shape.nodes)
    name = _run_name(recipe, o, budget, now, rand)
    image = _image(recipe, spec, o.image)

    env: dict[str, str] = dict(recipe.env)
    flags = recipe.libtpu_flags(shape.generation.name)
    if flags:
        env["LIBTPU_INIT_ARGS"] = " ".join(flags)

    common = dict(
        name=name,
        recipe=recipe.name,
        kind=recipe.kind.value,
        team=team.name,
        namespace=team.ns,
        local_queue=team.queue,
        priority=priority,
        priority_value=PRIORITY_CLASSES[priority],
        service_account=team.ksa,
        image=image,
        pool=pool.name,
        node_pools=tuple(n for p in group for n in p.node_pool_names()),
        shape_key=shape.key,
        generation=shape.generation.name,
        topology=shape.topology,
        accelerator_label=shape.accelerator_label,
        placement_policy=spec.workload_policy_name(pool),
        accelerator_type=shape.accelerator_type,
        machine_type=shape.machine_type,
        chips_per_vm=shape.chips_per_vm,
        nodes_per_slice=shape.nodes,
        chips_per_slice=shape.chips,
        devices_per_slice=shape.devices,
        slices=slices,
        steps=steps,
        host_network=o.host_network,
        max_restarts=o.max_restarts,
        ttl_seconds=o.ttl_seconds,
        jobset_version=spec.versions.jobset,
        kueue_version=spec.versions.kueue,
        labels=(
            ("app.kubernetes.io/managed-by", MANAGED_BY),
            ("app.kubernetes.io/name", recipe.name.replace(".", "-")),
            ("tpu-gke-toolkit/run", name),
        ),
    )

    if recipe.kind is Kind.COMMAND:
        if o.sets:
            raise PlanError("--set", f"recipe {recipe.name} runs a plain command, not MaxText; it takes no --set", "drop --set or pick a MaxText recipe")
        assert recipe.command is not None  # guaranteed by the recipe model
        return RunPlan(command=tuple(recipe.command), args=(), env=tuple(env.items()), output_dir=None, **common)

    return _plan_maxtext(recipe, spec, o, shape, slices, steps, name, env, common)


def _plan_maxtext(
    recipe: Recipe,
    spec: EnvSpec,
    o: Overrides,
    shape: SliceShape,
    slices: int,
    steps: int,
    name: str,
    env: dict[str, str],
    common: dict[str, Any],
) -> RunPlan:
    mt = recipe.maxtext
    assert mt is not None  # guaranteed by the recipe model
    sets = parse_sets(o.sets)
    known = maxtext_keys()
    recipe_where = f"recipe {recipe.name}"

    for key, value in sets.items():
        if key not in known:
            raise PlanError("--set", f"{key} is not a MaxText 0.2.5 key{suggest(key, known)}", "check the spelling against MaxText's base.yml")
        if key in PLANNER_KEYS:
            fix = {"run_name": "use --name", "steps": "use --steps", "num_slices": "use --slices"}.get(key, "the planner sets it from the target pool")
            raise PlanError("--set", f"{key} is set by the planner", fix)
        if key in MODEL_KEYS and mt.model_name != "default" and sets.get("override_model_config", "").lower() != "true":
            raise PlanError(
                "--set",
                f"{key} changes preset model {mt.model_name}, which MaxText refuses without override_model_config=true",
                "add --set override_model_config=true, or use a model_name=default recipe",
            )
        if key == "base_output_directory" and not value.startswith("gs://"):
            raise PlanError("--set", f"base_output_directory={value!r} is not a gs:// path", "use gs://BUCKET/PATH")

    # The model as it will run: recipe dims with any --set dims applied.
    dims = mt.model.model_dump()
    for key in MODEL_KEYS & sets.keys():
        dims[key] = _int(key, sets[key], "--set")
        if dims[key] <= 0:
            raise PlanError("--set", f"{key}={dims[key]} must be positive", f"use a positive {key}")
    model = ModelDims.model_validate(dims)

    # Mesh: recipe rule, then --set on individual axes (an explicit value replaces a fill).
    sources: dict[str, str] = {}
    rules = {"ici": dict(mt.parallelism.ici), "dcn": dict(mt.parallelism.dcn)}
    for level in ("ici", "dcn"):
        for axis in rules[level]:
            sources[f"{level}_{axis}_parallelism"] = f"{recipe_where} parallelism.{level}.{axis}"
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
        # An explicit degree on the recipe's fill axis ends the fill (the product must then match).
        rules[level][axis] = degree
        sources[key] = "--set"
    ici = _resolve_axes("ici", rules["ici"], shape.devices, f"devices of a {shape.generation.name} {shape.topology} slice", sources)
    dcn = _resolve_axes("dcn", rules["dcn"], slices, "slice(s)", sources)
    totals = {a: ici[a] * dcn[a] for a in MESH_AXES}

    def where_axis(*axes: str) -> str:
        for a in axes:
            for level in ("ici", "dcn"):
                k = f"{level}_{a}_parallelism"
                if sources.get(k) == "--set" and (ici if level == "ici" else dcn)[a] != 1:
                    return "--set"
        for a in axes:
            for level in ("ici", "dcn"):
                k = f"{level}_{a}_parallelism"
                if k in sources:
                    return sources[k]
        return recipe_where

    seq = _int("max_target_length", str(sets.get("max_target_length", mt.args.get("max_target_length", model.max_target_length))), "--set")
    tensor = totals["tensor"]
    _check_divides(tensor, model.base_num_query_heads, "the query heads", "tensor parallelism (ici x dcn)", where_axis("tensor"))
    _check_divides(tensor, model.base_mlp_dim, "the MLP dimension", "tensor parallelism (ici x dcn)", where_axis("tensor"))
    fsdp = totals["fsdp"] * totals["fsdp_transpose"]
    _check_divides(fsdp, model.base_emb_dim, "the embedding dimension", "fsdp x fsdp_transpose (ici x dcn)", where_axis("fsdp", "fsdp_transpose"))
    _check_divides(totals["pipeline"], model.base_num_decoder_layers, "the decoder layers", "pipeline parallelism", where_axis("pipeline"))
    _check_divides(totals["expert"], model.num_experts, "the experts", "expert parallelism", where_axis("expert"))
    seq_split = totals["sequence"] * totals["context"]
    _check_divides(seq_split, seq, "the sequence length", "sequence x context parallelism", where_axis("sequence", "context"))

    # Per-device batch: --set wins, else the recipe's rule for this HBM size.
    hbm_gib = shape.hbm_bytes_per_device / GIB
    if "per_device_batch_size" in sets:
        try:
            pdb = float(sets["per_device_batch_size"])
        except ValueError:
            raise PlanError("--set", f"per_device_batch_size={sets['per_device_batch_size']!r} is not a number", "write it like per_device_batch_size=4") from None
        if not pdb > 0:
            raise PlanError("--set", f"per_device_batch_size={pdb:g} must be positive", "use e.g. per_device_batch_size=1")
        batch_where = "--set"
    else:
        rule = mt.batch_for(hbm_gib)
        if rule is None:
            raise PlanError(
                "--pool",
                f"recipe {recipe.name} has no per_device_batch rule for {hbm_gib:g} GiB per {shape.generation.name} device",
                "pick a pool with more HBM or --set per_device_batch_size=N",
            )
        pdb = rule
        batch_where = f"{recipe_where} per_device_batch"
    devices = shape.devices * slices
    global_batch = pdb * devices
    batch_split = totals["data"] * totals["fsdp"] * totals["fsdp_transpose"] * totals["expert"]
    if not float(global_batch).is_integer() or int(global_batch) % batch_split:
        raise PlanError(
            batch_where,
            f"per_device_batch_size={pdb:g} x {devices} devices = global batch {global_batch:g}, which data x fsdp ({batch_split}) cannot split evenly",
            f"use a per_device_batch_size that makes the global batch a multiple of {batch_split}",
        )

    params = model.params()
    hbm = estimate_hbm(model, params, pdb, seq, totals, shape.hbm_bytes_per_device)
    if not hbm.fits:
        d = hbm.as_dict()
        raise PlanError(
            batch_where,
            f"per_device_batch_size={pdb:g} needs at least ~{d['estimate_gib']:g} GiB per device (params+Adam {d['state_gib']:g}, "
            f"activations {d['activations_gib']:g}, logits {d['logits_gib']:g}) but a {shape.generation.name} device has {d['available_gib']:g} GiB",
            "lower per_device_batch_size, shard more (bigger slice or more fsdp), or pick a pool with more HBM",
        )

    # Output: --set base_output_directory, else the spec's checkpoints (or artifacts) bucket.
    if "base_output_directory" in sets:
        base_out = sets["base_output_directory"].rstrip("/")
    else:
        bucket = spec.bucket_for(BucketPurpose.CHECKPOINTS) or spec.bucket_for(BucketPurpose.ARTIFACTS)
        if bucket is None:
            raise PlanError(
                "buckets",
                "the spec has no checkpoints or artifacts bucket for MaxText's output",
                "add a bucket with purpose: checkpoints, or --set base_output_directory=gs://BUCKET/PATH",
            )
        base_out = f"gs://{bucket.name}"

    # Argument order: identity, model, recipe args, sizing, mesh; --set replaces in place or appends.
    args: dict[str, str] = {"run_name": name, "base_output_directory": base_out, "model_name": mt.model_name}
    if mt.model_name == "default":
        for key in ("base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "head_dim", "base_num_decoder_layers", "base_mlp_dim", "vocab_size", "max_target_length"):
            args[key] = _fmt(getattr(model, key))
    for key, value in mt.args.items():
        args[key] = _fmt(value)
    args["per_device_batch_size"] = _fmt(pdb)
    args["steps"] = str(steps)
    for level, degrees in (("ici", ici), ("dcn", dcn)):
        for axis in MESH_AXES:
            # base.yml defaults ici_fsdp and dcn_data to -1: always write them out.
            if degrees[axis] != 1 or (level, axis) in (("ici", "fsdp"), ("dcn", "data")):
                args[f"{level}_{axis}_parallelism"] = str(degrees[axis])
    for key, value in sets.items():
        if mesh_key(key) or key in MODEL_KEYS or key in ("per_device_batch_size", "base_output_directory"):
            continue  # already resolved above
        args[key] = value

    return RunPlan(
        command=("python3", "-m", MAXTEXT_TRAIN_MODULE),
        args=(mt.config, *(f"{k}={v}" for k, v in args.items())),
        env=tuple(env.items()),
        output_dir=f"{base_out}/{name}/",
        ici=tuple((a, ici[a]) for a in MESH_AXES if ici[a] != 1 or a == "fsdp"),
        dcn=tuple((a, dcn[a]) for a in MESH_AXES if dcn[a] != 1 or a == "data"),
        per_device_batch_size=pdb,
        global_batch_size=int(global_batch),
        params=params,
        hbm=hbm,
        **common,
    )
