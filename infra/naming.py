"""Names shared by the stack and the workloads side, kept free of CDK imports.

The Kubernetes side (KSA annotations, node selectors, the local simulated
cluster) must agree with what the stack creates; both read these functions.
"""

from __future__ import annotations

import hashlib

MANAGED_BY = "tpu-gke-toolkit"

# Kubernetes node labels on every TPU node, describing its multislice group.
# GKE itself sets cloud.google.com/gke-tpu-accelerator, -topology and gke-nodepool.
LABEL_PREFIX = "tpu-gke-toolkit.io"
POOL_LABEL = f"{LABEL_PREFIX}/pool"
GROUP_SIZE_LABEL = f"{LABEL_PREFIX}/slice-group-size"
SLICE_INDEX_LABEL = f"{LABEL_PREFIX}/slice-index"
ACCELERATOR_TYPE_LABEL = f"{LABEL_PREFIX}/accelerator-type"
TOPOLOGY_LABEL = f"{LABEL_PREFIX}/topology"
CAPACITY_LABEL = f"{LABEL_PREFIX}/capacity"


def service_account_id(cluster: str, suffix: str) -> str:
    """A valid SA account id (6-30 chars) from the cluster name, stable and unique per cluster."""
    full = f"{cluster}-{suffix}"
    if len(full) <= 30:
        return full
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:4]
    head = cluster[: 30 - len(suffix) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{suffix}"


def service_account_email(project: str, cluster: str, suffix: str) -> str:
    """e.g. workload → <cluster>-workload@<project>.iam.gserviceaccount.com"""
    return f"{service_account_id(cluster, suffix)}@{project}.iam.gserviceaccount.com"


def workload_policy_name(cluster: str, generation: str, topology: str) -> str:
    return f"{cluster}-{generation}-{topology}"[:63].rstrip("-")
