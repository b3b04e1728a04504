"""What the user may change about a run, each field with the flag, help and bounds it is given by.

``Overrides`` is the one declaration of the run-planning options: the planner reads the
fields, and the CLI builds its ``render``/``submit`` options from each field's ``Flag``
(``workloads.cli.runs``), so adding an option is a field here plus the planner code that
applies it. Help texts quote the defaults from ``workloads.planning.defaults``, the
objects the planner applies. Standard library only: ``--help`` imports this module.
"""

# No `from __future__ import annotations`: the CLI reads the fields' types (typing.get_type_hints),
# and real annotations spare it compiling sixteen strings on every command.
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from workloads.planning.defaults import (
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PROFILE_START,
    DEFAULT_TTL_SECONDS,
    PROGRAM_ERROR_EXIT_CODES,
    by_capacity,
)


class Flag(NamedTuple):
    """How a field is given on the command line (``decls`` as Typer takes them: ``--x`` or ``--x/--no-x``).

    A NamedTuple, not a dataclass: a third of the cost of building one, and ``--help`` builds it.
    """

    decls: str
    help: str
    metavar: str | None = None


def _flag(default: Any, decls: str, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"flag": Flag(decls, help, **kw)})


def flag_of(f: Any) -> Flag | None:
    """The ``Flag`` of a dataclass field, None for a field the command line does not set."""
    return f.metadata.get("flag")


_EXIT_CODES = ", ".join(map(str, PROGRAM_ERROR_EXIT_CODES))


@dataclass(frozen=True)
class Overrides:
    """What the user may change on the command line (the field order is the order of the options in ``--help``)."""

    slices: int | None = _flag(None, "--slices", "number of TPU slices (default: the recipe's, 1 unless imported with --num-slices)")
    pool: str | None = _flag(None, "--pool", "tpu_pools entry to run on (default: the recipe's preferred shape)")
    sets: tuple[str, ...] = _flag((), "--set", "MaxText key=value; repeatable")
    steps: int | None = _flag(None, "--steps", "training steps (default: the recipe's)")
    image: str | None = _flag(None, "--image", "container image with a tag or digest")
    team: str | None = _flag(None, "--team", "team (namespace, queue, service account); default the spec's first")
    priority: str | None = _flag(None, "--priority", "very-low, low, medium, high, very-high (default: the team's)")
    name: str | None = _flag(None, "--name", "exact run name (default: <recipe>-<MMDD-HHMM>-<random>)")
    suffix: str | None = _flag(None, "--suffix", "suffix for the run name instead of the time and random part")
    # pod network: the team's own identity (see planner._check_host_network)
    host_network: bool = _flag(
        False,
        "--host-network/--no-host-network",
        "hostNetwork pods: more DCN throughput, but they act as the TPU nodes' SA, not the team's "
        "(only for teams with host_network: true in the spec); default: pod network with the team's own identity",
    )
    # None: by the pool's capacity mode (defaults.DEFAULT_MAX_RESTARTS)
    max_restarts: int | None = _flag(
        None,
        "--max-restarts",
        "whole-JobSet restarts after a failure that is neither a disruption (always restarted, free) nor a program error "
        f"(exit {_EXIT_CODES}: fails at once); default by capacity: {by_capacity(DEFAULT_MAX_RESTARTS)}",
    )
    # minutes; None: by capacity mode (defaults.DEFAULT_CHECKPOINT_MINUTES)
    checkpoint_every: float | None = _flag(
        None,
        "--checkpoint-every",
        f"minutes between checkpoints (MaxText recipes); default by capacity: {by_capacity(DEFAULT_CHECKPOINT_MINUTES)}",
        metavar="MINUTES",
    )
    ttl_seconds: int = DEFAULT_TTL_SECONDS  # not a flag
    # None: the recipe's first runtime
    runtime: str | None = _flag(
        None,
        "--runtime",
        "jobset (slices restart together), job (an Indexed Job + headless Service, one slice) or ray (a KubeRay RayJob); default: the recipe's first",
    )
    # steps MaxText's profiler records; None: no profiling
    profile_steps: int | None = _flag(
        None,
        "--profile",
        "record STEPS steps with MaxText's xplane profiler and upload them to the spec's Vertex AI TensorBoard "
        "(an experiment named after the run); traces also stay in <output>/<run>/tensorboard/",
        metavar="STEPS",
    )
    # steps skipped first; None: DEFAULT_PROFILE_START
    profile_start: int | None = _flag(
        None,
        "--profile-start",
        f"steps to skip before profiling (default {DEFAULT_PROFILE_START}: past compilation and warm-up)",
        metavar="STEP",
    )
