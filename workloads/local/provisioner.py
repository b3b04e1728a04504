"""The local cluster's stand-in for GKE's DWS queued provisioning (and, through ``class_autoscaler``, for node
auto-provisioning of TPU ComputeClasses).

On GKE, Kueue's ``kueue.x-k8s.io/provisioning-request`` admission check creates a
ProvisioningRequest (class ``queued-provisioning.gke.io``) for a run's TPU pods once it
has reserved quota; GKE answers it when Dynamic Workload Scheduler has the whole slices,
creates the VMs in the queued node pools, and Kueue then admits the run. When the run is
over, the autoscaler removes the VMs again.

This daemon plays GKE's part on kwok nodes (``local up`` runs it like the rehearsal
daemon: ``python -m workloads.local.provisioner --state-dir DIR``; its log is
``<state>/logs/provisioner.log``). Every ``POLL_S`` it

- accepts each new ProvisioningRequest (``Accepted=True``);
- after ``delay_seconds``, either refuses it (``Failed=True``, while the ``refuse``
  budget lasts, so Kueue's retry and backoff show) or answers it: the slices' nodes, in
  node pools of the matching queued capacity option that hold none yet, labelled and
  tainted as GKE labels queued nodes (``workloads.local.nodes.provisioned_nodes``), then
  ``Provisioned=True`` with the ``ResizeRequestName`` detail Kueue copies into the pods'
  nodeSelector. With no free node pool it waits, as DWS does;
- removes a request's nodes once its run no longer needs them: the Workload finished,
  was evicted (quota released) or is gone.

``delay_seconds`` and ``refuse`` live in ``<state>/provisioner/config.json``
(``configure``), so a test or a benchmark can change them while the daemon runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.spec import CapacityOption, EnvSpec, TpuPoolSpec, load_spec
from toolkit.errors import ToolkitError
from toolkit.names import GKE_NODEPOOL_LABEL, GKE_TPU_ACCELERATOR_LABEL, GKE_TPU_TOPOLOGY_LABEL, TGK_POOL_LABEL
from toolkit.owned import write_atomic
from workloads.local import nodes as local_nodes
from workloads.local import state
from workloads.local.class_autoscaler import ClassAutoscaler
from workloads.local.disrupt import patch

PR_API = "autoscaling.x-k8s.io/v1"
POLL_S = 0.5
# Which request a node was provisioned for (namespace/name): what release() frees it by.
REQUEST_ANNOTATION = "tpu-gke-toolkit.io/provisioning-request"
FIELD_MANAGER = "tgk-provisioner"
DEFAULT_DELAY_S = 2.0


@dataclass
class Behaviour:
    """How the simulated DWS answers: after ``delay_seconds``, refusing the next ``refuse`` requests."""

    delay_seconds: float = DEFAULT_DELAY_S
    refuse: int = 0
    class_refuse: int = 0  # ComputeClasses: their first N priorities have no capacity (workloads.local.class_autoscaler)


def config_file(state_dir: Path) -> Path:
    return state_dir / "provisioner" / "config.json"


def ready_file(state_dir: Path) -> Path:
    return state_dir / "provisioner" / "ready"


def load_behaviour(state_dir: Path) -> Behaviour:
    try:
        doc = json.loads(config_file(state_dir).read_text())
        return Behaviour(float(doc.get("delay_seconds", DEFAULT_DELAY_S)), int(doc.get("refuse", 0)), int(doc.get("class_refuse", 0)))
    except (OSError, ValueError, TypeError):
        return Behaviour()


def configure(state_dir: Path, *, delay_seconds: float | None = None, refuse: int | None = None, class_refuse: int | None = None) -> Behaviour:
    """Change the daemon's behaviour (it reads the file every pass); unspecified fields are kept."""
    b = load_behaviour(state_dir)
    if delay_seconds is not None:
        b.delay_seconds = max(0.0, float(delay_seconds))
    if refuse is not None:
        b.refuse = max(0, int(refuse))
    if class_refuse is not None:
        b.class_refuse = max(0, int(class_refuse))
    path = config_file(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(asdict(b)))
    return b


def resize_name(namespace: str, name: str) -> str:
    """GKE's name for the node group it made for a request: a label value, so short and stable."""
    return "dws-" + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, status: str, reason: str, message: str, now: float) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": _iso(now)}


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in ((obj.get("status") or {}).get("conditions") or [])}


def is_true(obj: dict[str, Any], type_: str) -> bool:
    return (conditions(obj).get(type_) or {}).get("status") == "True"


def match_option(spec: EnvSpec, selector: dict[str, str]) -> tuple[TpuPoolSpec, CapacityOption] | None:
    """The queued capacity option whose nodes the pods' nodeSelector asks for (shape, and pool for a capacity list)."""
    for pool in spec.tpu_pools:
        shape = pool.shape
        if selector.get(GKE_TPU_ACCELERATOR_LABEL) != shape.accelerator_label or selector.get(GKE_TPU_TOPOLOGY_LABEL) != shape.topology:
            continue
        if selector.get(TGK_POOL_LABEL, pool.name) != pool.name:
            continue
        for option in pool.capacity_options():
            if local_nodes.is_queued(option):
                return pool, option
    return None


def slices_needed(pods: int, hosts_per_slice: int) -> int:
    """Whole slices for ``pods`` TPU pods, one per VM (a slice is all its VMs or none)."""
    return max(1, math.ceil(pods / hosts_per_slice))


def free_node_pools(option_pools: list[str], used: set[str]) -> list[str]:
    """The option's node pools holding no VM: each queued node pool holds at most one slice."""
    return [p for p in option_pools if p not in used]


def _say(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


class Provisioner:
    """One pass at a time (``tick``): answer requests, then release nodes no run needs."""

    def __init__(self, state_dir: Path, kube: Any) -> None:
        self.state_dir, self.kube = state_dir, kube
        self.first_seen: dict[str, float] = {}
        self._spec: tuple[str, float, EnvSpec] | None = None

    # -------------------------------------------------------------- inputs

    def spec(self) -> EnvSpec | None:
        """The spec the cluster was (last) brought up from, re-read when it changes."""
        try:
            path = json.loads((self.state_dir / "cluster.json").read_text()).get("spec")
            mtime = os.stat(path).st_mtime
        except (OSError, ValueError, TypeError):
            return self._spec[2] if self._spec else None
        if not self._spec or self._spec[:2] != (path, mtime):
            self._spec = (path, mtime, load_spec(path))
        return self._spec[2]

    def _info(self, api: str, kind: str) -> Any:
        return self.kube.resource(api, kind)

    # ---------------------------------------------------------------- pass

    def tick(self, now: float) -> None:
        prs = self.kube.list(self._info(PR_API, "ProvisioningRequest"))
        spec = self.spec()
        behaviour = load_behaviour(self.state_dir)
        for pr in prs:
            if spec is not None:
                self.answer(pr, spec, behaviour, now)
        self.release(prs)
        if spec is not None:
            ClassAutoscaler(self.kube, _say).tick(spec, behaviour.class_refuse)

    def _set_status(self, pr: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pr["metadata"]
        info = self._info(PR_API, "ProvisioningRequest")
        patch(self.kube, info.path(meta["namespace"], meta["name"]) + "/status", {"status": status})

    def answer(self, pr: dict[str, Any], spec: EnvSpec, behaviour: Behaviour, now: float) -> None:
        meta = pr["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        conds = conditions(pr)
        if is_true(pr, "Provisioned") or is_true(pr, "Failed"):
            return
        first = self.first_seen.setdefault(key, now)
        accepted = condition("Accepted", "True", "Accepted", "the request is queued for Dynamic Workload Scheduler (simulated)", now)
        if "Accepted" not in conds:
            self._set_status(pr, {"conditions": [accepted]})
            _say(f"{key}: accepted")
            return
        if now - first < behaviour.delay_seconds:
            return
        if behaviour.refuse > 0:
            configure(self.state_dir, refuse=behaviour.refuse - 1)
            failed = condition("Failed", "True", "CapacityNotAvailable", "no capacity for the requested TPU slices (simulated refusal)", now)
            self._set_status(pr, {"conditions": [conds["Accepted"], failed]})
            _say(f"{key}: refused ({behaviour.refuse - 1} more refusals to come)")
            return
        self._provision(pr, key, spec, conds["Accepted"], now)

    def _provision(self, pr: dict[str, Any], key: str, spec: EnvSpec, accepted: dict[str, Any], now: float) -> None:
        ns, name = pr["metadata"]["namespace"], pr["metadata"]["name"]
        pods, selector = 0, {}
        for ps in pr["spec"]["podSets"]:
            pt = self.kube.get(self._info("v1", "PodTemplate"), ps["podTemplateRef"]["name"], ns)
            if pt is None:
                return  # Kueue creates the templates with the request; the next pass sees them
            selector = {**selector, **(pt["template"]["spec"].get("nodeSelector") or {})}
            pods += int(ps["count"])
        found = match_option(spec, selector)
        if found is None:
            failed = condition("Failed", "True", "NoQueuedNodePool", f"no queued-provisioning node pool matches nodeSelector {selector}", now)
            self._set_status(pr, {"conditions": [accepted, failed]})
            _say(f"{key}: refused, no matching queued node pool")
            return
        pool, option = found
        node_info = self._info("v1", "Node")
        used = {n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "") for n in self.kube.list(node_info, label_selector=f"{TGK_POOL_LABEL}={pool.name}")}
        want = slices_needed(pods, pool.shape.nodes)
        free = free_node_pools(pool.option_node_pool_names(option), used)
        if len(free) < want:
            return  # DWS keeps the request queued until whole slices are free
        resize = resize_name(ns, name)
        for node in local_nodes.provisioned_nodes(spec, pool, option, free[:want], resize):
            node["metadata"]["annotations"][REQUEST_ANNOTATION] = key
            self.kube.create(node, field_manager=FIELD_MANAGER)
        done = condition("Provisioned", "True", "Provisioned", f"{want} slice(s) of {pool.shape.accelerator_type} provisioned in {', '.join(free[:want])}", now)
        self._set_status(pr, {"conditions": [accepted, done], "provisioningClassDetails": {"ResizeRequestName": resize}})
        _say(f"{key}: provisioned {want} slice(s) in {', '.join(free[:want])} after {now - self.first_seen.get(key, now):.2f}s")

    def release(self, prs: list[dict[str, Any]]) -> None:
        """Delete the nodes of requests whose run is over (finished, evicted or gone), as the autoscaler scales down."""
        node_info = self._info("v1", "Node")
        by_request: dict[str, list[str]] = {}
        for n in self.kube.list(node_info):
            req = (n["metadata"].get("annotations") or {}).get(REQUEST_ANNOTATION)
            if req:
                by_request.setdefault(req, []).append(n["metadata"]["name"])
        if not by_request:
            return
        live = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in prs}
        for key, names in by_request.items():
            if self._needed(live.get(key)):
                continue
            for name in names:
                self.kube.delete(node_info, name, propagation="Background")
            self.first_seen.pop(key, None)
            _say(f"{key}: run over; removed {len(names)} node(s)")

    def _needed(self, pr: dict[str, Any] | None) -> bool:
        if pr is None:
            return False
        owner = next((o for o in pr["metadata"].get("ownerReferences") or [] if o.get("kind") == "Workload"), None)
        if owner is None:
            return True  # not Kueue's: kept while the request exists
        wl = self.kube.get(self.kube.kueue("Workload"), owner["name"], pr["metadata"]["namespace"])
        return wl is not None and not is_true(wl, "Finished") and is_true(wl, "QuotaReserved")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads.local.provisioner", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    state_dir = args.state_dir
    prov = Provisioner(state_dir, state.client(state_dir))
    ready = ready_file(state_dir)
    _say(f"simulated DWS provisioner for {state_dir} (poll {POLL_S}s)")
    while True:
        now = time.time()
        try:
            prov.tick(now)
        except (ToolkitError, OSError, KeyError) as e:
            _say(f"tick: {e}")
        if not ready.is_file():
            ready.parent.mkdir(parents=True, exist_ok=True)
            ready.write_text(f"{os.getpid()}\n")
        time.sleep(max(0.0, POLL_S - (time.time() - now)))


if __name__ == "__main__":
    raise SystemExit(main())
