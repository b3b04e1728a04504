"""A run's dataset and multi-tier checkpointing objects against the real API server (tests/test_training_storage.py renders them).

The JobSet with its GCS FUSE dataset volume and multi-tier checkpointing RAM disk goes through
the real kube-apiserver and JobSet v0.10.1's webhook (server-side dry run), its pod through the
team namespace's Pod Security admission, and the CheckpointConfiguration `queues apply` renders
through the CheckpointConfiguration CRD `local up` installs (its schema refuses a field GKE's
API does not have). The kwok nodes mount nothing: what the CSI drivers do is GKE's.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from infra.spec import parse_spec
from tests.support import EXAMPLES, REPO
from tests.support.local_cluster import wait_for
from toolkit.errors import ClusterError
from toolkit.names import JOBSET_NAME_LABEL, TGK_FIELD_MANAGER
from workloads.local import addons
from workloads.planning.planner import Overrides, plan_run
from workloads.render import checkpointing, volumes
from workloads.render import jobset as js


def _spec(path: str = "c4/en/3.0.1"):
    """The default spec (its cluster is the shared test cluster) with a dataset and multi-tier checkpointing."""
    doc = yaml.safe_load((EXAMPLES / "default.yaml").read_text())
    doc["tpu_pools"][0]["multi_tier_checkpointing"] = {"ramdisk_gib": 64}
    doc["datasets"] = [{"name": "c4-en", "bucket": "my-tpu-project-tpu-dev-data", "path": path, "format": "arrayrecord"}]
    return parse_spec(doc)


def _install_crd(cluster) -> None:
    crds = addons.load_docs(addons.CHECKPOINT_CONFIGURATION_CRD)
    cluster.apply(crds, field_manager=TGK_FIELD_MANAGER)
    info = cluster.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")

    def established():
        live = cluster.get(info, crds[0]["metadata"]["name"]) or {}
        return any(c["type"] == "Established" and c["status"] == "True" for c in (live.get("status") or {}).get("conditions") or []) or None

    wait_for(established, 60, "the CheckpointConfiguration CRD to be established", interval=0.5)
    cluster.forget_discovery()


def test_the_checkpoint_configuration_applies_and_its_schema_holds(cluster) -> None:
    _install_crd(cluster)
    (cc,) = checkpointing.checkpoint_configurations(_spec())
    (stored,) = cluster.apply([cc], field_manager=TGK_FIELD_MANAGER, dry_run=True)
    assert stored["spec"]["inMemoryVolumeSize"] == "64Gi" and stored["spec"]["nodeSelector"] == cc["spec"]["nodeSelector"]
    bad = copy.deepcopy(cc)
    bad["spec"]["inMemoryVolumeSize"] = "a lot"
    with pytest.raises(ClusterError) as e:
        cluster.apply([bad], field_manager=TGK_FIELD_MANAGER, dry_run=True)
    assert "inMemoryVolumeSize" in str(e.value)
    unknown = copy.deepcopy(cc)
    unknown["spec"]["ramDisk"] = "64Gi"
    with pytest.raises(ClusterError) as e:
        cluster.apply([unknown], field_manager=TGK_FIELD_MANAGER, dry_run=True)
    assert "ramDisk" in str(e.value)


def test_the_jobset_with_its_dataset_and_ramdisk_passes_the_api_server_and_pod_security(cluster) -> None:
    plan = plan_run("maxtext-6b", _spec(), Overrides(slices=2, name="data-mtc", dataset="c4-en", multi_tier_checkpointing=True))
    (obj,) = js.run_objects(plan)
    (stored,) = cluster.apply([obj], field_manager=TGK_FIELD_MANAGER, dry_run=True)
    template = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    vols = {v["name"]: v for v in template["spec"]["volumes"]}
    assert vols[volumes.DATASET_VOLUME]["csi"]["readOnly"] is True
    assert vols[volumes.MTC_VOLUME]["csi"]["driver"] == "multitier-checkpoint.csi.storage.gke.io"
    assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    # The pod itself, in the team's namespace: its Pod Security level admits CSI volumes.
    pod_spec = copy.deepcopy(template["spec"])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "data-mtc-0", "namespace": plan.target.namespace, **copy.deepcopy(template["metadata"])},
        "spec": pod_spec,
    }
    created = cluster.create(pod, dry_run=True)
    mounts = {m["name"]: m for m in created["spec"]["containers"][0]["volumeMounts"]}
    assert mounts[volumes.DATASET_VOLUME] == {"name": "dataset", "mountPath": "/data/c4-en", "readOnly": True}


def test_checkpoints_through_gcs_fuse_and_lustre_pass_the_api_server(cluster) -> None:
    """Each team's Lustre PersistentVolume and claim bind on the real control plane; the runs' JobSets pass JobSet's webhook."""
    from workloads.render import lustre

    doc = yaml.safe_load((EXAMPLES / "default.yaml").read_text())
    doc["lustre"] = {"name": "tpu-dev-ckpt", "capacity_gib": 18000, "ip": "10.96.0.2"}
    spec = parse_spec(doc)
    objects = lustre.lustre_objects(spec)
    pv_info, pvc_info = cluster.resource("v1", "PersistentVolume"), cluster.resource("v1", "PersistentVolumeClaim")
    try:
        cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
        pv, pvc = objects
        ns, claim = pvc["metadata"]["namespace"], pvc["metadata"]["name"]

        def bound():
            live = cluster.get(pvc_info, claim, ns) or {}
            return live if (live.get("status") or {}).get("phase") == "Bound" else None

        live = wait_for(bound, 60, "the team's Lustre claim to bind its PersistentVolume", interval=0.5)
        assert live["spec"]["volumeName"] == pv["metadata"]["name"]
        for storage in ("gcsfuse", "lustre"):
            plan = plan_run("maxtext-6b", spec, Overrides(slices=2, name=f"ckpt-{storage}", checkpoint_storage=storage))
            (stored,) = cluster.apply(js.run_objects(plan), field_manager=TGK_FIELD_MANAGER, dry_run=True)
            template = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            assert any(v["name"] == volumes.CHECKPOINT_VOLUME for v in template["spec"]["volumes"])
    finally:
        cluster.delete(pvc_info, objects[1]["metadata"]["name"], objects[1]["metadata"]["namespace"])
        cluster.delete(pv_info, objects[0]["metadata"]["name"])


def test_a_run_with_its_dataset_and_ramdisk_is_admitted_and_runs_on_the_local_cluster(kubeconfig, cluster, tpu_quota) -> None:
    """Through the run service, as a notebook submits: Kueue admits the JobSet, the scheduler places its
    pods (CSI ephemeral volumes need no claim), and the rehearsal completes it."""
    import secrets

    from toolkit.errors import SpecError
    from workloads import runs
    from workloads.cluster.client import Cluster
    from workloads.local import bucket

    run = f"data-{secrets.token_hex(3)}"
    version = f"c4/en/{secrets.token_hex(3)}"  # a fresh prefix: the shared cluster's bucket outlives the test
    spec = _spec(version)
    plan = runs.plan("maxtext-6b", spec, runs.Overrides(slices=2, name=run, dataset="c4-en", multi_tier_checkpointing=True, steps=4))
    ns = plan.target.namespace
    live = Cluster.connect(kubeconfig, "tgk-local", timeout=30)
    # The dataset is checked in the cluster's own bucket server before anything is applied: no files yet.
    with pytest.raises(SpecError) as e:
        runs.submit(live, plan, timeout=120, rehearse_seconds=2, spec=spec)
    assert e.value.field == "datasets[0].path" and "no files match" in e.value.problem
    assert cluster.get(cluster.resource("jobset.x-k8s.io/v1alpha2", "JobSet"), run, ns) is None  # nothing applied
    gcs = bucket.SERVICE.client_of(live)
    fixture = (REPO / "tests" / "data" / "datasets" / "three.array_record").read_bytes()
    gcs.bucket(spec.datasets[0].bucket).blob(f"{version}/train.array_record-00000-of-00001").upload_from_string(fixture)
    try:
        result = runs.submit(live, plan, timeout=120, rehearse_seconds=2, spec=spec)
        assert result.admission is not None and result.admission.admitted, result.admission
        pod_info = cluster.resource("v1", "Pod")

        def every_worker_placed():
            pods = cluster.list(pod_info, ns, label_selector=f"{JOBSET_NAME_LABEL}={run}")
            return pods if len(pods) == plan.target.nodes and all(p["spec"].get("nodeName") for p in pods) else None

        pods = wait_for(every_worker_placed, 120, f"every worker of {run} on a node")
        assert all({v["name"] for v in p["spec"]["volumes"]} >= {volumes.DATASET_VOLUME, volumes.MTC_VOLUME} for p in pods)
        done = wait_for(lambda: (s := cluster.run_status(ns, run)).phase.value in ("Succeeded", "Failed") and s, 240, f"{run} to finish")
        assert done.phase.value == "Succeeded", done.message
    finally:
        cluster.delete_run(ns, run)
