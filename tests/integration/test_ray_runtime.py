"""A RayJob rehearsed on the local cluster with the real KubeRay v1.6.0, Kueue 0.19.2 and a real Ray head.

``local up --with ray`` (a cluster of its own, in ``<test state>-ray``: Kueue's Ray
integrations need a fresh start, and the tier's shared cluster is never restarted)
runs the KubeRay operator, installs its CRDs before Kueue starts, and stands a real
Ray head in for the head pods' dashboard (workloads/local/kuberay.py). Then
``submit llama3-8b --runtime ray`` as a user runs it, and:

- Kueue admits the RayJob as one Workload, with the TPU podset's count and TPU total
  of the run (hosts x chips);
- KubeRay creates the RayCluster's head and worker pods; the workers land on the
  kwok TPU VMs of one node pool, one per VM;
- the job completes: KubeRay reads the Ray job's status from the real Ray head's Jobs
  API (where the stand-in submitted it under the RayJob's jobId), and the RayJob ends
  Complete/SUCCEEDED;
- ``delete`` leaves nothing behind (RayJob, RayCluster, submitter Job, pods, Services,
  Workload).

What this does not rehearse: the entrypoint itself (tests/maxtext/test_ray_trainer.py
runs it on CPU), Ray processes in the pods, the operator reaching a pod IP.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, run_module
from tests.support.local_cluster import shared_state_dir, wait_for
from toolkit.names import GKE_NODEPOOL_LABEL

SPEC = EXAMPLES / "v6e-reservation.yaml"  # the seed's v6e 4x4 slices
RECIPE = "llama3-8b"
JOB_SECONDS = "6"  # how long the stand-in head runs the rehearsed Ray job


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[object]:
    from workloads.local import LocalClusterError
    from workloads.local.controlplane import LocalCluster

    cluster = LocalCluster(Path(f"{shared_state_dir()}-ray"), progress=lambda m: sys.stderr.write(f"[local-cluster ray] {m}\n"))
    t0 = time.monotonic()
    try:
        cluster.up(load_spec(SPEC), spec_path=str(SPEC), build=True, timeout=600, with_ray=True)
    except LocalClusterError as e:
        cluster.down()
        pytest.fail(f"the local cluster with Ray could not start: {e}", pytrace=False)
    sys.stderr.write(f"[local-cluster ray] ready after {time.monotonic() - t0:.1f}s\n")
    try:
        yield cluster
    finally:
        cluster.down()


def _items(kube, api: str, kind: str, ns: str | None = None, selector: str | None = None) -> list[dict]:
    return kube.list(kube.resource(api, kind), ns, label_selector=selector)


def test_local_status_counts_the_ray_daemons(ray_cluster) -> None:
    st = ray_cluster.status()
    assert st["state"] == "up", st
    for name in ("kuberay", "ray-head", "ray-standin", "kueue"):
        assert st["daemons"][name]["running"], (name, st["daemons"][name])
    kube = ray_cluster.client()
    crds = {c["metadata"]["name"] for c in _items(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition")}
    assert {"rayjobs.ray.io", "rayclusters.ray.io"} <= crds
    cfg = (ray_cluster.state_dir / "config" / "kueue.yaml").read_text()
    assert "ray.io/rayjob" in cfg and "ray.io/raycluster" in cfg


def test_rayjob_admitted_placed_completed_and_deleted(ray_cluster) -> None:
    spec = load_spec(SPEC)
    ns = spec.team("pretrain").ns
    kubeconfig = str(ray_cluster.kubeconfig)
    kube = ray_cluster.client()

    r = run_module(
        "workloads",
        "submit",
        RECIPE,
        "--runtime",
        "ray",
        "--spec",
        str(SPEC),
        "--team",
        "pretrain",
        "--kubeconfig",
        kubeconfig,
        "--no-wait",
        "-o",
        "json",
        "--rehearse-seconds",
        JOB_SECONDS,
        timeout=300,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    submitted = json.loads(r.stdout)
    run = submitted["run"]
    assert submitted["namespace"] == ns
    t_submitted = time.monotonic()
    rayjob_info = kube.resource("ray.io/v1", "RayJob")
    from workloads.local.addons import RAY_JOB_SECONDS_ANNOTATION

    # --rehearse-seconds reached the RayJob: the stand-in Ray job runs that long.
    applied = kube.get(rayjob_info, run, ns)
    assert applied["metadata"]["annotations"][RAY_JOB_SECONDS_ANNOTATION] == JOB_SECONDS

    # Kueue: one Workload for the RayJob, admitted, the TPU podset sized like the run.
    pool = spec.tpu_pools[0]
    hosts, chips = pool.shape.nodes, pool.shape.chips_per_vm

    def admitted() -> dict | None:
        wls = [
            w
            for w in _items(kube, "kueue.x-k8s.io/v1beta2", "Workload", ns)
            if any(o.get("kind") == "RayJob" and o.get("name") == run for o in w["metadata"].get("ownerReferences", []))
        ]
        assert len(wls) <= 1, [w["metadata"]["name"] for w in wls]
        return wls[0] if wls and (wls[0].get("status") or {}).get("admission") else None

    wl = wait_for(admitted, 180, "Kueue to admit the RayJob", interval=0.2)
    podsets = {p["name"]: p for p in wl["spec"]["podSets"]}
    tpu_sets = [p for p in podsets.values() if "google.com/tpu" in json.dumps(p["template"]["spec"].get("containers", []))]
    assert len(tpu_sets) == 1 and tpu_sets[0]["count"] == hosts, podsets.keys()
    usage = {a["name"]: a.get("resourceUsage", {}) for a in wl["status"]["admission"]["podSetAssignments"]}
    assert usage[tpu_sets[0]["name"]]["google.com/tpu"] == str(hosts * chips)

    # KubeRay: head and workers; the workers on the TPU VMs of one node pool, one per VM.
    def placed() -> list[dict] | None:
        pods = _items(kube, "v1", "Pod", ns, "ray.io/cluster")
        workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        running = [p for p in workers + heads if (p.get("status") or {}).get("phase") == "Running"]
        return workers if len(heads) == 1 and len(workers) == hosts and len(running) == hosts + 1 else None

    workers = wait_for(placed, 180, "the RayCluster's head and workers Running", interval=0.2)
    sys.stderr.write(f"[ray rehearsal] RayJob submitted -> head and {hosts} workers Running: {time.monotonic() - t_submitted:.1f} s\n")
    nodes = {n["metadata"]["name"]: n for n in _items(kube, "v1", "Node")}
    on = [nodes[p["spec"]["nodeName"]] for p in workers]
    assert len({n["metadata"]["name"] for n in on}) == hosts  # one per VM
    assert len({n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in on}) == 1  # one slice
    for n in on:
        labels = n["metadata"]["labels"]
        assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
        assert labels["cloud.google.com/gke-tpu-topology"] == "4x4"

    # The job completes, as KubeRay reads it from the real Ray head's Jobs API.
    def finished() -> dict | None:
        rj = kube.get(rayjob_info, run, ns)
        st = (rj or {}).get("status") or {}
        return rj if st.get("jobDeploymentStatus") in ("Complete", "Failed") else None

    rj = wait_for(finished, 240, "the RayJob to finish", interval=0.2)
    st = rj["status"]
    assert (st["jobDeploymentStatus"], st.get("jobStatus")) == ("Complete", "SUCCEEDED"), st
    assert st["dashboardURL"].endswith(f".{ns}.svc.cluster.local:8265")
    dash = json.loads((ray_cluster.state_dir / "ray" / "head.ready").read_text())["dashboard"]
    with urllib.request.urlopen(f"{dash}/api/jobs/{st['jobId']}", timeout=10) as resp:  # noqa: S310 - loopback
        job = json.loads(resp.read())
    assert job["status"] == "SUCCEEDED" and "workloads.ray.jax_trainer" in job["entrypoint"]

    # The queueing timeline reads the RayJob and its Workload, as it does a JobSet's.
    from workloads.observe.analysis import timeline

    tl = timeline(kube, ns, run)
    assert tl is not None and tl.created is not None and tl.admitted is not None and tl.created <= tl.admitted, tl

    # delete: nothing of the run is left.
    d = run_module("workloads", "delete", run, "--yes", "--spec", str(SPEC), "--team", "pretrain", "--kubeconfig", kubeconfig, timeout=300)
    assert d.returncode == 0, (d.stdout, d.stderr)

    def gone() -> bool:
        left = []
        for api, kind in (
            ("ray.io/v1", "RayJob"),
            ("ray.io/v1", "RayCluster"),
            ("batch/v1", "Job"),
            ("v1", "Pod"),
            ("v1", "Service"),
            ("kueue.x-k8s.io/v1beta2", "Workload"),
        ):
            left += [f"{kind}/{o['metadata']['name']}" for o in _items(kube, api, kind, ns) if run in json.dumps(o["metadata"])]
        return not left

    wait_for(gone, 120, "every object of the run to be gone", interval=0.2)


def test_a_rayjob_or_raycluster_with_a_forbidden_priority_is_refused(ray_cluster) -> None:
    """The team's priority admission policy (workloads/render/admission.py) covers KubeRay's kinds once their CRDs exist."""
    import copy

    from toolkit.errors import Rejected
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render import rayjob

    spec = load_spec(SPEC)
    team = spec.team("research")  # may use very-low, low, medium (its priority and the lower ones)
    (rj,) = rayjob.run_objects(plan_run(RECIPE, spec, Overrides(team="research", runtime="ray", name="prio-ray")))
    kube = ray_cluster.client()
    assert kube.create(rj, dry_run=True)["metadata"]["name"] == "prio-ray"
    bad = copy.deepcopy(rj)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["priorityClassName"] = "high"
    with pytest.raises(Rejected) as e:
        kube.create(bad, dry_run=True)
    assert f"priorityClassName high is not allowed in namespace {team.ns}" in str(e.value), str(e.value)
    cluster_only = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "prio-rc", "namespace": team.ns},
        "spec": bad["spec"]["rayClusterSpec"],
    }
    with pytest.raises(Rejected) as e:
        kube.create(cluster_only, dry_run=True)
    assert "priorityClassName high is not allowed" in str(e.value), str(e.value)
    submitter = copy.deepcopy(rj)
    submitter["spec"]["submitterPodTemplate"]["spec"]["priorityClassName"] = "system-cluster-critical"
    with pytest.raises(Rejected):
        kube.create(submitter, dry_run=True)
