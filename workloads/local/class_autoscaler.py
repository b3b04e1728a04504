"""The local cluster's stand-in for GKE's node auto-provisioning of TPU ComputeClasses (``tpu_pools[].compute_class``).

On GKE, a pod that selects a ComputeClass (``cloud.google.com/compute-class``, which
Kueue writes into an admitted run's pods from the pool's flavor) and cannot be scheduled
makes the autoscaler create a node pool for it from the class's first priority that has
capacity, a TPU slice at a time (all its VMs or none); an empty auto-created node pool is
removed. ``workloads.local.provisioner`` runs ``ClassAutoscaler.tick`` on every pass, so
the rehearsal plays it on kwok nodes:

- each Job (one slice of a JobSet run) with pods pending on a class gets one slice of
  nodes, from the first priority of the class that is not out of capacity: the first
  ``class_refuse`` priorities are (``provisioner.configure``), so the refused-first case
  can be rehearsed; with every priority out of capacity the pods stay pending, as GKE
  leaves them;
- the nodes are labelled as GKE labels them (the class's name, the priority's capacity:
  spot nodes carry ``gke-spot``) and tainted with the class, which the flavor's
  toleration lets the run's pods through;
- a slice whose Job has no pod left to run is removed (GKE scales an idle node pool away).

The decisions (``pending_slices``, ``choose``, ``idle_slices``) are pure; ``tick`` does the I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from infra.spec import CapacityOption, EnvSpec, TpuPoolSpec
from toolkit.names import GKE_COMPUTE_CLASS_LABEL, JOBSET_JOB_INDEX_LABEL, K8S_JOB_NAME_LABEL, TGK_LOCAL_MANAGED_LABEL
from workloads.local import nodes as local_nodes

# Which slice (<namespace>/<Job>) a node was made for: what idle_slices frees it by.
SLICE_ANNOTATION = "tpu-gke-toolkit.io/class-slice"
FIELD_MANAGER = "tgk-class-autoscaler"
DONE_PHASES = ("Succeeded", "Failed")


def class_pools(spec: EnvSpec) -> dict[str, TpuPoolSpec]:
    return {p.class_name: p for p in spec.tpu_pools if p.class_name is not None}


def _slice_of(pod: dict[str, Any]) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    job = labels.get(K8S_JOB_NAME_LABEL)
    return f"{pod['metadata'].get('namespace', '')}/{job}" if job else None


def pending_slices(pods: list[dict[str, Any]], classes: set[str]) -> dict[str, tuple[str, int]]:
    """Slice key -> (class, JobSet job index) of every Job with a pod that selects a class and has no node yet."""
    out: dict[str, tuple[str, int]] = {}
    for pod in pods:
        cls = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(GKE_COMPUTE_CLASS_LABEL)
        key = _slice_of(pod)
        if cls not in classes or key is None or (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            continue
        index = int((pod["metadata"].get("labels") or {}).get(JOBSET_JOB_INDEX_LABEL, 0))
        out.setdefault(key, (cls, index))
    return out


def choose(pool: TpuPoolSpec, refuse: int) -> CapacityOption | None:
    """The class's first priority with capacity: the first ``refuse`` have none (None: no priority has any)."""
    options = pool.capacity_options()
    return options[refuse] if refuse < len(options) else None


def idle_slices(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Slice key -> node names of the slices made here whose Job has no pod left to run."""
    live = {k for p in pods if (k := _slice_of(p)) and (p.get("status") or {}).get("phase") not in DONE_PHASES}
    out: dict[str, list[str]] = {}
    for n in nodes:
        key = (n["metadata"].get("annotations") or {}).get(SLICE_ANNOTATION)
        if key and key not in live:
            out.setdefault(key, []).append(n["metadata"]["name"])
    return out


def node_pool_name(cls: str, key: str) -> str:
    """GKE names an auto-created node pool nap-<...>: a label value, so short and stable per slice."""
    return f"nap-{cls[:20]}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def slice_nodes(spec: EnvSpec, pool: TpuPoolSpec, option: CapacityOption, key: str, index: int) -> list[dict[str, Any]]:
    """The slice's VMs as GKE makes them for the class: its label and taint, the priority's capacity labels."""
    cls = pool.class_name
    assert cls is not None
    out = local_nodes.slice_nodes(spec, pool, option, node_pool_name(cls, key), index, extra_labels={GKE_COMPUTE_CLASS_LABEL: cls})
    for n in out:
        n["metadata"]["labels"].pop(TGK_LOCAL_MANAGED_LABEL, None)  # the autoscaler's, not `local up`'s
        n["metadata"]["annotations"][SLICE_ANNOTATION] = key
        n["spec"]["taints"] = [*n["spec"]["taints"], {"key": GKE_COMPUTE_CLASS_LABEL, "value": cls, "effect": "NoSchedule"}]
    return out


class ClassAutoscaler:
    """One pass at a time over the cluster's pods and the nodes it made (``kube``: the local cluster's client)."""

    def __init__(self, kube: Any, say: Callable[[str], None]) -> None:
        self.kube, self.say = kube, say

    def tick(self, spec: EnvSpec, refuse: int) -> None:
        pools = class_pools(spec)
        if not pools:
            return
        pod_info, node_info = self.kube.resource("v1", "Pod"), self.kube.resource("v1", "Node")
        pods = self.kube.list(pod_info)
        made = [n for n in self.kube.list(node_info) if SLICE_ANNOTATION in (n["metadata"].get("annotations") or {})]
        have = {n["metadata"]["annotations"][SLICE_ANNOTATION] for n in made}
        for key, (cls, index) in pending_slices(pods, set(pools)).items():
            if key in have:
                continue  # its nodes exist; the scheduler places the pods
            pool = pools[cls]
            option = choose(pool, refuse)
            if option is None:
                continue  # every priority is out of capacity: the pods stay pending
            skipped = ", ".join(o.mode for o in pool.capacity_options()[:refuse])
            for node in slice_nodes(spec, pool, option, key, index):
                self.kube.create(node, field_manager=FIELD_MANAGER)
            self.say(f"{key}: class {cls}: a slice from priority {option.index} ({option.mode})" + (f" after {skipped} had no capacity" if skipped else ""))
        for key, names in idle_slices(made, pods).items():
            for name in names:
                self.kube.delete(node_info, name, propagation="Background")
            self.say(f"{key}: idle; removed its {len(names)} node(s)")
