"""The run model: one immutable ``RunPlan`` made of three parts, for every runtime.

    RunPlan = name
            + Target   where it runs: the pool, the catalog's SliceShape, slices,
                       and the team's namespace, queue, priority and identity
            + Program  what runs: image, command, args, env, recipe, steps
                       (+ MaxText sizing: mesh, batch, parameters, HBM estimate)
            + Policy   how it is kept running: failure handling, restarts, TTL,
                       pod networking

``workloads.planning.planner.plan_run`` is the one function that builds it; each
runtime renderer (``workloads.render.jobset`` today) reads it and adds nothing
that a plan could disagree with. Hardware figures are never copied into the
plan: ``target.shape`` is the catalog's own object, so nodes, chips, devices and
HBM come from ``infra.catalog`` and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.catalog import GIB, SliceShape

# Exit codes that mean "the program itself is wrong": rerunning it cannot help.
PROGRAM_ERROR_EXIT_CODES = (1, 2)
DEFAULT_TTL_SECONDS = 3 * 24 * 3600  # finished runs stay inspectable (logs, status) for 3 days


@dataclass(frozen=True)
class HbmEstimate:
    """Lower-bound memory per device (see the planner's docstring for the model)."""

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
        def gib(b: int) -> float:
            return round(b / GIB, 2)

        return {
            "estimate_gib": gib(self.total_bytes),
            "state_gib": gib(self.state_bytes),
            "activations_gib": gib(self.activation_bytes),
            "logits_gib": gib(self.logits_bytes),
            "available_gib": gib(self.available_bytes),
        }


@dataclass(frozen=True)
class Target:
    """Where a run goes: hardware from the catalog, queueing from the team."""

    pool: str  # the tpu_pools entry chosen
    shape: SliceShape
    slices: int
    node_pools: tuple[str, ...]  # every GKE node pool of that shape in the spec
    zone: str
    capacity: str  # the pool's capacity mode: on-demand, spot, flex-start, reservation
    placement_policy: str | None  # tpu7x: nodes carry cloud.google.com/placement-policy-name
    team: str
    namespace: str
    local_queue: str
    priority: str
    priority_value: int
    service_account: str

    @property
    def multislice(self) -> bool:
        return self.slices > 1

    @property
    def nodes(self) -> int:
        return self.shape.nodes * self.slices

    @property
    def chips(self) -> int:
        return self.shape.chips * self.slices

    @property
    def devices(self) -> int:
        return self.shape.devices * self.slices


@dataclass(frozen=True)
class MaxTextSizing:
    """What the planner worked out for a MaxText program on its target."""

    ici: tuple[tuple[str, int], ...]
    dcn: tuple[tuple[str, int], ...]
    per_device_batch_size: float
    global_batch_size: int
    params: int
    hbm: HbmEstimate


@dataclass(frozen=True)
class Program:
    """What runs in every worker: the same image, command, args and env."""

    recipe: str
    kind: str  # "maxtext" or "command"
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    steps: int
    output_dir: str | None = None
    sizing: MaxTextSizing | None = None

    @property
    def is_maxtext(self) -> bool:
        return self.kind == "maxtext"


@dataclass(frozen=True)
class Policy:
    """How the run is kept alive and cleaned up, whichever runtime carries it."""

    max_restarts: int
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    program_error_exit_codes: tuple[int, ...] = PROGRAM_ERROR_EXIT_CODES
    host_network: bool = True


@dataclass(frozen=True)
class RunPlan:
    """A checked run. Immutable; every renderer takes exactly this."""

    name: str
    target: Target
    program: Program
    policy: Policy
    labels: tuple[tuple[str, str], ...]
    jobset_version: str
    kueue_version: str

    def summary(self) -> dict[str, Any]:
        t, p, shape = self.target, self.program, self.target.shape
        out: dict[str, Any] = {
            "name": self.name,
            "recipe": p.recipe,
            "namespace": t.namespace,
            "local_queue": t.local_queue,
            "priority": t.priority,
            "service_account": t.service_account,
            "image": p.image,
            "pool": t.pool,
            "shape": f"{shape.generation.name} {shape.topology} ({shape.accelerator_type})",
            "slices": t.slices,
            "nodes": t.nodes,
            "chips": t.chips,
            "devices": t.devices,
            "tpu_per_pod": shape.chips_per_vm,
            "steps": p.steps,
            "output_dir": p.output_dir,
            "host_network": self.policy.host_network,
        }
        if p.sizing:
            out["mesh"] = {"ici": dict(p.sizing.ici), "dcn": dict(p.sizing.dcn)}
            out["per_device_batch_size"] = p.sizing.per_device_batch_size
            out["global_batch_size"] = p.sizing.global_batch_size
            out["hbm_per_device"] = p.sizing.hbm.as_dict()
        return out
