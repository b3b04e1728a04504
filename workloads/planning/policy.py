"""Planning, stage 3 of 4 — policy: how a run is kept alive (restarts, checkpointing) and where its state goes.

    target -> sizing -> policy -> program        (workloads.planning.planner.plan_run)

From the ``Placement`` and the ``Sizing``, one frozen ``PolicyChoice``: the run's ``Policy``,
whole (restarts, TTL, the exit codes that end it, pod networking, checkpointing,
multi-tier checkpointing, checkpoint storage), and the output directory MaxText writes under.

Restarts: by capacity mode unless ``--max-restarts`` (``defaults.DEFAULT_MAX_RESTARTS``); a
plain Job cannot restart a whole run, so its budget is 0. Program errors (exit 1, 2 and
the recipe's fatal codes) end the run at once.

Checkpointing (MaxText runs; on unless enable_checkpointing=false): every
``--checkpoint-every`` minutes (default by capacity mode, ``defaults``), as a
``checkpoint_period`` in steps of the estimated step time, into
``<checkpoints bucket>/<run name>/checkpoints/``: the run name is stable, so a
restarted JobSet finds its own latest step and resumes there. A recipe arg or ``--set``
on one of the checkpoint keys (``CHECKPOINT_KEYS``) is read into the policy, so the plan
and MaxText's arguments cannot disagree; the bucket must be one the run's pods may write.

Multi-tier checkpointing (``--multi-tier-checkpointing``): GKE's RAM disk per TPU VM,
sized from the model and checked against the VM and the pool's configuration; checkpoint
storage (``--checkpoint-storage``): the bucket through GCS FUSE, or the spec's Lustre.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from infra.access import write_problem
from infra.catalog import GIB, machine_size
from infra.spec import (
    IN_PLACE,
    IN_PLACE_RESTART_MIN_GKE_VERSION,
    IN_PLACE_RESTART_MIN_JOBSET,
    MTC_GENERATIONS,
    RECREATE,
    RESTART_PATHS,
    BucketPurpose,
    DatasetSpec,
    EnvSpec,
    TeamSpec,
)
from toolkit import names
from workloads.planning import hang
from workloads.planning.dataset import maxtext_data_args
from workloads.planning.defaults import (
    AUTOCHECKPOINT_CAPACITY,
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_IN_PLACE_MAX_RESTARTS,
    DEFAULT_MAX_RESTARTS,
    INT32_MAX,
    PROGRAM_ERROR_EXIT_CODES,
)
from workloads.planning.errors import PlanError, suggest
from workloads.planning.hang import HangWatch
from workloads.planning.maxtext_sets import arg_text, read_int
from workloads.planning.model import (
    CHECKPOINT_STORAGES,
    RUNTIME_JOB,
    RUNTIME_JOBSET,
    RUNTIME_RAY,
    Checkpointing,
    CheckpointStorage,
    MultiTierCheckpointing,
    Policy,
)
from workloads.planning.overrides import Overrides
from workloads.planning.sizing import Sizing
from workloads.planning.target import Placement

# MaxText keys the planner writes from plan.policy.checkpoint; a recipe arg or --set on
# one of them is read into that policy (so the plan and the args cannot disagree).
CHECKPOINT_KEYS = ("enable_checkpointing", "async_checkpointing", "checkpoint_period", "max_num_checkpoints_to_keep", "enable_autocheckpoint")
# MaxText keys multi-tier checkpointing writes; a --set on one of them is a conflict (or MTC done by hand).
MULTI_TIER_KEYS = (
    "enable_multi_tier_checkpointing",
    "local_checkpoint_directory",
    "local_checkpoint_period",
    "multi_tier_checkpointing_backup_interval_minutes",
    "multi_tier_checkpointing_backup_interval_steps",
    "enable_emergency_checkpoint",
)
# MaxText keys --dataset writes (workloads.planning.dataset.maxtext_data_args); a --set on one of them beside it is a conflict.
DATASET_KEYS = tuple(maxtext_data_args(DatasetSpec(name="x", bucket="b", path="p", format="arrayrecord")))
# Local (RAM disk) saves this often: cheap enough to take far more often than the GCS tier.
MTC_LOCAL_MINUTES = 5.0
# What the team namespace's claim on the spec's Managed Lustre instance is called (workloads.render.lustre applies it).
LUSTRE_CLAIM = f"{names.TGK}-lustre"


@dataclass(frozen=True)
class PolicyChoice:
    """Stage 3's result: the run's policy, the directory MaxText's output goes under and the dataset it reads (None: none)."""

    policy: Policy
    output_base: str | None = None  # gs://bucket[/path]: the run's output is <output_base>/<name>/; None for a plain command
    dataset: DatasetSpec | None = None  # mounted read-only through GCS FUSE (Program.dataset)


def choose_policy(placed: Placement, sizing: Sizing | None, spec: EnvSpec, o: Overrides) -> PolicyChoice:
    """The run's policy; one PlanError naming the flag or recipe field for the first thing that cannot be."""
    recipe = placed.recipe
    if sizing is None:
        if o.checkpoint_every is not None:
            raise PlanError(
                "--checkpoint-every",
                f"recipe {recipe.name} runs a plain command, which saves no checkpoints",
                "drop --checkpoint-every or pick a MaxText recipe",
            )
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
        if o.hang_after:
            raise PlanError(
                hang.FLAG, f"recipe {recipe.name} runs a plain command, which logs no MaxText steps to watch", f"drop {hang.FLAG} or pick a MaxText recipe"
            )
        return PolicyChoice(_policy(placed, spec, o))
    sets = sizing.sets.text
    checkpoint = _checkpointing(placed, sets, o, sizing.step_seconds, restart_path(placed, spec, o))
    if checkpoint is not None:
        _check_checkpoint_bucket(spec, sets, placed.team, o.host_network)
    base_out = _output_base(spec, sets, placed.team)
    dataset = _dataset(placed, spec, o, sets)
    multi_tier = _multi_tier(placed, spec, o, sizing, checkpoint)
    storage = _checkpoint_storage(placed, spec, o, sets, base_out, multi_tier is not None)
    if o.host_network and (dataset is not None or (storage is not None and storage.kind == "gcsfuse")):
        # The driver mounts with the pod's Kubernetes service account (Workload Identity), which a
        # hostNetwork pod does not get without the driver's hostNetworkPodKSA opt-in; the toolkit does not set that up.
        raise PlanError(
            "--host-network",
            "GCS FUSE volumes (the dataset, gcsfuse checkpoints) mount with the pod's own identity, which hostNetwork pods do not have",
            "drop --host-network for this run",
        )
    policy = _policy(placed, spec, o, checkpoint=checkpoint, multi_tier=multi_tier, storage=storage)
    return PolicyChoice(dataclasses.replace(policy, hang=_hang(placed, o, sizing.step_seconds, checkpoint, multi_tier)), base_out, dataset)


def _hang(placed: Placement, o: Overrides, step_s: float, checkpoint: Checkpointing | None, multi_tier: MultiTierCheckpointing | None) -> HangWatch | None:
    """The exit guard's hang watch (``workloads.planning.hang``); a RayJob's workers run no exit guard, so none is promised there."""
    if placed.runtime == RUNTIME_RAY:
        if o.hang_after:
            raise PlanError(
                hang.FLAG, "a RayJob's workers run Ray's own entrypoint, not the exit guard that watches for a hang", "use --runtime jobset, or drop it"
            )
        return None
    if hang.HANG_EXIT_CODE in placed.recipe.fatal_exit_codes and o.hang_after != 0:
        raise PlanError(
            "fatal_exit_codes",
            f"recipe {placed.recipe.name} makes exit {hang.HANG_EXIT_CODE} fatal, and the exit guard ends a hung attempt with it to have it restarted",
            f"drop {hang.HANG_EXIT_CODE} from the recipe's fatal_exit_codes, or pass {hang.FLAG} 0",
        )
    return hang.watch(
        step_s,
        checkpointing=checkpoint is not None,
        async_save=checkpoint.async_save if checkpoint else True,
        multi_tier=multi_tier is not None,
        hang_after_min=o.hang_after,
    )


def restart_path(placed: Placement, spec: EnvSpec, o: Overrides) -> str:
    """--restart, else the spec's (``EnvFields.restart_path``); in-place only for a JobSet on a cluster that has it.

    Other runtimes have no JobSet restart: a plain Job cannot restart the run, a RayJob's
    KubeRay makes a new RayCluster; they are recreate runs whatever the spec says.
    """
    # JobSet's agent runs one program per pod: parallel containers (two per VM) restart by recreating.
    one_program = placed.target.containers_per_vm == 1
    if o.restart is None:
        return spec.restart_path if placed.runtime == RUNTIME_JOBSET and one_program else RECREATE
    if o.restart not in RESTART_PATHS:
        raise PlanError(
            "--restart", f"unknown restart path {o.restart[:20]!r}{suggest(o.restart, list(RESTART_PATHS))}", f"use one of {', '.join(RESTART_PATHS)}"
        )
    if o.restart == IN_PLACE:
        if placed.runtime != RUNTIME_JOBSET:
            raise PlanError(
                "--restart",
                f"in-place restarts are JobSet's (InPlaceRestart), and this run is a {placed.runtime} run",
                "use --runtime jobset, or drop --restart",
            )
        if not one_program:
            raise PlanError(
                "--restart",
                "in-place restarts run one program per pod under JobSet's agent, and --parallel-containers runs two",
                "drop --parallel-containers, or use --restart recreate",
            )
        if not spec.cluster_has_in_place_restart:
            why = (
                f"versions.jobset is {spec.versions.jobset}, older than {IN_PLACE_RESTART_MIN_JOBSET}"
                if not spec.jobset_has_in_place_restart
                else f"the cluster's GKE floor is {spec.min_master_version or 'the channel default'}, and container restart rules need {IN_PLACE_RESTART_MIN_GKE_VERSION}"
            )
            raise PlanError(
                "--restart",
                f"the spec's cluster cannot restart in place: {why}",
                "set recovery.restart: in-place in the spec and deploy it, or use --restart recreate",
            )
    return o.restart


def _policy(
    placed: Placement,
    spec: EnvSpec,
    o: Overrides,
    *,
    checkpoint: Checkpointing | None = None,
    multi_tier: MultiTierCheckpointing | None = None,
    storage: CheckpointStorage | None = None,
) -> Policy:
    """Restarts by capacity mode unless --max-restarts; program errors = 1, 2 + the recipe's fatal codes.

    A plain Job cannot restart a whole run (workloads.render.job): its budget is 0, and asking for more is refused.
    """
    if placed.runtime == RUNTIME_JOB:
        if o.max_restarts:
            raise PlanError(
                "--max-restarts",
                "a plain Job cannot restart the whole run (it fails on the first pod failure)",
                "use --runtime jobset for restarts, or drop --max-restarts",
            )
        max_restarts = 0
    restart = restart_path(placed, spec, o)
    if placed.runtime == RUNTIME_JOB:
        pass
    elif o.max_restarts is not None:
        max_restarts = o.max_restarts
    else:
        # In place, JobSet counts disruptions too (defaults.DEFAULT_IN_PLACE_MAX_RESTARTS says why).
        budget = DEFAULT_IN_PLACE_MAX_RESTARTS if restart == IN_PLACE else DEFAULT_MAX_RESTARTS
        max_restarts = budget[placed.target.capacity]
    return Policy(
        max_restarts=max_restarts,
        ttl_seconds=o.ttl_seconds,
        program_error_exit_codes=tuple(sorted({*PROGRAM_ERROR_EXIT_CODES, *placed.recipe.fatal_exit_codes})),
        host_network=o.host_network,
        checkpoint=checkpoint,
        multi_tier=multi_tier,
        checkpoint_storage=storage,
        restart=restart,
        agent_image=spec.in_place_agent_image if restart == IN_PLACE else None,
    )


# ------------------------------------------------------------------ checkpointing


def _checkpointing(placed: Placement, sets: dict[str, str], o: Overrides, step_s: float, restart: str) -> Checkpointing | None:
    """--set wins over the recipe's args, which win over the capacity mode's defaults.

    Autocheckpoint (a save at the preemption's SIGTERM) is on by default for spot runs that
    restart by recreating: in place, JobSet's agent is the container's first process and ends
    the program with SIGKILL when its pod stops, so MaxText never sees the SIGTERM it saves on.
    """
    recipe, steps, capacity = placed.recipe, placed.steps, placed.target.capacity
    assert recipe.maxtext is not None  # a MaxText run (sizing is not None)
    given = {k: arg_text(v) for k, v in recipe.maxtext.args.items() if k in CHECKPOINT_KEYS}
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
        every = DEFAULT_CHECKPOINT_MINUTES[capacity] if o.checkpoint_every is None else o.checkpoint_every
        period = _period_steps(every, step_s, steps, explicit=o.checkpoint_every is not None)
    return Checkpointing(
        every_minutes=every,
        period_steps=period,
        keep=_count(given, where, "max_num_checkpoints_to_keep") if "max_num_checkpoints_to_keep" in given else DEFAULT_CHECKPOINTS_KEPT,
        async_save=_flag(given, where, "async_checkpointing", True),
        autocheckpoint=_flag(given, where, "enable_autocheckpoint", capacity in AUTOCHECKPOINT_CAPACITY and restart == RECREATE),
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
            f"{every_minutes:g} min is shorter than one step (~{step_s:.1f} s estimated)",
            f"pass at least {math.ceil(step_s / 60 * 100) / 100:g}",
        )
    run_minutes = steps * step_s / 60
    if explicit and math.floor(raw) > steps:
        raise PlanError(
            "--checkpoint-every",
            f"{every_minutes:g} min is longer than the whole run (~{run_minutes:.1f} min: {steps} steps x ~{step_s:.1f} s estimated)",
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
    n = read_int(key, given[key], where[key])
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


# ------------------------------------------------------------------ the dataset


def _dataset(placed: Placement, spec: EnvSpec, o: Overrides, sets: dict[str, str]) -> DatasetSpec | None:
    """--dataset, else the recipe's dataset:; it must be the spec's and readable by the team's identity."""
    recipe, team = placed.recipe, placed.team
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


# ------------------------------------------------------------------ multi-tier checkpointing


def _multi_tier(placed: Placement, spec: EnvSpec, o: Overrides, sizing: Sizing, checkpoint: Checkpointing | None) -> MultiTierCheckpointing | None:
    """--multi-tier-checkpointing (or the recipe's key): where GKE and MaxText support it, with a RAM disk the VM holds."""
    recipe, target, sets = placed.recipe, placed.target, sizing.sets.text
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
    if placed.runtime != RUNTIME_JOBSET:
        raise PlanError(where, f"the RAM disk is mounted into JobSet pods only, and this run is a {placed.runtime} run", "use --runtime jobset")
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
    params = sizing.params
    i, pool = next((i, p) for i, p in enumerate(spec.tpu_pools) if p.name == target.pool)
    memory = machine_size(shape.machine_type).memory_gib * GIB
    m = MultiTierCheckpointing(
        params=params,
        hosts_per_slice=shape.nodes,
        configured_bytes=(pool.multi_tier_checkpointing.ramdisk_gib * GIB) if pool.multi_tier_checkpointing else 0,
        vm_memory_bytes=memory,
        local_period_steps=min(checkpoint.period_steps, max(1, math.floor(MTC_LOCAL_MINUTES * 60 / sizing.step_seconds))),
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


# ------------------------------------------------------------------ checkpoint storage


def _checkpoint_storage(placed: Placement, spec: EnvSpec, o: Overrides, sets: dict[str, str], base_out: str, multi_tier: bool) -> CheckpointStorage | None:
    """--checkpoint-storage, else the recipe's: gcs (None), the team's bucket through GCS FUSE, or the spec's Lustre."""
    recipe, team = placed.recipe, placed.team
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
