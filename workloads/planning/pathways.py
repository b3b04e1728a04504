"""MaxText on Pathways (``--runtime pathways``): what the plan carries, and what Pathways cannot honour.

Pathways runs one JAX program for the whole run in a **head** pod on the CPU pool: the IFRT proxy
(``pathways-proxy``, port 29000) the program talks to (``JAX_PLATFORMS=proxy``,
``JAX_BACKEND_TARGET=grpc://<head>:29000``), the resource manager (``pathways-rm``, 29001) and the
program itself; the TPU VMs run **workers** (``pathways-worker``, 29005) per slice, as xpk's
``workload create-pathways`` and Cluster Toolkit's ``gcluster job submit --pathways*`` render it
(``workloads.render.pathways``). MaxText runs single-controller there
(``enable_single_controller=true``).

**Elastic slices** (``--elastic-slices N``, ``--max-slice-restarts M``): the proxy tolerates N
slices going away (``--num_elastic_slices``), each slice's workers may be replaced
``M`` times (their Job's ``backoffLimit`` is M x the slice's hosts, as xpk computes it), and
MaxText recovers in its process, on the same mesh, from its last checkpoint
(``elastic_enabled=true``, ``elastic_max_retries`` = M, ``elastic_timeout_seconds``), as MaxText's
elastic training guide documents (degrading to fewer slices is not covered there, nor here).

Refused, one line each: a plain command (Pathways runs a JAX program through the proxy), elastic
flags without ``--runtime pathways``, more elastic slices than the run has, restarts without
elasticity, and the options Pathways' layout cannot carry: parallel containers (xpk and Cluster
Toolkit turn them off for Pathways), a dynamic ``--topology``, GKE's multi-tier checkpointing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workloads.planning.defaults import INT32_MAX
from workloads.planning.errors import PlanError

# The published images (GKE docs "Pathways on GKE": proxy_server and server, tagged jax-<version>),
# pinned to the JAX of the pinned MaxText image (scripts/maxtext-tiny.constraints.txt: jax 0.12.0.1).
PATHWAYS_JAX = "0.12.0.1"
PROXY_IMAGE = f"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-{PATHWAYS_JAX}"
SERVER_IMAGE = f"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-{PATHWAYS_JAX}"
PROXY_PORT, RM_PORT, RM_PORT2, WORKER_PORT, WORKER_PORT2 = 29000, 29001, 29002, 29005, 29006
ELASTIC_TIMEOUT_S = 300  # MaxText's elastic guide's elastic_timeout_seconds
HEAD_JOB, WORKER_JOB = "pathways-head", "worker"


@dataclass(frozen=True)
class ElasticSlices:
    slices: int  # how many slices may be away at once (the proxy's --num_elastic_slices)
    max_slice_restarts: int  # replacements of each slice's workers (and MaxText's elastic_max_retries)
    timeout_s: int = ELASTIC_TIMEOUT_S

    def maxtext_args(self) -> dict[str, str]:
        return {"elastic_enabled": "true", "elastic_timeout_seconds": str(self.timeout_s), "elastic_max_retries": str(self.max_slice_restarts)}


def check(runtime: str, recipe_kind: str, slices: int, nodes_per_slice: int, o: Any) -> ElasticSlices | None:
    """The run's elastic slices (None without), or a PlanError for what Pathways (or its absence) cannot honour."""
    pathways = runtime == "pathways"
    if not pathways:
        for flag, value in (("--elastic-slices", o.elastic_slices), ("--max-slice-restarts", o.max_slice_restarts)):
            if value is not None:
                raise PlanError(
                    flag, f"elastic slices are Pathways' (the {runtime} runtime restarts every slice together)", "add --runtime pathways, or drop it"
                )
        return None
    if recipe_kind != "maxtext":
        raise PlanError("--runtime", "Pathways runs a JAX program through its proxy, and this recipe runs a plain command", "use --runtime jobset")
    for flag, on, why in (
        ("--parallel-containers", o.parallel_containers, "a Pathways worker runs one container per VM (xpk and Cluster Toolkit turn them off for Pathways)"),
        ("--topology", o.topology is not None, "Pathways runs here on the pool's own slices, not dynamic ones"),
        (
            "--multi-tier-checkpointing",
            o.multi_tier_checkpointing,
            "the program runs in the head, not on the TPU VMs whose RAM disks GKE's multi-tier checkpointing fills",
        ),
    ):
        if on:
            raise PlanError(flag, f"--runtime pathways cannot honour it: {why}", f"drop {flag}, or use --runtime jobset")
    if o.elastic_slices is None:
        if o.max_slice_restarts is not None:
            raise PlanError("--max-slice-restarts", "bounds elastic slice replacements, and the run has none", "add --elastic-slices N, or drop it")
        return None
    if o.elastic_slices > slices:
        raise PlanError("--elastic-slices", f"{o.elastic_slices} elastic slices of a run of {slices}", f"pass --elastic-slices {slices} or fewer")
    restarts = 10 if o.max_slice_restarts is None else o.max_slice_restarts
    if restarts * nodes_per_slice > INT32_MAX:
        raise PlanError(
            "--max-slice-restarts",
            f"{restarts} x {nodes_per_slice} hosts is above a Job's backoffLimit (an int32)",
            f"pass at most {INT32_MAX // nodes_per_slice}",
        )
    return ElasticSlices(o.elastic_slices, restarts)


# The head's sidecars' limits (xpk's and Cluster Toolkit's): the proxy 16 vCPU / 100 GiB, the resource manager 8 / 32.
HEAD_VCPU, HEAD_MEMORY_GIB = 16 + 8, 100 + 32


def check_head(cpu_machine: str, cpu_pool: str) -> None:
    """The head must fit one node of the CPU pool, or it would wait there forever."""
    from infra import catalog

    size = catalog.machine_size(cpu_machine, catalog.LOCAL_NODE_FALLBACK_SIZE)
    if size.vcpu < HEAD_VCPU or size.memory_gib < HEAD_MEMORY_GIB:
        raise PlanError(
            "--runtime",
            f"the Pathways head needs {HEAD_VCPU} vCPU and {HEAD_MEMORY_GIB} GiB on one CPU node (its proxy and resource manager), "
            f"and cpu_pool {cpu_pool} runs {cpu_machine} ({size.vcpu} vCPU, {size.memory_gib} GiB)",
            "set cpu_pool.machine_type to a larger type in the spec (e.g. n2-highmem-32), or use --runtime jobset",
        )


def maxtext_args(elastic: ElasticSlices | None) -> dict[str, str]:
    """What MaxText needs to run single-controller on Pathways (and elastic)."""
    return {"enable_single_controller": "true", **(elastic.maxtext_args() if elastic else {})}


def name_tail(slices: int, nodes_per_slice: int) -> str:
    """The longest pod name suffix of a Pathways run: its head's or its last worker's (before the Job controller's random part)."""
    return max(f"-{HEAD_JOB}-0-0", f"-{WORKER_JOB}-{slices - 1}-{nodes_per_slice - 1}", key=len)


def head_address(run: str) -> str:
    """The head pod's stable name through the JobSet's headless Service (``workloads.render.jobset.coordinator_address``'s rule)."""
    return f"{run}-{HEAD_JOB}-0-0.{run}"


def program_env(run: str) -> dict[str, str]:
    """The program's environment in the head: JAX through the proxy."""
    return {"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": f"grpc://{head_address(run)}:{PROXY_PORT}", "XCLOUD_ENVIRONMENT": "GCP"}
