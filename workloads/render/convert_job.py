"""The Job that converts a Hugging Face checkpoint to MaxText's format on the CPU pool. Pure: a Conversion in, objects out.

One pod (``backoffLimit`` 2: a conversion is idempotent, MaxText writes step 0 again, so a
preempted CPU node or a transient read error is retried) on the spec's CPU pool
(``nodeSelector`` ``cloud.google.com/gke-nodepool``), as the team's Kubernetes service
account (its Workload Identity reads the Hugging Face bucket and writes the team's
checkpoints bucket), under the same pod security as every run (``podsecurity``). It is not
queued through Kueue: the team queues cover TPU flavors only, and a conversion holds no TPU.

- the Hugging Face files: a read-only GCS FUSE CSI volume of their bucket, only their prefix
  (``only-dir``), at ``conversion.HF_MOUNT``, with the read options of a run's dataset
  (``volumes.TRAINING_READ_OPTIONS``: every file is read once, its metadata cached);
- the command: ``python3 -m maxtext.checkpoint_conversion.to_maxtext`` with the conversion's
  arguments (``Conversion.args``), each ``$`` doubled against the kubelet's ``$(NAME)``
  expansion (``kubelet_escape``); ``JAX_PLATFORMS=cpu``;
- resources: ``Conversion.memory_gib`` of memory and ``conversion.CPU_REQUEST`` CPUs
  requested (the module docstring of ``workloads.planning.conversion`` says why that much).

Labels: ``app.kubernetes.io/managed-by: tpu-gke-toolkit`` and ``tpu-gke-toolkit/convert: <name>``,
by which ``convert`` finds the Job again; no run label (a conversion is not a run: ``list``,
``status`` and ``cleanup`` leave it alone).
"""

from __future__ import annotations

from typing import Any

from toolkit import names
from workloads.planning.conversion import CONVERT_MODULE, CPU_REQUEST, HF_MOUNT, Conversion
from workloads.planning.defaults import DEFAULT_TTL_SECONDS
from workloads.render import podsecurity
from workloads.render.kubelet_escape import k8s_literals
from workloads.render.volumes import TRAINING_READ_OPTIONS

CONVERT_LABEL = "tpu-gke-toolkit/convert"
HF_VOLUME = "hugging-face"
CONTAINER = "convert"
BACKOFF_LIMIT = 2


def labels(c: Conversion) -> dict[str, str]:
    return {names.K8S_MANAGED_BY_LABEL: names.TGK, names.K8S_APP_NAME_LABEL: "convert", CONVERT_LABEL: c.name}


def hf_mount_options(c: Conversion) -> str:
    owner = [] if c.run_as_user is None else [f"uid={c.run_as_user}", f"gid={c.run_as_user}"]
    return ",".join([*TRAINING_READ_OPTIONS, f"only-dir={c.source_prefix}", *owner])


def job(c: Conversion) -> dict[str, Any]:
    env = podsecurity.home_env(c.run_as_user, [{"name": "JAX_PLATFORMS", "value": "cpu"}])
    container = {
        "name": CONTAINER,
        "image": c.image,
        "command": ["python3", "-m", CONVERT_MODULE],
        "args": k8s_literals(c.args),
        "env": env,
        "resources": {"requests": {"cpu": CPU_REQUEST, "memory": f"{c.memory_gib}Gi"}},
        "volumeMounts": [{"name": HF_VOLUME, "mountPath": HF_MOUNT, "readOnly": True}],
        "securityContext": podsecurity.container_security_context(),
    }
    volume = {
        "name": HF_VOLUME,
        "csi": {"driver": names.GCSFUSE_CSI_DRIVER, "readOnly": True, "volumeAttributes": {"bucketName": c.source_bucket, "mountOptions": hf_mount_options(c)}},
    }
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": c.service_account,
        "automountServiceAccountToken": False,
        "nodeSelector": {names.GKE_NODEPOOL_LABEL: c.cpu_pool},
        "securityContext": podsecurity.pod_security_context(c.run_as_user),
        "containers": [container],
        "volumes": [volume],
    }
    annotations = {names.GCSFUSE_VOLUMES_ANNOTATION: "true", **{a: "0" for a in names.GCSFUSE_SIDECAR_LIMIT_ANNOTATIONS}}
    return {
        "apiVersion": names.JOB_API,
        "kind": "Job",
        "metadata": {"name": c.job_name, "namespace": c.namespace, "labels": labels(c)},
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "ttlSecondsAfterFinished": DEFAULT_TTL_SECONDS,
            "template": {"metadata": {"labels": labels(c), "annotations": annotations}, "spec": pod},
        },
    }


def convert_objects(c: Conversion) -> list[dict[str, Any]]:
    return [job(c)]
