"""What Ironwood (tpu7x) pools may ask of GKE beyond a shape: another VM type, gVNIC, the slice controller, dynamic slicing.

- ``machine_type``: tpu7x multi-host pools run on ``tpu7x-standard-4t`` or ``tpu7x-ultranet-4t``
  (the same VM with an iRDMA NIC, ``infra.catalog.ULTRANET_MACHINE``). Whether the pool's zone
  offers it is a fact of the project's zone, read by ``infra check`` (``infra.cloud_checks``).
- ``gvnic``: Google Virtual NIC on the pool's VMs; on by default for tpu7x: Ironwood training node
  pools are created with ``gcloud beta container node-pools create ... --enable-gvnic``.
- ``cluster.slice_controller``: GKE's slice controller add-on. On by default where a tpu7x pool has
  several slices (Ironwood multislice training lists it among its prerequisites) or uses dynamic slicing (GKE's
  dynamic slicing pages: the controller forms the slices).
- ``dynamic_slicing``: GKE dynamic slicing (GA): the pool's node pools are 4x4x4 sub-blocks of an All
  Capacity mode reservation (the workload policy's ``accelerator_topology_mode: PROVISION_ONLY``,
  which GKE accepts only with SPECIFIC_RESERVATION affinity, as Cluster Toolkit's node-pool module
  checks); runs then ask for a sub-slice of one sub-block (2x2x1, 2x2x2, 2x2x4, 2x4x4) or a
  super-slice of several (multiples of 4, ``workloads.planning.dynamic_slices``), and Kueue's
  topology-aware scheduling with the slice controller's admission check places them. Spot,
  flex-start and on-demand capacity cannot be consumed that way, so they are refused.

Each feature's GKE floor is in ``infra.gke_features`` and joins ``EnvFields.gke_floors`` through
``floors``; the cross-field refusals are ``check`` (the spec rule ``check_ironwood``).
"""

from __future__ import annotations

from typing import Any

from infra import catalog, naming
from infra.gke_features import DYNAMIC_SLICING_GENERATIONS, DYNAMIC_SLICING_MIN_GKE_VERSION, SLICE_CONTROLLER_MIN_GKE_VERSION
from infra.spec.capacity import Reservation
from infra.spec.messages import split_problem
from infra.spec.section import FieldValueError
from toolkit.errors import CatalogError, SpecError

# The spec's fields (infra.spec.env.EnvFields) and a pool (infra.spec.tpu_pools.TpuPoolSpec) come in as
# Any: both import this module, and a type-only import back would be a cycle (tests/test_layers.py).
EnvFields = Any
TpuPoolSpec = Any

GVNIC_DEFAULT_GENERATIONS = ("tpu7x",)
SUB_BLOCK_TOPOLOGY = "4x4x4"  # a tpu7x sub-block: 16 hosts, 64 chips; one node pool each under dynamic slicing


def provision_only_policy(cluster: str) -> str:
    """The name of the PROVISION_ONLY workload policy a cluster's dynamically sliced pools are placed by.

    The pinned Google provider (hashicorp/google 7.43.0, and the GA provider up to 8.7.0) has no
    ``workload_policy.accelerator_topology_mode`` (only google-beta has it), so Terraform cannot make
    this policy: the stack references it by name, ``infra check`` refuses when it does not exist, and
    ``provision_only_command`` is the one command that makes it.
    """
    return naming.workload_policy_name(cluster, "tpu7x", SUB_BLOCK_TOPOLOGY)[: naming.GCE_NAME_MAX - 3].rstrip("-") + "-po"


def provision_only_command(project: str, region: str, cluster: str) -> str:
    """The gcloud command that creates ``provision_only_policy`` (GKE docs "Use dynamic slicing in GKE with Kueue")."""
    return (
        f"gcloud beta compute resource-policies create workload-policy {provision_only_policy(cluster)} --project={project} --region={region} "
        f"--type=HIGH_THROUGHPUT --accelerator-topology={SUB_BLOCK_TOPOLOGY} --accelerator-topology-mode=PROVISION_ONLY"
    )


def machine_shape(shape: catalog.SliceShape, machine_type: str) -> catalog.SliceShape:
    """``shape`` on ``machine_type``; a FieldValueError naming ``machine_type`` for one its generation does not offer."""
    try:
        return catalog.with_machine(shape, machine_type)
    except CatalogError as e:
        choices = catalog.machine_choices(shape.generation.name)
        raise FieldValueError("machine_type", *split_problem(str(e), f"use one of {', '.join(choices)} or leave machine_type out")) from None


def slice_controller_on(spec: EnvFields) -> bool:
    """GKE's slice controller add-on: as ``cluster.slice_controller`` says, else on for multislice or dynamically sliced tpu7x pools."""
    if spec.cluster.slice_controller is not None:
        return spec.cluster.slice_controller
    return any(_needs_slice_controller(p) for p in spec.tpu_pools)


def _needs_slice_controller(pool: TpuPoolSpec) -> bool:
    return pool.shape.generation.name == "tpu7x" and (pool.slices > 1 or pool.dynamic_slicing)


def floors(spec: EnvFields) -> list[tuple[str, str]]:
    """The GKE floors of the Ironwood features the spec turns on, worded as ``EnvFields.gke_floors`` words them."""
    out = []
    sliced = next((i for i, p in enumerate(spec.tpu_pools) if p.dynamic_slicing), None)
    if sliced is not None:
        out.append((DYNAMIC_SLICING_MIN_GKE_VERSION, f"the first GKE version with dynamic slicing (tpu_pools[{sliced}].dynamic_slicing)"))
    if slice_controller_on(spec):
        out.append((SLICE_CONTROLLER_MIN_GKE_VERSION, "the first GKE version whose slice controller add-on is documented (cluster.slice_controller)"))
    return out


def check(spec: EnvFields) -> None:
    """Dynamic slicing's requirements, and a slice controller turned off where a pool needs it."""
    for i, pool in enumerate(spec.tpu_pools):
        if pool.dynamic_slicing:
            _dynamic_slicing(spec, i, pool)
        if spec.cluster.slice_controller is False and pool.dynamic_slicing:
            raise SpecError(
                "cluster.slice_controller",
                f"is off, and tpu_pools[{i}] ({pool.name}) uses dynamic slicing, whose slices GKE's slice controller forms",
                "remove cluster.slice_controller (on by default) or set it to true",
            )


def _dynamic_slicing(spec: EnvFields, i: int, pool: TpuPoolSpec) -> None:
    where = f"tpu_pools[{i}]"
    gen = pool.shape.generation.name
    if gen not in DYNAMIC_SLICING_GENERATIONS:
        raise SpecError(
            f"{where}.dynamic_slicing", f"GKE offers dynamic slicing on {', '.join(DYNAMIC_SLICING_GENERATIONS)} only, and {pool.name} is {gen}", "remove it"
        )
    if pool.shape.topology != SUB_BLOCK_TOPOLOGY:
        raise SpecError(
            f"{where}.topology",
            f"{pool.shape.topology}: under dynamic slicing each node pool is one {SUB_BLOCK_TOPOLOGY} sub-block (16 hosts), and runs ask for their slice shape",
            f"set topology: {SUB_BLOCK_TOPOLOGY} and slices: the number of sub-blocks (runs ask for 2x2x2 ... 4x4x8 with submit --topology)",
        )
    for k, cap in enumerate(pool.capacities):
        if not isinstance(cap, Reservation):
            field = f"{where}.capacity" + (f"[{k}]" if pool.has_fallback else "")
            raise SpecError(
                f"{field}.mode",
                f"{cap.mode} capacity cannot be sliced dynamically: GKE's PROVISION_ONLY accelerator topology mode takes an All Capacity "
                "reservation consumed as SPECIFIC_RESERVATION",
                "use capacity: {mode: reservation, name: <All Capacity reservation>, zone: ...}, or remove dynamic_slicing",
            )
    if pool.compute_class is not None:
        raise SpecError(
            f"{where}.compute_class",
            "GKE creates a compute class's node pools itself; dynamic slicing needs one node pool per reserved sub-block",
            "remove compute_class",
        )
    if pool.autoscaling:
        raise SpecError(f"{where}.autoscaling", "a sub-block's node pool holds its 16 VMs whole under dynamic slicing", "remove autoscaling")
    if spec.cluster.release_channel.value != "RAPID":
        raise SpecError(
            "cluster.release_channel", f"is {spec.cluster.release_channel.value}, and GKE offers dynamic slicing on the Rapid channel only", "set it to RAPID"
        )
