"""What the user may change about a run, each field with the flag, help and bounds it is given by.

``Overrides`` is the one declaration of the run-planning options: the planner reads the
fields, and the CLI builds its ``render``/``submit`` options from each field's ``Flag``
(``workloads.cli.runs``), so adding an option is a field here plus the planner code that
applies it. Help texts quote the defaults from ``workloads.planning.defaults``, the
objects the planner applies. Standard library only: ``--help`` imports this module.

Every number has ``Bounds``: the values its consumer accepts (an int32 where it becomes a
Kubernetes int32 field or a MaxText step, a finite and sane number of minutes), and, where
the flag has one, its own wording for a value below the floor. ``Overrides.problem()`` is
the one check of the numbers: the planner calls it first and no later stage checks them
again, so the command line and a notebook calling ``runs.plan`` are held to the same bounds.

``Overrides`` is what the user typed and nothing else: the planner never writes a derived
value back into it (the runtime it chose, for one, is the plan's ``runtime``).
"""

# No `from __future__ import annotations`: the CLI reads the fields' types (typing.get_type_hints),
# and real annotations spare it compiling sixteen strings on every command.
import math
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from workloads.planning.defaults import (
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_IN_PLACE_MAX_RESTARTS,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PROFILE_START,
    DEFAULT_TTL_SECONDS,
    INT32_MAX,
    MAX_CHECKPOINT_MINUTES,
    PROGRAM_ERROR_EXIT_CODES,
    by_capacity,
)


class Bounds(NamedTuple):
    """The values a number may take: finite, in [low, high]; ``why`` names what sets the ceiling.

    ``floor``: the flag's own (problem, fix) for a value below ``low`` (and, for a float, one that is
    not finite), ``{value}`` standing for the value; without it the wording is this class's.
    """

    low: float
    high: float
    why: str
    above_low: bool = False  # low itself is out: (low, high]
    floor: tuple[str, str] | None = None

    def problem(self, value: float) -> tuple[str, str] | None:
        """(problem, fix) for a value outside the bounds, else None."""
        low, high = _number(self.low), _number(self.high)
        finite = not (isinstance(value, float) and not math.isfinite(value))
        below = not finite or value < self.low or (self.above_low and value == self.low)
        if below and self.floor is not None:
            problem, fix = self.floor
            return problem.format(value=value), fix.format(value=value)
        if not finite:
            return f"must be a finite number, got {value}", f"pass a number from {low} to {high}"
        if value < self.low or (self.above_low and value == self.low):
            least = f"above {low}" if self.above_low else f"at least {low}"
            return f"must be {least}, got {_number(value)}", f"pass a number {least}"
        if value > self.high:
            return f"{_number(value)} is above {high}, the most {self.why}", f"pass at most {high}"
        return None


def _number(value: float) -> str:
    """A number as a message shows it: whole numbers without an exponent, a huge one by its length."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        value = int(value)
    if isinstance(value, int):
        digits = len(str(value)) if value.bit_length() < 14000 else None  # str() refuses 4,300+ digits
        return str(value) if digits is not None and digits <= 40 else f"a number of {digits or 'thousands of'} digits"
    return f"{value:g}"


STEPS = Bounds(1, INT32_MAX, "MaxText's step counter (an int32) can count")


class Flag(NamedTuple):
    """How a field is given on the command line (``decls`` as Typer takes them: ``--x`` or ``--x/--no-x``).

    A NamedTuple, not a dataclass: a third of the cost of building one, and ``--help`` builds it.
    """

    decls: str
    help: str
    metavar: str | None = None
    bounds: Bounds | None = None


def _flag(default: Any, decls: str, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"flag": Flag(decls, help, **kw)})


def flag_of(f: Any) -> Flag | None:
    """The ``Flag`` of a dataclass field, None for a field the command line does not set."""
    return f.metadata.get("flag")


def bounds_of(f: Any) -> Bounds | None:
    """A numeric field's ``Bounds``: its flag's, or (for a field without a flag) its own."""
    flag = flag_of(f)
    return flag.bounds if flag is not None else f.metadata.get("bounds")


_EXIT_CODES = ", ".join(map(str, PROGRAM_ERROR_EXIT_CODES))


@dataclass(frozen=True)
class Overrides:
    """What the user may change on the command line (the field order is the order of the options in ``--help``)."""

    slices: int | None = _flag(
        None,
        "--slices",
        "number of TPU slices (default: the recipe's, 1 unless imported with --num-slices)",
        bounds=Bounds(1, INT32_MAX, "a JobSet's replicas (an int32) can be", floor=("must be at least 1, got {value}", "pass --slices 1 or more")),
    )
    pool: str | None = _flag(
        None,
        "--pool",
        "tpu_pools entry to plan for (default: the recipe's preferred shape); pools of one shape with one capacity option "
        "share a Kueue flavor, so Kueue may admit the run on any of them",
    )
    sets: tuple[str, ...] = _flag((), "--set", "MaxText key=value; repeatable")
    secret_env: tuple[str, ...] = _flag(
        (),
        "--secret-env",
        "NAME=SECRET/KEY: the workers' environment variable NAME from key KEY of the Kubernetes Secret SECRET in the team's namespace "
        "(a secretKeyRef: the value is never in the manifest or the output), e.g. HF_TOKEN=hf-token/token for MaxText's hf_access_token; repeatable",
        metavar="NAME=SECRET/KEY",
    )
    steps: int | None = _flag(
        None,
        "--steps",
        "training steps (default: the recipe's)",
        bounds=STEPS._replace(floor=("must be at least 1, got {value}", "pass a positive step count")),
    )
    image: str | None = _flag(None, "--image", "container image with a tag or digest")
    team: str | None = _flag(None, "--team", "team (namespace, queue, service account); default the spec's first")
    priority: str | None = _flag(None, "--priority", "very-low, low, medium, high, very-high (default: the team's)")
    name: str | None = _flag(None, "--name", "exact run name (default: <recipe>-<MMDD-HHMM>-<random>)")
    suffix: str | None = _flag(None, "--suffix", "suffix for the run name instead of the time and random part")
    # pod network: the team's own identity (see target._check_host_network)
    host_network: bool = _flag(
        False,
        "--host-network/--no-host-network",
        "hostNetwork pods: more DCN throughput, but they act as the TPU nodes' SA, not the team's "
        "(only for teams with host_network: true in the spec); default: pod network with the team's own identity",
    )
    # None: by the pool's capacity mode and the restart path (defaults.DEFAULT_MAX_RESTARTS, DEFAULT_IN_PLACE_MAX_RESTARTS)
    max_restarts: int | None = _flag(
        None,
        "--max-restarts",
        f"whole-JobSet restarts after a failure that is not a program error (exit {_EXIT_CODES}: fails at once); recreating, "
        "a disruption is restarted free; in place, JobSet counts every restart, disruptions too; default by capacity, "
        f"in place: {by_capacity(DEFAULT_IN_PLACE_MAX_RESTARTS)}; recreating: {by_capacity(DEFAULT_MAX_RESTARTS)}",
        bounds=Bounds(
            0,
            INT32_MAX,
            "JobSet's maxRestarts and RayJob's backoffLimit (int32) can be",
            floor=("must be >= 0, got {value}", "pass 0 to fail on the first non-disruption failure, or leave it out for the capacity mode's default"),
        ),
    )
    # None: the spec's (EnvFields.restart_path: recovery.restart, auto = in-place where the cluster has it)
    restart: str | None = _flag(
        None,
        "--restart",
        "how JobSet restarts every worker of every slice after a failure: recreate (every pod deleted and made again) or "
        "in-place (healthy pods restart their containers where they are, only lost ones are new; JobSet's InPlaceRestart, "
        "needs a cluster that has it); default: the spec's recovery.restart",
    )
    # minutes; None: by capacity mode (defaults.DEFAULT_CHECKPOINT_MINUTES)
    checkpoint_every: float | None = _flag(
        None,
        "--checkpoint-every",
        f"minutes between checkpoints (MaxText recipes); default by capacity: {by_capacity(DEFAULT_CHECKPOINT_MINUTES)}",
        metavar="MINUTES",
        bounds=Bounds(
            0,
            MAX_CHECKPOINT_MINUTES,
            "minutes a checkpoint interval may be (a year)",
            above_low=True,
            floor=(
                "must be a number of minutes above 0, got {value:g}",
                "pass e.g. --checkpoint-every 30, or leave it out for the capacity mode's default (turn checkpointing off with --set enable_checkpointing=false)",
            ),
        ),
    )
    # minutes without a new step before the exit guard ends the attempt as hung; None: derived from the plan (workloads.planning.hang)
    hang_after: float | None = _flag(
        None,
        "--hang-after",
        "minutes without a new MaxText step before the attempt is ended as hung (exit 124, restarted; JobSet and Job runs); "
        "default derived from the plan: an XLA compile + 10 estimated steps; 0 turns the watch off",
        metavar="MINUTES",
        bounds=Bounds(
            0,
            MAX_CHECKPOINT_MINUTES,
            "minutes a hang bound may be (a year)",
            floor=("must be 0 (off) or a number of minutes, got {value:g}", "pass e.g. --hang-after 15, or leave it out for the plan's bound"),
        ),
    )
    # not a flag: JobSet/Job/RayJob ttlSecondsAfterFinished, an int32
    ttl_seconds: int = field(default=DEFAULT_TTL_SECONDS, metadata={"bounds": Bounds(0, INT32_MAX, "ttlSecondsAfterFinished (an int32) can be")})
    # None: the recipe's first runtime
    runtime: str | None = _flag(
        None,
        "--runtime",
        "jobset (slices restart together), job (an Indexed Job + headless Service, one slice), ray (a KubeRay RayJob) or pathways (a Pathways head and its workers); default: the recipe's first",
    )
    # steps MaxText's profiler records; None: no profiling
    profile_steps: int | None = _flag(
        None,
        "--profile",
        "record STEPS steps with MaxText's xplane profiler and upload them to the spec's Vertex AI TensorBoard "
        "(an experiment named <run>-<digest of its output directory>); traces also stay in <output>/<run>/tensorboard/",
        metavar="STEPS",
        bounds=STEPS._replace(floor=("must be at least 1 step, got {value}", "pass e.g. --profile 3")),
    )
    # steps skipped first; None: DEFAULT_PROFILE_START
    profile_start: int | None = _flag(
        None,
        "--profile-start",
        f"steps to skip before profiling (default {DEFAULT_PROFILE_START}: past compilation and warm-up)",
        metavar="STEP",
        bounds=STEPS._replace(low=0, floor=("must be >= 0, got {value}", f"pass e.g. --profile-start {DEFAULT_PROFILE_START}")),
    )

    # a dataset of the spec's datasets:, read through a read-only GCS FUSE mount; None: the recipe's (synthetic data without one)
    dataset: str | None = _flag(
        None,
        "--dataset",
        "train on this dataset of the spec's datasets: (mounted read-only at /data/<dataset> through GCS FUSE; MaxText's Grain pipeline reads it); "
        "default: the recipe's dataset:, else synthetic data",
        metavar="NAME",
    )
    # a MaxText checkpoint the run starts from (MaxText's load_parameters_path); None: the recipe's, else fresh weights
    load_parameters: str | None = _flag(
        None,
        "--load-parameters",
        "start from the parameters of this MaxText checkpoint (gs://BUCKET/PATH/0/items, e.g. what `convert` wrote); "
        "checked before anything is applied: it exists, holds a checkpoint, and its shapes are the recipe's model's",
        metavar="PATH",
    )
    # where checkpoints go; None: the recipe's checkpoint_storage, else gcs
    checkpoint_storage: str | None = _flag(
        None,
        "--checkpoint-storage",
        "gcs (MaxText writes the team's checkpoints bucket itself; the default), gcsfuse (the same bucket mounted through GCS FUSE "
        "with checkpoint-tuned options) or lustre (the spec's Managed Lustre instance, through the team's PersistentVolumeClaim)",
        metavar="KIND",
    )
    # MaxText multi-tier checkpointing (GKE's add-on): a RAM disk per TPU VM, replicated to peers, backed up to GCS
    multi_tier_checkpointing: bool = _flag(
        False,
        "--multi-tier-checkpointing/--no-multi-tier-checkpointing",
        "save checkpoints to a RAM disk on every TPU VM, replicated to peer slices and backed up to the checkpoints bucket by GKE's "
        "multi-tier checkpointing (multislice JobSet runs on v4, v5e, v5p, v6e pools whose spec declares multi_tier_checkpointing); "
        "the RAM disk is sized from the model and checked against the VM's memory",
    )

    # a slice shape on a dynamically sliced pool (workloads.planning.dynamic_slices); None: the pool's own slices
    topology: str | None = _flag(
        None,
        "--topology",
        "dynamically sliced tpu7x pools only: the slice to run on, a sub-slice of one 4x4x4 sub-block (2x2x1, 2x2x2, 2x2x4, 2x4x4) "
        "or a super-slice of several (4x4x8, 4x8x8, ...); Kueue's topology-aware scheduling and GKE's slice controller place it",
        metavar="AxBxC",
    )
    # Pathways elastic slices (workloads.planning.pathways): slices that may go away and come back without a restart
    elastic_slices: int | None = _flag(
        None,
        "--elastic-slices",
        "--runtime pathways only: slices that may be lost and replaced while the others keep running (the proxy's --num_elastic_slices; "
        "MaxText recovers in its process from its last checkpoint)",
        metavar="N",
        bounds=Bounds(1, INT32_MAX, "a run's slices can be", floor=("must be at least 1, got {value}", "pass --elastic-slices 1 or more")),
    )
    max_slice_restarts: int | None = _flag(
        None,
        "--max-slice-restarts",
        "with --elastic-slices: how many times each slice's workers may be replaced (default 10, as MaxText's elastic guide)",
        metavar="M",
        bounds=Bounds(0, 1_000_000, "slice replacements a run may count"),
    )
    # GKE's multi-container setup on tpu7x (two NUMA nodes per VM): a container per NUMA node, each with half the chips
    parallel_containers: bool = _flag(
        False,
        "--parallel-containers/--no-parallel-containers",
        "tpu7x: two containers per VM, each holding 2 of its 4 chips and one NUMA node's CPUs and NIC (GKE's multi-container setup; "
        "xpk's and Cluster Toolkit's default there): two JAX processes per VM, MaxText's process count doubles, its devices do not",
    )

    def problem(self) -> tuple[str, str, str] | None:
        """(flag or field, problem, fix) for the first number outside its ``Bounds``, else None."""
        for f in fields(self):
            bounds, value = bounds_of(f), getattr(self, f.name)
            if bounds is None or value is None or isinstance(value, bool):
                continue
            if not isinstance(value, (int, float)):
                return _where(f), f"must be a number, got {type(value).__name__}", "pass a number"
            found = bounds.problem(value)
            if found:
                return (_where(f), *found)
        return None


def _where(f: Any) -> str:
    flag = flag_of(f)
    return flag.decls.split("/")[0] if flag is not None else f.name
