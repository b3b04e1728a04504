"""Dynamic slicing: the slice a run asks for (``--topology``) on a pool of 4x4x4 sub-blocks, and what GKE needs to make it.

Under GKE dynamic slicing (``infra.spec.ironwood``) a tpu7x pool is a set of 4x4x4 sub-blocks of an
All Capacity reservation, and each run says what slice it wants:

- a **sub-slice** of one sub-block: 2x2x1 (1 host), 2x2x2 (2), 2x2x4 (4) or 2x4x4 (8), the shapes
  GKE's slice controller forms (its ``SupportedSubsliceTopologies``); Kueue places its pods in one
  ``cloud.google.com/gke-tpu-partition-<shape>-id`` domain of the nodes;
- a **super-slice** of several sub-blocks: AxBxC with every side a multiple of 4, A <= B <= C
  (e.g. 4x4x8, 4x8x8, 4x12x16), placed one 16-host 4x4x4 partition at a time
  (``cloud.google.com/gke-tpu-partition-4x4x4-id``) within one block
  (``cloud.google.com/gce-topology-block``).

The pod template then carries what the Kueue-side slice controller's webhook would add (the slice
topology annotation, Kueue's ``podset-required-topology`` / ``podset-slice-required-topology`` /
``podset-slice-size`` and a required node affinity to HEALTHY partitions), so the run is the same
whether or not that webhook runs; ``workloads.render.dynamic_slicing`` writes it. Admission goes
through Kueue's topology-aware scheduling and the ``accelerator.gke.io/slice`` admission check,
whose controller creates the Slice objects GKE activates.

Refused with one line: a topology the generation has no slice of (1x2x2, 3x4x4, 8x4x4), more chips
than the pool's sub-blocks hold, and ``--topology`` on a pool that is not dynamically sliced
(spot, flex-start and on-demand capacity cannot be: PROVISION_ONLY takes an All Capacity
reservation).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from infra import catalog
from infra.spec import TpuPoolSpec
from infra.spec.ironwood import SUB_BLOCK_TOPOLOGY
from workloads.planning.errors import PlanError

SUB_SLICES = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")  # GKE's slice controller: SupportedSubsliceTopologies
SUB_BLOCK_CHIPS = 64
SUB_BLOCK_HOSTS = 16
BLOCK_LABEL = "cloud.google.com/gce-topology-block"
SUB_BLOCK_LABEL = "cloud.google.com/gce-topology-subblock"


def partition_id_label(topology: str) -> str:
    return f"cloud.google.com/gke-tpu-partition-{topology}-id"


def partition_state_label(topology: str) -> str:
    return f"cloud.google.com/gke-tpu-partition-{topology}-state"


@dataclass(frozen=True)
class DynamicSlice:
    """What one run's slices ask of Kueue and GKE's slice controller."""

    topology: str
    kind: str  # "sub" or "super"
    pool: str

    @property
    def level(self) -> str:
        """The node label whose value is one slice's domain (Kueue's podset-slice-required-topology)."""
        return partition_id_label(self.topology if self.kind == "sub" else SUB_BLOCK_TOPOLOGY)

    @property
    def health_label(self) -> str:
        return partition_state_label(self.topology if self.kind == "sub" else SUB_BLOCK_TOPOLOGY)

    def pods_per_domain(self, nodes_per_slice: int) -> int:
        """Kueue's podset-slice-size: the pods one domain of ``level`` takes (a sub-slice's all; a super-slice's per sub-block)."""
        return nodes_per_slice if self.kind == "sub" else SUB_BLOCK_HOSTS


# GKE's Slice names hold 49 characters (its Slice reference: the controller appends a hyphen and an 8-character
# cluster hash for Compute Engine's 63); the Kueue-side controller names each Slice
# <namespace>-<Workload name>-<podset>-<index>, and Kueue names a JobSet's Workload jobset-<run>-<5 characters>.
SLICE_NAME_MAX = 49


def run_name_budget(namespace: str, slices: int) -> int:
    """The longest run name whose Slices still have valid names (the JobSet's one podset is its replicated job, ``slice``)."""
    return SLICE_NAME_MAX - len(f"{namespace}-jobset-") - len("-abcde") - len(f"-slice-{slices - 1}")


def kind_of(topology: str) -> str | None:
    """ "sub", "super", or None for a shape GKE cannot slice dynamically."""
    if topology in SUB_SLICES:
        return "sub"
    try:
        dims = [int(d) for d in topology.split("x")]
    except ValueError:
        return None
    if len(dims) == 3 and all(d > 0 and d % 4 == 0 for d in dims) and dims == sorted(dims):
        return "super"
    return None


def choose(pool: TpuPoolSpec, topology: str, slices: int) -> tuple[catalog.SliceShape, DynamicSlice]:
    """The slice shape of ``--topology`` on ``pool`` (its machine type) and what its placement needs; PlanError otherwise."""
    topo = topology.strip().lower()
    if not pool.dynamic_slicing:
        modes = ", ".join(sorted({c.mode for c in pool.capacities}))
        raise PlanError(
            "--topology",
            f"pool {pool.name} is not dynamically sliced ({modes} capacity, node pools of {pool.shape.topology}): its slices are its node pools",
            "drop --topology, or pick a pool with dynamic_slicing: true (an All Capacity reservation; spot, flex-start and on-demand cannot be sliced)",
        )
    kind = kind_of(topo)
    if kind is None:
        raise PlanError(
            "--topology",
            f"tpu7x has no dynamic slice {topology[:40]!r}",
            f"use a sub-slice of one sub-block ({', '.join(SUB_SLICES)}) or a super-slice of sub-blocks, every side a multiple of 4, smallest first (4x4x8, 4x8x8, ...)",
        )
    base = catalog.shape(pool.shape.generation.name, topo)
    shape = dataclasses.replace(base, machine_type=pool.shape.machine_type) if base.multi_host else base
    held = pool.slices * SUB_BLOCK_CHIPS
    want = slices * shape.chips
    if want > held:
        fits = max(1, held // shape.chips) if shape.chips <= held else 0
        fix = f"pass --slices {fits} or fewer" if fits else f"ask for a slice of at most {held} chips"
        raise PlanError("--topology", f"{slices} x {topo} is {want} chips, and pool {pool.name}'s {pool.slices} sub-blocks hold {held}", fix)
    if kind == "super" and math.prod(shape.dims) % SUB_BLOCK_CHIPS:
        raise PlanError("--topology", f"{topo} is not a whole number of 4x4x4 sub-blocks", "use sides that are multiples of 4")
    return shape, DynamicSlice(topo, kind, pool.name)
