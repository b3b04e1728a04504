"""Planning, stage 1 of 4 — the target: where a run goes, what it is called and what it pulls.

    target -> sizing -> policy -> program        (workloads.planning.planner.plan_run)

From the recipe, the spec and the user's ``Overrides`` (whose numbers are already within
their bounds), one frozen ``Placement``:

- the runtime: ``--runtime``, else the recipe's first; one the recipe or the slice count
  cannot carry is refused (a plain Job runs one slice);
- the team, its identity (``--host-network`` only for a team that opted in) and its
  priority (one of the team's allowed priorities);
- the pool (``workloads.planning.select``: the same choice ``preflight`` makes) and from it
  the ``Target``: the catalog's slice shape, the node pools of that shape, the zone, the
  capacity mode, the team's namespace, queue and service account, the DCN network of a
  multislice run; a Ray run needs a TPU generation Ray knows;
- the run name: ``--name`` (with ``--suffix``), else the recipe's name with the time and
  ``rand``, within the longest name whose pods still get valid names (``name_budget``);
- the image: ``--image`` (pinned by a tag or digest), the recipe's reference, or its
  ``name:tag`` in the spec's Artifact Registry (the Ray image for a Ray run of the MaxText image);
- the step count: ``--steps``, else the recipe's.

Pure; ``now`` and ``rand`` come from the caller (the run service passes the clock's).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime

from infra.spec import PRIORITY_CLASSES, EnvSpec, TeamSpec
from toolkit import names
from workloads import ray as ray_pins
from workloads.planning import dynamic_slices, pathways
from workloads.planning.errors import PlanError, suggest
from workloads.planning.image_reference import image_problem
from workloads.planning.images import MAXTEXT_IMAGE, RAY_IMAGE
from workloads.planning.model import RUNTIME_JOB, RUNTIME_JOBSET, RUNTIME_PATHWAYS, RUNTIME_RAY, RUNTIMES, DcnNetwork, Target
from workloads.planning.overrides import Overrides
from workloads.planning.recipe_model import Recipe
from workloads.planning.recipes import shown_path
from workloads.planning.select import PoolChoice, select_pool

REPLICATED_JOB = "slice"  # the JobSet's one replicated job: one child Job per slice
POD_NAME_RANDOM = len("-abcde")  # the Job controller's generateName suffix
RAYJOB_NAME_MAX = 47  # KubeRay v1.6.0 utils.MaxRayJobNameLength
DNS1035 = re.compile(names.DNS1035_LABEL)


@dataclass(frozen=True)
class Placement:
    """Stage 1's result: the recipe and what the user's flags and the spec made of it before any sizing."""

    recipe: Recipe
    runtime: str  # RUNTIMES: which renderer carries the run
    team: TeamSpec
    target: Target
    name: str
    image: str
    steps: int


def place_run(recipe: Recipe, spec: EnvSpec, o: Overrides, *, now: datetime, rand: str) -> Placement:
    """The run's target, name and image; one PlanError naming the flag and the fix for the first thing that cannot be."""
    slices = o.slices or recipe.slices
    runtime = _runtime(recipe, o, slices)
    team = spec.team(o.team)
    _check_host_network(o, team)
    priority = _priority(o, team)
    if o.topology is not None:
        # The slice is the run's to say: the pool is the first dynamically sliced one unless --pool names another.
        named = o.pool or next((p.name for p in spec.tpu_pools if p.dynamic_slicing), None)
        choice = select_pool(spec, recipe, pool=named, slices=1)
        shape, dynamic = dynamic_slices.choose(choice.pool, o.topology, slices)
        if runtime != RUNTIME_JOBSET:
            raise PlanError("--topology", f"the {runtime} runtime has no slice controller integration here", "use --runtime jobset")
    else:
        choice = select_pool(spec, recipe, pool=o.pool, slices=slices)
        shape, dynamic = choice.shape, None
    budget = name_budget(slices, shape.nodes, runtime)
    if dynamic is not None:
        budget = min(budget, dynamic_slices.run_name_budget(team.ns, slices))
    name = _run_name(recipe, o, budget, now, rand)
    target = _target(spec, choice, slices, team, priority)
    if dynamic is not None:
        # Kueue and the slice controller place it: no node pool's topology or placement policy to select.
        target = dataclasses.replace(target, shape=shape, dynamic=dynamic, placement_policy=None, dcn=target.dcn)
    if o.parallel_containers:
        target = dataclasses.replace(target, containers_per_vm=_parallel_containers(target, runtime))
    if runtime == RUNTIME_RAY:
        _check_ray_shape(target, o)
    image = image_ref(recipe, spec, o.image, runtime)
    return Placement(recipe, runtime, team, target, name, image, recipe.steps if o.steps is None else o.steps)


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
    if runtime == RUNTIME_PATHWAYS:
        return names.K8S_NAME_MAX - len(pathways.name_tail(slices, nodes_per_slice)) - POD_NAME_RANDOM
    longest_tail = f"-{nodes_per_slice - 1}" if runtime == RUNTIME_JOB else f"-{REPLICATED_JOB}-{slices - 1}-{nodes_per_slice - 1}"
    return names.K8S_NAME_MAX - len(longest_tail) - POD_NAME_RANDOM


def _runtime(recipe: Recipe, o: Overrides, slices: int) -> str:
    """--runtime, else the recipe's first; one that the recipe or the slice count cannot carry is refused."""
    runtime = recipe.runtimes[0] if o.runtime is None else o.runtime
    if runtime not in RUNTIMES:
        raise PlanError("--runtime", f"unknown runtime {runtime!r}{suggest(runtime, list(RUNTIMES))}", f"use one of {', '.join(RUNTIMES)}")
    if runtime == RUNTIME_PATHWAYS and RUNTIME_JOBSET in recipe.runtimes and recipe.kind.value == "maxtext":
        return runtime  # the same MaxText program, single-controller (workloads.planning.pathways)
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


def _run_name(recipe: Recipe, o: Overrides, budget: int, now: datetime, rand: str) -> str:
    if o.name is not None:
        name = o.name if o.suffix is None else f"{o.name}-{o.suffix}"
        flag = "--name" if o.suffix is None else "--name/--suffix"
        if not DNS1035.fullmatch(name):
            raise PlanError(flag, f"{name!r} is not a DNS-1035 label", "use lowercase letters, digits and '-', starting with a letter")
        if len(name) > budget:
            raise PlanError(flag, f"{name!r} is {len(name)} characters; pod names of this run allow at most {budget}", f"shorten it to {budget} characters")
        return name
    tail = f"-{now:%m%d-%H%M}-{rand}" if o.suffix is None else f"-{o.suffix}"
    base = re.sub(r"[^-a-z0-9]", "-", recipe.name)[: max(1, budget - len(tail))].rstrip("-")
    name = base + tail
    if not DNS1035.fullmatch(name) or len(name) > budget:
        raise PlanError(
            "--suffix", f"{name!r} is not a usable run name ({budget} characters at most, DNS-1035)", "use a short suffix of lowercase letters and digits"
        )
    return name


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
        run_as_user=team.pod_user,
    )


def _parallel_containers(target: Target, runtime: str) -> int:
    """``--parallel-containers``: the containers per VM its generation runs (workloads.planning.parallel_containers), or a refusal."""
    from workloads.planning import parallel_containers as pc

    gen = target.shape.generation.name
    n = pc.containers_for(gen)
    if n is None:
        where = ", ".join(pc.GENERATIONS)
        raise PlanError(
            "--parallel-containers",
            f"GKE's multi-container setup binds one container to each NUMA node of {where} VMs (two per VM); a {gen} VM runs one container",
            "drop --parallel-containers",
        )
    if runtime not in pc.RUNTIMES:
        raise PlanError(
            "--parallel-containers", f"the {runtime} runtime lays out its own containers", f"drop --parallel-containers, or use --runtime {pc.RUNTIMES[0]}"
        )
    if target.shape.chips_per_vm % n:
        raise PlanError("--parallel-containers", f"{target.shape.chips_per_vm} chips per VM do not split over {n} containers", "drop --parallel-containers")
    return n


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


def image_ref(recipe: Recipe, spec: EnvSpec, image: str | None, runtime: str) -> str:
    """The image a run of ``recipe`` pulls: ``--image``, else the recipe's reference, else its name in the spec's Artifact Registry."""
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
