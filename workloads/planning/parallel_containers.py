"""Parallel containers: GKE's multi-container setup on tpu7x VMs, and what it changes for a run.

A tpu7x VM has four chips, two NICs and two NUMA nodes, its CPUs, memory and NICs split evenly
between them (GKE docs "About Ironwood (TPU7x) in GKE", NUMA binding); GKE lets a pod run one
container per NUMA node, each bound to that node's CPUs, memory and TPU chips. xpk
(``--use-parallel-containers``, on by default; ``SystemCharacteristics.parallel_containers=2`` for
tpu7x) and Cluster Toolkit (``gcluster job submit``, on for tpu7x unless
``--gke-disable-parallel-containers``) both render it the same way: the pod's one training
container twice, the same image, command and environment, each asking for half the VM's
``google.com/tpu`` (2 of 4), never for Pathways workers. Here it is ``--parallel-containers``.

What it changes (``layout``), from GKE's TPU device plugin (each container's TPU environment:
``TPU_CHIPS_PER_HOST_BOUNDS`` 1,2,1 for two chips instead of 2,2,1 for four, so
``TPU_HOST_BOUNDS`` doubles along the second axis): every VM runs two JAX processes instead of
one, each with 2 chips = 4 TensorCores = 4 JAX devices; ``jax.process_count()`` doubles, the
devices (and so MaxText's mesh, batch and step) do not. The processes of one VM are told apart
by GKE's TPU webhook, which alone knows the pod's containers (the device plugin leaves
``TPU_WORKER_ID`` to it on tpu7x); the MegaScale variables of a multislice run are left to it too,
as xpk's and Cluster Toolkit's pods leave them (the toolkit writes them itself for one container:
``workloads.render.jobset``), since two processes of a pod cannot share one MegaScale port.

Offered only where a VM has two NUMA nodes to bind to (``GENERATIONS``), for the JobSet and Job
runtimes; a Ray worker group is KubeRay's to lay out, and Pathways workers run one container.
"""

from __future__ import annotations

from typing import Any

# A run's target (workloads.planning.model.Target) comes in as Any: the model imports this module.
Target = Any

# Containers per VM by generation: where the VM has two NUMA nodes (xpk's parallel_containers).
GENERATIONS = {"tpu7x": 2}
RUNTIMES = ("jobset", "job")


def containers_for(generation: str) -> int | None:
    """How many containers a VM of ``generation`` runs in parallel, or None where it cannot."""
    return GENERATIONS.get(generation)


def chips_per_host_bounds(chips: int) -> str:
    """GKE's TPU device plugin's TPU_CHIPS_PER_HOST_BOUNDS for a container holding ``chips`` chips (its getChipsPerDim)."""
    return {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}[chips]


def host_bounds(topology: str, chips: int) -> str:
    """TPU_HOST_BOUNDS: the slice's topology over the chips each container holds, axis by axis (3D; a 2D topology gets 1)."""
    dims = [int(d) for d in topology.split("x")] + ([1] if topology.count("x") == 1 else [])
    per = [int(x) for x in chips_per_host_bounds(chips).split(",")]
    return ",".join(str(d // p) for d, p in zip(dims, per, strict=True))


def layout(t: Target) -> dict[str, Any]:
    """What the run's pods and processes look like (``plan`` and ``submit --dry-run`` print it)."""
    chips = t.chips_per_container
    return {
        "containers_per_pod": t.containers_per_vm,
        "chips_per_container": chips,
        "jax_processes": t.processes,
        "devices_per_process": chips * t.shape.generation.devices_per_chip,
        "tpu_chips_per_host_bounds": chips_per_host_bounds(chips),
        "tpu_host_bounds": host_bounds(t.shape.topology, chips),
    }
