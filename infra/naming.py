"""Names of cloud resources the stack creates, derived from the cluster name.

Kept free of CDK imports: the Kubernetes side (KSA annotations, the local
simulated cluster) must agree with what the stack creates, and both read these
functions. Kubernetes label names are not here: they live in toolkit.names.
"""

from __future__ import annotations

import hashlib


def service_account_id(cluster: str, suffix: str) -> str:
    """A valid SA account id (6-30 chars) from the cluster name, stable and unique per cluster."""
    full = f"{cluster}-{suffix}"
    if len(full) <= 30:
        return full
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:4]
    head = cluster[: 30 - len(suffix) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{suffix}"


def workload_policy_name(cluster: str, generation: str, topology: str) -> str:
    return f"{cluster}-{generation}-{topology}"[:63].rstrip("-")


def team_service_account_id(cluster: str, team: str) -> str:
    """The SA account id of one team's Google service account: ``<cluster>-t-<team>``.

    Too short or too long for GCP (6-30 characters), it becomes readable heads of
    both names and a digest of the pair, so it stays unique per (cluster, team).
    """
    full = f"{cluster}-t-{team}"
    if 6 <= len(full) <= 30:
        return full
    digest = hashlib.sha256(f"{cluster}/{team}".encode()).hexdigest()[:6]
    head = cluster[:12].rstrip("-")
    tail = team[: 30 - len(head) - len(digest) - 2].strip("-")
    return "-".join(p for p in (head, tail, digest) if p)


def team_service_account_email(project: str, cluster: str, team: str) -> str:
    """The Google service account a team's KSA acts as through Workload Identity."""
    return f"{team_service_account_id(cluster, team)}@{project}.iam.gserviceaccount.com"
