"""Dynamic slicing on the local cluster: the nodes' partition labels, and what GKE's two slice controllers do.

GKE labels every VM of a PROVISION_ONLY sub-block node pool with where it sits (``partition_labels``):
its block and sub-block (``cloud.google.com/gce-topology-block``, ``-subblock``), the id of every
partition it belongs to, one per shape, 4x4x4 down to 2x2x1
(``cloud.google.com/gke-tpu-partition-<shape>-id``), and each partition's health
(``...-<shape>-state``: HEALTHY, or UNHEALTHY once a host of it is faulty); a PROVISION_ONLY node
has no ``cloud.google.com/gke-tpu-topology`` of its own until a slice on it is formed. Sixteen
hosts make a sub-block; host ``i`` is in 2x4x4 partition ``i // 8``, 2x2x4 ``i // 4``, 2x2x2
``i // 2`` and 2x2x1 ``i`` of it (the ids are GKE's opaque 32-hex-digit strings; here a digest of
the node pool and the partition).

``SliceControllers.tick`` (a step of the rehearsal daemon, ``rehearsald``) plays both controllers
the run's admission goes through, as their published behaviour has them:

- the **Kueue slice controller** (admission check controller ``accelerator.gke.io/slice``): for a
  Workload that holds a quota reservation with a topology assignment and whose check is Pending,
  it creates one ``Slice`` (``accelerator.gke.io/v1beta1``) per slice of each podset, named
  ``<namespace>-<workload>-<podset>-<index>``, from the partition ids of the assigned nodes (a
  sub-slice: its one partition; a super-slice: its 4x4x4 sub-blocks); sets the check Ready, with
  the podset update GKE's controller makes (a ``cloud.google.com/gke-tpu-topology`` node
  selector), once every Slice is ACTIVE; sets it Retry (Kueue evicts the Workload and queues it
  again) when a Slice FAILED; deletes the Slices of a Workload that is gone, finished, evicted or
  no longer holds its reservation;
- **GKE's slice controller**: a new Slice is ACTIVATING, then ACTIVE after ``ACTIVATION_S`` if every
  partition of it is HEALTHY, and its nodes get the slice's topology label; an UNHEALTHY partition
  makes it FAILED (at once if it is active). A deleted Slice's nodes lose the label.

``fault(kube, node_pool)`` is a faulty host of a sub-block, as the All Capacity mode reports it:
every partition of that sub-block UNHEALTHY; ``repair`` makes them HEALTHY again. Neither is
faster than GKE's published steps: GKE publishes no activation time (Cluster Toolkit's controller
waits up to 6 min), so ``ACTIVATION_S`` is the rehearsal's, like its other compressed waits
(``workloads.local.disrupt``), and ``$TGK_SLICE_ACTIVATION_S`` changes it.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from typing import Any

from infra.spec.ironwood import SUB_BLOCK_TOPOLOGY
from toolkit import names
from toolkit.errors import Conflict, FieldError, NotFound, ToolkitError
from workloads.cluster.client import Cluster
from workloads.planning.dynamic_slices import BLOCK_LABEL, SUB_BLOCK_LABEL, SUB_SLICES, kind_of, partition_id_label, partition_state_label
from workloads.render.dynamic_slicing import KUEUE_SLICE_REQUIRED, SLICE_API, SLICE_CONTROLLER

ACTIVATION_ENV = "TGK_SLICE_ACTIVATION_S"
ACTIVATION_S = 5.0
RETRY_AFTER_S = 5  # the check's requeueAfterSeconds after a failed Slice (the controller's retry delay)
HEALTHY, UNHEALTHY = "HEALTHY", "UNHEALTHY"
TOPOLOGY_MODE_LABEL = "cloud.google.com/gke-accelerator-topology-mode"
OWNER_NS = f"{names.TGK_LOCAL_PREFIX}/workload-namespace"
OWNER_NAME = f"{names.TGK_LOCAL_PREFIX}/workload-name"
SLICE_TOPOLOGY_OWNER = f"{names.TGK_LOCAL_PREFIX}/slice"  # which Slice set a node's topology label
# Hosts of a sub-block per partition shape (2x2x1 chips per host).
HOSTS = {"2x2x1": 1, "2x2x2": 2, "2x2x4": 4, "2x4x4": 8, SUB_BLOCK_TOPOLOGY: 16}
KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"


def partition_id(node_pool: str, shape: str, index: int) -> str:
    return hashlib.sha256(f"{node_pool}/{shape}/{index}".encode()).hexdigest()[:32]


def partition_labels(block: str, node_pool: str, host: int) -> dict[str, str]:
    """The labels GKE puts on host ``host`` (0-15) of sub-block node pool ``node_pool``."""
    labels = {BLOCK_LABEL: block, SUB_BLOCK_LABEL: node_pool, TOPOLOGY_MODE_LABEL: "PROVISION_ONLY"}
    for shape, hosts in HOSTS.items():
        labels[partition_id_label(shape)] = partition_id(node_pool, shape, host // hosts)
        labels[partition_state_label(shape)] = HEALTHY
    return labels


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def activation_seconds() -> float:
    raw = os.environ.get(ACTIVATION_ENV, "").strip()
    try:
        return max(0.0, float(raw)) if raw else ACTIVATION_S
    except ValueError:
        return ACTIVATION_S


# ------------------------------------------------------------------ a faulty sub-block


def _pool_nodes(kube: Cluster, node_pool: str) -> list[dict[str, Any]]:
    return [
        n
        for n in kube.list(kube.resource("v1", "Node"), label_selector=f"{names.GKE_NODEPOOL_LABEL}={node_pool}")
        if SUB_BLOCK_LABEL in n["metadata"]["labels"]
    ]


def _set_health(kube: Cluster, node_pool: str, state: str) -> int:
    nodes = _pool_nodes(kube, node_pool)
    if not nodes:
        raise FieldError(
            "NODE_POOL",
            f"no dynamically sliced sub-block node pool {node_pool!r} on the local cluster",
            "name a node pool of a pool with dynamic_slicing: true",
        )
    info = kube.resource("v1", "Node")
    for n in nodes:
        labels = {partition_state_label(s): state for s in HOSTS}
        kube.request("PATCH", info.path(None, n["metadata"]["name"]), body={"metadata": {"labels": labels}}, content_type="application/merge-patch+json")
    return len(nodes)


def fault(kube: Cluster, node_pool: str) -> int:
    """A faulty host in sub-block ``node_pool``: every partition of it UNHEALTHY (GKE takes the sub-block out). Returns its nodes."""
    return _set_health(kube, node_pool, UNHEALTHY)


def repair(kube: Cluster, node_pool: str) -> int:
    return _set_health(kube, node_pool, HEALTHY)


# ------------------------------------------------------------------ the controllers


def _ready(s: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (s.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)


def slice_state(s: dict[str, Any]) -> str:
    c = _ready(s)
    return "CREATED" if c is None else str(c.get("reason") or "")


class SliceControllers:
    """Both controllers' passes over the cluster (see the module docstring)."""

    def __init__(self, kube: Cluster, say: Any = lambda m: None) -> None:
        self.kube, self.say = kube, say
        self.activating: dict[str, float] = {}  # Slice name -> when it began activating

    def tick(self, now: float) -> None:
        try:
            slice_info = self.kube.resource(SLICE_API, "Slice")
        except NotFound:
            return  # the Slice API is not installed: nothing to play
        nodes = {n["metadata"]["name"]: n for n in self.kube.list(self.kube.resource("v1", "Node"))}
        slices = {s["metadata"]["name"]: s for s in self.kube.list(slice_info)}
        self._gke(slice_info, slices, nodes, now)
        self._kueue(slice_info, slices, nodes)

    # GKE's: activate, fail, label and unlabel nodes
    def _gke(self, info: Any, slices: dict[str, dict[str, Any]], nodes: dict[str, dict[str, Any]], now: float) -> None:
        for name, s in slices.items():
            state = slice_state(s)
            members = self._members(s, nodes)
            healthy = members and all(self._healthy(n, s["spec"]["topology"]) for n in members)
            if state in ("CREATED", "ACTIVATING"):
                start = self.activating.setdefault(name, now)
                if not healthy:
                    self._status(info, s, "False", "FAILED", "a partition of the slice is unhealthy")
                elif now - start >= activation_seconds():
                    self._label(members, s)
                    self._status(info, s, "True", "ACTIVE", f"slice of {len(members)} hosts formed")
                    self.activating.pop(name, None)
                elif state == "CREATED":
                    self._status(info, s, "False", "ACTIVATING", "forming the slice")
            elif state in ("ACTIVE", "ACTIVE_DEGRADED") and not healthy:
                self._status(info, s, "False", "FAILED", "a partition of the slice became unhealthy")
        for n in nodes.values():  # a deleted Slice's nodes lose its topology
            owner = (n["metadata"].get("annotations") or {}).get(SLICE_TOPOLOGY_OWNER)
            if owner and owner not in slices:
                self._node_patch(n, {"metadata": {"labels": {names.GKE_TPU_TOPOLOGY_LABEL: None}, "annotations": {SLICE_TOPOLOGY_OWNER: None}}})

    @staticmethod
    def _members(s: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        ids = set(s["spec"]["partitionIds"])
        topo = s["spec"]["topology"]
        level = partition_id_label(topo if kind_of(topo) == "sub" else SUB_BLOCK_TOPOLOGY)
        return [n for n in nodes.values() if n["metadata"]["labels"].get(level) in ids]

    @staticmethod
    def _healthy(node: dict[str, Any], topology: str) -> bool:
        labels = node["metadata"]["labels"]
        shapes = [topology] if topology in SUB_SLICES else [SUB_BLOCK_TOPOLOGY]
        return all(labels.get(partition_state_label(t)) == HEALTHY for t in shapes)

    def _label(self, members: list[dict[str, Any]], s: dict[str, Any]) -> None:
        for n in members:
            self._node_patch(
                n, {"metadata": {"labels": {names.GKE_TPU_TOPOLOGY_LABEL: s["spec"]["topology"]}, "annotations": {SLICE_TOPOLOGY_OWNER: s["metadata"]["name"]}}}
            )

    def _node_patch(self, n: dict[str, Any], body: dict[str, Any]) -> None:
        info = self.kube.resource("v1", "Node")
        try:
            self.kube.request("PATCH", info.path(None, n["metadata"]["name"]), body=body, content_type="application/merge-patch+json")
        except NotFound:
            pass

    def _status(self, info: Any, s: dict[str, Any], status: str, reason: str, message: str) -> None:
        cond = {"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": _now_iso()}
        try:
            self.kube.request(
                "PATCH",
                info.path(None, s["metadata"]["name"]) + "/status",
                body={"status": {"conditions": [cond]}},
                content_type="application/merge-patch+json",
            )
            self.say(f"slice {s['metadata']['name']} ({s['spec']['topology']}): {reason}")
        except NotFound:
            pass

    # Kueue's slice controller: Slices from the topology assignment, and the admission check's state
    def _kueue(self, info: Any, slices: dict[str, dict[str, Any]], nodes: dict[str, dict[str, Any]]) -> None:
        ac_info = self.kube.resource(KUEUE_V1BETA1, "AdmissionCheck")
        mine = [c for c in self.kube.list(ac_info) if (c.get("spec") or {}).get("controllerName") == SLICE_CONTROLLER]
        for c in mine:  # the controller keeps its checks Active, as every admission check controller does
            if not any(x.get("type") == "Active" and x.get("status") == "True" for x in (c.get("status") or {}).get("conditions") or []):
                cond = {"type": "Active", "status": "True", "reason": "Active", "message": "The admission check is active", "lastTransitionTime": _now_iso()}
                self.kube.request(
                    "PATCH",
                    ac_info.path(None, c["metadata"]["name"]) + "/status",
                    body={"status": {"conditions": [cond]}},
                    content_type="application/merge-patch+json",
                )
                self.say(f"admission check {c['metadata']['name']}: Active")
        checks = {c["metadata"]["name"] for c in mine}
        if not checks:
            return
        wls = self.kube.list(self.kube.resource(KUEUE_V1BETA1, "Workload"))
        live: set[str] = set()
        for wl in wls:
            st = wl.get("status") or {}
            ac = next((a for a in st.get("admissionChecks") or [] if a.get("name") in checks), None)
            if ac is None:
                continue
            meta = wl["metadata"]
            reserved = any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in st.get("conditions") or [])
            finished = any(c.get("type") in ("Finished", "Evicted") and c.get("status") == "True" for c in st.get("conditions") or [])
            if not reserved or finished or st.get("admission") is None or ac.get("state") == "Retry":
                continue  # its Slices are deleted below
            desired = self._desired(wl, nodes)
            if desired is None:
                continue
            live.update(desired)
            for name, spec in desired.items():
                if name not in slices:
                    self._create(info, name, spec, meta)
            states = [slice_state(slices[n]) if n in slices else "CREATED" for n in desired]
            if any(s == "FAILED" for s in states):
                self._check(wl, ac, "Retry", f"{states.count('FAILED')} Slice(s) FAILED", retry=True)
            elif all(s in ("ACTIVE", "ACTIVE_DEGRADED") for s in states) and ac.get("state") != "Ready":
                self._check(wl, ac, "Ready", f"{len(states)} Slice(s) ACTIVE", topologies=self._topologies(wl))
            elif ac.get("state") == "Pending":
                msg = ", ".join(f"{states.count(x)} {x}" for x in dict.fromkeys(states))
                if ac.get("message") != msg:
                    self._check(wl, ac, "Pending", msg)
        for name, s in slices.items():  # Slices of Workloads that no longer hold them
            if (s["metadata"].get("annotations") or {}).get(OWNER_NAME) and name not in live:
                try:
                    self.kube.delete(info, name, propagation="Background")
                    self.activating.pop(name, None)
                    self.say(f"slice {name}: deleted (its workload no longer holds it)")
                except NotFound:
                    pass

    def _desired(self, wl: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
        """Slice name -> spec for every podset assignment with a topology; None while an assignment names unknown nodes."""
        out: dict[str, dict[str, Any]] = {}
        podsets = {p["name"]: p for p in (wl.get("spec") or {}).get("podSets") or []}
        for psa in wl["status"]["admission"].get("podSetAssignments") or []:
            ps = podsets.get(psa["name"])
            ta = psa.get("topologyAssignment")
            if ps is None or ta is None:
                continue
            tmpl = ps.get("template") or {}
            topo = (tmpl.get("metadata") or {}).get("annotations", {}).get(names.GKE_TPU_SLICE_TOPOLOGY_ANNOTATION)
            level = (tmpl.get("metadata") or {}).get("annotations", {}).get(KUEUE_SLICE_REQUIRED)
            if not topo or not level:
                continue
            host = ta["levels"].index(names.K8S_HOSTNAME_LABEL) if names.K8S_HOSTNAME_LABEL in ta["levels"] else None
            if host is None:
                return None
            ids: list[str] = []
            for d in ta.get("domains") or []:
                node = nodes.get(d["values"][host])
                if node is None or level not in node["metadata"]["labels"]:
                    return None
                pid = node["metadata"]["labels"][level]
                if pid not in ids:
                    ids.append(pid)
            per = 1 if kind_of(topo) == "sub" else max(1, hosts_of(topo) // HOSTS[SUB_BLOCK_TOPOLOGY])
            for i in range(0, len(ids), per):
                name = f"{wl['metadata']['namespace']}-{wl['metadata']['name']}-{psa['name']}-{i // per}"
                out[name] = {"type": "tpu7x", "topology": topo, "partitionIds": ids[i : i + per]}
        return out

    def _create(self, info: Any, name: str, spec: dict[str, Any], meta: dict[str, Any]) -> None:
        obj = {
            "apiVersion": SLICE_API,
            "kind": "Slice",
            "metadata": {"name": name, "annotations": {OWNER_NS: meta["namespace"], OWNER_NAME: meta["name"]}},
            "spec": spec,
        }
        try:
            self.kube.create(obj, field_manager="tgk-local-slice-controller")
            self.say(f"slice {name}: created ({spec['topology']}, partitions {', '.join(p[:8] for p in spec['partitionIds'])})")
        except Conflict:
            pass

    @staticmethod
    def _topologies(wl: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            topo = ((ps.get("template") or {}).get("metadata") or {}).get("annotations", {}).get(names.GKE_TPU_SLICE_TOPOLOGY_ANNOTATION)
            if topo:
                out.append({"name": ps["name"], "nodeSelector": {names.GKE_TPU_TOPOLOGY_LABEL: topo}})
        return out

    def _check(
        self, wl: dict[str, Any], ac: dict[str, Any], state: str, message: str, *, retry: bool = False, topologies: list[dict[str, Any]] | None = None
    ) -> None:
        checks = []
        for a in wl["status"].get("admissionChecks") or []:
            if a.get("name") == ac["name"]:
                a = {**a, "state": state, "message": message, "lastTransitionTime": _now_iso()}
                if topologies is not None:
                    a["podSetUpdates"] = topologies
                if retry:
                    a["requeueAfterSeconds"] = RETRY_AFTER_S
            checks.append(a)
        info = self.kube.resource(KUEUE_V1BETA1, "Workload")
        body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": {"admissionChecks": checks}}
        try:
            self.kube.request(
                "PATCH", info.path(wl["metadata"]["namespace"], wl["metadata"]["name"]) + "/status", body=body, content_type="application/merge-patch+json"
            )
            self.say(f"workload {wl['metadata']['namespace']}/{wl['metadata']['name']}: check {ac['name']} {state} ({message})")
        except (Conflict, NotFound):
            pass  # changed meanwhile: the next pass sees it
        except ToolkitError as e:
            self.say(f"workload {wl['metadata']['name']}: cannot set check {ac['name']} {state}: {e}")


def hosts_of(topology: str) -> int:
    """Hosts of a slice of ``topology`` (4 chips each)."""
    a, b, c = (int(x) for x in topology.split("x"))
    return a * b * c // 4
