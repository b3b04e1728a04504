"""A TPU pool: a group of identical slices, one GKE node pool per slice and capacity option.

The shape is given as an accelerator type (``v5litepod-16``) or a generation and topology
(``v6e`` + ``4x4``) and resolved once, by ``infra.catalog``, into a ``SliceShape`` every
consumer reads (machine type, hosts, chips, placement). Its capacity options
(``infra.spec.capacity``) give it node pools and Kueue flavors; with ``compute_class`` GKE
creates the slices on demand instead. What needs the rest of the spec (zones, other
pools, GKE versions) is checked by ``infra.spec.rules``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from infra import catalog
from infra.naming import GKE_NODE_POOL_NAME_MAX
from infra.spec.capacity import OPTION_TAGS, RUN_MODE_ORDER, Capacity, CapacityOption, FlexStart, OnDemand, Reservation, capacity_shorthand, parse_capacity_list
from infra.spec.ironwood import GVNIC_DEFAULT_GENERATIONS, machine_shape
from infra.spec.messages import split_problem
from infra.spec.section import FieldValueError, Section
from toolkit.errors import CatalogError
from toolkit.names import (
    DNS1035_LABEL,
    K8S_NAME_MAX,
    TGK_ACCELERATOR_TYPE_LABEL,
    TGK_CAPACITY_LABEL,
    TGK_GROUP_SIZE_LABEL,
    TGK_POOL_LABEL,
    TGK_RESERVATION_LABEL,
    TGK_SLICE_INDEX_LABEL,
    TGK_TOPOLOGY_LABEL,
    CapacityMode,
)

MAX_SLICES = 512
# A TPU pool's node pools are <name>-<slice index>; the longest index must still fit GKE's node pool names.
TPU_POOL_NAME_MAX = GKE_NODE_POOL_NAME_MAX - len(f"-{MAX_SLICES - 1}")


class ComputeClassSpec(Section):
    """GKE makes the pool's slices on demand from a custom ComputeClass instead of the stack declaring node pools.

    The class lists the pool's ``capacity`` options as its priorities, in order (each
    reservation, on-demand, flex-start, spot: GKE tries the next when one cannot be had);
    node auto-provisioning creates a slice's node pool when a run admitted to the pool's
    Kueue flavor needs it, and removes it when idle. ``active_migration`` moves running
    nodes back to a preferred priority when it frees up (GKE's ``optimizeRulePriority``).
    """

    name: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="the ComputeClass (default: the pool's name)")
    active_migration: bool = Field(True, description="GKE moves nodes back to a higher priority when it has capacity again")


def _compute_class_shorthand(v: Any) -> Any:
    # `compute_class: true` for the defaults; false is the same as leaving it out.
    if v is True:
        return {}
    return None if v is False else v


class MultiTierCheckpointingSpec(Section):
    """GKE's multi-tier checkpointing on a pool's TPU VMs: a RAM disk of ``ramdisk_gib`` per VM (the
    pool shape's CheckpointConfiguration, applied by ``queues apply``), backed up to ``bucket``."""

    ramdisk_gib: int = Field(..., ge=1, le=65536, description="RAM disk per TPU VM (inMemoryVolumeSize); `workloads submit --dry-run` prints what a run needs")
    bucket: str | None = Field(None, description="checkpoints bucket the add-on backs the RAM disks up to (default: the spec's first checkpoints bucket)")


# Google Cloud Managed Lustre (provider 7.43.0's google_lustre_instance; GKE docs "About the Managed
# Lustre CSI driver": the driver needs GKE 1.33.2-gke.1111000 and the instance in the cluster's VPC).
# The floor is the later 1.33.2-gke.4655000: from it the nodes' Lustre client uses LNet's own port


class TpuPoolSpec(Section):
    """A group of identical TPU slices: one GKE node pool per slice."""

    name: str = Field(..., pattern=DNS1035_LABEL, max_length=TPU_POOL_NAME_MAX, description="node pools are named <name>-<slice index>")
    type: str | None = Field(None, description="accelerator type, e.g. v5litepod-16, v6e-16, tpu7x-256")
    generation: str | None = Field(None, description="v4, v5e, v5p, v6e or tpu7x (with topology)")
    topology: str | None = Field(None, description="e.g. 4x4 or 4x4x8 (with generation)")
    chips_per_vm: int | None = Field(None, description="only to pick multi-host 2x4 (4) over single-host (8)")
    slices: int = Field(1, ge=1, le=MAX_SLICES, description="number of slices = node pools")
    capacity: Capacity = Field(default_factory=lambda: OnDemand(mode=CapacityMode.ON_DEMAND.value))
    zone: str | None = Field(None, description="defaults to the first of the spec's zones")
    autoscaling: bool = Field(False, description="scale each slice between 0 and its node count")
    disk_size_gb: int = Field(100, ge=10, le=65536)
    compute_class: ComputeClassSpec | None = Field(
        None, description="GKE creates the slices on demand from a ComputeClass of the capacity options (true, or {name, active_migration})"
    )
    multi_tier_checkpointing: MultiTierCheckpointingSpec | None = Field(
        None, description="GKE's multi-tier checkpointing on these VMs (runs opt in with --multi-tier-checkpointing)"
    )
    machine_type: str | None = Field(
        None,
        max_length=63,
        description="the multi-host VM type where the generation offers several (tpu7x: tpu7x-standard-4t, the default, or "
        "tpu7x-ultranet-4t with its iRDMA NIC; `infra check` asks Compute Engine whether the zone offers it)",
    )
    gvnic: bool | None = Field(None, description="Google Virtual NIC on the pool's VMs (default: on for tpu7x, as its published node pools have it)")
    dynamic_slicing: bool = Field(
        False,
        description="GKE dynamic slicing (tpu7x, an All Capacity reservation): each slice here is one 4x4x4 sub-block, and runs ask "
        "for sub-slices (2x2x1 .. 2x4x4) or super-slices (4x4x8 ...) with submit --topology (infra/spec/ironwood.py)",
    )

    _shape: catalog.SliceShape = PrivateAttr()
    # capacity: [a, b, c] keeps a in `capacity` (what single-option code reads) and b, c here.
    _fallback: tuple[Any, ...] = PrivateAttr(default=())

    @field_validator("capacity", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return capacity_shorthand(v)

    @field_validator("compute_class", mode="before")
    @classmethod
    def _class_shorthand(cls, v: Any) -> Any:
        return _compute_class_shorthand(v)

    @property
    def class_name(self) -> str | None:
        """The pool's ComputeClass, or None for a pool of declared node pools."""
        if self.compute_class is None:
            return None
        return self.compute_class.name or self.name

    @model_validator(mode="wrap")
    @classmethod
    def _capacity_list(cls, data: Any, handler: Any) -> TpuPoolSpec:
        """``capacity`` may be a list of options in priority order (reservations first, then on-demand, spot, flex-start)."""
        options = data.get("capacity") if isinstance(data, dict) else None
        if not isinstance(options, list):
            return handler(data)
        parsed = parse_capacity_list(options)
        pool = handler({**data, "capacity": parsed[0].model_dump()})
        pool._fallback = tuple(parsed[1:])
        return pool

    @model_validator(mode="after")
    def _resolve(self) -> TpuPoolSpec:
        if not self.type and not (self.generation and self.topology):
            missing = "topology" if self.generation else "generation" if self.topology else "type"
            raise FieldValueError(missing, "no TPU shape given", "give either type (e.g. v5litepod-16) or generation + topology (e.g. v6e + 4x4)")
        if self.type and self.generation:
            self._check_type_generation()
        if (self.generation is None) != (self.topology is None):
            # Only reachable with a type: without one, the check above names what is missing.
            given, missing = ("generation", "topology") if self.topology is None else ("topology", "generation")
            raise FieldValueError(
                given,
                f"is given with type {self.type!r} but without {missing}",
                f"drop {given} (the type names the shape) or add {missing}",
            )
        try:
            self._shape = catalog.resolve(self.type, generation=self.generation, topology=self.topology, chips_per_vm=self.chips_per_vm)
        except CatalogError as e:
            raise FieldValueError(self._shape_field(), *split_problem(str(e), "pick a valid TPU shape")) from None
        if self.machine_type is not None:
            self._shape = machine_shape(self._shape, self.machine_type)
        if self.slices > 1 and not self.shape.multi_host:
            raise FieldValueError(
                "slices",
                f"{self.shape.accelerator_type} is single-host; multislice needs multi-host slices",
                f"use a multi-host type (e.g. {self.shape.generation.canonical_prefix}-{self.shape.chips * 2 * (2 if self.shape.generation.name_counts_cores else 1)}) or set slices: 1",
            )
        return self

    def _check_type_generation(self) -> None:
        """type and generation must name the same generation: one of them would silently lose."""
        assert self.type and self.generation
        try:
            named = catalog.accelerator_type(self.type)
        except CatalogError:
            return  # an unknown type is reported by resolve below
        gen = catalog.GENERATIONS.get(self.generation.strip().lower())
        if gen is None or gen is named.generation:
            return  # an unknown generation is reported by resolve below
        example = f"{gen.canonical_prefix}-{named.chips * (2 if gen.name_counts_cores else 1)}"
        try:
            catalog.accelerator_type(example)
        except CatalogError:
            example = f"{gen.canonical_prefix}-N"
        raise FieldValueError(
            "generation",
            f"{self.generation!r} contradicts type {self.type!r}, which is a {named.generation.name} type",
            f"drop generation (the type names it) or use a {gen.name} type such as {example}",
        )

    def _shape_field(self) -> str:
        """Which of type / generation / topology / chips_per_vm made the shape invalid."""
        if self.generation and self.generation.strip().lower() not in catalog.GENERATIONS:
            return "generation"
        if self.chips_per_vm is not None:
            try:
                catalog.resolve(self.type, generation=self.generation, topology=self.topology)
                return "chips_per_vm"  # valid without it: the VM size is what is wrong
            except CatalogError:
                pass
        if self.type and not self.topology:
            return "type"
        return "topology"

    @property
    def shape(self) -> catalog.SliceShape:
        return self._shape

    @property
    def capacities(self) -> tuple[Any, ...]:
        """The capacity options in priority order (one for a pool without a fallback list)."""
        return (self.capacity, *self._fallback)

    @property
    def has_fallback(self) -> bool:
        return bool(self._fallback)

    @property
    def queued(self) -> bool:
        """Some option is DWS flex-start with queued provisioning (Kueue asks GKE for its slices)."""
        return any(isinstance(c, FlexStart) and c.queued for c in self.capacities)

    @property
    def flex_start(self) -> bool:
        return any(isinstance(c, FlexStart) for c in self.capacities)

    @property
    def run_mode(self) -> str:
        """The capacity mode a run on this pool is planned for: the most interruption-prone of its options."""
        modes = {c.mode for c in self.capacities}
        return next(m.value for m in RUN_MODE_ORDER if m in modes)

    def capacity_options(self) -> list[CapacityOption]:
        """The options that get node pools and a Kueue flavor, in priority order.

        The reservations of a capacity list are one option: the first reservation's, with the
        others as its ``alternates``. GKE creates a reservation's node pool whole or fails
        (RESOURCE_EXHAUSTED), so ``infra deploy`` tries them in order and keeps the first that
        succeeds; declaring a node pool per reservation would hold every one.
        """
        out: list[CapacityOption] = []
        reservations = [c for c in self.capacities if isinstance(c, Reservation)]
        if self.compute_class is not None:
            # GKE tries the class's priorities itself, reservations one by one: nothing to fold.
            return [CapacityOption(index=k, capacity=cap, tag=self._class_tag(cap)) for k, cap in enumerate(self.capacities)]
        for k, cap in enumerate(self.capacities):
            if isinstance(cap, Reservation) and cap is not reservations[0]:
                continue  # an alternate of the first reservation's option
            if not self.has_fallback:
                tag = ""
            elif isinstance(cap, Reservation):
                tag = "res"
            else:
                tag = OPTION_TAGS[cap.mode]
            alternates = tuple(reservations[1:]) if isinstance(cap, Reservation) else ()
            out.append(CapacityOption(index=k, capacity=cap, tag=tag, alternates=alternates))
        return out

    @staticmethod
    def _class_tag(cap: Any) -> str:
        return f"res-{cap.name}" if isinstance(cap, Reservation) else OPTION_TAGS[cap.mode]

    @property
    def reservation_choices(self) -> tuple[Any, ...]:
        """Every reservation the pool lists, in the order ``infra deploy`` tries them."""
        return tuple(c for c in self.capacities if isinstance(c, Reservation))

    def flavor_name(self, option: CapacityOption | None = None) -> str:
        """The Kueue ResourceFlavor of ``option`` (default: the first): the shape's, which every pool of that
        shape with one option shares, or ``<pool>-<tag>`` for an option of a capacity list."""
        if self.class_name is not None:
            return self.class_name  # one flavor for the class: GKE, not Kueue, picks the priority
        if self.dynamic_slicing:
            return self.name  # its own: its nodes are placed by a Kueue Topology of its own (workloads.render.dynamic_slicing)
        option = option or self.capacity_options()[0]
        return f"{self.name}-{option.tag}" if option.tag else self.shape.key

    def autoscaled(self, option: CapacityOption) -> bool:
        """The option's node pools have an autoscaler: the pool asks for one, and every fallback option after the first has one."""
        return self.autoscaling or option.index > 0 or self.compute_class is not None

    def scales_from_zero(self, option: CapacityOption) -> bool:
        """The option's node pools hold no VMs while idle (and cost nothing): autoscaled, or flex-start, which only
        the autoscaler obtains (modules.tpu_pool)."""
        return self.autoscaled(option) or option.mode == CapacityMode.FLEX_START

    def option_node_pool_names(self, option: CapacityOption) -> list[str]:
        """One GKE node pool per slice of one capacity option: <pool>-<slice>, or <pool>-<tag>-<slice> in a fallback list."""
        if self.compute_class is not None:
            return []  # GKE's node auto-provisioning names and creates them
        stem = f"{self.name}-{option.tag}" if option.tag else self.name
        return [f"{stem}-{i}" for i in range(self.slices)]

    def node_pool_names(self) -> list[str]:
        return [n for o in self.capacity_options() for n in self.option_node_pool_names(o)]

    def node_labels(self, option: CapacityOption, index: int, reservation: str | None = None) -> dict[str, str]:
        """The toolkit's labels on every node of slice ``index`` of ``option`` (its multislice group, its capacity;
        ``reservation``: the one of the option's choices its node pools were created from)."""
        labels = {
            TGK_POOL_LABEL: self.name,
            TGK_GROUP_SIZE_LABEL: str(self.slices),
            TGK_SLICE_INDEX_LABEL: str(index),
            TGK_ACCELERATOR_TYPE_LABEL: self.shape.accelerator_type,
            TGK_TOPOLOGY_LABEL: self.shape.topology,
            TGK_CAPACITY_LABEL: option.mode,
        }
        if isinstance(option.capacity, Reservation):
            labels[TGK_RESERVATION_LABEL] = option.reservation(reservation).name
        return labels

    @property
    def gvnic_on(self) -> bool:
        """gVNIC on the pool's VMs: as set, else on for the generations whose published node pools use it."""
        return self.gvnic if self.gvnic is not None else self.shape.generation.name in GVNIC_DEFAULT_GENERATIONS

    @property
    def total_nodes(self) -> int:
        """Every VM the pool can hold: each capacity option has node pools for all its slices (a ComputeClass
        pool: its slices once, whichever priority GKE makes them from; Kueue admits at most that many)."""
        options = 1 if self.compute_class is not None else len(self.capacity_options())
        return self.slices * self.shape.nodes * options

    @property
    def total_chips(self) -> int:
        return self.slices * self.shape.chips


def option_field(i: int, pool: TpuPoolSpec, option: CapacityOption) -> str:
    """The spec path of capacity option ``option`` of ``tpu_pools[i]`` (indexed only in a capacity list)."""
    where = f"tpu_pools[{i}].capacity"
    return f"{where}[{option.index}]" if pool.has_fallback else where
