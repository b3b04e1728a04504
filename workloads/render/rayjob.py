"""The ``ray`` runtime: a KubeRay ``ray.io/v1`` RayJob with its own RayCluster, as in GKE's tutorial
"Train an LLM using JAX, Ray Train, and TPU Trillium on GKE"
(https://cloud.google.com/kubernetes-engine/docs/tutorials/distributed-training-tpu).

Pure: a RunPlan in, dicts out. The RayJob (KubeRay v1.6.0) carries a RayCluster spec:

- a CPU head on the spec's CPU node pool (node selector ``cloud.google.com/gke-nodepool``);
- one TPU worker group: ``replicas`` = slices, ``numOfHosts`` = TPU VMs per slice (KubeRay
  creates and deletes a slice's hosts together), ``google.com/tpu`` = chips per VM, the GKE
  TPU node selector and toleration (the JobSet runtime's own functions);
- ``entrypoint``: Ray Train's JaxTrainer (``workloads.ray.jax_trainer``) with
  ``ScalingConfig(use_tpu, topology, accelerator_type, num_workers = hosts x slices)`` running
  the plan's MaxText command, the same config path and ``key=value`` arguments the JobSet
  runtime's container gets.

Kueue (its ``ray.io/rayjob`` integration) owns ``spec.suspend`` and needs
``shutdownAfterJobFinishes: true``; the RayJob is one Workload whose pod sets are the head,
the TPU group (replicas x numOfHosts pods) and, in K8sJobMode, the submitter.

Why the head and the submitter ask for no CPU or memory: the team's ClusterQueue has only
TPU flavors (they cover cpu and memory too), and Kueue gives every pod set that requests a
covered resource a flavor and writes that flavor's TPU node labels into its pods. A pod set
with no covered requests gets no flavor, so the head and the submitter stay where their
own node selector puts them, the CPU pool. The TPU workers ask for TPU chips only.

Restarts: ``backoffLimit`` = ``plan.policy.max_restarts``; KubeRay retries a failed RayJob
with a new RayCluster, i.e. the whole run, and MaxText resumes from the run's checkpoints.
The RayCluster goes as soon as the job ends (``ttlSecondsAfterFinished`` 0), freeing the
TPUs; the RayJob object stays for ``status`` and ``logs`` until ``delete``.
"""

from __future__ import annotations

from typing import Any

from infra.spec.teams import DEFAULT_RUN_AS_USER
from toolkit import names
from workloads.planning.model import RUNTIME_RAY, RunPlan
from workloads.ray import ENTRYPOINT_MODULE, RAY_VERSION, ray_accelerator_type
from workloads.ray import entrypoint as ray_entrypoint
from workloads.render import jobset, podsecurity, volumes
from workloads.render.program_env import program_env
from workloads.render.skeleton import BASE_NAME

RUNTIME = RUNTIME_RAY
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
WORKER_GROUP = "tpu-slices"
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001))


def accelerator_type(plan: RunPlan) -> str:
    """Ray's name for the TPU generation (the planner refused any it has none for)."""
    return ray_accelerator_type(plan.target.shape.generation.name)


def entrypoint_head(plan: RunPlan) -> list[str]:
    """The JaxTrainer entrypoint and its own flags (every word inert: numbers, catalog names, a DNS-1035 name)."""
    t = plan.target
    return [
        "python3",
        "-m",
        ENTRYPOINT_MODULE,
        "--num-workers",
        str(t.nodes),
        "--topology",
        t.shape.topology,
        "--accelerator-type",
        accelerator_type(plan),
        "--chips-per-worker",
        str(t.shape.chips_per_vm),
        "--run-name",
        plan.name,
    ]


def entrypoint_args(plan: RunPlan) -> list[str]:
    """What the head runs, as argv: the JaxTrainer entrypoint, then ``--`` and the plan's MaxText arguments."""
    return [*entrypoint_head(plan), "--", *plan.program.args]


def entrypoint(plan: RunPlan) -> str:
    """``spec.entrypoint``: ``entrypoint_args`` in words that bash, ``ray job submit`` and ``sh`` all leave as they are.

    See ``workloads.ray.entrypoint``: plain words after ``--`` when every MaxText
    argument is inert, else all of them as one base64url word. The planner refused
    arguments this could not carry (a NUL, an entrypoint over ``entrypoint.MAX_BYTES``).
    """
    return ray_entrypoint.entrypoint(entrypoint_head(plan), plan.program.args)


def _meta(plan: RunPlan) -> dict[str, Any]:
    return {"labels": jobset.pod_labels(plan)}


def _secure(plan: RunPlan, container: dict[str, Any]) -> dict[str, Any]:
    """``container`` with the run's container securityContext (and HOME for a non-root UID)."""
    env = podsecurity.home_env(plan.target.run_as_user, container.get("env", []))
    return {**container, **({"env": env} if env else {}), "securityContext": podsecurity.container_security_context()}


def _cpu_pod(plan: RunPlan, container: dict[str, Any]) -> dict[str, Any]:
    # No token: the head needs one only for KubeRay's in-tree autoscaler, which is off.
    return {
        "priorityClassName": plan.target.priority,
        "serviceAccountName": plan.target.service_account,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.pod_security_context(plan.target.run_as_user),
        "nodeSelector": {names.GKE_NODEPOOL_LABEL: plan.target.cpu_pool},
        "containers": [_secure(plan, container)],
    }


def head_group(plan: RunPlan) -> dict[str, Any]:
    container = {
        "name": HEAD_CONTAINER,
        "image": plan.program.image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": n, "containerPort": p} for n, p in HEAD_PORTS],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    spec = _cpu_pod(plan, container)
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return {"rayStartParams": {}, "template": {"metadata": _meta(plan), "spec": spec}}


def slice_affinity() -> dict[str, Any]:
    """A multi-host replica (one slice) on one GKE node pool, and no other replica there.

    Two node pools of the same shape both match the node selector, so without this the
    scheduler may spread one slice's hosts over two pools (two half slices: the TPU
    runtime never forms the ICI mesh). KubeRay labels each multi-host replica's pods with
    a name of their own (RayMultiHostIndexing, on by default in v1.6.0); ``matchLabelKeys``
    and ``mismatchLabelKeys`` (Kubernetes >= 1.31) turn "Ray workers" into "same pool as my
    replica, not a pool of another replica's workers". The JobSet runtime gets the same from JobSet's
    exclusive-topology annotation.
    """
    # The API refuses a key in both the selector and matchLabelKeys: select Ray workers, key on the replica.
    has_replica = {"matchLabels": {names.RAY_NODE_TYPE_LABEL: "worker"}}
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": has_replica, "matchLabelKeys": [names.RAY_REPLICA_NAME_LABEL], "topologyKey": names.GKE_NODEPOOL_LABEL}
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": has_replica,
                    "mismatchLabelKeys": [names.RAY_REPLICA_NAME_LABEL],
                    "namespaceSelector": {},
                    "topologyKey": names.GKE_NODEPOOL_LABEL,
                }
            ]
        },
    }


def worker_group(plan: RunPlan) -> dict[str, Any]:
    t, tpu = plan.target, plan.target.shape.chips_per_vm
    container = {
        "name": WORKER_CONTAINER,
        "image": plan.program.image,
        "imagePullPolicy": "IfNotPresent",
        "env": program_env(plan.program),
        "resources": {"requests": {names.TPU_RESOURCE: tpu}, "limits": {names.TPU_RESOURCE: tpu}},
        # The JaxTrainer's workers run MaxText here: they read the dataset.
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *volumes.volume_mounts(plan)],
    }
    spec: dict[str, Any] = {
        "priorityClassName": t.priority,
        "serviceAccountName": t.service_account,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.pod_security_context(t.run_as_user),
        "nodeSelector": jobset.node_selector(plan),
        "tolerations": [dict(names.TPU_TOLERATION)],
        "affinity": slice_affinity(),
        # KubeRay copies this container's securityContext into the init container it injects.
        "containers": [_secure(plan, container)],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes.volumes(plan)],
    }
    meta = _meta(plan)
    if a := volumes.pod_annotations(plan):
        meta["annotations"] = a
    return {
        "groupName": WORKER_GROUP,
        "replicas": t.slices,
        "minReplicas": t.slices,
        "maxReplicas": t.slices,
        "numOfHosts": t.shape.nodes,
        "rayStartParams": {},
        "template": {"metadata": meta, "spec": spec},
    }


def submitter_template(plan: RunPlan) -> dict[str, Any]:
    """K8sJobMode's submitter pod: KubeRay fills in its command (``ray job submit ...``)."""
    container = {"name": names.RAY_SUBMITTER_CONTAINER, "image": plan.program.image, "imagePullPolicy": "IfNotPresent"}
    return {"metadata": _meta(plan), "spec": {**_cpu_pod(plan, container), "restartPolicy": "Never"}}


def rayjob(plan: RunPlan) -> dict[str, Any]:
    return {
        "apiVersion": names.RAY_API,
        "kind": "RayJob",
        "metadata": {"name": plan.name, "namespace": plan.target.namespace, "labels": jobset.run_labels(plan)},
        "spec": {
            "suspend": True,  # Kueue starts it on admission
            "shutdownAfterJobFinishes": True,  # Kueue requires it; frees the TPUs when the job ends
            "ttlSecondsAfterFinished": 0,
            "backoffLimit": plan.policy.max_restarts,
            "submissionMode": "K8sJobMode",
            "entrypoint": entrypoint(plan),
            "submitterPodTemplate": submitter_template(plan),
            "rayClusterSpec": {
                "rayVersion": RAY_VERSION,
                "headGroupSpec": head_group(plan),
                "workerGroupSpecs": [worker_group(plan)],
            },
        },
    }


def run_objects(plan: RunPlan) -> list[dict[str, Any]]:
    return [rayjob(plan)]


def skeletons() -> list[dict[str, Any]]:
    """What every RayJob of this runtime has in common (``base/ray/``)."""
    dshm_mount = [{"name": "dshm", "mountPath": "/dev/shm"}]
    dshm = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    pod_ctx = {"automountServiceAccountToken": False, "securityContext": podsecurity.pod_security_context(DEFAULT_RUN_AS_USER)}
    ctx = podsecurity.container_security_context()
    return [
        {
            "apiVersion": names.RAY_API,
            "kind": "RayJob",
            "metadata": {"name": BASE_NAME},
            "spec": {
                "suspend": True,
                "shutdownAfterJobFinishes": True,
                "ttlSecondsAfterFinished": 0,
                "submissionMode": "K8sJobMode",
                "submitterPodTemplate": {
                    "spec": {
                        **pod_ctx,
                        "containers": [{"name": names.RAY_SUBMITTER_CONTAINER, "imagePullPolicy": "IfNotPresent", "securityContext": ctx}],
                        "restartPolicy": "Never",
                    }
                },
                "rayClusterSpec": {
                    "rayVersion": RAY_VERSION,
                    "headGroupSpec": {
                        "rayStartParams": {},
                        "template": {
                            "spec": {
                                **pod_ctx,
                                "containers": [
                                    {
                                        "name": HEAD_CONTAINER,
                                        "imagePullPolicy": "IfNotPresent",
                                        "ports": [{"name": n, "containerPort": p} for n, p in HEAD_PORTS],
                                        "volumeMounts": dshm_mount,
                                        "securityContext": ctx,
                                    }
                                ],
                                "volumes": dshm,
                            }
                        },
                    },
                    "workerGroupSpecs": [
                        {
                            "groupName": WORKER_GROUP,
                            "rayStartParams": {},
                            "template": {
                                "spec": {
                                    **pod_ctx,
                                    "tolerations": [dict(names.TPU_TOLERATION)],
                                    "containers": [
                                        {"name": WORKER_CONTAINER, "imagePullPolicy": "IfNotPresent", "volumeMounts": dshm_mount, "securityContext": ctx}
                                    ],
                                    "volumes": dshm,
                                }
                            },
                        }
                    ],
                },
            },
        }
    ]
