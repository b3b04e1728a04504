"""The Pathways JobSet for a RunPlan (``--runtime pathways``), as plain data. Pure.

The layout is the published Pathways-on-GKE one (xpk's ``workload create-pathways`` template,
Cluster Toolkit's ``pathways_jobset.tmpl``, GKE's Pathways docs):

- ``spec.network``: DNS hostnames for every pod, published before they are ready (the workers
  reach the head while it starts); ``startupPolicy: InOrder``: the head before the workers;
  ``successPolicy``: the run is done when the head is (its program finished), whatever the
  workers do then.
- replicated job ``pathways-head``, one pod on the CPU pool (``target.cpu_pool``, one per node:
  exclusive by hostname): the IFRT proxy and the resource manager as native sidecars
  (``initContainers`` with ``restartPolicy: Always``), the program (MaxText, single-controller,
  ``workloads.planning.pathways``) as its container; the proxy gets ``--num_elastic_slices`` when
  the run has elastic slices.
- replicated job ``worker``, one replica per slice, one ``pathways-worker`` pod per TPU VM with
  the VM's chips, on the pool's node pools one slice each (exclusive by node pool), the MegaScale
  variables from the JobSet's labels and annotations; ``restartPolicy: OnFailure`` and a
  ``backoffLimit`` of ``max_slice_restarts`` x hosts with elastic slices (a lost slice's pods are
  recreated while the head and the other slices keep running, as xpk sets it), else 4 x hosts
  (xpk's) — a Pathways worker reconnects to its resource manager.

Differences from the published templates, each for a toolkit-wide reason: the head's address is
its stable DNS name (``PATHWAYS_HEAD``, ``workloads.planning.pathways.head_address``) instead of
JobSet's coordinator label, whose 63-character limit caps run names near 22 characters (Cluster
Toolkit caps Pathways names at 22 for that); pods use the team's identity on the pod network
unless the run asks for ``--host-network`` (``workloads.render.jobset`` says why); images are
pinned, not ``latest``; every container runs under the pod security context of the rest of the
toolkit; the head's containers ask for no resources, so Kueue admits it without a flavor and
the CPU pool's node is the head's whole (like a Ray head's, ``workloads.render.rayjob``): the
sizes xpk and Cluster Toolkit give its sidecars (16 vCPU / 100 GiB, 8 / 32) are checked against
the CPU pool's machine type at plan time instead (``workloads.planning.pathways.check_head``). ``failurePolicy``: the JobSet's ``maxRestarts`` is ``policy.max_restarts`` and restarts
recreate every job (``Recreate``).
"""

from __future__ import annotations

from typing import Any

from toolkit import names
from workloads.cluster import runkinds
from workloads.planning.model import RUNTIME_PATHWAYS, RunPlan
from workloads.planning.pathways import (
    HEAD_JOB,
    PROXY_IMAGE,
    PROXY_PORT,
    RM_PORT,
    RM_PORT2,
    SERVER_IMAGE,
    WORKER_JOB,
    WORKER_PORT,
    WORKER_PORT2,
    head_address,
)
from workloads.render import jobset, podsecurity, volumes
from workloads.render.kubelet_escape import k8s_literal, k8s_literals
from workloads.render.skeleton import BASE_NAME

RUNTIME = RUNTIME_PATHWAYS
PROXY_CONTAINER = "pathways-proxy"  # the IFRT proxy, a native sidecar of the head
XPK_WORKER_BACKOFF_PER_HOST = 4  # xpk: vms_per_slice x 4 without elastic slices


def _ref(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def _scratch(plan: RunPlan) -> str:
    """Where Pathways keeps its scratch files: the run's own output directory (never a shared staging bucket)."""
    return f"{plan.program.output_dir or 'gs://invalid/'}pathways/"


def _secure(c: dict[str, Any]) -> dict[str, Any]:
    c["securityContext"] = podsecurity.container_security_context()
    return c


def head_containers(plan: RunPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(init containers: the proxy and the resource manager as sidecars, containers: the program)."""
    e = plan.policy.elastic
    head = {"name": "PATHWAYS_HEAD", "value": head_address(plan.name)}
    proxy_args = [f"--server_port={PROXY_PORT}", f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}", f"--gcs_scratch_location={_scratch(plan)}"]
    if e is not None:
        proxy_args.append(f"--num_elastic_slices={e.slices}")
    proxy = _secure(
        {
            "name": PROXY_CONTAINER,
            "image": PROXY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "args": proxy_args,
            "env": podsecurity.home_env(plan.target.run_as_user, [head]),
            "ports": [{"containerPort": PROXY_PORT, "protocol": "TCP"}],
            "restartPolicy": "Always",
        }
    )
    rm = _secure(
        {
            "name": "pathways-rm",
            "image": SERVER_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "args": [
                f"--server_port={RM_PORT}",
                f"--gcs_scratch_location={_scratch(plan)}",
                "--node_type=resource_manager",
                f"--instance_count={plan.target.slices}",
                f"--instance_type={plan.target.shape.generation.name}:{plan.target.shape.topology}",
            ],
            "env": podsecurity.home_env(
                plan.target.run_as_user,
                [
                    {"name": "REPLICATED_JOB_NAME", "valueFrom": _ref("metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']")},
                    {"name": "JOBSET_NAME", "valueFrom": _ref(f"metadata.annotations['{names.JOBSET_NAME_LABEL}']")},
                    {"name": "HOST_ADDRESS", "value": head_address(plan.name)},
                    {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
                ],
            ),
            "ports": [{"containerPort": RM_PORT, "protocol": "TCP"}, {"containerPort": RM_PORT2, "protocol": "TCP"}],
            "restartPolicy": "Always",
        }
    )
    program = jobset.container(plan)
    program.pop("ports")
    program.pop("resources")  # on the CPU node: no TPU
    program["env"] = podsecurity.home_env(plan.target.run_as_user, [head, *[e for e in program["env"] if e["name"] != "LIBTPU_INIT_ARGS"]])
    return [proxy, rm], [program]


def _pod_common(plan: RunPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": plan.target.priority,
        "serviceAccountName": plan.target.service_account,
        "automountServiceAccountToken": False,
    }
    if plan.policy.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    spec["securityContext"] = podsecurity.pod_security_context(plan.target.run_as_user, None)
    return spec


def head_job(plan: RunPlan) -> dict[str, Any]:
    init, containers = head_containers(plan)
    pod = {
        **_pod_common(plan),
        "restartPolicy": "Never",
        "nodeSelector": {names.GKE_NODEPOOL_LABEL: plan.target.cpu_pool},
        "initContainers": init,
        "containers": containers,
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes.volumes(plan)],
    }
    return {
        "name": HEAD_JOB,
        "replicas": 1,
        "template": {
            "metadata": {"annotations": {names.JOBSET_EXCLUSIVE_TOPOLOGY_ANNOTATION: names.K8S_HOSTNAME_LABEL}},
            "spec": {
                "completionMode": "Indexed",
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"metadata": {"labels": jobset.pod_labels(plan), **_annotations(plan)}, "spec": pod},
            },
        },
    }


def _annotations(plan: RunPlan) -> dict[str, Any]:
    a = volumes.pod_annotations(plan)
    return {"annotations": a} if a else {}


def worker_job(plan: RunPlan) -> dict[str, Any]:
    t = plan.target
    hosts = t.shape.nodes
    e = plan.policy.elastic
    env = [
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
        {"name": "MEGASCALE_NUM_SLICES", "valueFrom": _ref(f"metadata.annotations['{names.JOBSET_REPLICAS_ANNOTATION}']")},
        {"name": "MEGASCALE_SLICE_ID", "valueFrom": _ref(f"metadata.annotations['{names.JOBSET_JOB_INDEX_LABEL}']")},
        {"name": "PATHWAYS_HEAD", "value": head_address(plan.name)},
        {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": head_address(plan.name)},
        *({"name": "LIBTPU_INIT_ARGS", "value": k8s_literal(v)} for k, v in plan.program.env if k == "LIBTPU_INIT_ARGS"),
    ]
    worker = _secure(
        {
            "name": "pathways-worker",
            "image": SERVER_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "args": k8s_literals(
                [f"--server_port={WORKER_PORT}", f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}", f"--gcs_scratch_location={_scratch(plan)}"]
            ),
            "env": podsecurity.home_env(t.run_as_user, env),
            "ports": [{"containerPort": p, "protocol": "TCP"} for p in (WORKER_PORT, WORKER_PORT2, jobset.TPU_RUNTIME_PORT, jobset.MEGASCALE_PORT)],
            "resources": {"requests": {names.TPU_RESOURCE: t.shape.chips_per_vm}, "limits": {names.TPU_RESOURCE: t.shape.chips_per_vm}},
        }
    )
    # $(PATHWAYS_HEAD) is the kubelet's to expand here: it is the container's own variable.
    worker["args"] = [a.replace("$$(PATHWAYS_HEAD)", "$(PATHWAYS_HEAD)") for a in worker["args"]]
    pod = {
        **_pod_common(plan),
        "restartPolicy": "OnFailure",
        "nodeSelector": jobset.node_selector(plan),
        "tolerations": [dict(names.TPU_TOLERATION)],
        "containers": [worker],
    }
    return {
        "name": WORKER_JOB,
        "replicas": t.slices,
        "template": {
            "metadata": {"annotations": {names.JOBSET_EXCLUSIVE_TOPOLOGY_ANNOTATION: names.GKE_NODEPOOL_LABEL}},
            "spec": {
                "completionMode": "Indexed",
                "parallelism": hosts,
                "completions": hosts,
                "backoffLimit": (e.max_slice_restarts if e else XPK_WORKER_BACKOFF_PER_HOST) * hosts,
                "template": {"metadata": {"labels": jobset.pod_labels(plan)}, "spec": pod},
            },
        },
    }


def pathways_jobset(plan: RunPlan) -> dict[str, Any]:
    return {
        "apiVersion": names.JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": plan.name, "namespace": plan.target.namespace, "labels": {**jobset.run_labels(plan), RUNTIME_LABEL: RUNTIME}},
        "spec": {
            "ttlSecondsAfterFinished": plan.policy.ttl_seconds,
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
            "failurePolicy": {"maxRestarts": plan.policy.max_restarts, "restartStrategy": "Recreate"},
            "replicatedJobs": [head_job(plan), worker_job(plan)],
        },
    }


RUNTIME_LABEL = runkinds.PATHWAYS_RUNTIME_LABEL  # tells a Pathways JobSet from a plain one


def run_objects(plan: RunPlan) -> list[dict[str, Any]]:
    return [pathways_jobset(plan)]


def skeletons() -> list[dict[str, Any]]:
    """What every Pathways JobSet has in common (the overlay's patch makes the run's)."""
    return [
        {
            "apiVersion": names.JOBSET_API,
            "kind": "JobSet",
            "metadata": {"name": BASE_NAME},
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
                "replicatedJobs": [{"name": HEAD_JOB, "replicas": 1}, {"name": WORKER_JOB, "replicas": 1}],
            },
        }
    ]
