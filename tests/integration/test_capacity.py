"""Capacity on the local cluster: ordered fallback between flavors, and DWS queued provisioning.

* fallback: a pool lists a reservation, then spot. With the reservation's flavor full
  (one run holds its only slice), the next run is admitted on the spot flavor and its
  pods land on the spot option's kwok nodes, never the reservation's.
* DWS queued provisioning: a run on a queued flex-start pool reserves quota, Kueue
  creates a ProvisioningRequest, the simulated provisioner refuses the first one (Kueue
  retries after its backoff) and answers the second by creating the slice's nodes; the
  run is admitted, its pods run on exactly those nodes, it completes, and the nodes go.
* a ComputeClass pool: no nodes until a run is admitted; its reservation (the class's
  first priority) is out of capacity, so the simulated autoscaler makes the slice from the
  next priority (spot), the run completes there, and the idle slice is removed.

This module starts a control plane of its own (``<test state>-capacity``), built from a
spec with capacity lists, so the tier's shared default-spec cluster is never changed.
Waits poll with deadlines; figures are scripts/bench_capacity.py's, not asserted here.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.spec import load_spec
from tests.support import run_module
from tests.support.local_cluster import own_spec, start_own_cluster, wait_for
from toolkit.names import GKE_COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL, TPU_RESOURCE

NS = "research"

CAPACITY_SPEC: dict[str, Any] = own_spec(
    "capacity",
    tpu_pools=[
        {
            "name": "v5e",
            "type": "v5litepod-16",
            "slices": 1,
            "capacity": [{"mode": "reservation", "name": "v5e-res", "zone": "us-west4-a"}, "spot"],
        },
        {
            "name": "flex",
            "type": "v6e-16",
            "slices": 2,
            "capacity": {"mode": "flex-start", "queued": True, "retry": {"limit": 3, "base_seconds": 1, "max_seconds": 4}},
        },
        {
            # A shape of its own: runs of one shape go to whichever pool of it Kueue admits them on.
            "name": "cc",
            "type": "v5litepod-32",
            "slices": 1,
            "capacity": [{"mode": "reservation", "name": "cc-res", "zone": "us-west4-a"}, "spot"],
            "compute_class": True,
        },
    ],
    teams=[{"name": "research", "namespace": NS}],
)


@pytest.fixture(scope="module")
def capacity_cluster(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    yield from start_own_cluster("capacity", CAPACITY_SPEC, tmp_path_factory.mktemp("capacity"))


def wl_cli(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


def submit(spec_path: Path, kubeconfig: Path, run: str, *extra: str, wait_admission: bool = False) -> None:
    args = ["submit", "hello-tpu", "--spec", str(spec_path), "--kubeconfig", str(kubeconfig), "--name", run, "--slices", "1", *extra]
    if not wait_admission:
        args.append("--no-wait")
    r = wl_cli(*args)
    assert r.returncode == 0, (r.stdout, r.stderr)


def workload(kube, ns: str, run: str) -> dict | None:
    js = kube.jobset(ns, run)
    return kube.workload_for(ns, js) if js else None


def admitted_flavor(wl: dict | None) -> str | None:
    """The TPU flavor Kueue admitted the Workload on, once it is admitted."""
    if not wl:
        return None
    conds = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
    if conds.get("Admitted") != "True":
        return None
    (psa, *_) = wl["status"]["admission"]["podSetAssignments"]
    return psa["flavors"][TPU_RESOURCE]


def running_pods(kube, ns: str, run: str, n: int) -> list[dict] | None:
    pods = [p for p in kube.pods(ns, run) if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods) else None


def finished(kube, ns: str, run: str) -> str | None:
    for c in ((kube.jobset(ns, run) or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Completed", "Failed") and c.get("status") == "True":
            return c["type"]
    return None


def node_pools(kube) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "") for n in kube.list(kube.resource("v1", "Node"))}


def delete(kubeconfig: Path, spec_path: Path, *runs: str) -> None:
    for run in runs:
        wl_cli("delete", run, "--yes", "--spec", str(spec_path), "--kubeconfig", str(kubeconfig))


# ------------------------------------------------------------------ fallback


def test_a_full_first_flavor_falls_to_the_next(capacity_cluster) -> None:
    lc, spec_path = capacity_cluster
    kube = lc.client()
    spec = load_spec(spec_path)
    pool = spec.tpu_pools[0]
    res, spot = pool.capacity_options()
    first, second = f"fb-a-{secrets.token_hex(2)}", f"fb-b-{secrets.token_hex(2)}"
    try:
        submit(spec_path, lc.kubeconfig, first, "--rehearse-seconds", "300", wait_admission=True)
        assert admitted_flavor(workload(kube, NS, first)) == f"{pool.name}-{res.tag}"

        t0 = time.monotonic()
        submit(spec_path, lc.kubeconfig, second, "--rehearse-seconds", "300")
        flavor = wait_for(lambda: admitted_flavor(workload(kube, NS, second)), 120, f"admission of {second}")
        sys.stderr.write(f"fallback admission: {time.monotonic() - t0:.2f}s after submit\n")
        assert flavor == f"{pool.name}-{spot.tag}"

        n = pool.shape.nodes
        pods = wait_for(lambda: running_pods(kube, NS, second, n), 120, f"{second}'s pods Running")
        on = node_pools(kube)
        assert {on[p["spec"]["nodeName"]] for p in pods} == set(pool.option_node_pool_names(spot))
        # and the first run stayed on the reservation's node pools
        firsts = wait_for(lambda: running_pods(kube, NS, first, n), 120, f"{first}'s pods Running")
        assert {on[p["spec"]["nodeName"]] for p in firsts} == set(pool.option_node_pool_names(res))
    finally:
        delete(lc.kubeconfig, spec_path, first, second)


# ------------------------------------------------------------------ DWS queued provisioning


def _check_state(wl: dict | None) -> str | None:
    checks = ((wl or {}).get("status") or {}).get("admissionChecks") or []
    return checks[0].get("state") if checks else None


def test_queued_provisioning_admits_after_the_slice_exists_and_removes_it_after(capacity_cluster) -> None:
    from workloads.local import provisioner
    from workloads.render import kueue as kueue_render

    lc, spec_path = capacity_cluster
    kube = lc.client()
    spec = load_spec(spec_path)
    pool = next(p for p in spec.tpu_pools if p.queued)
    pr_info = kube.resource(provisioner.PR_API, "ProvisioningRequest")
    node_info = kube.resource("v1", "Node")

    def queued_nodes() -> list[dict]:
        return [n for n in kube.list(node_info) if (n["metadata"].get("annotations") or {}).get(provisioner.REQUEST_ANNOTATION)]

    assert queued_nodes() == [] and not any(n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) in pool.node_pool_names() for n in kube.list(node_info)), (
        "a queued pool has no nodes until a request is answered"
    )
    provisioner.configure(lc.state_dir, delay_seconds=1.0, refuse=1)
    run = f"dws-{secrets.token_hex(2)}"
    t0 = time.monotonic()
    try:
        submit(spec_path, lc.kubeconfig, run, "--pool", pool.name, "--rehearse-seconds", "4")
        # quota first, then the request; the run is not admitted while it is pending
        first = wait_for(lambda: next((p for p in kube.list(pr_info, NS) if p["metadata"]["name"].endswith("-1")), None), 60, "the first ProvisioningRequest")
        assert first["spec"]["provisioningClassName"] == kueue_render.PROVISIONING_CLASS
        assert first["spec"]["parameters"]["tpu-topology"] == pool.shape.topology
        assert sum(ps["count"] for ps in first["spec"]["podSets"]) == pool.shape.nodes

        # refused: Failed, and Kueue retries with a second request after its backoff. Kueue deletes
        # the failed request as soon as it has made the retry (within ~0.2 s here), so a poll can
        # miss the condition; the Workload's event for the check going to Retry with the
        # provisioner's message stays.
        def refused() -> bool:
            pr = kube.get(pr_info, first["metadata"]["name"], NS)
            if pr is not None and provisioner.is_true(pr, "Failed"):
                return True
            wl = workload(kube, NS, run)
            return bool(wl) and any(
                e["involvedObject"].get("uid") == wl["metadata"]["uid"] and "to Retry" in (e.get("message") or "") and "(simulated refusal)" in e["message"]
                for e in kube.list(kube.resource("v1", "Event"), NS)
            )

        wait_for(refused, 60, "the refusal")
        assert admitted_flavor(workload(kube, NS, run)) is None
        second = wait_for(lambda: next((p for p in kube.list(pr_info, NS) if p["metadata"]["name"].endswith("-2")), None), 60, "Kueue's retry")
        wait_for(lambda: provisioner.is_true(kube.get(pr_info, second["metadata"]["name"], NS) or {}, "Provisioned"), 60, "provisioning")
        t_prov = time.monotonic()
        assert wait_for(lambda: admitted_flavor(workload(kube, NS, run)), 60, "admission") == pool.shape.key
        assert _check_state(workload(kube, NS, run)) == "Ready"
        pods = wait_for(lambda: running_pods(kube, NS, run, pool.shape.nodes), 120, "the run's pods Running")
        t_run = time.monotonic()
        made = {n["metadata"]["name"]: n for n in queued_nodes()}
        assert len(made) == pool.shape.nodes
        resize = kube.get(pr_info, second["metadata"]["name"], NS)["status"]["provisioningClassDetails"]["ResizeRequestName"]
        for p in pods:
            assert p["spec"]["nodeName"] in made
            assert p["spec"]["nodeSelector"][kueue_render.GKE_PROVISIONING_REQUEST_LABEL] == resize
            assert p["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == second["metadata"]["name"]
        sys.stderr.write(f"queued provisioning: provisioned {t_prov - t0:.2f}s, Running {t_run - t0:.2f}s after submit (1 refusal)\n")
        # the run completes, and its nodes are removed
        assert wait_for(lambda: finished(kube, NS, run), 120, "completion") == "Completed"
        wait_for(lambda: queued_nodes() == [], 60, "the provisioned nodes to go")
    finally:
        provisioner.configure(lc.state_dir, refuse=0)
        delete(lc.kubeconfig, spec_path, run)


# ------------------------------------------------------------------ ComputeClass


def test_a_compute_class_run_lands_on_the_first_priority_with_capacity(capacity_cluster) -> None:
    from workloads.local import provisioner

    lc, spec_path = capacity_cluster
    kube = lc.client()
    pool = next(p for p in load_spec(spec_path).tpu_pools if p.class_name)
    node_info = kube.resource("v1", "Node")

    def class_nodes() -> list[dict]:
        return [n for n in kube.list(node_info) if n["metadata"]["labels"].get(GKE_COMPUTE_CLASS_LABEL) == pool.class_name]

    assert class_nodes() == [], "a class pool has no nodes until a run needs them"
    provisioner.configure(lc.state_dir, class_refuse=1)  # the reservation, the first priority, is out of capacity
    run = f"cc-{secrets.token_hex(2)}"
    try:
        t0 = time.monotonic()
        submit(spec_path, lc.kubeconfig, run, "--pool", pool.name, "--rehearse-seconds", "10")

        def running_on_class() -> tuple[list[dict], dict[str, dict]] | None:
            # The nodes are read while the pods run: once the run is over its idle slice goes.
            pods = running_pods(kube, NS, run, pool.shape.nodes)
            return (pods, {n["metadata"]["name"]: n for n in class_nodes()}) if pods else None

        pods, made = wait_for(running_on_class, 180, f"{run}'s pods Running on the class's nodes")
        sys.stderr.write(f"compute class, first priority refused: submit -> Running {time.monotonic() - t0:.2f}s\n")
        assert len(made) == pool.shape.nodes  # one whole slice
        assert {p["spec"]["nodeName"] for p in pods} == set(made)
        assert all(n["metadata"]["labels"].get(GKE_SPOT_LABEL) == "true" for n in made.values()), "not the second priority (spot)"
        assert wait_for(lambda: finished(kube, NS, run), 120, f"{run} to finish") == "Completed"
        wait_for(lambda: class_nodes() == [], 120, "the idle slice removed")
    finally:
        provisioner.configure(lc.state_dir, class_refuse=0)
        delete(lc.kubeconfig, spec_path, run)
