"""Cluster Toolkit's ``gcluster job submit --compute-type X [--topology T]`` -> the TPU slice it asks for. Pure.

The published ``cluster_toolkit/`` scripts name their TPUs every way ``gcluster`` accepts
(the rules live in Cluster Toolkit's ``pkg/config/hardware.go`` and
``pkg/orchestrator/gke/resource_resolver.go``):

| ``--compute-type`` | read as |
|---|---|
| a generation: ``tpu7x``, ``v6e``, ``v5p`` (also ``tpu-v5p``) | that generation, ``--topology`` required |
| a TPU machine type: ``ct6e-standard-4t``, ``ct5p-hightpu-4t``, ``tpu7x-standard-4t`` | its generation and chips per VM, ``--topology`` required |
| a shorthand ``<generation>-<N>``: ``v6e-256``, ``v6e-4``, ``tpu7x-64`` | with ``--topology``: the generation and that topology (gcluster resolves the machine from the prefix; ``v6e-4`` / ``v6e-8`` / ``v5p-4`` name VMs of 4 or 8 chips). Without: N is the slice's chip count, gcluster's default topology for it (``v6e-256`` -> 16x16); never for tpu7x, which gcluster refuses without ``--topology`` |

gcluster's shorthand counts chips for v5e, v5p and v6e (``v6e-256`` is 256 chips), unlike
Cloud TPU accelerator-type names, which count TensorCores for v4, v5p and tpu7x; the
topology, when given, always wins.
"""

from __future__ import annotations

import re

from infra import catalog
from toolkit.errors import CatalogError, FieldError

# gcluster's shorthand keys that name a VM of N chips rather than a slice (its AcceleratorShorthandMap).
_VM_SHORTHANDS = {"v6e-1": 1, "v6e-4": 4, "v6e-8": 8, "v5p-1": 1, "v5p-2": 2, "v5p-4": 4, "v5litepod-1": 1, "v5litepod-4": 4, "v5litepod-8": 8, "v4-8": 4}
_MACHINE = re.compile(r"^(?P<family>[a-z0-9]+)-(?:standard|hightpu)-(?P<chips>\d+)t$", re.ASCII)


def _machine_types() -> dict[str, tuple[str, int]]:
    """Every TPU machine type the catalog knows -> (generation, chips per VM)."""
    out: dict[str, tuple[str, int]] = {}
    for gen in catalog.GENERATIONS.values():
        for machine in (gen.multi_host_machine, *(m for _, m in gen.single_host_machines)):
            m = _MACHINE.fullmatch(machine)
            if m:
                out[machine] = (gen.name, int(m.group("chips")))
    return out


def _generation(prefix: str) -> str | None:
    prefix = prefix.lower().removeprefix("tpu-")  # tpu-v5p: the GKE accelerator label's spelling
    for gen in catalog.GENERATIONS.values():
        if prefix in gen.name_prefixes or prefix == gen.name:
            return gen.name
    return None


def _bad(problem: str, fix: str) -> FieldError:
    return FieldError("--compute-type", problem, fix)


def slice_shape(compute_type: str, topology: str | None) -> tuple[catalog.SliceShape, list[str]]:
    """The slice ``--compute-type`` (and ``--topology``) ask for, and notes on how it was read; FieldError if none."""
    ct = compute_type.strip().lower()
    topo = (topology or "").strip().lower() or None
    notes: list[str] = []
    machines = _machine_types()
    gen: str | None
    chips_per_vm: int | None = None
    count: int | None = None
    if ct in machines:
        gen, chips_per_vm = machines[ct]
    elif (g := _generation(ct)) is not None:
        gen = g
    else:
        prefix, _, suffix = ct.partition("-")
        if ct.startswith("tpu-"):  # tpu-v5p-128
            prefix, _, suffix = ct[4:].partition("-")
        gen = _generation(prefix)
        if gen is None or not suffix.isdigit():
            known = ", ".join(["tpu7x", "v6e", "v5p", "ct6e-standard-4t", "tpu7x-standard-4t", "v6e-256"])
            raise _bad(f"{compute_type[:60]!r} is not a TPU compute type gcluster resolves", f"use one like {known} (with --topology AxB[xC])")
        if ct in _VM_SHORTHANDS:
            chips_per_vm = _VM_SHORTHANDS[ct]
        else:
            count = int(suffix)
    if topo is None:
        if count is None:
            raise _bad(
                f"{compute_type[:60]!r} names no slice size and the script gives no --topology",
                f"add --topology AxB{'xC' if catalog.GENERATIONS[gen].dims == 3 else ''} to the script",
            )
        if gen == "tpu7x":
            raise _bad(f"{compute_type!r}: gcluster takes a tpu7x slice's size from --topology only", "add --topology AxBxC (e.g. 4x4x4) to the script")
        g = catalog.GENERATIONS[gen]
        try:  # the Cloud TPU name of that many chips (it counts TensorCores for v4, v5p)
            topo = catalog.accelerator_type(f"{g.canonical_prefix}-{count * (2 if g.name_counts_cores else 1)}").topology
        except CatalogError:
            raise _bad(
                f"{compute_type!r} asks for {count} {gen} chips, which no {gen} slice has", "add --topology with the slice's shape to the script"
            ) from None
        notes.append(f"--compute-type {compute_type}: {count} chips, read as gcluster does (topology {topo})")
    elif count is not None:
        notes.append(f"--compute-type {compute_type}: the generation is read from it; --topology {topo} gives the size (as gcluster does)")
    try:
        if chips_per_vm is not None:
            try:
                return catalog.shape(gen, topo, chips_per_vm), notes
            except CatalogError:
                pass  # a single-VM machine type with a multi-host topology: gcluster picks the pool's machine
        return catalog.shape(gen, topo), notes
    except CatalogError as e:
        raise FieldError("--topology", f"{topo!r} is not a {gen} slice ({e})", f"give a valid {gen} topology") from None
