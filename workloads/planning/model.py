"""The run model: one immutable ``RunPlan`` made of three parts, for every runtime.

    RunPlan = name
            + Target   where it runs: the pool, the catalog's SliceShape, slices,
                       and the team's namespace, queue, priority and identity
            + Program  what runs: image, command, args, env, recipe, steps
                       (+ MaxText sizing: mesh, batch, parameters, HBM estimate)
            + Policy   how it is kept running: failure handling, restarts,
                       checkpointing, TTL, pod networking

``workloads.planning.planner.plan_run`` is the one function that builds it; each
runtime renderer (``workloads.render.jobset`` today) reads it and adds nothing
that a plan could disagree with. Hardware figures are never copied into the
plan: ``target.shape`` is the catalog's own object, so nodes, chips, devices and
HBM come from ``infra.catalog`` and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infra.catalog import GIB, SliceShape
from infra.spec import RECREATE, DatasetSpec
from workloads.planning.checkpoint_shapes import LoadParameters

# The policy defaults are plain data of their own (workloads.planning.defaults: the CLI's help quotes them).
from workloads.planning.defaults import (  # noqa: F401  re-exported: part of the run model
    AUTOCHECKPOINT_CAPACITY,
    DEFAULT_CHECKPOINT_MINUTES,
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_TTL_SECONDS,
    PROGRAM_ERROR_EXIT_CODES,
)
from workloads.planning.dynamic_slices import DynamicSlice
from workloads.planning.hang import HangWatch
from workloads.planning.parallel_containers import layout as parallel_layout
from workloads.planning.pathways import ElasticSlices

# The ways a plan can run (each a renderer in workloads.render, registered in
# kustomize.RUNTIMES): a JobSet (slices restart together), a plain Indexed Job with a
# headless Service (GKE's TPU tutorial; one slice), a KubeRay RayJob (Ray Train JaxTrainer).
RUNTIME_JOBSET = "jobset"
RUNTIME_JOB = "job"
RUNTIME_RAY = "ray"
# MaxText on Pathways: a JobSet of a head (the IFRT proxy, the resource manager and the program) and
# TPU workers per slice (workloads.planning.pathways, workloads.render.pathways).
RUNTIME_PATHWAYS = "pathways"
RUNTIMES = (RUNTIME_JOBSET, RUNTIME_JOB, RUNTIME_RAY, RUNTIME_PATHWAYS)


@dataclass(frozen=True)
class HbmEstimate:
    """Per-device bytes by part (``workloads.planning.hbm`` estimates them), the device's HBM, and the estimate's measured error for this kind of run."""

    parts_bytes: tuple[tuple[str, int], ...]
    available_bytes: int
    kind: str
    error: tuple[float, float]  # compiled / estimated, least and most
    measured: bool  # False: no compiled configuration of this kind (error is then the target band)
    # What no schedule of XLA's can give back: the state, gradients, what the remat policy keeps and
    # one copy of the logits. The rest (working sets, more copies) is what XLA allocates when it has
    # the room, and rematerializes under pressure (0: not computed).
    floor_bytes: int = 0

    def parts(self) -> dict[str, int]:
        return dict(self.parts_bytes)

    @property
    def total_bytes(self) -> int:
        return sum(b for _, b in self.parts_bytes)

    @property
    def low_bytes(self) -> int:
        return int(self.total_bytes * self.error[0])

    @property
    def high_bytes(self) -> int:
        return int(self.total_bytes * self.error[1])

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.available_bytes

    # The three figures earlier plans reported, for the JSON summary's readers.
    @property
    def state_bytes(self) -> int:
        p = self.parts()
        return p.get("state", 0) + p.get("gradients", 0)

    @property
    def activation_bytes(self) -> int:
        p = self.parts()
        return p.get("saved", 0) + p.get("working", 0)

    @property
    def logits_bytes(self) -> int:
        return self.parts().get("logits", 0)

    def as_dict(self) -> dict[str, float | str | bool | list[float]]:
        def gib(b: int) -> float:
            return round(b / GIB, 2)

        return {
            "estimate_gib": gib(self.total_bytes),
            **{f"{k}_gib": gib(v) for k, v in self.parts_bytes},
            "available_gib": gib(self.available_bytes),
            "floor_gib": gib(self.floor_bytes),
            "kind": self.kind,
            "compiled_over_estimate": list(self.error),
            "error_measured": self.measured,
        }

    def range_text(self) -> str:
        lo, hi = self.error
        how = "compiled configurations of this kind came out" if self.measured else "no compiled configuration of this kind yet; the target is"
        return f"{self.kind}: {how} {lo:g}-{hi:g}x the estimate, {self.low_bytes / GIB:.1f}-{self.high_bytes / GIB:.1f} GiB"


@dataclass(frozen=True)
class DcnNetwork:
    """The second network of a multislice run (spec ``network.dcn``): the pods' eth1 and its TCP buffers."""

    network: str  # the GKE Network object eth1 attaches to
    tcp_rmem: str  # net.ipv4.tcp_rmem for the run's network namespace


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
    cpu_pool: str = "cpu"  # the spec's CPU node pool (a Ray head runs there)
    dcn: DcnNetwork | None = None  # multislice over the spec's DCN network (network.dcn); None = the pod network only
    run_as_user: int | None = None  # the team's non-root UID, GID and fsGroup (TeamSpec.pod_user); None = the image's user (run_as_root)
    dynamic: DynamicSlice | None = None  # --topology on a dynamically sliced pool (workloads.planning.dynamic_slices)
    containers_per_vm: int = 1  # parallel containers (workloads.planning.parallel_containers): 2 on tpu7x, each with half the chips

    @property
    def chips_per_container(self) -> int:
        return self.shape.chips_per_vm // self.containers_per_vm

    @property
    def processes(self) -> int:
        """JAX processes of the whole run: one per container (MaxText's jax.process_count())."""
        return self.nodes * self.containers_per_vm

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
    hbm: HbmEstimate  # workloads.planning.hbm estimates it


@dataclass(frozen=True)
class Profiling:
    """MaxText's xplane profiler over steps ``first_step`` .. ``first_step + steps - 1``.

    Traces land in ``<output_dir>tensorboard/`` in the run's bucket; with a Vertex AI
    TensorBoard in the spec (``tensorboard``: its display name) MaxText also creates an
    experiment in it and uploads them, as the pods' identity. The experiment is named after
    the run *and its output directory* (``experiment``: ``<run>-<8 hex>``), not after the run
    alone as MaxText would: the TensorBoard is the project's, so two runs under one name in
    different buckets (teams, or a reused name) would otherwise upload into one experiment.
    One output directory is one run's (``workloads.runs.identity``), so its experiment is too.
    """

    first_step: int
    steps: int
    tensorboard: str | None = None
    project: str | None = None
    region: str | None = None
    experiment: str | None = None

    def maxtext_args(self) -> dict[str, str]:
        args = {"profiler": "xplane", "skip_first_n_steps_for_profiler": str(self.first_step), "profiler_steps": str(self.steps)}
        if self.tensorboard:
            args |= {"use_vertex_tensorboard": "true", "vertex_tensorboard_project": self.project or "", "vertex_tensorboard_region": self.region or ""}
        return args

    def env(self) -> dict[str, str]:
        # MaxText finds (or creates) the instance by display name; without this it would
        # look for "<project>-tb-instance" and make a second TensorBoard.
        if not self.tensorboard:
            return {}
        return {"TENSORBOARD_NAME": self.tensorboard, **({"EXPERIMENT_NAME": self.experiment} if self.experiment else {})}


@dataclass(frozen=True)
class SecretRef:
    """The environment variable ``name`` holds key ``key`` of the Secret ``secret`` in the run's namespace
    (``workloads.planning.secret_env``); rendered as a ``secretKeyRef``, never as the value."""

    name: str
    secret: str
    key: str

    def text(self) -> str:
        return f"{self.name}={self.secret}/{self.key}"


@dataclass(frozen=True)
class Program:
    """What runs in every worker: the same image, command, args and env.

    ``estimated_step_seconds``: the planner's step time (``workloads.planning.step_time``; None
    for a plain command: nothing to estimate), ``estimated_mfu`` what MaxText would report for
    it (its model FLOPs over the step at the bf16 peak), and ``step_error`` the measured error
    of that estimate on published runs of its kind (published / estimated, least and most).
    """

    recipe: str
    kind: str  # "maxtext", "sft" (MaxText's fine-tuning trainer) or "command"
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    steps: int
    secret_env: tuple[SecretRef, ...] = ()  # environment variables from Kubernetes Secrets (secretKeyRef), after env
    output_dir: str | None = None
    sizing: MaxTextSizing | None = None
    estimated_step_seconds: float | None = None
    estimated_mfu: float | None = None
    step_kind: str | None = None  # "dense, bf16", "dense, quantized" or "mixture of experts"
    step_error: tuple[float, float] | None = None  # None: no published figure measures the generation
    profile: Profiling | None = None  # --profile: MaxText's profiler window (MaxText runs only)
    dataset: DatasetSpec | None = None  # --dataset / the recipe's dataset: (read-only GCS FUSE mount); None: the recipe's data args
    load_parameters: LoadParameters | None = None  # --load-parameters / the recipe's load_parameters_path: checked before apply
    # What the plan may trip over without being wrong (printed once as `warning:` lines).
    warnings: tuple[str, ...] = ()

    @property
    def is_maxtext(self) -> bool:
        """A MaxText program: pre-training or fine-tuning (the same model, mesh, checkpoints and log)."""
        return self.kind in ("maxtext", "sft")

    @property
    def estimated_run_seconds(self) -> float | None:
        """Steps x estimated step time (compile and checkpoint restores not included)."""
        return None if self.estimated_step_seconds is None else self.steps * self.estimated_step_seconds


@dataclass(frozen=True)
class Checkpointing:
    """When and how a MaxText run saves its state, so a restarted JobSet resumes.

    ``every_minutes`` is what was asked (``--checkpoint-every`` or the capacity mode's
    default); ``period_steps`` is what MaxText is given (``checkpoint_period``): the
    minutes over the estimated step time, between one step and the whole run.
    """

    every_minutes: float
    period_steps: int
    keep: int  # max_num_checkpoints_to_keep
    async_save: bool = True  # async_checkpointing: training continues while a save uploads
    autocheckpoint: bool = False  # enable_autocheckpoint: also save at the preemption step

    def maxtext_args(self) -> dict[str, str]:
        return {
            "enable_checkpointing": "true",
            "async_checkpointing": "true" if self.async_save else "false",
            "checkpoint_period": str(self.period_steps),
            "max_num_checkpoints_to_keep": str(self.keep),
            "enable_autocheckpoint": "true" if self.autocheckpoint else "false",
        }


@dataclass(frozen=True)
class MultiTierCheckpointing:
    """GKE's multi-tier checkpointing of a MaxText run: a RAM disk on every TPU VM (the add-on's CSI
    driver, sized by the pool's CheckpointConfiguration), replicated to peers and backed up to GCS.

    ``ramdisk_bytes`` is the documented rule (MaxText's multi_tier_checkpointing guide): a full
    checkpoint is ~12 bytes per parameter (bf16/fp32 weights and Adam state as Orbax saves
    them), sharded over the slice's hosts; each host holds two (the one being written and the
    last complete one), plus a 15% margin.
    """

    params: int
    hosts_per_slice: int
    configured_bytes: int  # the pool's CheckpointConfiguration inMemoryVolumeSize (spec)
    vm_memory_bytes: int  # the TPU VM's memory (catalog)
    local_period_steps: int  # local_checkpoint_period
    backup_minutes: int  # multi_tier_checkpointing_backup_interval_minutes
    directory: str = "/local-checkpoints"  # where the RAM disk is mounted (local_checkpoint_directory)

    @property
    def checkpoint_bytes(self) -> int:
        return MTC_BYTES_PER_PARAM * self.params

    @property
    def ramdisk_bytes(self) -> int:
        return math.ceil(2 * self.checkpoint_bytes / self.hosts_per_slice * MTC_MARGIN)

    def maxtext_args(self) -> dict[str, str]:
        return {
            "enable_multi_tier_checkpointing": "true",
            "local_checkpoint_directory": self.directory,
            "local_checkpoint_period": str(self.local_period_steps),
            "multi_tier_checkpointing_backup_interval_minutes": str(self.backup_minutes),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "ramdisk_gib_needed": round(self.ramdisk_bytes / GIB, 1),
            "ramdisk_gib_configured": round(self.configured_bytes / GIB, 1),
            "vm_memory_gib": round(self.vm_memory_bytes / GIB, 1),
            "checkpoint_gib": round(self.checkpoint_bytes / GIB, 1),
            "directory": self.directory,
            "local_period_steps": self.local_period_steps,
            "backup_minutes": self.backup_minutes,
        }


CHECKPOINT_STORAGES = ("gcs", "gcsfuse", "lustre")  # --checkpoint-storage: MaxText's own GCS client (the default), or a mount


@dataclass(frozen=True)
class CheckpointStorage:
    """Where a run's checkpoints go when not through MaxText's own GCS client: a mount MaxText writes as files.

    ``gcsfuse``: the team's checkpoints bucket, read-write through GCS FUSE with checkpoint-tuned
    options (the same objects as ``gcs``, so resuming and the run's identity check work alike).
    ``lustre``: the spec's Managed Lustre instance through the team namespace's claim, in a
    directory of the team's own.
    """

    kind: str  # "gcsfuse" or "lustre"
    base_output: str  # MaxText's base_output_directory (under mount_dir)
    location: str  # where the files are, as the user finds them (gs://bucket/ or lustre:<instance>/<dir>/)
    bucket: str | None = None  # gcsfuse: the bucket mounted
    claim: str | None = None  # lustre: the PersistentVolumeClaim in the team's namespace
    mount_dir: str = "/checkpoints"


# The documented sizing rule (MaxText docs/guides/checkpointing_solutions/multi_tier_checkpointing.md).
MTC_BYTES_PER_PARAM = 12
MTC_MARGIN = 1.15


@dataclass(frozen=True)
class Policy:
    """How the run is kept alive and cleaned up, whichever runtime carries it."""

    max_restarts: int  # restarts for failures that are neither disruptions nor program errors
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    program_error_exit_codes: tuple[int, ...] = PROGRAM_ERROR_EXIT_CODES  # 1, 2 + the recipe's fatal_exit_codes
    host_network: bool = False
    checkpoint: Checkpointing | None = None  # None: the run does not checkpoint (a plain command, or turned off)
    multi_tier: MultiTierCheckpointing | None = None  # --multi-tier-checkpointing (None: GCS only)
    checkpoint_storage: CheckpointStorage | None = None  # --checkpoint-storage gcsfuse|lustre (None: gcs, MaxText's own client)
    restart: str = RECREATE  # how JobSet restarts every worker (infra.recovery: recreate | in-place)
    agent_image: str | None = None  # restart in-place: JobSet's in-place restart agent, copied into each pod
    hang: HangWatch | None = None  # the exit guard's hang watch (MaxText runs under the guard; workloads.planning.hang)
    elastic: ElasticSlices | None = None  # Pathways elastic slices (--elastic-slices; workloads.planning.pathways)


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
    runtime: str = RUNTIME_JOBSET  # which renderer carries it (RUNTIMES)

    def summary(self) -> dict[str, Any]:
        t, p, shape = self.target, self.program, self.target.shape
        out: dict[str, Any] = {
            "name": self.name,
            "runtime": self.runtime,
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
            "max_restarts": self.policy.max_restarts,
            "restart": self.policy.restart,
            "program_error_exit_codes": list(self.policy.program_error_exit_codes),
            "checkpoint": self._checkpoint_summary(),
        }
        if t.containers_per_vm > 1:
            out["parallel_containers"] = parallel_layout(t)
        if t.dynamic is not None:
            out["dynamic_slice"] = {"topology": t.dynamic.topology, "kind": t.dynamic.kind, "domain": t.dynamic.level, "health": t.dynamic.health_label}
        if p.dataset is not None:
            out["dataset"] = {"name": p.dataset.name, "source": f"gs://{p.dataset.bucket}/{p.dataset.object_prefix()}", "format": p.dataset.format.value}
        if p.load_parameters is not None:
            out["load_parameters"] = {"path": p.load_parameters.path, "model": p.load_parameters.describe()}
        if self.policy.multi_tier is not None:
            out["multi_tier_checkpointing"] = self.policy.multi_tier.as_dict()
        if p.estimated_step_seconds is not None:
            out["estimated_step_seconds"] = round(p.estimated_step_seconds, 3)
            out["estimated_run_seconds"] = round(p.estimated_run_seconds or 0.0, 1)
            out["estimated_mfu"] = round(p.estimated_mfu or 0.0, 3)
            out["step_time_error"] = (
                {"kind": p.step_kind, "published_over_estimate": list(p.step_error)} if p.step_error else {"kind": p.step_kind, "measured": False}
            )
        if p.profile:
            out["profile"] = {"first_step": p.profile.first_step, "steps": p.profile.steps, "vertex_tensorboard": p.profile.tensorboard}
        if p.sizing:
            out["mesh"] = {"ici": dict(p.sizing.ici), "dcn": dict(p.sizing.dcn)}
            out["per_device_batch_size"] = p.sizing.per_device_batch_size
            out["global_batch_size"] = p.sizing.global_batch_size
            out["hbm_per_device"] = p.sizing.hbm.as_dict()
        return out

    def _checkpoint_summary(self) -> dict[str, Any] | None:
        c = self.policy.checkpoint
        if c is None:
            return None
        out: dict[str, Any] = {
            "every_minutes": c.every_minutes,
            "period_steps": c.period_steps,
            "keep": c.keep,
            "async": c.async_save,
            "autocheckpoint": c.autocheckpoint,
        }
        if self.checkpoint_dir:
            out["directory"] = self.checkpoint_dir
        st = self.policy.checkpoint_storage
        out["storage"] = "gcs" if st is None else st.kind
        return out

    @property
    def checkpoint_dir(self) -> str | None:
        """Where the run's checkpoints are, as the user finds them (None for a run without an output)."""
        st = self.policy.checkpoint_storage
        if st is not None and st.kind == "lustre":
            return f"{st.location}{self.name}/checkpoints/"
        return f"{self.program.output_dir}checkpoints/" if self.program.output_dir else None
