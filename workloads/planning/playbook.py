"""Plan-time checks learned from running published recipes (the TPU v7 playbook, seed 003).

Two things a mesh that divides cleanly can still get wrong:

* **FSDP limits per model family.** Some models have a sharded weight dimension smaller
  than a large slice's device count: deepseek3-671b's MoE weights have a dimension of 512,
  so ``fsdp x fsdp_transpose`` above 512 fails in MaxText with "global size of its
  dimension 0 should be divisible by 1024, but it is equal to 512" after the slices are
  held. Refused here with the playbook's fix (the devices past 512 on the data axis).
* **A recipe tuned for one slice shape.** An imported recipe lists the one shape its
  script ran on; its tile sizes, XLA flags and batch were chosen for it. On another shape
  it still runs (the mesh is re-derived), so that is a warning naming both shapes and the
  mesh the run gets, not a refusal; a mesh that cannot work on the new shape is refused
  by the planner's mesh checks, whose message the warning's shapes explain.

Pure: the resolved mesh in, a PlanError or warning lines out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.planning.select import PlanError


@dataclass(frozen=True)
class FsdpLimit:
    """``fsdp x fsdp_transpose`` (ICI x DCN) must divide ``dimension``; ``source`` is where that was learned."""

    dimension: int
    source: str


_PLAYBOOK = "the TPU v7 playbook (seed 003): a 512-wide MoE weight dimension"
FSDP_LIMITS: dict[str, FsdpLimit] = {
    "deepseek3-671b": FsdpLimit(512, _PLAYBOOK),
    "deepseek3-671b-2dfsdp": FsdpLimit(512, _PLAYBOOK),
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
        f"put the rest on the data axis: --set ici_data_parallelism={over} (the playbook measured ~45% less per-chip"
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
