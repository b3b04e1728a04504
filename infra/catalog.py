"""The TPU catalog: every generation GKE offers, as pure data and pure functions.

A slice shape is (generation, topology, chips per VM). Everything else the
toolkit needs — node labels, machine type, nodes per slice, devices, HBM, peak
FLOP/s, how the pool is placed, each VM's vCPU and memory — is derived here and
nowhere else, so the node pool, the Kueue flavor, the local simulated nodes and
the MaxText mesh cannot disagree.

Sources: GKE's "Plan TPUs in GKE" (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus)
and xpk's hardware table (https://github.com/AI-Hypercomputer/xpk, src/xpk/core/system_characteristics.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from functools import cache
from itertools import combinations_with_replacement

from toolkit.errors import CatalogError

GIB = 1024**3


class Placement(str, Enum):
    """How GKE co-locates the VMs of a multi-host slice."""

    NONE = "none"  # single host: nothing to place
    COMPACT = "compact"  # placement_policy {type = COMPACT, tpu_topology = ...}
    WORKLOAD_POLICY = "workload-policy"  # google_compute_resource_policy referenced by name


@dataclass(frozen=True)
class Generation:
    name: str
    accelerator_label: str  # cloud.google.com/gke-tpu-accelerator
    name_prefixes: tuple[str, ...]  # accelerator-type prefixes, first is canonical
    name_counts_cores: bool  # v4/v5p/tpu7x names count TensorCores (2 per chip)
    dims: int
    multi_host_machine: str
    single_host_machines: tuple[tuple[str, str], ...]  # (topology, machine type)
    devices_per_chip: int  # JAX devices per chip
    hbm_gib_per_chip: float
    peak_bf16_tflops_per_chip: float
    peak_fp8_tflops_per_chip: float | None
    max_chips: int
    min_gke_version: str | None  # GKE Standard floor for this generation
    multi_host_placement: Placement
    # Cloud TPU system architecture pages (cloud.google.com/tpu/docs/<generation>): int8 peak where
    # the chip has a faster int8 path (None: int8 runs at the bf16 rate), bidirectional ICI bandwidth.
    peak_int8_tops_per_chip: float | None = None
    ici_gbytes_per_s_per_chip: float = 0.0
    # Other multi-host machine types a pool may choose (the first of ``multi_host_machine``'s alternatives
    # is never implied): tpu7x-ultranet-4t is the tpu7x VM with an iRDMA NIC for faster DCN transfers.
    alternate_machines: tuple[str, ...] = ()

    @property
    def canonical_prefix(self) -> str:
        return self.name_prefixes[0]


# The tpu7x VM with an iRDMA NIC (Intel RDMA over a SmartNIC) for faster DCN transfers; not needed for
# multislice, which runs on tpu7x-standard-4t too. Offered in some zones only: `infra check` reads
# Compute Engine's machineTypes of the pool's zone.
ULTRANET_MACHINE = "tpu7x-ultranet-4t"

# Multislice across node pools on GKE Standard needs at least this version.
MULTISLICE_MIN_GKE_VERSION = "1.27.4-gke.900"

_2D_SINGLE = (("1x1", "1t"), ("2x2", "4t"), ("2x4", "8t"))

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            name="v4",
            accelerator_label="tpu-v4-podslice",
            name_prefixes=("v4",),
            name_counts_cores=True,
            dims=3,
            multi_host_machine="ct4p-hightpu-4t",
            single_host_machines=(("2x2x1", "ct4p-hightpu-4t"),),
            devices_per_chip=1,
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=275,
            peak_fp8_tflops_per_chip=None,
            max_chips=4096,
            min_gke_version=None,
            multi_host_placement=Placement.COMPACT,
            peak_int8_tops_per_chip=None,
            ici_gbytes_per_s_per_chip=300,
        ),
        Generation(
            name="v5e",
            accelerator_label="tpu-v5-lite-podslice",
            name_prefixes=("v5litepod", "v5e"),
            name_counts_cores=False,
            dims=2,
            multi_host_machine="ct5lp-hightpu-4t",
            single_host_machines=tuple((t, f"ct5lp-hightpu-{m}") for t, m in _2D_SINGLE),
            devices_per_chip=1,
            hbm_gib_per_chip=16,
            peak_bf16_tflops_per_chip=197,
            peak_fp8_tflops_per_chip=None,
            max_chips=256,
            min_gke_version=None,
            multi_host_placement=Placement.COMPACT,
            peak_int8_tops_per_chip=393,
            ici_gbytes_per_s_per_chip=400,
        ),
        Generation(
            name="v5p",
            accelerator_label="tpu-v5p-slice",
            name_prefixes=("v5p",),
            name_counts_cores=True,
            dims=3,
            multi_host_machine="ct5p-hightpu-4t",
            single_host_machines=(("2x2x1", "ct5p-hightpu-4t"),),
            devices_per_chip=1,
            hbm_gib_per_chip=95,
            peak_bf16_tflops_per_chip=459,
            peak_fp8_tflops_per_chip=None,
            max_chips=8960,
            min_gke_version=None,
            multi_host_placement=Placement.COMPACT,
            peak_int8_tops_per_chip=918,
            ici_gbytes_per_s_per_chip=600,
        ),
        Generation(
            name="v6e",
            accelerator_label="tpu-v6e-slice",
            name_prefixes=("v6e",),
            name_counts_cores=False,
            dims=2,
            multi_host_machine="ct6e-standard-4t",
            single_host_machines=tuple((t, f"ct6e-standard-{m}") for t, m in _2D_SINGLE),
            devices_per_chip=1,
            hbm_gib_per_chip=32,
            peak_bf16_tflops_per_chip=918,
            peak_fp8_tflops_per_chip=None,
            max_chips=256,
            min_gke_version="1.31.2-gke.1115000",
            multi_host_placement=Placement.COMPACT,
            peak_int8_tops_per_chip=1836,
            ici_gbytes_per_s_per_chip=800,
        ),
        Generation(
            name="tpu7x",
            accelerator_label="tpu7x",
            name_prefixes=("tpu7x",),
            name_counts_cores=True,
            dims=3,
            multi_host_machine="tpu7x-standard-4t",
            single_host_machines=(("2x2x1", "tpu7x-standard-4t"),),
            devices_per_chip=2,
            hbm_gib_per_chip=192,
            peak_bf16_tflops_per_chip=2307,
            peak_fp8_tflops_per_chip=4614,
            max_chips=9216,
            min_gke_version="1.34.0-gke.2201000",
            multi_host_placement=Placement.WORKLOAD_POLICY,
            peak_int8_tops_per_chip=None,
            ici_gbytes_per_s_per_chip=1200,
            alternate_machines=(ULTRANET_MACHINE,),
        ),
    )
}

_2D_MULTI_HOST = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_3D_SMALL_MULTI_HOST = ("2x2x2", "2x2x4", "2x4x4")
CHIPS_PER_MULTI_HOST_VM = 4


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: what a single node pool (one slice) provides."""

    generation: Generation
    topology: str
    machine_type: str
    chips_per_vm: int

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.topology.split("x"))

    @property
    def chips(self) -> int:
        return math.prod(self.dims)

    @property
    def nodes(self) -> int:
        """VMs (Kubernetes nodes, JobSet pods) per slice."""
        return self.chips // self.chips_per_vm

    @property
    def multi_host(self) -> bool:
        return self.nodes > 1

    @property
    def devices(self) -> int:
        """JAX devices in one slice."""
        return self.chips * self.generation.devices_per_chip

    @property
    def accelerator_label(self) -> str:
        return self.generation.accelerator_label

    @property
    def accelerator_count(self) -> int:
        """What accelerator-type names count: chips (v5e, v6e) or TensorCores (v4, v5p, tpu7x)."""
        return self.chips * (2 if self.generation.name_counts_cores else 1)

    @property
    def accelerator_type(self) -> str:
        """Cloud TPU accelerator-type name, e.g. v5litepod-16, v5p-16, tpu7x-128."""
        return f"{self.generation.canonical_prefix}-{self.accelerator_count}"

    @property
    def placement(self) -> Placement:
        return self.generation.multi_host_placement if self.multi_host else Placement.NONE

    @property
    def hbm_bytes_per_chip(self) -> int:
        return int(self.generation.hbm_gib_per_chip * GIB)

    @property
    def hbm_bytes_per_device(self) -> int:
        return self.hbm_bytes_per_chip // self.generation.devices_per_chip

    @property
    def peak_tflops_per_chip(self) -> float:
        return self.generation.peak_bf16_tflops_per_chip

    @property
    def peak_tflops_per_device(self) -> float:
        return self.generation.peak_bf16_tflops_per_chip / self.generation.devices_per_chip

    @property
    def key(self) -> str:
        """Stable identifier: flavor names and pool grouping.

        Generation + topology is all the node labels carry, so it is all Kueue can
        tell apart; the spec refuses two pools that share a key but not a machine type.
        """
        return f"{self.generation.name}-{self.topology}"

    def describe(self) -> str:
        hosts = f"{self.nodes} hosts" if self.multi_host else "single host"
        return f"{self.accelerator_type} ({self.generation.name} {self.topology}, {self.chips} chips, {hosts}, {self.machine_type})"


# --------------------------------------------------------------------- validity


def _single_host(gen: Generation) -> dict[str, str]:
    return dict(gen.single_host_machines)


def _is_valid_3d_multi_host(dims: tuple[int, ...], gen: Generation) -> bool:
    topo = "x".join(map(str, dims))
    if topo in _3D_SMALL_MULTI_HOST:
        return True
    return all(d % 4 == 0 for d in dims) and math.prod(dims) <= gen.max_chips


def _valid_topologies(gen: Generation) -> list[str]:
    """Representative valid topologies (all of them for 2D; up to the pod size for 3D)."""
    out = list(_single_host(gen))
    if gen.dims == 2:
        out += [t for t in _2D_MULTI_HOST if t not in out]
        return out
    out += list(_3D_SMALL_MULTI_HOST)
    side = range(4, 33, 4)
    for dims in combinations_with_replacement(side, 3):
        if math.prod(dims) <= gen.max_chips:
            out.append("x".join(map(str, dims)))
    return out


def valid_topologies(generation: str) -> list[str]:
    return _valid_topologies(_generation(generation))


def _topology_summary(gen: Generation) -> str:
    if gen.dims == 2:
        return ", ".join(_valid_topologies(gen))
    singles = ", ".join(_single_host(gen))
    return (
        f"{singles} (single host), {', '.join(_3D_SMALL_MULTI_HOST)}, or AxBxC with A<=B<=C "
        f"multiples of 4 up to {gen.max_chips} chips (4x4x4, 4x4x8, 4x8x8, 8x8x8, ...)"
    )


def _generation(name: str) -> Generation:
    gen = GENERATIONS.get(name.strip().lower())
    if gen is None:
        raise CatalogError(f"unknown TPU generation {name!r}; valid: {', '.join(GENERATIONS)}")
    return gen


_TOPO_RE = re.compile(r"^[0-9]+(x[0-9]+){1,2}$")


def machine_choices(generation: str) -> tuple[str, ...]:
    """The multi-host machine types a pool of ``generation`` may use, the default first."""
    gen = _generation(generation)
    return (gen.multi_host_machine, *gen.alternate_machines)


def with_machine(s: SliceShape, machine_type: str) -> SliceShape:
    """``s`` on another of its generation's multi-host machine types (CatalogError for one it does not offer)."""
    choices = machine_choices(s.generation.name)
    if machine_type == s.machine_type:
        return s
    if machine_type not in choices[1:]:
        raise CatalogError(f"{s.generation.name} multi-host slices run on {', '.join(choices)}, not {machine_type!r}")
    if not s.multi_host:
        raise CatalogError(f"{machine_type} makes multi-host slices only; {s.topology} is a single host ({s.machine_type})")
    return SliceShape(s.generation, s.topology, machine_type, s.chips_per_vm)


def shape(generation: str, topology: str, chips_per_vm: int | None = None) -> SliceShape:
    """Resolve an explicit generation + topology (and optionally chips per VM)."""
    gen = _generation(generation)
    topo = topology.strip().lower()
    if not _TOPO_RE.fullmatch(topo):
        raise CatalogError(f"topology {topology!r} is not of the form AxB or AxBxC; valid for {gen.name}: {_topology_summary(gen)}")
    dims = tuple(int(d) for d in topo.split("x"))
    if len(dims) != gen.dims:
        raise CatalogError(f"{gen.name} slices have {gen.dims}D topologies, got {topology!r}; valid: {_topology_summary(gen)}")
    if any(d < 1 for d in dims):
        raise CatalogError(f"topology {topology!r} has a zero dimension; valid for {gen.name}: {_topology_summary(gen)}")
    singles = _single_host(gen)
    if topo not in singles and list(dims) != sorted(dims):
        same = [t for t in singles if sorted(map(int, t.split("x"))) == sorted(dims)]
        canonical = same[0] if same else "x".join(map(str, sorted(dims)))
        raise CatalogError(f"write {gen.name} topology {topology!r} as {canonical!r} (the form GKE names it)")

    chips = math.prod(dims)
    multi_ok = (topo in _2D_MULTI_HOST) if gen.dims == 2 else _is_valid_3d_multi_host(dims, gen)

    if chips_per_vm is None:
        # A shape a single VM can hold is single-host (v5litepod-8 = one ct5lp-hightpu-8t).
        chips_per_vm = chips if topo in singles else CHIPS_PER_MULTI_HOST_VM
    if topo in singles and chips_per_vm == chips:
        return SliceShape(gen, topo, singles[topo], chips_per_vm)
    if multi_ok and chips_per_vm == CHIPS_PER_MULTI_HOST_VM and chips > CHIPS_PER_MULTI_HOST_VM:
        return SliceShape(gen, topo, gen.multi_host_machine, chips_per_vm)
    if topo in singles or multi_ok:
        raise CatalogError(
            f"{gen.name} {topo} cannot be built from {chips_per_vm}-chip VMs; multi-host slices use "
            f"{CHIPS_PER_MULTI_HOST_VM}-chip VMs ({gen.multi_host_machine}), single-host shapes are "
            f"{', '.join(f'{t} ({m})' for t, m in singles.items())}"
        )
    raise CatalogError(f"{gen.name} has no {topo} slice; valid: {_topology_summary(gen)}")


_NAME_RE = re.compile(r"^([a-z0-9]+?)-([0-9]+)$")


def _prefix_map() -> dict[str, Generation]:
    return {p: g for g in GENERATIONS.values() for p in g.name_prefixes}


@cache
def _default_topology_by_chips(gen_name: str) -> dict[int, str]:
    """For each chip count, the most compact valid topology (smallest largest side)."""
    gen = GENERATIONS[gen_name]
    best: dict[int, tuple[int, ...]] = {}
    for topo in _valid_topologies(gen):
        dims = tuple(int(d) for d in topo.split("x"))
        chips = math.prod(dims)
        if chips not in best or (max(dims), dims) < (max(best[chips]), best[chips]):
            best[chips] = dims
    return {c: "x".join(map(str, d)) for c, d in sorted(best.items())}


def accelerator_type(name: str) -> SliceShape:
    """Resolve an accelerator-type name: v5litepod-16, v6e-16, v4-16, v5p-16, tpu7x-128."""
    raw = name.strip().lower()
    m = _NAME_RE.fullmatch(raw)
    prefixes = _prefix_map()
    valid_names = ", ".join(f"{g.canonical_prefix}-N" for g in GENERATIONS.values())
    if not m or m.group(1) not in prefixes:
        raise CatalogError(f"unknown TPU type {name!r}; valid names look like {valid_names} (e.g. v5litepod-16, v6e-16, v4-16, v5p-16, tpu7x-128)")
    gen = prefixes[m.group(1)]
    count = int(m.group(2))
    by_chips = _default_topology_by_chips(gen.name)
    per = 2 if gen.name_counts_cores else 1
    sizes = ", ".join(f"{gen.canonical_prefix}-{c * per}" for c in list(by_chips)[:14])
    if gen.name_counts_cores:
        if count % 2:
            raise CatalogError(f"{name!r}: {gen.name} names count TensorCores (2 per chip), so the number is even; valid {gen.name} types: {sizes}, ...")
        chips = count // 2
    else:
        chips = count
    if chips not in by_chips:
        raise CatalogError(f"unknown TPU type {name!r}; valid {gen.name} types: {sizes}, ...")
    return shape(gen.name, by_chips[chips])


def resolve(
    type_name: str | None = None,
    *,
    generation: str | None = None,
    topology: str | None = None,
    chips_per_vm: int | None = None,
) -> SliceShape:
    """Resolve either an accelerator-type name or generation + topology."""
    if type_name and (generation or topology):
        named = accelerator_type(type_name)
        if generation and _generation(generation) is not named.generation:
            raise CatalogError(
                f"generation {generation!r} contradicts type {type_name!r}, a {named.generation.name} type; "
                f"drop generation (the type names it) or use a {_generation(generation).canonical_prefix}-N type"
            )
        explicit = shape(generation or "", topology or "", chips_per_vm) if generation and topology else None
        if explicit is not None and explicit.chips != named.chips:
            raise CatalogError(f"{type_name!r} has {named.chips} chips but topology {topology!r} has {explicit.chips}")
        return explicit or named
    if type_name:
        s = accelerator_type(type_name)
        return shape(s.generation.name, s.topology, chips_per_vm) if chips_per_vm else s
    if generation and topology:
        return shape(generation, topology, chips_per_vm)
    raise CatalogError("give a TPU type name (e.g. v5litepod-16) or both generation and topology")


GKE_VERSION = r"^([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:-gke\.([0-9]+))?$"  # 1.31.2-gke.1115000, 1.34.1, 1.34


def gke_version_tuple(version: str) -> tuple[int, ...]:
    """'1.31.2-gke.1115000' -> (1, 31, 2, 1115000); '1.34' -> (1, 34, 0, 0)."""
    m = re.fullmatch(GKE_VERSION, version.strip())
    if not m:
        raise CatalogError(f"GKE version {version!r} is not of the form 1.31.2-gke.1115000")
    return tuple(int(g) if g else 0 for g in m.groups())


def gke_version_floor(shapes: list[SliceShape], multislice: bool) -> str | None:
    """Highest minimum GKE version among the shapes (and multislice), or None."""
    candidates = [s.generation.min_gke_version for s in shapes if s.generation.min_gke_version]
    if multislice:
        candidates.append(MULTISLICE_MIN_GKE_VERSION)
    return max(candidates, key=gke_version_tuple) if candidates else None


# ---------------------------------------------------------------- machine sizes


@dataclass(frozen=True)
class MachineSize:
    """vCPU and memory of a Compute Engine machine type."""

    vcpu: int
    memory_gib: int


# Every TPU VM machine type of GENERATIONS (Compute Engine machine-type pages).
TPU_VM_SIZES: dict[str, MachineSize] = {
    "ct4p-hightpu-4t": MachineSize(240, 407),
    "ct5lp-hightpu-1t": MachineSize(24, 48),
    "ct5lp-hightpu-4t": MachineSize(112, 192),
    "ct5lp-hightpu-8t": MachineSize(224, 384),
    "ct5p-hightpu-4t": MachineSize(208, 448),
    "ct6e-standard-1t": MachineSize(44, 176),
    "ct6e-standard-4t": MachineSize(180, 720),
    "ct6e-standard-8t": MachineSize(180, 1440),
    "tpu7x-standard-4t": MachineSize(224, 960),
    # Taken as the standard-4t host with another NIC: no published vCPU/memory figure of its own was found.
    ULTRANET_MACHINE: MachineSize(224, 960),
}
# GiB of memory per vCPU of the general-purpose families' variants (e2/n2/n2d/c3-standard-8 ...).
GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}
_GENERAL_PURPOSE_RE = re.compile(r"^[a-z0-9]+-(standard|highmem|highcpu)-([0-9]+)$")

# What a caller assumes for a machine type machine_size() does not know; each use has its own:
# - a Kueue ClusterQueue's cpu/memory quota (workloads.render.kueue): at least as large as
#   every TPU VM above, so cpu and memory never limit a TPU job's admission;
QUOTA_FALLBACK_SIZE = MachineSize(240, 1440)
# - a simulated node of the local cluster (workloads.local.nodes): a small general-purpose VM.
LOCAL_NODE_FALLBACK_SIZE = MachineSize(8, 32)


def machine_size(machine_type: str, default: MachineSize | None = None) -> MachineSize:
    """vCPU and memory of a TPU VM type (TPU_VM_SIZES) or of a general-purpose type (from its name).

    e2-standard-8 is 8 vCPU x 4 GiB, n2-highmem-4 4 x 8 GiB, c3-highcpu-22 22 x 1 GiB.
    A type neither covers gets ``default``; without one it is a CatalogError.
    """
    if machine_type in TPU_VM_SIZES:
        return TPU_VM_SIZES[machine_type]
    m = _GENERAL_PURPOSE_RE.fullmatch(machine_type)
    if m:
        vcpu = int(m.group(2))
        return MachineSize(vcpu, vcpu * GIB_PER_VCPU[m.group(1)])
    if default is None:
        raise CatalogError(f"no vCPU/memory known for machine type {machine_type!r}")
    return default
