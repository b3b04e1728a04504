"""Training on the spec's datasets and GKE's multi-tier checkpointing (issue 25 items 1 and 3): the plan, the pods, the cluster objects, IAM.

The bad inputs (exit 2, one line, nothing applied) are in tests/bad_runs/cases.yaml and
tests/bad_specs/; the objects against the real API server in
tests/integration/test_training_storage_live.py; checkov scans them through tests/k8s_scan.py.
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
    assert not any(o.startswith(("uid=", "gid=")) for o in options)  # the team runs as the image's user
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
    doc |= {"name": "llama3-c4", "dataset": "c4-en"}
    (tmp_path / "llama3-c4.yaml").write_text(yaml.safe_dump(doc))
    recipes.load_recipe.cache_clear()
    try:
        plan = plan_run("llama3-c4", load_spec(V6E), Overrides(name="t", team="pretrain"))
        assert plan.program.dataset is not None and plan.program.dataset.name == "c4-en"
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
    from workloads.local import addons, controlplane

    (crd,) = addons.load_docs(controlplane.CHECKPOINT_CONFIGURATION_CRD)
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
    assert 55 < v5e.policy.multi_tier.ramdisk_bytes / GIB < 60  # ~8.6B parameters
    assert 50 < v6e.policy.multi_tier.ramdisk_bytes / GIB < 53  # ~8.0B parameters
