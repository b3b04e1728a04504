"""GCP's rules for names, and the names of cloud resources the stack creates from the cluster name.

Kept free of CDK imports: the Kubernetes side (KSA annotations, the local
simulated cluster) must agree with what the stack creates, and both read these
functions. Kubernetes names and their rules are not here: they live in toolkit.names.
"""

from __future__ import annotations

import hashlib

# Compute Engine resource names (networks, subnets, routers, NATs, firewalls, reservations, resource
# policies): RFC 1035, 1-63 characters, [a-z]([-a-z0-9]*[a-z0-9])? (compute/docs/naming-resources).
# Artifact Registry repository ids keep the same form and length (artifact-registry/docs/repositories/create-repos).
GCE_NAME_MAX = 63
# GKE: a cluster name and a node pool name are each 1-40 lowercase letters, digits and '-', a
# letter first, no '-' last (container API Cluster.name / NodePool.name; gcloud container ... create).
GKE_CLUSTER_NAME_MAX = 40
GKE_NODE_POOL_NAME_MAX = 40
# Project ids and service account ids follow one rule: 6-30 lowercase letters, digits and '-', a letter first, no '-' last
# (resource-manager/docs/creating-managing-projects; iam/docs/service-accounts-create: account ids).
GCP_ID_MIN, GCP_ID_MAX = 6, 30
GCP_ID = rf"^[a-z][-a-z0-9]{{{GCP_ID_MIN - 2},{GCP_ID_MAX - 2}}}[a-z0-9]$"
BUCKET_NAME = r"^[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]$"  # Cloud Storage: 3-63 characters (the dotted 222-character form is not taken)
REGION = r"^[a-z]+-[a-z]+[0-9]+$"
ZONE = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$"


def service_account_id(cluster: str, suffix: str) -> str:
    """A valid SA account id (6-30 chars) from the cluster name, stable and unique per cluster."""
    full = f"{cluster}-{suffix}"
    if len(full) <= GCP_ID_MAX:
        return full
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:4]
    head = cluster[: GCP_ID_MAX - len(suffix) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{suffix}"


def workload_policy_name(cluster: str, generation: str, topology: str) -> str:
    return f"{cluster}-{generation}-{topology}"[:GCE_NAME_MAX].rstrip("-")


def team_service_account_id(cluster: str, team: str) -> str:
    """The SA account id of one team's Google service account: ``<cluster>-t-<team>``.

    Too short or too long for GCP (6-30 characters), it becomes readable heads of
    both names and a digest of the pair, so it stays unique per (cluster, team).
    """
    full = f"{cluster}-t-{team}"
    if GCP_ID_MIN <= len(full) <= GCP_ID_MAX:
        return full
    digest = hashlib.sha256(f"{cluster}/{team}".encode()).hexdigest()[:6]
    head = cluster[:12].rstrip("-")
    tail = team[: GCP_ID_MAX - len(head) - len(digest) - 2].strip("-")
    return "-".join(p for p in (head, tail, digest) if p)


def team_service_account_email(project: str, cluster: str, team: str) -> str:
    """The Google service account a team's KSA acts as through Workload Identity."""
    return f"{team_service_account_id(cluster, team)}@{project}.iam.gserviceaccount.com"
