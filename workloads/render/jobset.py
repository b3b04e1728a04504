"""The JobSet for a RunPlan, as plain data (dicts), per docs/facts/jobset-kueue.md.

Pure: a RunPlan in, dicts out; ``workloads.render.yamlio`` serializes them. Choices
made here (and why):

- Priority: the pod's ``priorityClassName`` (the five PriorityClasses from
  ``infra.spec.PRIORITY_CLASSES``, created by ``queues apply``). Kueue takes a
  JobSet's workload priority from it, and the kube-scheduler sees the same value,
  so there is one priority, not two that can disagree. No WorkloadPriorityClass.
- hostNetwork (default on): what GKE's multislice examples and xpk use for DCN
  throughput. Trade-off: hostNetwork pods reach the node's metadata server and
  act as the *node* service account, so Workload Identity (the team KSA's GSA)
  does not apply; bucket access then comes from the TPU node pool's SA.
  ``--no-host-network`` keeps pods on the pod network with Workload Identity.
- Multislice env is explicit: MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID come
  from the JobSet's downward-API annotations (so a changed replica count cannot
  leave them stale); the coordinator is worker 0 of slice 0 by its stable DNS name.
  JobSet's ``spec.coordinator`` is not used: it writes ``<pod>.<jobset>`` into a
  *label*, whose 63-character limit would cap run names near 26 characters.
- Failure handling: a Job podFailurePolicy ignores disruptions (preemption,
  maintenance: the pod is replaced without counting as a failure) and fails the
  Job at once on exit codes 1-2 (a Python error or bad config: rerunning the same
  program cannot help); JobSet then fails the whole run on that reason instead of
  spending ``maxRestarts`` on it. Other failures (signals, OOM kills, lost peers)
  restart the JobSet up to ``maxRestarts`` times.
"""

from __future__ import annotations

from typing import Any

from workloads.planning.planner import MEGASCALE_PORT, REPLICATED_JOB, TPU_RUNTIME_PORT, RunPlan

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
PLACEMENT_POLICY_LABEL = "cloud.google.com/placement-policy-name"
TPU_RESOURCE = "google.com/tpu"
CONTAINER = "workload"  # the one container's name; `logs` and `status` look for it
FIELD_MANAGER = "tpu-gke-toolkit"
NON_RETRYABLE_EXIT_CODES = (1, 2)
TPU_TOLERATION = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def _env(plan: RunPlan) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plan.env]
    if plan.multislice:
        env += [
            {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": plan.coordinator_address},
            {"name": "MEGASCALE_NUM_SLICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-replicas']"}}},
            {"name": "MEGASCALE_SLICE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}}},
            {"name": "MEGASCALE_PORT", "value": str(MEGASCALE_PORT)},
        ]
    return env


def run_labels(plan: RunPlan) -> dict[str, str]:
    return {QUEUE_LABEL: plan.local_queue, **dict(plan.labels)}


def pod_labels(plan: RunPlan) -> dict[str, str]:
    return dict(plan.labels)


def container(plan: RunPlan) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(plan.command),
    }
    if plan.args:
        c["args"] = list(plan.args)
    c["env"] = _env(plan)
    c["ports"] = [
        {"name": "tpu-runtime", "containerPort": TPU_RUNTIME_PORT},
        {"name": "megascale", "containerPort": MEGASCALE_PORT},
    ]
    c["resources"] = {
        "requests": {TPU_RESOURCE: plan.tpu_per_pod},
        "limits": {TPU_RESOURCE: plan.tpu_per_pod},
    }
    c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return c


def pod_spec(plan: RunPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": plan.priority,
        "serviceAccountName": plan.service_account,
        "restartPolicy": "Never",
    }
    if plan.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    spec["nodeSelector"] = {ACCELERATOR_LABEL: plan.accelerator_label, TOPOLOGY_LABEL: plan.topology}
    if plan.placement_policy:
        spec["nodeSelector"][PLACEMENT_POLICY_LABEL] = plan.placement_policy
    spec["tolerations"] = [dict(TPU_TOLERATION)]
    spec["containers"] = [container(plan)]
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return spec


def job_spec(plan: RunPlan) -> dict[str, Any]:
    return {
        "parallelism": plan.nodes_per_slice,
        "completions": plan.nodes_per_slice,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": list(NON_RETRYABLE_EXIT_CODES)},
                },
            ]
        },
        "template": {
            "metadata": {"labels": pod_labels(plan)},
            "spec": pod_spec(plan),
        },
    }


def jobset(plan: RunPlan) -> dict[str, Any]:
    """The JobSet that runs the plan: one child Job per slice, one pod per TPU VM."""
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": plan.name,
            "namespace": plan.namespace,
            "labels": run_labels(plan),
            "annotations": {EXCLUSIVE_TOPOLOGY: NODEPOOL_LABEL},
        },
        "spec": {
            "ttlSecondsAfterFinished": plan.ttl_seconds,
            "failurePolicy": {
                "maxRestarts": plan.max_restarts,
                "rules": [
                    {"name": "program_error", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
                ],
            },
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": plan.slices,
                    "template": {"spec": job_spec(plan)},
                }
            ],
        },
    }


def run_objects(plan: RunPlan) -> list[dict[str, Any]]:
    """Exactly what `submit` applies for a plan (Kueue objects come from `queues apply`)."""
    return [jobset(plan)]
