"""Every Kubernetes and GKE name the toolkit reads or writes, defined once.

Three kinds of name live here, and their prefixes say whose they are:

- ``GKE_*``: labels, taints and resources that GKE itself puts on TPU nodes and
  that pods and Kueue flavors select on. They are GKE's contract, not ours.
- ``K8S_*``, ``JOBSET_*``, ``KUEUE_*``, ``KWOK_*``: names of upstream projects
  (API versions, the labels their controllers set, annotations they read).
- ``TGK_*``: the toolkit's own labels and names. They are under the
  ``tpu-gke-toolkit.io`` prefix (node labels the stack writes), the
  ``tpu-gke-toolkit/`` prefix (run labels), or ``local.tgk.dev`` (the local
  rehearsal cluster only), so nobody mistakes them for GKE's.

Where GKE's come from: "Plan TPUs in GKE"
(https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus); JobSet's and Kueue's:
their APIs at the pinned releases (https://github.com/kubernetes-sigs/jobset,
api/jobset/v1alpha2/jobset_types.go; https://kueue.sigs.k8s.io/docs/reference/).
"""

from __future__ import annotations

from enum import StrEnum

# ------------------------------------------------------------------- GKE (theirs)
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# A TPU slice's shape as newer pod templates name it (an annotation; tpu-recipes' k8s manifests use it).
GKE_TPU_SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_MACHINE_FAMILY_LABEL = "cloud.google.com/machine-family"
# Nodes of a pool placed by a named resource policy (tpu7x multi-host workload policies).
GKE_PLACEMENT_POLICY_LABEL = "cloud.google.com/placement-policy-name"
GKE_WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"
# DWS queued provisioning: GKE labels and taints the nodes of a queued node pool with it.
GKE_QUEUED_LABEL = "cloud.google.com/gke-queued"
# A custom ComputeClass: pods select it with this node label, and GKE labels and taints its nodes with the class's name.
GKE_COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
# The extended resource TPU VMs advertise, and the taint GKE puts on TPU nodes.
TPU_RESOURCE = "google.com/tpu"
TPU_TAINT = {"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
# What a pod carries to land on a tainted TPU node (any value of the key).
TPU_TOLERATION = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# ------------------------------------------------------------- Kubernetes (theirs)
K8S_NAME_MAX = 63  # a DNS label: Namespace, LocalQueue, ServiceAccount and pod-name parts; label values
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a letter first: the names the toolkit takes for Kubernetes and GCE objects
K8S_HOSTNAME_LABEL = "kubernetes.io/hostname"
K8S_ZONE_LABEL = "topology.kubernetes.io/zone"
K8S_REGION_LABEL = "topology.kubernetes.io/region"
K8S_INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
K8S_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
K8S_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
K8S_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller puts it on every pod of a Job
JOB_API = "batch/v1"
K8S_MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
K8S_APP_NAME_LABEL = "app.kubernetes.io/name"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
# Pod Security Admission (built into kube-apiserver): the level a namespace enforces, and warns about.
K8S_PSA_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
K8S_PSA_WARN_LABEL = "pod-security.kubernetes.io/warn"
K8S_PSA_AUDIT_LABEL = "pod-security.kubernetes.io/audit"
NETWORK_POLICY_API = "networking.k8s.io/v1"
ADMISSION_API = "admissionregistration.k8s.io/v1"  # ValidatingAdmissionPolicy: GA in Kubernetes 1.30
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # names a WorkloadPriorityClass (the toolkit makes none)

# ---------------------------------------------------------------- JobSet (theirs)
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"  # also an annotation on each pod
JOBSET_REPLICAS_ANNOTATION = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOBSET_NAME_ANNOTATION = "jobset.sigs.k8s.io/jobset-name"  # on each pod: its JobSet (JobSet's in-place restart agent reads it)
JOBSET_IN_PLACE_ATTEMPT_ANNOTATION = "jobset.sigs.k8s.io/in-place-restart-attempt"  # the agent writes it on its pod; JobSet reads it

# ----------------------------------------------------------------- Kueue (theirs)
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"  # the storage version of the pinned Kueue v0.19.2 (v0.20 stops serving v1beta1)
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on the Workload Kueue creates for a job

# --------------------------------------------------------------- KubeRay (theirs)
# v1.6.0's API and pod labels (ray-operator/controllers/ray/utils/constant.go).
RAY_API = "ray.io/v1"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"  # head | worker
RAY_REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"  # the slice (RayMultiHostIndexing, on by default)
RAY_HOST_INDEX_LABEL = "ray.io/replica-host-index"  # the VM within its slice (multi-host groups only)
RAY_REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"  # one name per multi-host replica (a slice)
RAY_SUBMITTER_CONTAINER = "ray-job-submitter"  # utils.SubmitterContainerName

# ------------------------------------------------------------------ kwok (theirs)
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"

# --------------------------------------------------------------- the toolkit (ours)
TGK = "tpu-gke-toolkit"
TGK_FIELD_MANAGER = TGK  # server-side apply field manager of every toolkit apply
# Run labels on JobSets and pods.
TGK_RUN_LABEL = "tpu-gke-toolkit/run"
# On a submitted run's top-level object: a digest of everything submit applied, so a
# resubmission under the same name can tell "the same run again" from "another run".
TGK_SUBMISSION_ANNOTATION = "tpu-gke-toolkit/submission"
# Node labels the stack writes on each TPU slice node pool (its multislice group).
TGK_NODE_LABEL_PREFIX = "tpu-gke-toolkit.io"
TGK_POOL_LABEL = f"{TGK_NODE_LABEL_PREFIX}/pool"
TGK_GROUP_SIZE_LABEL = f"{TGK_NODE_LABEL_PREFIX}/slice-group-size"
TGK_SLICE_INDEX_LABEL = f"{TGK_NODE_LABEL_PREFIX}/slice-index"
TGK_ACCELERATOR_TYPE_LABEL = f"{TGK_NODE_LABEL_PREFIX}/accelerator-type"
TGK_TOPOLOGY_LABEL = f"{TGK_NODE_LABEL_PREFIX}/topology"  # not GKE_TPU_TOPOLOGY_LABEL: ours, for people and scripts
TGK_CAPACITY_LABEL = f"{TGK_NODE_LABEL_PREFIX}/capacity"
# On every node of a node pool (a slice) one of whose VMs `badhost --cordon` cordoned: run pods keep off the pool.
TGK_DEGRADED_SLICE_LABEL = f"{TGK_NODE_LABEL_PREFIX}/degraded-slice"
# The reservation a node pool consumes (reservation capacity only): Kueue flavors of a fallback list select on it.
TGK_RESERVATION_LABEL = f"{TGK_NODE_LABEL_PREFIX}/reservation"
# The local rehearsal cluster's own marks (never on a real cluster).
TGK_LOCAL_PREFIX = "local.tgk.dev"
TGK_LOCAL_MANAGED_LABEL = f"{TGK_LOCAL_PREFIX}/managed"
TGK_LOCAL_FIELD_MANAGER = "tgk-local"


class CapacityMode(StrEnum):
    """How GCP provisions a pool's TPU VMs: the spec's ``capacity`` modes, and the values of
    ``TGK_CAPACITY_LABEL``. Listed in this order wherever all of them are (prices, messages).

    A member is its string (``CapacityMode.SPOT == "spot"``, formats as ``spot``); models
    and documents keep plain strings, and tables keyed by mode take either.
    """

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    FLEX_START = "flex-start"
    RESERVATION = "reservation"


# GKE's TPU tutorial env for a plain Indexed Job: this worker's index, and every worker's DNS name.
TPU_WORKER_ID_ENV = "TPU_WORKER_ID"
TPU_WORKER_HOSTNAMES_ENV = "TPU_WORKER_HOSTNAMES"

# The name of the one container of every TPU worker pod; `logs` and `status` look for it.
WORKLOAD_CONTAINER = "workload"

# GKE's Cloud Storage FUSE CSI driver (GKE docs "Access Cloud Storage buckets with the Cloud Storage FUSE
# CSI driver" and its sidecar page): the driver name, the pod annotation that injects its sidecar, and the
# annotations that size the sidecar ("0": no limit, Standard clusters only).
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_VOLUMES_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_SIDECAR_LIMIT_ANNOTATIONS = ("gke-gcsfuse/cpu-limit", "gke-gcsfuse/memory-limit", "gke-gcsfuse/ephemeral-storage-limit")
# GKE's multi-tier checkpointing add-on (HighScaleCheckpointing): its CSI driver mounts the RAM disk a
# CheckpointConfiguration (checkpointing.gke.io/v1, cluster-scoped) sizes for the nodes it selects.
MTC_CSI_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
CHECKPOINTING_API = "checkpointing.gke.io/v1"
