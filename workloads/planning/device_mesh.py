"""How MaxText lays a slice's devices out as its ICI mesh, and when that layout is refused.

MaxText 0.2.5 builds each slice's device mesh with JAX's ``mesh_utils.create_device_mesh``
(``create_hybrid_device_mesh`` across slices calls it once per slice with the same ICI shape),
passing the ``ici_*_parallelism`` degrees in the order of its ``mesh_axes``
(``maxtext_axes``). Unless the run sets ``allow_split_physical_axes=true``, JAX (0.12, the
MaxText venv's) gives every logical axis a set of *whole* physical axes of the slice's torus —
x, y, z, and on tpu7x the two TensorCores of a chip — whose sizes multiply to the axis's
degree, greedily, from the most network-intensive axis (the last in ``mesh_axes``) to the
least, trying the most physical axes first, the first fitting set in index order (tpu7x: sets
holding the core axis first, its fastest links). An axis no free set fits raises
``NotImplementedError`` when MaxText starts, after the slices are held: tensor 8 on a v5e 4x4
slice (physical axes 4 and 4) is such a mesh.

Some device kinds lay small slices out themselves before that assignment and never refuse
(``_handler``): v5e and v6e with 4 devices in a 2x2, with 8 devices, or 16 devices in a 4x4
when one axis takes them all; v5p 2x2x2; tpu7x up to 32 devices with x and y at most 2;
v4i (TPU v4 lite) with 4 devices.

``lay_out`` reproduces that verdict (the physical axes each logical axis gets, or the axis
that fits nowhere); ``maxtext_axes`` gives the logical mesh in MaxText's order. Both are pure;
``mesh.check_device_mesh`` turns a refusal into the planner's one-line error.
tests/maxtext/test_device_mesh.py holds the verdicts to JAX's own function, on fake devices
and on libtpu's topology devices, and MaxText's mesh creation on the run's arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from infra.catalog import SliceShape
from toolkit.yamlfile import YamlFileError, load_yaml

# The device_kind JAX's devices report for each catalog generation (what libtpu's topology
# devices report too: tests/maxtext/test_device_mesh.py compares them).
DEVICE_KINDS: dict[str, str] = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite", "tpu7x": "TPU7x"}

_TPU_V2_V3 = ("TPU v2", "TPU v3")
_CORE_AXIS_KINDS = ("TPU7x", "TPU7", "TPU8i")  # a physical mesh of (x, y, z, core)
_CORE_FIRST_KINDS = ("TPU7x", "TPU7")  # the core axis is assigned first: it has the most bandwidth
_V5P_KINDS = ("TPU v5p", "TPU v5")
_V5E_KINDS = ("TPU v5 lite", "TPU v5e", "TPU v6 lite")
_V4I_KINDS = ("TPU v4 lite", "TPU8i")

# MaxText 0.2.5's base.yml mesh_axes, least network-intensive first: the logical mesh it asks
# JAX for. Its parallelism keys map onto it (``pipeline`` is the ``stage`` axis, ``model`` a
# second name for tensor); ``sequence`` has keys but no axis, so its degree is not in the mesh.
MAXTEXT_MESH_AXES: tuple[str, ...] = (
    "diloco",
    "data",
    "stage",
    "fsdp",
    "fsdp_transpose",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "expert",
    "autoregressive",
)
_KEY_AXIS = {"stage": "pipeline", "model": "tensor"}  # MaxText mesh axis -> the axis of its *_parallelism keys
# custom_mesh_and_rule=<name> replaces mesh_axes with its file's (maxtext/configs/custom_mesh_and_rule/<name>.yml).
CUSTOM_RULE_AXES: dict[str, tuple[str, ...]] = {
    "cp-as-ep": ("data", "stage", "fsdp", "context", "expert"),
    "ep-as-cp": ("data", "stage", "fsdp", "expert"),
    "ep-as-dp": ("data", "fsdp", "fsdp_transpose", "expert"),
    "fsdp-as-dp-for-attn": ("data", "fsdp", "fsdp_transpose", "expert"),
    "pipeline-large-moe": ("data", "stage", "fsdp", "context", "tensor", "expert"),
    "pure-fsdp": ("fsdp",),
    "shard-exp-on-fsdp": ("data", "stage", "fsdp", "fsdp_transpose", "context", "expert"),
}


@dataclass(frozen=True)
class PhysicalMesh:
    """A slice's devices as JAX sees them: their device_kind, the chips' x, y, z extent and devices per chip."""

    device_kind: str
    chips: tuple[int, int, int]
    cores_per_chip: int = 1

    @property
    def devices(self) -> int:
        return math.prod(self.chips) * self.cores_per_chip

    @property
    def axes(self) -> tuple[tuple[str, int], ...]:
        """The physical mesh JAX assigns to: (name, size) per axis (JAX's ``_get_physical_tpu_mesh``)."""
        x, y, z = self.chips
        if self.device_kind in _TPU_V2_V3:
            return (("x", x), ("y", y), ("core", self.cores_per_chip))
        if self.device_kind in _CORE_AXIS_KINDS or (self.device_kind in _V5P_KINDS and self.cores_per_chip == 2):
            return (("x", x), ("y", y), ("z", z), ("core", self.cores_per_chip))
        return (("x", x), ("y", y), ("z", z))


def physical_mesh(shape: SliceShape) -> PhysicalMesh:
    """The physical mesh of one catalog slice: topology AxB is chips (A, B, 1), AxBxC is (A, B, C)."""
    dims = (*shape.dims, 1, 1)[:3]
    return PhysicalMesh(DEVICE_KINDS[shape.generation.name], (dims[0], dims[1], dims[2]), shape.generation.devices_per_chip)


@dataclass(frozen=True)
class Placed:
    """A logical axis and the physical axes it was given (none for a degree of 1)."""

    axis: str
    size: int
    physical: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """JAX accepts the mesh: each logical axis's physical axes, or the device-kind handler that laid it out itself."""

    placed: tuple[Placed, ...]
    handler: str | None = None


@dataclass(frozen=True)
class Unplaceable:
    """JAX refuses the mesh: ``axis`` of ``size`` fits no set of the ``free`` physical axes the ``taken`` ones left."""

    axis: str
    size: int
    free: tuple[tuple[str, int], ...]
    taken: tuple[Placed, ...]

    @property
    def sizes(self) -> list[int]:
        """The degrees the axis could take instead: products of the free physical axes."""
        free = [s for _, s in self.free if s > 1]
        return sorted({math.prod(c) for k in range(1, len(free) + 1) for c in combinations(free, k)})


def _handler(p: PhysicalMesh, sizes: Sequence[int]) -> str | None:
    """The device-kind handler that returns a mesh before the torus assignment (JAX's device_kind_handler_dict), if any."""
    kind, n = p.device_kind, p.devices
    x, y, z = p.chips
    if kind in _TPU_V2_V3:
        return f"{kind}'s tray ring layout"
    if kind in _V4I_KINDS and n == 4:
        return f"{kind}'s 4-device ring"
    if kind in _V5E_KINDS:
        if (x, y, z) == (2, 2, 1) and n == 4:
            return f"{kind}'s 2x2 ring"
        if n == 8:
            return f"{kind}'s 8-device tray order"
        if (x, y, z) == (4, 4, 1) and n == 16 and max(sizes) == 16:
            return f"{kind}'s 4x4 ring (one axis takes every device)"
    if kind in _V5P_KINDS and (x, y, z) == (2, 2, 2) and n == 8:
        return f"{kind}'s 2x2x2 order"
    if kind in _CORE_FIRST_KINDS and n % 8 == 0 and n <= 32 and x <= 2 and y <= 2:
        return f"{kind}'s ring of 2x2x2 trays"
    return None


def lay_out(p: PhysicalMesh, logical: Sequence[tuple[str, int]]) -> Layout | Unplaceable:
    """JAX's ``create_device_mesh`` verdict (without ``allow_split_physical_axes``) for ``logical``, least network-intensive axis first."""
    sizes = [s for _, s in logical]
    if math.prod(sizes) != p.devices:
        raise ValueError(f"the logical mesh {sizes} does not hold the {p.devices} devices")
    if (by := _handler(p, sizes)) is not None:
        return Layout(tuple(Placed(a, s, ()) for a, s in logical), handler=by)
    names = [n for n, _ in p.axes]
    free = [s for _, s in p.axes]
    # tpu7x's (x, y, z, core): sets holding the core axis first, then by their other axes' rank (JAX's priority_map).
    rank = {0: 1, 1: 2, 2: 3, 3: 0} if len(free) == 4 and p.device_kind in _CORE_FIRST_KINDS else None
    placed: list[Placed] = []
    for axis, size in reversed(logical):
        fit: tuple[int, ...] | None = None
        for count in range(len(free), 0, -1):
            candidates = list(combinations(range(len(free)), count))
            if rank is not None:
                candidates.sort(key=lambda c: (min(rank[i] for i in c), sum(rank[i] for i in c)))  # stable, as JAX's
            fit = next((c for c in candidates if math.prod(free[i] for i in c) == size), None)
            if fit is not None:
                break
        if fit is None:
            if size > 1:
                left = tuple((names[i], s) for i, s in enumerate(free) if s)
                return Unplaceable(axis, size, left, tuple(reversed(placed)))
            placed.append(Placed(axis, size, ()))
            continue
        placed.append(Placed(axis, size, tuple(names[i] for i in fit)))
        for i in fit:
            free[i] = 0  # taken: no later axis may share it
    return Layout(tuple(reversed(placed)))


# ------------------------------------------------------------------ MaxText's logical mesh


@dataclass(frozen=True)
class MaxTextMesh:
    """The logical mesh MaxText asks for: (MaxText axis, degree) in its order, and degrees it leaves out."""

    axes: tuple[str, ...]
    ici: tuple[tuple[str, int], ...]
    dropped: tuple[tuple[str, str, int], ...]  # (level, key axis, degree) of an axis > 1 that is not in mesh_axes


def maxtext_axes(run_args: Mapping[str, str]) -> tuple[str, ...] | None:
    """MaxText's mesh_axes for the run (custom_mesh_and_rule's, then mesh_axes, then base.yml's); None when unreadable here."""
    rule = run_args.get("custom_mesh_and_rule", "").strip()
    if rule:
        return CUSTOM_RULE_AXES.get(rule)
    given = run_args.get("mesh_axes", "").strip()
    if given:
        try:
            axes = load_yaml(given)
        except YamlFileError:  # a mesh_axes written some other way is MaxText's to read, not judged here
            return None
        return tuple(str(a) for a in axes) if isinstance(axes, list) else None
    return MAXTEXT_MESH_AXES


def maxtext_mesh(axes: Sequence[str], ici: Mapping[str, int], dcn: Mapping[str, int]) -> MaxTextMesh:
    """The degrees in MaxText's order: with pipelining, ``stage`` moves ahead of ``data`` (MaxText's config does so)."""
    order = list(axes)
    if (ici.get("pipeline", 1) > 1 or dcn.get("pipeline", 1) > 1) and "stage" in order and "data" in order:
        s, d = order.index("stage"), order.index("data")
        if s > d:
            order[s], order[d] = order[d], order[s]
    covered = {_KEY_AXIS.get(a, a) for a in order}
    dropped = tuple((level, a, degree) for level, degrees in (("ici", ici), ("dcn", dcn)) for a, degree in degrees.items() if degree > 1 and a not in covered)
    return MaxTextMesh(tuple(order), tuple((a, ici.get(_KEY_AXIS.get(a, a), 1)) for a in order), dropped)


def key_axis(axis: str) -> str:
    """The axis of the *_parallelism keys behind a MaxText mesh axis (stage -> pipeline)."""
    return _KEY_AXIS.get(axis, axis)
