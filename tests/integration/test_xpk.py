"""xpk itself against a toolkit cluster: its workload is admitted.

xpk 1.13.1 (PyPI, scripts/setup-xpk.sh) runs for real with ``--dry-run``: no gcloud and
no kubectl, but the same code path renders the JobSet it would apply
(``--output-manifest-file``), and its scheduling check reads the resources ConfigMap
from ``DRY_RUN_RESOURCES_CONFIG_MAP`` — fed here with the ConfigMap ``queues apply``
put on the cluster, printed as xpk's ``kubectl get configmap -o custom-columns`` would
print it. The JobSet is then created as ``kubectl apply -f`` creates a new object (a
POST, in the context's namespace ``default``) and Kueue admits it through ``multislice-queue``.

Not rehearsed here: xpk's ``kubectl``/``gcloud`` calls themselves (credentials, the
cluster lookup, the resource-policy check), which need a GKE cluster.

A control plane of this module's own: a small tpu7x spec (two 2x2x2 slices, 4 kwok
nodes labelled with xpk's placement-policy name).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.spec import load_spec
from tests.support import REPO, example_doc, run_module
from tests.support.local_cluster import start_own_cluster
from workloads.cluster import wait
from workloads.render import xpk as xr

WORKLOAD = "xpk-probe"


def _spec_doc() -> dict:
    d = example_doc("tpu7x-multislice")
    d["tpu_pools"][0].update(name="tpu7x-16", topology="2x2x2", slices=2, capacity="on-demand")
    d.pop("network")  # the DCN objects are tests/integration/test_multinetwork.py's
    return d


@pytest.fixture(scope="module")
def xpk_cluster(tmp_path_factory) -> Iterator[tuple[object, Path]]:
    yield from start_own_cluster("xpk", _spec_doc(), tmp_path_factory.mktemp("xpk"))


@pytest.fixture(scope="module")
def xpk_bin() -> str:
    r = subprocess.run(["bash", str(REPO / "scripts" / "setup-xpk.sh")], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-800:]
    return r.stdout.strip().splitlines()[-1]


def _xpk(xpk_bin: str, spec, tmp: Path, resources: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "DRY_RUN_RESOURCES_CONFIG_MAP": resources}
    return subprocess.run(
        [
            xpk_bin,
            "workload",
            "create",
            "--dry-run",
            "--skip-validation",
            f"--cluster={spec.cluster.name}",
            f"--project={spec.project}",
            "--project-number=1",
            f"--zone={spec.zones[0]}",
            f"--workload={WORKLOAD}",
            "--docker-image=busybox:1.37.0",
            "--command=echo hi",
            *args,
        ],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_xpk_workload_is_admitted(xpk_cluster, xpk_bin, tmp_path) -> None:
    lc, spec_path = xpk_cluster
    spec = load_spec(spec_path)
    from workloads.cluster.client import Cluster

    cluster = Cluster.connect(lc.kubeconfig, "tgk-local", timeout=30)
    r = run_module("workloads", "queues", "apply", "--kubeconfig", str(lc.kubeconfig), "--context", "tgk-local", "--spec", str(spec_path))
    assert r.returncode == 0, r.stderr
    assert "applied LocalQueue default/multislice-queue" in r.stdout and "applied ClusterQueue cluster-queue" in r.stdout

    # What xpk's `kubectl get configmap <cluster>-resources-configmap -o=custom-columns="ConfigData:data"` prints.
    cm = cluster.get(cluster.resource("v1", "ConfigMap"), xr.resources_configmap_name(spec), "default")
    assert cm is not None, "queues apply did not create xpk's resources ConfigMap"
    printed = "map[" + " ".join(f"{k}:{v}" for k, v in sorted(cm["data"].items())) + "]"
    assert printed == "map[tpu7x-16:4]"

    # xpk reads it: three slices of 2 VMs do not fit the 4 VMs it lists, so xpk itself refuses.
    too_big = _xpk(xpk_bin, spec, tmp_path, printed, "--device-type=tpu7x-16", "--num-slices=3", f"--output-manifest-file={tmp_path / 'no.yaml'}")
    assert too_big.returncode != 0, too_big.stdout[-1500:]
    assert not (tmp_path / "no.yaml").exists()

    manifest = tmp_path / "jobset.yaml"
    ok = _xpk(xpk_bin, spec, tmp_path, printed, "--device-type=tpu7x-16", "--num-slices=2", f"--output-manifest-file={manifest}")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-1000:]
    (js,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    assert js["kind"] == "JobSet" and js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == xr.LOCAL_QUEUE
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/placement-policy-name"] == spec.workload_policy_name(spec.tpu_pools[0])

    js["metadata"]["namespace"] = "default"  # what kubectl apply does with the context's namespace
    try:
        # xpk runs `kubectl apply -f`: client-side apply, which creates a new object with a POST
        # (its manifest has nulls, e.g. `env:` with nothing under it, that the server prunes on create).
        cluster.create(js, field_manager="kubectl-client-side-apply")

        def admitted():
            live = cluster.jobset("default", WORKLOAD)
            wl = cluster.workload_for("default", live) if live else None
            conds = {c["type"]: c["status"] for c in ((wl or {}).get("status") or {}).get("conditions") or []}
            return wl if conds.get("Admitted") == "True" else None

        try:
            wl = wait.wait_for(admitted, timeout=120, what="xpk's JobSet to be admitted", interval=0.5)
        except wait.WaitTimeout as e:
            raise AssertionError(f"{e} (last: {str(e.last)[:400]})") from None
        assert wl["status"]["admission"]["clusterQueue"] == xr.CLUSTER_QUEUE

        def placed():
            pods = cluster.pods("default", WORKLOAD)
            return pods if len(pods) == 4 and all((p.get("spec") or {}).get("nodeName") for p in pods) else None

        pods = wait.wait_for(placed, timeout=120, what="xpk's 4 pods to be scheduled", interval=0.5)
        node_info = cluster.resource("v1", "Node")
        by_slice: dict[str, set[str]] = {}
        for p in pods:
            node = cluster.get(node_info, p["spec"]["nodeName"])
            labels = node["metadata"]["labels"]
            assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu7x" and labels["cloud.google.com/gke-tpu-topology"] == "2x2x2"
            by_slice.setdefault(p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"], set()).add(labels["cloud.google.com/gke-nodepool"])
        # One node pool per slice: xpk's exclusive-topology annotation against the spec's node pools.
        assert sorted(len(v) for v in by_slice.values()) == [1, 1] and len(set().union(*by_slice.values())) == 2
    finally:
        cluster.delete_jobset("default", WORKLOAD)
