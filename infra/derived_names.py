"""The names the toolkit derives from a spec, checked for collisions (and for GCP's rules) at spec load. Pure.

Two resources of one kind under one name do not fail loudly: a second Google service
account with the id of the first is the first (Terraform fails mid-apply, or one team's
pods act as the other's identity); a team whose namespace is ``kube-system`` has the
toolkit label it with a Pod Security level the system's own pods then fail; the state
bucket listed as a data bucket is managed twice. Every derived name is listed here with
what it is derived from, so a collision names the field to change.

Audited (and where the check is):
- Google service account ids: nodes, workload, ci (``<cluster>-<suffix>``) and one per
  team (``<cluster>-t-<team>``, hashed when too long or short): valid and distinct — here.
- Namespaces: distinct per team (``infra.spec.rules.check_teams``); none of the cluster's own
  (kube-*, the add-ons' *-system, GKE's gke-*/gmp-*) — here.
- LocalQueues: distinct per namespace, including xpk's ``multislice-queue`` in
  ``xpk.namespace`` — here. ClusterQueues ``<team>-cq`` and xpk's ``cluster-queue``: distinct — here.
- KSAs: one per team namespace, distinct because the namespaces are.
- ResourceFlavors: shape keys (``v5e-4x4``) and ``<pool>-<tag>``: a tag (od, spot, flex,
  res, resN) never ends like a topology, so they cannot meet; pools are distinct.
- Node pools ``<pool>-<slice>`` / ``<pool>-<tag>-<slice>`` and the CPU pool: ``infra.spec.rules.check_pools``.
- Networks and subnets ``network.name`` / ``network.dcn.name``: distinct, and the DCN
  firewall ``<dcn>-internal`` fits GCE's 63 characters — here. Router/NAT: ``rules.check_derived_names``.
- Buckets: distinct (``rules.check_buckets_and_ci``); the Terraform state bucket (given, or
  ``<project>-tf-state``) is none of them and keeps Cloud Storage's rules — here.
- Workload policies ``<cluster>-<generation>-<topology>``: at most 40 + 1 + 5 + 1 + 8 < 63
  characters, one per shape.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from infra import gcp_names, naming
from infra.naming import GCE_NAME_MAX, GCP_ID, GCP_ID_MAX, GCP_ID_MIN
from toolkit.errors import SpecError

if TYPE_CHECKING:
    # The fields, not infra.spec.EnvSpec: this check is one of EnvSpec's rules (infra.spec.rules.RULES).
    from infra.spec.env import EnvFields

# Namespaces the cluster itself runs in: Kubernetes', the add-ons the toolkit installs, GKE's.
RESERVED_NAMESPACE = re.compile(r"^(kube-.*|kueue-system|jobset-system|kuberay-system|gke-.*|gmp-.*|gatekeeper-system|istio-system|config-management-system)$")
XPK_LOCAL_QUEUE = "multislice-queue"  # workloads.render.xpk.LOCAL_QUEUE (infra cannot import workloads)
XPK_CLUSTER_QUEUE = "cluster-queue"
DCN_FIREWALL_SUFFIX = "-internal"  # modules/network.py DcnNetwork


def check(spec: EnvFields) -> None:
    _service_accounts(spec)
    _namespaces(spec)
    _queues(spec)
    _networks(spec)
    _state_bucket(spec)


def _service_accounts(spec: EnvFields) -> None:
    cluster = spec.cluster.name
    ids: dict[str, str] = {}
    for suffix in ("nodes", "workload", *(["ci"] if spec.cloud_build.enabled else [])):
        ids.setdefault(naming.service_account_id(cluster, suffix), f"the {suffix} service account")
    for i, t in enumerate(spec.teams):
        account = naming.team_service_account_id(cluster, t.name)
        if not re.fullmatch(GCP_ID, account):
            raise SpecError(
                f"teams[{i}].name",
                f"makes the service account id {account!r}, but GCP needs {GCP_ID_MIN}-{GCP_ID_MAX} lowercase letters, digits and '-'",
                "use a team name of lowercase letters and digits",
            )
        if account in ids:
            raise SpecError(
                f"teams[{i}].name",
                f"makes the service account id {account!r}, which is already {ids[account]}'s; one account would act for both",
                "rename the team",
            )
        ids[account] = f"team {t.name}"


def _namespaces(spec: EnvFields) -> None:
    for i, t in enumerate(spec.teams):
        if RESERVED_NAMESPACE.fullmatch(t.ns):
            key = "namespace" if t.namespace else "name"
            raise SpecError(
                f"teams[{i}].{key}",
                f"namespace {t.ns!r} belongs to the cluster's own components; the toolkit would relabel it (Pod Security) and fill it with team objects",
                f"give the team a namespace of its own, e.g. namespace: team-{t.name}",
            )
    if spec.xpk.enabled and RESERVED_NAMESPACE.fullmatch(spec.xpk.namespace):
        raise SpecError(
            "xpk.namespace", f"namespace {spec.xpk.namespace!r} belongs to the cluster's own components", "give xpk a namespace of its own, e.g. xpk"
        )


def _queues(spec: EnvFields) -> None:
    local: dict[tuple[str, str], str] = {}
    cluster_queues: dict[str, str] = {}
    if spec.xpk.enabled:
        local[(spec.xpk.namespace, XPK_LOCAL_QUEUE)] = "xpk's"
        cluster_queues[XPK_CLUSTER_QUEUE] = "xpk's"
    for i, t in enumerate(spec.teams):
        if (t.ns, t.queue) in local:
            raise SpecError(
                f"teams[{i}].local_queue",
                f"LocalQueue {t.ns}/{t.queue} is already {local[(t.ns, t.queue)]}; runs would go to the wrong ClusterQueue",
                "set another local_queue",
            )
        local[(t.ns, t.queue)] = f"teams[{i}]'s"
        cq = f"{t.name}-cq"
        if cq in cluster_queues:
            raise SpecError(f"teams[{i}].name", f"ClusterQueue {cq} is already {cluster_queues[cq]}", "rename the team")
        cluster_queues[cq] = f"teams[{i}]'s"


def _networks(spec: EnvFields) -> None:
    dcn = spec.network.dcn
    if dcn is None:
        return
    name = dcn.name or f"{spec.cluster.name}-dcn"
    if name == spec.network_name:
        raise SpecError(
            "network.dcn.name",
            f"{name!r} is also the cluster's network (and subnet) name; GCP names one network per project",
            f"give the DCN network another name, e.g. {spec.cluster.name}-dcn",
        )
    firewall = f"{name}{DCN_FIREWALL_SUFFIX}"
    if len(firewall) > GCE_NAME_MAX:
        raise SpecError(
            "network.dcn.name" if dcn.name else "cluster.name",
            f"makes the DCN firewall name {name[:12]}...{DCN_FIREWALL_SUFFIX}, {len(firewall)} characters; GCP allows {GCE_NAME_MAX}",
            f"shorten network.dcn.name to at most {GCE_NAME_MAX - len(DCN_FIREWALL_SUFFIX)} characters",
        )


def _state_bucket(spec: EnvFields) -> None:
    bucket = spec.state_bucket
    if spec.state.bucket is None:
        found = gcp_names.bucket_name_problem(bucket)
        if found is not None:
            raise SpecError("project", f"makes the Terraform state bucket name {bucket!r}: {found[0]}", "set state.bucket to a name of your own")
    for i, b in enumerate(spec.buckets):
        if b.name == bucket:
            raise SpecError(
                f"buckets[{i}].name",
                f"{b.name!r} is the Terraform state bucket; the stack would manage (and may destroy) the bucket holding its own state",
                "give the bucket another name, or set state.bucket",
            )
