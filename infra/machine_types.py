"""The Compute Engine machine types a GKE CPU node pool may use: a table, and the check against it. Pure.

GKE takes a node pool's machine type as given and Compute Engine refuses one that does
not exist only when the first VM is created, after the cluster and every TPU pool
(``n2-standrad-8``, ``n2-standard-6``: apply fails half-way). The spec is checked here
first, before any cloud call.

Source: Compute Engine's machine-series pages (general-purpose, compute-optimized and
memory-optimized machine families: predefined types, shared-core types, custom machine
types), compiled 2026-11 for this table. A series or size GCP adds later is refused
until it is added below; TPU and GPU (accelerator-optimized) types are not CPU-pool
types and are left out on purpose.
"""

from __future__ import annotations

import difflib
import re

SOURCE = "Compute Engine machine families (general-purpose, compute-optimized, memory-optimized), compiled 2026-11"

_C4 = (2, 4, 8, 16, 24, 32, 48, 96, 144, 192, 288)
_C4A = (1, 2, 4, 8, 16, 32, 48, 64, 72)
_C4D = (2, 4, 8, 16, 32, 48, 64, 96, 192, 384)
_C3 = (4, 8, 22, 44, 88, 176)
_C3D = (4, 8, 16, 30, 60, 90, 180, 360)
_C2D = (2, 4, 8, 16, 32, 56, 112)
_N4 = (2, 4, 8, 16, 32, 48, 64, 80)

# series -> variant -> the vCPU counts of its predefined types (<series>-<variant>-<vCPUs>).
PREDEFINED: dict[str, dict[str, tuple[int, ...]]] = {
    "e2": {"standard": (2, 4, 8, 16, 32), "highmem": (2, 4, 8, 16), "highcpu": (2, 4, 8, 16, 32)},
    "n1": {"standard": (1, 2, 4, 8, 16, 32, 64, 96), "highmem": (2, 4, 8, 16, 32, 64, 96), "highcpu": (2, 4, 8, 16, 32, 64, 96)},
    "n2": {
        "standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
        "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
        "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96),
    },
    "n2d": {
        "standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
        "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96),
        "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    },
    "n4": {"standard": _N4, "highmem": _N4, "highcpu": _N4},
    "t2d": {"standard": (1, 2, 4, 8, 16, 32, 48, 60)},
    "t2a": {"standard": (1, 2, 4, 8, 16, 32, 48)},
    "c2": {"standard": (4, 8, 16, 30, 60)},
    "c2d": {"standard": _C2D, "highmem": _C2D, "highcpu": _C2D},
    "c3": {"standard": _C3, "highmem": _C3, "highcpu": _C3},
    "c3d": {"standard": _C3D, "highmem": _C3D, "highcpu": _C3D},
    "c4": {"standard": _C4, "highmem": _C4, "highcpu": _C4},
    "c4a": {"standard": _C4A, "highmem": _C4A, "highcpu": _C4A},
    "c4d": {"standard": _C4D, "highmem": _C4D, "highcpu": _C4D},
}
# Types with Local SSD attached (<series>-<variant>-<vCPUs>-lssd).
LOCAL_SSD: dict[str, dict[str, tuple[int, ...]]] = {
    "c3": {"standard": _C3},
    "c3d": {"standard": (8, 16, 30, 60, 90, 180, 360), "highmem": (8, 16, 30, 60, 90, 180, 360)},
    "c4": {"standard": (4, 8, 16, 24, 32, 48, 96, 144, 192, 288), "highmem": (4, 8, 16, 24, 32, 48, 96, 144, 192, 288)},
    "c4a": {"standard": (4, 8, 16, 32, 48, 64, 72), "highmem": (4, 8, 16, 32, 48, 64, 72)},
}
NAMED: frozenset[str] = frozenset(
    {
        # shared-core
        "e2-micro",
        "e2-small",
        "e2-medium",
        "f1-micro",
        "g1-small",
        # bare metal
        "c3-standard-192-metal",
        "c3-highmem-192-metal",
        "c3-highcpu-192-metal",
        # memory-optimized
        "m1-megamem-96",
        "m1-ultramem-40",
        "m1-ultramem-80",
        "m1-ultramem-160",
        "m2-megamem-416",
        "m2-ultramem-208",
        "m2-ultramem-416",
        "m2-hypermem-416",
        "m3-megamem-64",
        "m3-megamem-128",
        "m3-ultramem-32",
        "m3-ultramem-64",
        "m3-ultramem-128",
        # HPC
        "h3-standard-88",
    }
)
# Custom machine types: <series>-custom-<vCPUs>-<MiB>[-ext] (N1's are plain custom-<vCPUs>-<MiB>).
CUSTOM_SERIES = ("e2", "n2", "n2d", "n4")
_CUSTOM = re.compile(r"^(?:(?P<series>[a-z0-9]+)-)?custom-(?P<vcpu>[0-9]+)-(?P<mib>[0-9]+)(?P<ext>-ext)?$")
_PREDEFINED = re.compile(r"^(?P<series>[a-z0-9]+)-(?P<variant>[a-z]+)-(?P<vcpu>[0-9]+)(?P<lssd>-lssd)?$")


def known() -> list[str]:
    """Every predefined and named type of the table (not the custom ones), sorted."""
    out = set(NAMED)
    for table, tail in ((PREDEFINED, ""), (LOCAL_SSD, "-lssd")):
        for series, variants in table.items():
            out |= {f"{series}-{v}-{n}{tail}" for v, sizes in variants.items() for n in sizes}
    return sorted(out)


def _custom_problem(m: re.Match[str]) -> str | None:
    series = m["series"] or "n1"
    if series not in (*CUSTOM_SERIES, "n1"):
        return f"{series} has no custom machine types (custom types are {', '.join(f'{s}-custom-V-MiB' for s in CUSTOM_SERIES)} and custom-V-MiB for N1)"
    vcpu, mib = int(m["vcpu"]), int(m["mib"])
    if vcpu < 1 or mib % 256:
        return f"a custom type has at least 1 vCPU and memory in multiples of 256 MiB, not {vcpu} vCPU and {mib} MiB"
    return None


def problem(machine_type: str) -> tuple[str, str] | None:
    """(problem, fix) when ``machine_type`` is not a CPU-pool machine type the table knows, else None."""
    if machine_type in NAMED:
        return None
    custom = _CUSTOM.fullmatch(machine_type)
    if custom:
        p = _custom_problem(custom)
        return (p, "use a valid custom type such as n2-custom-8-32768, or a predefined type such as n2-standard-8") if p else None
    m = _PREDEFINED.fullmatch(machine_type)
    if m:
        table = LOCAL_SSD if m["lssd"] else PREDEFINED
        sizes = table.get(m["series"], {}).get(m["variant"])
        if sizes and int(m["vcpu"]) in sizes:
            return None
        if sizes:
            tail = m["lssd"] or ""
            near = sorted(sizes, key=lambda n: (abs(n - int(m["vcpu"])), n))[:3]
            stem = f"{m['series']}-{m['variant']}"
            return (
                f"{machine_type!r} is not a Compute Engine machine type: {stem}{tail and ' (Local SSD)'} comes in {', '.join(map(str, sizes))} vCPUs",
                f"use {' or '.join(f'{stem}-{n}{tail}' for n in sorted(near))}",
            )
    close = difflib.get_close_matches(machine_type, known(), n=3, cutoff=0.6) or ["n2-standard-8", "e2-standard-8", "c3-standard-8"]
    return (
        f"{machine_type!r} is not a Compute Engine machine type for a CPU node pool (infra/machine_types.py: {SOURCE})",
        f"use {' or '.join(close)}",
    )
