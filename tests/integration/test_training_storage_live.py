"""A run's dataset and multi-tier checkpointing objects against the real API server (tests/test_training_storage.py renders them).

The JobSet with its GCS FUSE dataset volume and multi-tier checkpointing RAM disk goes through
the real kube-apiserver and JobSet v0.12.0's webhook (server-side dry run), its pod through the
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
from toolkit.errors import ClusterError, FieldError
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


# ------------------------------------------------------------------ a run's directory is its own on Lustre and through GCS FUSE


def _lustre_spec():
    doc = yaml.safe_load((EXAMPLES / "default.yaml").read_text())
    doc["lustre"] = {"name": "tpu-dev-ckpt", "capacity_gib": 18000, "ip": "10.96.0.2"}
    return parse_spec(doc)


@pytest.fixture()
def lustre_claim(cluster):
    """The team namespaces' claims on the spec's Lustre, bound by the real PersistentVolume controller (what `queues apply` applies)."""
    from workloads.render import lustre

    spec = _lustre_spec()
    objects = lustre.lustre_objects(spec)
    pv_info, pvc_info = cluster.resource("v1", "PersistentVolume"), cluster.resource("v1", "PersistentVolumeClaim")
    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    for pvc in claims:
        ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
        wait_for(
            lambda ns=ns, name=name: ((cluster.get(pvc_info, name, ns) or {}).get("status") or {}).get("phase") == "Bound", 60, f"claim {ns}/{name} to bind"
        )
    try:
        yield spec
    finally:
        for o in objects:
            meta = o["metadata"]
            cluster.delete(pvc_info if o["kind"] == "PersistentVolumeClaim" else pv_info, meta["name"], meta.get("namespace"))


def test_a_runs_lustre_directory_is_its_own_through_the_helper_pod(cluster, kubeconfig, local_cluster, lustre_claim, tpu_quota) -> None:
    """The identity guard and cleanup on Lustre, on the real API server: the helper pod is created in the team's namespace,
    scheduled once its claim is bound, played by the rehearsal daemon against the directory that plays the instance (the one
    the run's rehearsal saves its checkpoints in), and deleted; a run under a reused name is refused; --resume restores."""
    import json
    import secrets

    from tests.integration.test_rehearsal import RESTORED, STEP, _finished, _log
    from workloads import runs
    from workloads.cluster import cleanup as cl
    from workloads.cluster.client import Cluster
    from workloads.local import volumes as local_volumes
    from workloads.runs import cleanup as svc

    spec = lustre_claim
    run = f"lus-{secrets.token_hex(3)}"
    ns = spec.teams[0].ns
    live = Cluster.connect(kubeconfig, "tgk-local", timeout=30)
    root = local_volumes.lustre_dir(local_cluster.state_dir, f"{spec.project}/{spec.lustre_zone}/{spec.lustre.name}")
    pod_info = cluster.resource("v1", "Pod")
    helpers = lambda: cluster.list(pod_info, ns, label_selector="app.kubernetes.io/name=tgk-volume-helper")  # noqa: E731

    def plan(recipe="maxtext-6b", steps=20, name=run):
        return runs.plan(recipe, spec, runs.Overrides(slices=1, name=name, steps=steps, checkpoint_storage="lustre"))

    base = root / ns / "llama-base" / "checkpoints" / "0" / "items"
    base.mkdir(parents=True, exist_ok=True)
    (base / "checkpoint").write_bytes(b"converted weights")  # a converted base checkpoint laid on Lustre by hand
    try:
        first = runs.submit(live, plan(), timeout=120, rehearse_seconds=5)
        assert first.checkpoints.state == "new" and first.admission.admitted, first
        assert json.loads((root / ns / run / "tgk-run.json").read_text())["recipe"] == "maxtext-6b"
        wait_for(lambda: not helpers(), 60, "the helper pods to go")  # the ledger let this command delete the ones it made
        assert wait_for(lambda: _finished(cluster, run), 240, "the first run to finish") == "Completed"
        saved = sorted(int(p.name) for p in (root / ns / run / "checkpoints").iterdir())
        assert saved and saved[-1] == 19, saved  # the rehearsal saved on the claim's volume, as MaxText would
        cluster.delete_jobset(ns, run)
        wait_for(lambda: cluster.jobset(ns, run) is None and not cluster.pods(ns, run), 120, "the first run to go")

        with pytest.raises(FieldError) as e:  # another recipe under the name: refused, nothing applied
            runs.submit(live, plan("gpt3-6b"), timeout=120)
        assert str(e.value).startswith(f"--name: lustre:tpu-dev-ckpt/{ns}/{run}/checkpoints/ belongs to run {run} (maxtext-6b")
        assert cluster.jobset(ns, run) is None
        resumed = runs.submit(live, plan(steps=30), timeout=120, rehearse_seconds=4, resume=True)
        assert resumed.checkpoints.state == "resumed"
        assert wait_for(lambda: _finished(cluster, run), 240, "the resumed run to finish") == "Completed"
        log = _log(cluster, run)
        assert int(RESTORED.search(log).group(1)) == 19 and [int(s) for s in STEP.findall(log)][0] == 20, log[-1500:]

        # The converted checkpoint: --resume reads it, never adopts it.
        foreign = runs.submit(live, plan(name="llama-base", steps=4), timeout=120, rehearse_seconds=2, resume=True)
        assert foreign.checkpoints.state == "foreign" and not (root / ns / "llama-base" / "tgk-run.json").exists()
        wait_for(lambda: _finished(cluster, "llama-base"), 240, "the run from the base checkpoint to finish")
        for name in (run, "llama-base"):
            cluster.delete_jobset(ns, name)
            wait_for(lambda name=name: cluster.jobset(ns, name) is None, 120, f"{name} to go")

        # cleanup on Lustre: one helper pod surveys, another deletes what the ledger permits.
        scope = svc.scope(spec, team=spec.teams[0].name, older_than="0s", checkpoints=True)
        (v,) = scope.lustre
        dirs = {d.run: d for d in svc.lustre_dirs(live, v)}
        plan_ = cl.choose([], [], now=9e9, older_than=0, checkpoints=[cl.CheckpointDir(dirs[run]), cl.CheckpointDir(dirs["llama-base"])], retention=0)
        assert [c.run for c in plan_.checkpoints] == [run]
        assert "no tgk-run.json beside it" in dict(plan_.kept)[f"lustre:tpu-dev-ckpt/{ns}/llama-base/"]
        files = [p for p in (root / ns / run / "checkpoints").rglob("*") if p.is_file()]
        assert files and svc.delete_lustre(live, v, plan_.checkpoints[0]) == len(files) == dirs[run].objects
        assert not (root / ns / run / "checkpoints").exists() and (root / ns / run / "tgk-run.json").exists()
        assert (base / "checkpoint").read_bytes() == b"converted weights"
        wait_for(lambda: not helpers(), 60, "the helper pods to go")
    finally:
        for name in (run, "llama-base"):
            cluster.delete_jobset(ns, name)


def test_a_runs_gcsfuse_directory_is_its_own_through_the_real_mount(tmp_path) -> None:
    """--checkpoint-storage gcsfuse: the identity is an object in the bucket, the run sees it through the real gcsfuse
    with the run's own mount options, and what the run writes there is what cleanup lists and deletes.

    Against fake-gcs-server (tests/support/gcs_emulator.py): the local cluster's gcp-storage-emulator answers gcsfuse's
    directory-object uploads with a dropped connection, and gcsfuse retries them forever."""
    import secrets

    from tests.support.gcs_emulator import running_precondition_server
    from workloads import runs
    from workloads.cluster import cleanup as cl
    from workloads.data import mount
    from workloads.observe import storage
    from workloads.runs import cleanup as svc
    from workloads.runs import identity as ident
    from workloads.runs.identity import IDENTITY

    spec = parse_spec(yaml.safe_load((EXAMPLES / "default.yaml").read_text()))
    run = f"fuse-{secrets.token_hex(3)}"
    plan = runs.plan("maxtext-6b", spec, runs.Overrides(slices=1, name=run, checkpoint_storage="gcsfuse"))
    st = plan.policy.checkpoint_storage
    with running_precondition_server() as url:
        gcs = storage.make_client(project=spec.project, endpoint=url)
        gcs.create_bucket(st.bucket)
        # What submit checks before it applies, on the run's output directory (the bucket the mount shows).
        first = ident.claim(ident.GcsStore(gcs, plan.program.output_dir), plan, resume=False)
        assert first.state == "new" and first.where == f"gs://{st.bucket}/{run}/"
        options = volumes.checkpoint_mount_options(plan).split(",")
        with mount.mounted(st.bucket, options, tmp_path / "mnt", endpoint=url, log_file=tmp_path / "gcsfuse.log", read_only=False, timeout=60) as m:
            assert (m / run / IDENTITY).read_bytes() == gcs.bucket(st.bucket).blob(f"{run}/{IDENTITY}").download_as_bytes()
            (m / run / "checkpoints" / "5" / "items").mkdir(parents=True)
            (m / run / "checkpoints" / "5" / "items" / "state").write_bytes(b"w" * 64)
            (m / run / "metrics").mkdir()
            (m / run / "metrics" / "metrics_step_5.txt").write_bytes(b"{}")
            (m / run / "tensorboard").mkdir()
            (m / run / "tensorboard" / "events").write_bytes(b"e")
        other = runs.plan("gpt3-6b", spec, runs.Overrides(slices=1, name=run, checkpoint_storage="gcsfuse"))
        with pytest.raises(FieldError, match="belongs to run"):
            ident.claim(ident.GcsStore(gcs, other.program.output_dir), other, resume=False)
        assert ident.claim(ident.GcsStore(gcs, plan.program.output_dir), plan, resume=False).state == "same"
        found = {d.run: (d, objects) for d, objects in svc.bucket_dirs(gcs, st.bucket)}
        d, objects = found[run]
        assert d.owner == run and d.record_format == 2 and d.objects >= 2
        (c,) = cl.choose([], [], now=9e9, older_than=0, checkpoints=[cl.CheckpointDir(d)], retention=0).checkpoints
        assert svc.delete_checkpoints(gcs, c, objects) == len(objects)
        left = sorted(b.name for b in gcs.list_blobs(st.bucket, prefix=f"{run}/"))
        assert f"{run}/{IDENTITY}" in left and f"{run}/tensorboard/events" in left
        assert not [n for n in left if n.startswith((f"{run}/checkpoints/", f"{run}/metrics/"))], left
