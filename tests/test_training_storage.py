"""Training on the spec's datasets and GKE's multi-tier checkpointing: the plan, the pods, the cluster objects, IAM.

The bad inputs (exit 2, one line, nothing applied) are in tests/bad_runs/cases.yaml and
tests/bad_specs/; the objects against the real API server in
tests/integration/test_training_storage_live.py; checkov scans them through tests/support/k8s_scan.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import access
from infra.catalog import GIB
from infra.spec import EXAMPLES_DIR, BucketPurpose, load_spec, parse_spec
from toolkit import names
from toolkit.errors import ToolkitError
from workloads.planning import recipes
from workloads.planning.dataset import mount_dir
from workloads.planning.planner import Overrides, plan_run
from workloads.render import checkpointing, job, jobset, rayjob, volumes

V6E = EXAMPLES_DIR / "v6e-reservation.yaml"


def _spec_doc() -> dict[str, Any]:
    return yaml.safe_load(V6E.read_text())


def _plan(**o: Any):
    return plan_run("llama3-8b", load_spec(V6E), Overrides(name="t", team="pretrain", **o))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    if obj["kind"] == "Job":
        return obj["spec"]["template"]
    raise AssertionError(obj["kind"])


def _args_dict(args: tuple[str, ...]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args[1:])


# ------------------------------------------------------------------ datasets


def test_a_dataset_replaces_synthetic_data_with_grain_reading_the_mount() -> None:
    plan = _plan(dataset="c4-en")
    d = load_spec(V6E).dataset("c4-en")
    args = _args_dict(plan.program.args)
    assert args["dataset_type"] == "grain"
    assert args["grain_file_type"] == "arrayrecord"
    assert args["grain_train_files"] == f"{mount_dir(d)}/*.array_record*" == "/data/c4-en/*.array_record*"
    assert args["tokenizer_path"] == "assets/tokenizers/tokenizer_llama3.tiktoken" and args["tokenizer_type"] == "tiktoken"
    assert "synthetic" not in args.values()
    assert plan.summary()["dataset"] == {"name": "c4-en", "source": "gs://my-tpu-project-trillium-data/c4/en/3.0.1/", "format": "arrayrecord"}
    without = _args_dict(_plan().program.args)
    assert without["dataset_type"] == "synthetic" and "grain_train_files" not in without


def test_the_jobset_mounts_the_dataset_read_only_through_gcs_fuse() -> None:
    plan = _plan(dataset="c4-en", slices=2)
    template = _pod(jobset.jobset(plan))
    annotations = template["metadata"]["annotations"]
    assert annotations[names.GCSFUSE_VOLUMES_ANNOTATION] == "true"
    assert all(annotations[a] == "0" for a in names.GCSFUSE_SIDECAR_LIMIT_ANNOTATIONS)
    (vol,) = [v for v in template["spec"]["volumes"] if v["name"] == volumes.DATASET_VOLUME]
    assert vol["csi"]["driver"] == "gcsfuse.csi.storage.gke.io" and vol["csi"]["readOnly"] is True
    assert vol["csi"]["volumeAttributes"]["bucketName"] == "my-tpu-project-trillium-data"
    options = vol["csi"]["volumeAttributes"]["mountOptions"].split(",")
    assert "only-dir=c4/en/3.0.1" in options and "implicit-dirs" in options and "metadata-cache:ttl-secs:-1" in options
    assert not any(o.startswith("file-cache:") for o in options)  # no file cache: see workloads/render/volumes.py
    assert options[-2:] == ["uid=10001", "gid=10001"]  # the team's pods run as non-root by default: the mount is theirs
    (mount,) = [m for m in template["spec"]["containers"][0]["volumeMounts"] if m["name"] == volumes.DATASET_VOLUME]
    assert mount == {"name": "dataset", "mountPath": "/data/c4-en", "readOnly": True}


def test_a_run_without_a_dataset_mounts_nothing_new() -> None:
    template = _pod(jobset.jobset(_plan(slices=2)))
    assert "annotations" not in template["metadata"]
    assert [v["name"] for v in template["spec"]["volumes"]] == ["dshm"]


def test_a_non_root_team_owns_the_mount() -> None:
    doc = _spec_doc()
    doc["teams"][0]["run_as_user"] = 1000
    plan = plan_run("llama3-8b", parse_spec(doc), Overrides(name="t", team="pretrain", dataset="c4-en"))
    options = volumes.dataset_mount_options(plan).split(",")
    assert options[-2:] == ["uid=1000", "gid=1000"]


def test_the_job_and_ray_runtimes_mount_it_too() -> None:
    plan = _plan(dataset="c4-en", slices=1, runtime="job")
    template = _pod(job.job(plan))
    assert template["metadata"]["annotations"][names.GCSFUSE_VOLUMES_ANNOTATION] == "true"
    assert any(v["name"] == "dataset" for v in template["spec"]["volumes"])
    ray = rayjob.rayjob(_plan(dataset="c4-en", slices=1, runtime="ray"))
    cluster = ray["spec"]["rayClusterSpec"]
    worker = cluster["workerGroupSpecs"][0]["template"]
    assert worker["metadata"]["annotations"][names.GCSFUSE_VOLUMES_ANNOTATION] == "true"
    assert {"name": "dataset", "mountPath": "/data/c4-en", "readOnly": True} in worker["spec"]["containers"][0]["volumeMounts"]
    head = cluster["headGroupSpec"]["template"]
    assert "annotations" not in head["metadata"] and [v["name"] for v in head["spec"]["volumes"]] == ["dshm"]


def test_a_recipe_names_its_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TGK_RECIPES", str(tmp_path))
    doc = yaml.safe_load((recipes.RECIPES_DIR / "llama3-8b.yaml").read_text())
    (tmp_path / "llama3-c4.yaml").write_text(yaml.safe_dump({**doc, "name": "llama3-c4", "dataset": "c4-en", "multi_tier_checkpointing": True}))
    (tmp_path / "llama3-fuse.yaml").write_text(yaml.safe_dump({**doc, "name": "llama3-fuse", "checkpoint_storage": "gcsfuse"}))
    recipes.load_recipe.cache_clear()
    try:
        plan = plan_run("llama3-c4", load_spec(V6E), Overrides(name="t", team="pretrain", slices=2))
        assert plan.program.dataset is not None and plan.program.dataset.name == "c4-en"
        assert plan.policy.multi_tier is not None  # the recipe's multi_tier_checkpointing: true
        fuse = plan_run("llama3-fuse", load_spec(V6E), Overrides(name="t", team="pretrain"))
        assert fuse.policy.checkpoint_storage is not None and fuse.policy.checkpoint_storage.kind == "gcsfuse"
        assert plan_run("llama3-fuse", load_spec(V6E), Overrides(name="t", team="pretrain", checkpoint_storage="gcs")).policy.checkpoint_storage is None
        with pytest.raises(ToolkitError, match="recipe llama3-c4 multi_tier_checkpointing: MaxText's multi-tier checkpointing replicates"):
            plan_run("llama3-c4", load_spec(V6E), Overrides(name="t", team="pretrain", slices=1))
        with pytest.raises(ToolkitError, match="recipe llama3-c4 dataset: dataset c4-en is in bucket"):
            plan_run("llama3-c4", load_spec(V6E), Overrides(name="t", team="research"))
    finally:
        recipes.load_recipe.cache_clear()


def test_a_dataset_bucket_is_read_only_to_the_teams_pods() -> None:
    spec = load_spec(V6E)
    data = next(b for b in spec.buckets if b.purpose is BucketPurpose.DATA)
    team = spec.team("pretrain")
    assert access.bucket_role(spec, data, 1) == "roles/storage.objectViewer"
    assert "can only read" in (access.write_problem(spec, data, team, False) or "")
    doc = _spec_doc()
    del doc["datasets"]
    bare = parse_spec(doc)
    assert access.bucket_role(bare, data, 1) == "roles/storage.objectAdmin"  # a data bucket without a dataset: as before
    with pytest.raises(ToolkitError, match="checkpoints cannot be saved: team pretrain's service account can only read"):
        plan_run("llama3-8b", spec, Overrides(name="t", team="pretrain", sets=(f"base_output_directory=gs://{data.name}/out",)))


@pytest.mark.synth
def test_the_stack_grants_the_team_read_only_on_its_dataset_bucket(tmp_path: Path) -> None:
    from infra.stack import synth

    doc = json.loads(synth(load_spec(V6E), tmp_path).read_text())
    grants = [(g["//"]["metadata"]["path"], g["role"]) for g in doc["resource"]["google_storage_bucket_iam_member"].values()]
    data = [g for g in grants if "trillium-data" in g[0]]
    # pretrain's team SA, and the node SA (pretrain allows hostNetwork runs): read only; never another team's.
    assert sorted(p.split("/")[1] for p, _ in data) == ["identity", "team-pretrain"], data
    assert all(role == "roles/storage.objectViewer" for _, role in data), data
    assert ("trillium/team-pretrain/sa-my-tpu-project-trillium-ckpt-objectAdmin", "roles/storage.objectAdmin") in grants
    (cluster,) = doc["resource"]["google_container_cluster"].values()
    assert cluster["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
    assert cluster["min_master_version"] == "1.32.4-gke.1415000"  # multi-tier checkpointing's floor


# -------------------------------------------------- multi-tier checkpointing


def test_the_ramdisk_follows_the_documented_rule() -> None:
    plan = _plan(slices=2, multi_tier_checkpointing=True)
    m = plan.policy.multi_tier
    assert m is not None
    params = plan.program.sizing.params
    hosts = plan.target.shape.nodes
    assert hosts == 4
    assert m.ramdisk_bytes == math.ceil(2 * 12 * params / hosts * 1.15)
    assert m.vm_memory_bytes == 720 * GIB and m.configured_bytes == 64 * GIB
    summary = plan.summary()["multi_tier_checkpointing"]
    assert summary["ramdisk_gib_needed"] == round(m.ramdisk_bytes / GIB, 1)
    args = _args_dict(plan.program.args)
    assert args["enable_multi_tier_checkpointing"] == "true"
    assert args["local_checkpoint_directory"] == "/local-checkpoints"
    assert 1 <= int(args["local_checkpoint_period"]) <= int(args["checkpoint_period"])
    assert int(args["multi_tier_checkpointing_backup_interval_minutes"]) >= 1
    assert "multi_tier_checkpointing_backup_interval_steps" not in args  # MaxText takes exactly one of the two


def test_the_jobset_mounts_the_ramdisk_of_the_add_on() -> None:
    template = _pod(jobset.jobset(_plan(slices=2, multi_tier_checkpointing=True)))
    (vol,) = [v for v in template["spec"]["volumes"] if v["name"] == volumes.MTC_VOLUME]
    assert vol == {"name": "local-checkpoints", "csi": {"driver": "multitier-checkpoint.csi.storage.gke.io"}}
    assert {"name": "local-checkpoints", "mountPath": "/local-checkpoints"} in template["spec"]["containers"][0]["volumeMounts"]
    assert "annotations" not in template["metadata"]  # no GCS FUSE volume in the pod: no sidecar


def test_the_checkpoint_configuration_of_each_shape() -> None:
    spec = load_spec(V6E)
    (cc,) = checkpointing.checkpoint_configurations(spec)
    assert cc["apiVersion"] == "checkpointing.gke.io/v1" and cc["kind"] == "CheckpointConfiguration"
    assert "namespace" not in cc["metadata"]
    assert cc["spec"] == {
        "cloudStorageBucketName": "my-tpu-project-trillium-ckpt",
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "4x4"},
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "inMemoryVolumeSize": "64Gi",
    }
    assert checkpointing.checkpoint_configurations(load_spec(EXAMPLES_DIR / "default.yaml")) == []


def test_the_local_crd_declares_every_field_the_configuration_has() -> None:
    from workloads.local import addons

    (crd,) = addons.load_docs(addons.CHECKPOINT_CONFIGURATION_CRD)
    (cc,) = checkpointing.checkpoint_configurations(load_spec(V6E))
    group, version = cc["apiVersion"].split("/")
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["scope"]) == (group, "CheckpointConfiguration", "Cluster")
    (served,) = [v for v in crd["spec"]["versions"] if v["served"]]
    assert served["name"] == version
    schema = served["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(cc["spec"]) <= set(schema["properties"]) and set(schema["required"]) <= set(cc["spec"])


def test_the_ramdisk_figures_of_the_issue() -> None:
    """maxtext-6b on the default spec's v5e-16 x 2 and llama3-8b on v6e-16 x 2, with the rule computed here."""
    doc = yaml.safe_load((EXAMPLES_DIR / "default.yaml").read_text())
    doc["tpu_pools"][0]["multi_tier_checkpointing"] = {"ramdisk_gib": 192}
    v5e = plan_run("maxtext-6b", parse_spec(doc), Overrides(name="t", slices=2, multi_tier_checkpointing=True))
    v6e = _plan(slices=2, multi_tier_checkpointing=True)
    for plan, hosts in ((v5e, 4), (v6e, 4)):
        params = plan.program.sizing.params
        assert plan.policy.multi_tier.ramdisk_bytes / GIB == pytest.approx(2 * 12 * params / hosts * 1.15 / GIB, abs=1e-6)
    assert 55 < v5e.policy.multi_tier.ramdisk_bytes / GIB < 60  # ~8.86B parameters
    assert 50 < v6e.policy.multi_tier.ramdisk_bytes / GIB < 53  # ~8.0B parameters


# ------------------------------------------------------- checkpoint storage

TPU7X = EXAMPLES_DIR / "tpu7x-multislice.yaml"


def test_checkpoints_through_gcs_fuse_keep_the_bucket_and_the_run_identity() -> None:
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES_DIR / "default.yaml"), Overrides(name="t", slices=2, checkpoint_storage="gcsfuse"))
    args = _args_dict(plan.program.args)
    assert args["base_output_directory"] == "/checkpoints" and args["gcs_metrics"] == "false"
    assert any("gcs_metrics turned off" in w for w in plan.program.warnings)
    # The mount root is the bucket root: the files land where a gcs run's would, and the identity check reads them there.
    assert plan.program.output_dir == "gs://my-tpu-project-tpu-dev-ckpt/t/" and plan.checkpoint_dir == "gs://my-tpu-project-tpu-dev-ckpt/t/checkpoints/"
    template = _pod(jobset.jobset(plan))
    (vol,) = [v for v in template["spec"]["volumes"] if v["name"] == volumes.CHECKPOINT_VOLUME]
    assert vol["csi"]["driver"] == names.GCSFUSE_CSI_DRIVER and "readOnly" not in vol["csi"]
    assert vol["csi"]["volumeAttributes"]["bucketName"] == "my-tpu-project-tpu-dev-ckpt"
    options = vol["csi"]["volumeAttributes"]["mountOptions"].split(",")
    assert {"metadata-cache:negative-ttl-secs:0", "write:enable-streaming-writes:true", "rename-dir-limit=200000"} <= set(options)
    assert not any(o.startswith("only-dir=") for o in options)
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in template["spec"]["containers"][0]["volumeMounts"]
    assert template["metadata"]["annotations"][names.GCSFUSE_VOLUMES_ANNOTATION] == "true"
    assert plan.summary()["checkpoint"]["storage"] == "gcsfuse"


def test_checkpoints_to_lustre_through_the_teams_claim() -> None:
    spec = load_spec(TPU7X)
    plan = plan_run("maxtext-6b", spec, Overrides(name="t", slices=2, checkpoint_storage="lustre"))
    args = _args_dict(plan.program.args)
    assert args["base_output_directory"] == "/checkpoints/llm"  # the team's own directory
    assert plan.program.output_dir is None and plan.checkpoint_dir == "lustre:ironwood-ckpt/llm/t/checkpoints/"
    assert not any("does not check" in w for w in plan.program.warnings)  # the identity check reaches Lustre (tests/test_lustre_identity.py)
    template = _pod(jobset.jobset(plan))
    (vol,) = [v for v in template["spec"]["volumes"] if v["name"] == volumes.CHECKPOINT_VOLUME]
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "tpu-gke-toolkit-lustre"}}
    assert "annotations" not in template["metadata"] or names.GCSFUSE_VOLUMES_ANNOTATION not in template["metadata"]["annotations"]


def test_each_team_gets_a_volume_and_claim_on_the_instance() -> None:
    from workloads.render import lustre

    spec = load_spec(TPU7X)
    pv, pvc = lustre.lustre_objects(spec)
    assert pv["kind"] == "PersistentVolume" and "namespace" not in pv["metadata"]
    assert pv["spec"]["csi"] == {
        "driver": "lustre.csi.storage.gke.io",
        "volumeHandle": "my-tpu-project/us-central1-c/ironwood-ckpt",
        "volumeAttributes": {"ip": "10.96.0.2", "filesystem": "ckpt"},
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and pv["spec"]["capacity"] == {"storage": "36000Gi"}
    assert pv["spec"]["claimRef"] == {"namespace": "llm", "name": pvc["metadata"]["name"]}
    assert pvc["metadata"]["namespace"] == "llm" and pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    doc = yaml.safe_load(TPU7X.read_text())
    del doc["lustre"]["ip"]
    assert lustre.lustre_objects(parse_spec(doc)) == []  # not deployed yet: nothing to point at


@pytest.mark.synth
def test_the_stack_creates_the_instance_its_peering_and_the_csi_driver(tmp_path: Path) -> None:
    from infra.stack import synth

    doc = json.loads(synth(load_spec(TPU7X), tmp_path).read_text())
    r = doc["resource"]
    (inst,) = r["google_lustre_instance"].values()
    assert (inst["instance_id"], inst["location"], inst["capacity_gib"], inst["per_unit_storage_throughput"], inst["filesystem"]) == (
        "ironwood-ckpt",
        "us-central1-c",
        "36000",
        "500",
        "ckpt",
    )
    assert inst["network"] == "projects/my-tpu-project/global/networks/ironwood-ms-net"
    (rng,) = r["google_compute_global_address"].values()
    assert (rng["purpose"], rng["address"], rng["prefix_length"]) == ("VPC_PEERING", "10.96.0.0", 20)
    (peer,) = r["google_service_networking_connection"].values()
    assert any("google_service_networking_connection" in d for d in inst["depends_on"]) and peer["service"] == "servicenetworking.googleapis.com"
    lnet = [f for f in r["google_compute_firewall"].values() if f["name"] == "ironwood-ckpt-lnet"]
    assert lnet and lnet[0]["source_ranges"] == ["10.96.0.0/20"] and lnet[0]["allow"] == [{"protocol": "tcp", "ports": ["988"]}]
    (cluster,) = r["google_container_cluster"].values()
    assert cluster["addons_config"]["lustre_csi_driver_config"] == {"enabled": True}
    assert {"lustre.googleapis.com", "servicenetworking.googleapis.com"} <= {s["service"] for s in r["google_project_service"].values()}
    assert "lustre_mount_point" in doc["output"]


def test_infra_spec_shows_datasets_multi_tier_checkpointing_and_lustre() -> None:
    from tests.support import cli

    r = cli("infra", "spec", "--spec", str(V6E))
    assert r.returncode == 0, r.stderr
    assert "multi-tier checkpointing (64 GiB RAM disk per VM, backed up to my-tpu-project-trillium-ckpt)" in r.stdout
    assert "dataset c4-en: gs://my-tpu-project-trillium-data/c4/en/3.0.1/ (arrayrecord), read by team pretrain" in r.stdout
    doc = json.loads(cli("infra", "spec", "--spec", str(TPU7X), "-o", "json").stdout)
    assert doc["lustre"]["zone"] == "us-central1-c" and doc["lustre"]["ip"] == "10.96.0.2" and doc["datasets"] == []
