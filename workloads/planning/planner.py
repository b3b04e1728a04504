"""Run planning: recipe + overrides + environment spec -> a validated, frozen RunPlan, in four stages.

    Overrides.problem()   the user's numbers, each within its bounds (checked here once)
    target   (target.py)  runtime, team, priority, pool, Target, run name, image, steps -> Placement
    sizing   (sizing.py)  --set, model, mesh, batch, HBM estimate, step time          -> Sizing | None
    policy   (policy.py)  restarts, checkpointing, multi-tier, storage, output base   -> PolicyChoice
    program  (program.py) command, args, env, dataset, profiler                        -> Program

Each stage takes the frozen results of the ones before it and returns its own; no stage
changes an earlier result, and ``Overrides`` stays what the user typed. Every check that
can be made before a cloud call is made in the stage that owns the value, once, and each
failure is one ``PlanError`` line naming the flag or field and the fix: the pool and slice
count against the spec, the MaxText mesh against the slice's devices, each sharding axis
against the model dimension it splits, a memory estimate against HBM, names against
Kubernetes' length limits.

Pure: no I/O, no clock, no randomness (the run service, ``workloads.runs``, passes ``now``
and a random suffix in). The estimates and their calibration are documented in
``workloads.planning.sizing``; checkpointing in ``workloads.planning.policy``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from infra.spec import EnvSpec
from toolkit import names
from workloads.planning import pathways
from workloads.planning.defaults import DEFAULT_PROFILE_START, DEFAULT_TTL_SECONDS
from workloads.planning.errors import PlanError
from workloads.planning.hbm import HBM_ERROR, estimate_hbm
from workloads.planning.maxtext_sets import parse_sets
from workloads.planning.model import RunPlan
from workloads.planning.overrides import Overrides
from workloads.planning.policy import CHECKPOINT_KEYS, DATASET_KEYS, LUSTRE_CLAIM, MULTI_TIER_KEYS, choose_policy
from workloads.planning.program import PROFILE_KEYS, build_program
from workloads.planning.recipes import load_recipe
from workloads.planning.sizing import size_run
from workloads.planning.target import REPLICATED_JOB, name_budget, place_run

# The names callers import from here: the entry point, its inputs and errors, and each stage's public figures.
__all__ = [
    "CHECKPOINT_KEYS",
    "DATASET_KEYS",
    "DEFAULT_PROFILE_START",
    "DEFAULT_TTL_SECONDS",
    "HBM_ERROR",
    "LUSTRE_CLAIM",
    "MULTI_TIER_KEYS",
    "PROFILE_KEYS",
    "REPLICATED_JOB",
    "Overrides",
    "PlanError",
    "RunPlan",
    "estimate_hbm",
    "name_budget",
    "parse_sets",
    "plan_run",
]


def plan_run(
    recipe_name: str,
    spec: EnvSpec,
    overrides: Overrides | None = None,
    *,
    now: datetime | None = None,
    rand: str = "x0x",
    hbm_verdict: bool = True,
) -> RunPlan:
    """Resolve and check a run. ``now``/``rand`` make generated names deterministic in tests;
    ``hbm_verdict=False`` leaves the HBM verdict to the compiler (``sizing.size_run``)."""
    o = overrides or Overrides()
    recipe = load_recipe(recipe_name)
    bad = o.problem()  # every number within its declared bounds (overrides.Bounds): no stage checks them again
    if bad:
        raise PlanError(*bad)
    placed = place_run(recipe, spec, o, now=now or datetime(2000, 1, 1), rand=rand)
    sizing = size_run(placed, o, hbm_verdict=hbm_verdict)
    chosen = choose_policy(placed, sizing, spec, o)
    elastic = pathways.check(placed.runtime, placed.recipe.kind.value, placed.target.slices, placed.target.shape.nodes, o)
    if placed.runtime == "pathways":
        pathways.check_head(spec.cpu_pool.machine_type, spec.cpu_pool.name)
    if elastic is not None:
        chosen = dataclasses.replace(chosen, policy=dataclasses.replace(chosen.policy, elastic=elastic))
    program = build_program(placed, sizing, chosen, spec, o)
    return RunPlan(
        name=placed.name,
        target=placed.target,
        program=program,
        policy=chosen.policy,
        labels=(
            (names.K8S_MANAGED_BY_LABEL, names.TGK),
            (names.K8S_APP_NAME_LABEL, recipe.name.replace(".", "-")),
            (names.TGK_RUN_LABEL, placed.name),
        ),
        jobset_version=spec.versions.jobset,
        kueue_version=spec.versions.kueue,
        runtime=placed.runtime,
    )
