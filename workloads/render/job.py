"""The ``job`` runtime: a batch/v1 Indexed Job and a headless Service, as in "GKE AI Series: First
Training Job With JAX on TPUs" (https://easontechtalk.com/gke-ai-tpu-training-quickstart).

Pure: a RunPlan in, dicts out. One pod per TPU VM of one slice (``completions`` =
``parallelism`` = hosts), through the team's LocalQueue (Kueue's batch/Job integration
owns ``spec.suspend``). The pods' container, node selector, tolerations, priority and
identity are the JobSet runtime's own functions, so the two cannot drift apart.

Why a headless Service: an Indexed Job's pod ``i`` gets the hostname ``<job>-<i>``; with
``subdomain`` naming a headless Service of the same name, it resolves as
``<job>-<i>.<job>``, which is what ``TPU_WORKER_HOSTNAMES`` lists for libtpu/JAX.
``publishNotReadyAddresses``: workers look each other up while starting, before Ready.

Why pod affinity: a spec often has several node pools of one shape (one per slice),
and the node selector alone would let the workers spread over them, while a TPU slice
is one node pool. The pods require each other on one ``cloud.google.com/gke-nodepool``
(the first one placed picks it: the scheduler lets a pod that matches its own affinity
term start a group) and keep other Jobs' pods off it (the JobSet runtime gets both from
its exclusive-topology annotation). One pod per TPU VM follows from each pod asking for
all of a VM's chips.

What a plain Job cannot do (and the JobSet runtime does): restart the whole run. The
Job controller replaces *pods*, and a multi-host JAX program cannot take a replacement
pod, so the Job fails on the first pod failure (``backoffLimit: 0``, the same
``podFailurePolicy`` rules as the JobSet's child Jobs, so the Job's failure message
still says whether it was a disruption or a program error). The planner gives such a
run ``max_restarts`` 0 and refuses ``--max-restarts``. Kueue preemption is the one
whole-run restart it gets: Kueue suspends the Job (every pod goes) and resumes it when
re-admitted. After a node-level disruption, resubmit with the same ``--name``: MaxText
resumes from the run's latest checkpoint. Multislice is refused by the planner.
"""

from __future__ import annotations

from typing import Any

from toolkit import names
from workloads.planning.model import RUNTIME_JOB, RunPlan
from workloads.render import jobset, podsecurity, volumes
from workloads.render.program_env import program_env
from workloads.render.skeleton import BASE_NAME, indexed_job_spec

RUNTIME = RUNTIME_JOB


def worker_hostnames(plan: RunPlan) -> str:
    """Every worker's stable DNS name through the headless Service, in worker order."""
    return ",".join(f"{plan.name}-{i}.{plan.name}" for i in range(plan.target.shape.nodes))


def _env(plan: RunPlan) -> list[dict[str, Any]]:
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{names.K8S_COMPLETION_INDEX_LABEL}']"}}
    return program_env(plan.program) + [
        {"name": names.TPU_WORKER_ID_ENV, "valueFrom": index},
        {"name": names.TPU_WORKER_HOSTNAMES_ENV, "value": worker_hostnames(plan)},
    ]


def affinity(plan: RunPlan) -> dict[str, Any]:
    """Every worker on one node pool (one slice), and no other Job's pods on it."""
    pool = names.GKE_NODEPOOL_LABEL
    this_job = {"matchExpressions": [{"key": names.K8S_JOB_NAME_LABEL, "operator": "In", "values": [plan.name]}]}
    other_jobs = {
        "matchExpressions": [
            {"key": names.K8S_JOB_NAME_LABEL, "operator": "Exists"},
            {"key": names.K8S_JOB_NAME_LABEL, "operator": "NotIn", "values": [plan.name]},
        ]
    }
    return {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": this_job, "topologyKey": pool}]},
        # An empty namespaceSelector: other teams' Jobs too (a term covers its own namespace only otherwise).
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": other_jobs, "namespaceSelector": {}, "topologyKey": pool}]},
    }


def pod_spec(plan: RunPlan) -> dict[str, Any]:
    spec = jobset.pod_spec(plan)
    for c in spec["containers"]:  # one, or the parallel containers (the same program)
        c["env"] = podsecurity.home_env(plan.target.run_as_user, _env(plan))
    spec["containers"][0]["ports"] = [{"name": "tpu-runtime", "containerPort": jobset.TPU_RUNTIME_PORT}]
    spec["affinity"] = {**spec.get("affinity", {}), **affinity(plan)}
    return {"subdomain": plan.name, **spec}


def job(plan: RunPlan) -> dict[str, Any]:
    hosts = plan.target.shape.nodes
    return {
        "apiVersion": names.JOB_API,
        "kind": "Job",
        "metadata": {"name": plan.name, "namespace": plan.target.namespace, "labels": jobset.run_labels(plan)},
        "spec": {
            "suspend": True,  # Kueue starts it on admission
            "parallelism": hosts,
            "completions": hosts,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "podFailurePolicy": jobset.pod_failure_policy(plan),
            "ttlSecondsAfterFinished": plan.policy.ttl_seconds,
            "template": {
                "metadata": {"labels": jobset.pod_labels(plan), **({"annotations": a} if (a := volumes.pod_annotations(plan)) else {})},
                "spec": pod_spec(plan),
            },
        },
    }


def service(plan: RunPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": plan.name, "namespace": plan.target.namespace, "labels": dict(plan.labels)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.K8S_JOB_NAME_LABEL: plan.name},
        },
    }


def run_objects(plan: RunPlan) -> list[dict[str, Any]]:
    """The Service first: the pods' DNS names exist before the pods do."""
    return [service(plan), job(plan)]


def skeletons() -> list[dict[str, Any]]:
    """What every Job and Service of this runtime have in common (``base/job/``)."""
    job_skeleton = {
        "apiVersion": names.JOB_API,
        "kind": "Job",
        "metadata": {"name": BASE_NAME},
        # One slice, no DCN: only the TPU runtime's port (pod_spec drops megascale's too).
        "spec": {"suspend": True, **indexed_job_spec([{"name": "tpu-runtime", "containerPort": jobset.TPU_RUNTIME_PORT}])},
    }
    service_skeleton = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": BASE_NAME},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True},
    }
    return [service_skeleton, job_skeleton]
