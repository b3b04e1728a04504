"""Starting from weights: `--load-parameters` checked before anything is applied, and `convert` planned, rendered, recorded.

The checkpoint metadata read here is what real Orbax wrote for MaxText 0.2.5's conversion of a
tiny Llama (tests/data/checkpoints/converted-tiny-llama, held to the live MaxText by
tests/maxtext/test_convert.py); the buckets are a real GCS-compatible server (tests/gcs_emulator.py).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support.cli import cli
from tests.support.gcs_emulator import emulator_client
from tests.support.paths import REPO
from tests.support.recording_cluster import RecordingCluster
from tests.support.specs import example_doc, spec_from
from toolkit.errors import FieldError
from workloads import runs
from workloads.planning import checkpoint_shapes as cs
from workloads.planning.conversion import BASE_PREFIX, node_allocatable_gib, plan_conversion
from workloads.planning.planner import Overrides
from workloads.render.convert_job import convert_objects
from workloads.runs import base_checkpoints, load_parameters
from workloads.runs import convert as convert_service
from workloads.runs.identity import GcsStore

FIXTURE = REPO / "tests" / "data" / "checkpoints" / "converted-tiny-llama"
TRAINED = REPO / "tests" / "data" / "checkpoints" / "trained-tiny-llama-scanned"
SPEC = load_spec(REPO / "examples" / "default.yaml")
TINY = {
    "base_emb_dim": 64,
    "base_num_query_heads": 4,
    "base_num_kv_heads": 4,
    "head_dim": 16,
    "base_num_decoder_layers": 2,
    "base_mlp_dim": 128,
    "vocab_size": 256,
}


def _lp(path: str, scan: bool = False, **dims: int) -> cs.LoadParameters:
    return cs.LoadParameters(path, "llama3.1-8b", tuple({**TINY, **dims}.items()), scan)


def _dir(path: Path) -> cs.Read:
    return lambda name: (path / name).resolve().read_bytes() if (path / name).resolve().is_file() else None


# ------------------------------------------------------------------ the shapes, from Orbax's own metadata


def test_whole_shapes_come_from_the_shards_and_their_sharding() -> None:
    items = FIXTURE / "0" / "items"
    shapes = cs.global_shapes((items / cs.ARRAY_METADATA).read_bytes(), (items / cs.SHARDING).read_bytes())
    raw = json.loads((items / cs.ARRAY_METADATA).read_text())["array_metadatas"]
    shard = next(a["array_metadata"]["write_shape"] for a in raw if a["array_metadata"]["param_name"].endswith("token_embedder.embedding"))
    assert shard == [16, 64]  # one of 16 simulated devices' rows: not the array's shape
    assert shapes["token_embedder.embedding"] == ((256, 64),) and shapes["decoder.layers_0.self_attention.out.kernel"] == ((4, 16, 64),)
    assert cs.check(_lp(str(items)), _dir(items)).parameters == 21


def test_a_trained_checkpoints_replicated_arrays_read_back_whole() -> None:
    """A run's own checkpoint (scanned layers, fsdp x tensor): the final norm is split over tensor and replicated over fsdp,
    and Orbax wrote each replica a quarter of the shard."""
    items = TRAINED / "2" / "items"
    raw = json.loads((items / cs.ARRAY_METADATA).read_text())["array_metadatas"]
    piece = next(a["array_metadata"]["write_shape"] for a in raw if a["array_metadata"]["param_name"] == "params.params.decoder.decoder_norm.scale")
    shapes = cs.global_shapes((items / cs.ARRAY_METADATA).read_bytes(), (items / cs.SHARDING).read_bytes())
    assert piece == [4] and shapes["decoder.decoder_norm.scale"] == ((64,),)
    assert shapes["decoder.layers.self_attention.query.kernel"] == ((64, 2, 4, 16),)
    got = cs.check(_lp(str(items), scan=True), _dir(items))
    assert (got.parameters, got.scan_layers) == (12, True)  # the optimizer state beside them is not a parameter


def test_a_replica_cut_that_cannot_be_read_back_leaves_every_shape_it_could_be() -> None:
    spec = {"axis_names": ["data", "fsdp"], "shape": [2, 4], "partition_spec": [None, "fsdp"]}  # replicated over data (2)
    assert cs._whole((3, 5), spec) == ((6, 20), (3, 40), (3, 20))  # no dimension divisible by 2: cut at 0, at 1, or not at all
    assert cs._whole((4, 5), spec) == ((8, 20),)  # dimension 0 divisible: the cut was there


@pytest.mark.parametrize(
    ("lp", "said"),
    [
        (_lp("x", scan=True), "saved with scan_layers=false and the run has scan_layers=true"),
        (_lp("x", vocab_size=128256), "token_embedder.embedding is 256x64, the model's is 128256x64"),
        (_lp("x", base_num_decoder_layers=32), "it has 2 decoder layers and the model 32"),
        (_lp("x", base_num_kv_heads=1), "self_attention.key.kernel is 64x4x16, the model's is 64x1x16"),
    ],
)
def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(lp: cs.LoadParameters, said: str) -> None:
    items = FIXTURE / "0" / "items"
    with pytest.raises(FieldError) as e:
        cs.check(dataclasses.replace(lp, path=str(items)), _dir(items))
    assert e.value.field == "--load-parameters" and said in e.value.problem


def test_no_checkpoint_and_the_directory_above_it_are_told_apart(tmp_path) -> None:
    with pytest.raises(FieldError) as e:
        cs.check(_lp(str(FIXTURE)), _dir(FIXTURE))
    assert e.value.problem.endswith("is the directory above the checkpoint's parameters") and e.value.fix == f"pass {FIXTURE}/0/items"
    with pytest.raises(FieldError) as e:
        cs.check(_lp(str(tmp_path)), _dir(tmp_path))
    assert "no MaxText checkpoint" in e.value.problem


def test_the_expected_shapes_stack_scanned_layers_on_axis_1() -> None:
    want = cs.expected(_lp("x", scan=True, base_num_decoder_layers=3))
    assert want["decoder.layers.self_attention.query.kernel"] == (64, 3, 4, 16) and want["decoder.layers.mlp.wo.kernel"] == (128, 3, 64)
    assert "decoder.layers_0.mlp.wi_0.kernel" in cs.expected(_lp("x"))


# ------------------------------------------------------------------ submit --load-parameters, through the run service


@pytest.fixture(scope="module")
def gcs():
    with emulator_client() as client:
        yield client


def _upload(client, bucket: str, prefix: str) -> str:
    b = client.bucket(bucket)
    if not b.exists():
        client.create_bucket(bucket)
    for f in FIXTURE.rglob("*"):
        if f.is_file():
            b.blob(f"{prefix}/{f.relative_to(FIXTURE).as_posix()}").upload_from_string(f.read_bytes())
    return f"gs://{bucket}/{prefix}/0/items"


def _tiny_plan(path: str, *sets: str):
    given = {s.split("=", 1)[0] for s in sets}
    sizes = [f"{k}={v}" for k, v in TINY.items() if k not in given]
    return runs.plan("llama3.1-8b", SPEC, Overrides(name="ft", load_parameters=path, sets=("override_model_config=true", *sizes, *sets)))


def test_submit_refuses_a_missing_or_mismatched_checkpoint_before_anything_is_applied(gcs, monkeypatch, memory_buckets) -> None:
    path = _upload(gcs, f"tgk-lp-{uuid.uuid4().hex[:8]}", "_base/tiny")
    monkeypatch.setattr(runs.service, "_buckets", lambda cluster, project=None: gcs)
    ok = _tiny_plan(path, "scan_layers=false")
    assert ok.program.load_parameters is not None and f"load_parameters_path={path}" in ok.program.args
    for plan, said in (
        (_tiny_plan(path.replace("tiny", "gone")), "no MaxText checkpoint"),
        (_tiny_plan(path), "scan_layers=false"),
        (_tiny_plan(path, "scan_layers=false", "vocab_size=512"), "256x64, the model's is 512x64"),
    ):
        cluster = RecordingCluster()
        with pytest.raises(FieldError) as e:
            runs.apply(cluster, plan)
        assert e.value.field == "--load-parameters" and said in str(e.value)
        assert cluster.applied == []
    cluster = RecordingCluster()
    runs.apply(cluster, ok)
    assert [o["kind"] for o in cluster.applied] == ["JobSet"]


def test_a_path_on_this_machine_is_refused_for_a_cluster_run(gcs) -> None:
    with pytest.raises(FieldError) as e:
        load_parameters.on_cluster(_lp("/checkpoints/x/0/items"), gcs)
    assert "a path on this machine" in e.value.problem


@pytest.mark.parametrize(
    ("args", "field", "said"),
    [
        (["--load-parameters", "s3://b/x"], "--load-parameters", "neither gs://BUCKET/PATH nor an absolute path"),
        (["--load-parameters", "gs://b-1/x", "--set", "load_parameters_path=gs://b-1/y"], "--set", "set by --load-parameters"),
        (["--load-parameters", "/mnt/elsewhere/0/items"], "load_parameters_path", "no volume of this run mounts"),
    ],
)
def test_bad_load_parameters_flags_are_one_line_exit_2(args: list[str], field: str, said: str) -> None:
    done = cli("workloads", "submit", "llama3.1-8b", "--dry-run", *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert field in done.stderr and said in done.stderr


def test_the_dry_run_says_what_a_submit_would_check() -> None:
    done = cli("workloads", "submit", "llama3.1-8b", "--dry-run", "--load-parameters", "gs://my-bucket/_base/l/0/items")
    assert done.returncode == 0, done.stderr
    assert "load_parameters_path=gs://my-bucket/_base/l/0/items" in done.stdout
    assert "would check gs://my-bucket/_base/l/0/items holds a MaxText checkpoint of llama3.1-8b: vocab 128256 x emb 4096" in done.stderr


# ------------------------------------------------------------------ convert


def test_a_conversion_is_planned_for_the_recipes_model_into_the_teams_bucket() -> None:
    c = plan_conversion("llama3.1-8b", SPEC, source="gs://my-hf/meta-llama/Llama-3.1-8B", name="llama31")
    assert c.directory == f"gs://my-tpu-project-tpu-dev-ckpt/{BASE_PREFIX}/llama31/" and c.checkpoint.endswith("/_base/llama31/0/items")
    assert "model_name=llama3.1-8b" in c.args and "hf_model_path=/hf" in c.args and "scan_layers=true" in c.args
    assert c.memory_gib == 21  # 8.03B x 2 B x 1.25 + 2 GiB
    (job,) = convert_objects(c)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu"} and pod["serviceAccountName"] == c.service_account
    vol = pod["volumes"][0]["csi"]
    assert (
        vol["readOnly"] and vol["volumeAttributes"]["bucketName"] == "my-hf" and "only-dir=meta-llama/Llama-3.1-8B" in vol["volumeAttributes"]["mountOptions"]
    )
    assert pod["containers"][0]["command"] == ["python3", "-m", "maxtext.checkpoint_conversion.to_maxtext"]
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"] and "tpu-gke-toolkit/run" not in job["metadata"]["labels"]


@pytest.mark.parametrize(
    ("args", "field", "said"),
    [
        (["maxtext-6b", "--from", "gs://my-hf/x"], "RECIPE", "model default is a model of the recipe's own dimensions"),
        (["llama3-8b", "--from", "gs://my-hf/x"], "RECIPE", "model llama3-8b is not one MaxText 0.2.5 converts"),
        (["hello-tpu", "--from", "gs://my-hf/x"], "RECIPE", "runs a plain command"),
        (["llama3.1-8b", "--from", "/tmp/x"], "--from", "is not gs://BUCKET/PATH"),
        (["llama3.1-8b", "--from", "gs://my-hf/x", "--name", "Bad_Name"], "--name", "is not a name"),
        (["llama3.1-8b", "--from", "gs://my-hf/x", "--set", "base_output_directory=gs://b-1/x"], "--set", "set by convert"),
        (["llama3.1-8b", "--from", "gs://my-hf/x", "--tiny"], "--tiny", "only means something with --local"),
    ],
)
def test_bad_conversions_are_one_line_exit_2(args: list[str], field: str, said: str) -> None:
    done = cli("workloads", "convert", *args, "--dry-run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {field}:") and said in done.stderr and done.stdout == ""


def test_a_cpu_pool_too_small_for_the_model_is_refused_with_one_that_fits(tmp_path) -> None:
    doc = example_doc("default")
    doc["cpu_pool"] = {**doc.get("cpu_pool", {}), "machine_type": "n2-standard-4"}
    with pytest.raises(FieldError) as e:
        plan_conversion("llama3.1-8b", spec_from(doc), source="gs://my-hf/x", name="l")
    assert e.value.field == "cpu_pool.machine_type" and "needs ~21 GiB" in e.value.problem and "highmem type of 4 vCPUs" in e.value.fix
    # 32 GiB less GKE's reservation (25% of 4, 20% of 4, 10% of 8, 6% of the 16 left) and the 100 MiB eviction threshold
    assert node_allocatable_gib("n2-highmem-4") == pytest.approx(32 - (1 + 0.8 + 0.8 + 0.96) - 100 / 1024)


def test_the_record_is_claimed_once_and_a_base_checkpoint_is_never_overwritten(gcs) -> None:
    bucket = f"tgk-base-{uuid.uuid4().hex[:8]}"
    gcs.create_bucket(bucket)
    c = dataclasses.replace(plan_conversion("llama3.1-8b", SPEC, source="gs://my-hf/meta/L", name="l31"), bucket=bucket)
    store = GcsStore(gcs, c.directory)
    first = base_checkpoints.claim(store, base_checkpoints.record_of(c))
    again = base_checkpoints.claim(store, base_checkpoints.record_of(c))
    assert (first.state, again.state) == ("new", "same")
    other = dataclasses.replace(c, source_prefix="meta/Other")
    with pytest.raises(FieldError) as e:
        base_checkpoints.claim(store, base_checkpoints.record_of(other))
    assert e.value.field == "--name" and "never overwritten" in e.value.problem
    gcs.bucket(bucket).blob(f"{BASE_PREFIX}/stray/0/items/_METADATA").upload_from_string(b"{}")
    with pytest.raises(FieldError) as e:
        base_checkpoints.claim(GcsStore(gcs, f"gs://{bucket}/{BASE_PREFIX}/stray/"), base_checkpoints.record_of(dataclasses.replace(c, name="stray")))
    assert "no conversion of the toolkit recorded" in e.value.problem
    assert [r.name for r in base_checkpoints.records(gcs, bucket)] == ["l31"]


def test_cleanup_never_deletes_a_converted_base_checkpoint(gcs) -> None:
    from toolkit import ledger
    from workloads.runs.cleanup import bucket_dirs

    bucket = f"tgk-clean-{uuid.uuid4().hex[:8]}"
    gcs.create_bucket(bucket)
    c = dataclasses.replace(plan_conversion("llama3.1-8b", SPEC, source="gs://my-hf/m/L", name="checkpoints"), bucket=bucket)
    base_checkpoints.claim(GcsStore(gcs, c.directory), base_checkpoints.record_of(c))  # recorded before the Job writes
    _upload(gcs, bucket, f"{BASE_PREFIX}/checkpoints")  # what the Job writes; even named "checkpoints", it is no run's
    dirs = bucket_dirs(gcs, bucket)
    assert [d.run for d, _ in dirs] == [BASE_PREFIX]  # the ledger is asked about it: the shape of a run's directory
    verdict = ledger.run_output(dirs[0][0], live=[], now=4e9, retention=0)
    assert isinstance(verdict, ledger.Kept)  # no run identity the toolkit wrote: never deleted


def test_the_source_must_hold_safetensors(gcs) -> None:
    bucket = f"tgk-hf-{uuid.uuid4().hex[:8]}"
    gcs.create_bucket(bucket)
    c = plan_conversion("llama3.1-8b", SPEC, source=f"gs://{bucket}/meta/L", name="l")
    gcs.bucket(bucket).blob("meta/L/pytorch_model.bin").upload_from_string(b"x")
    with pytest.raises(FieldError) as e:
        convert_service.source_check(gcs, c)
    assert e.value.field == "--from" and "only PyTorch files" in e.value.problem
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    gcs.bucket(bucket).blob("meta/L/model.safetensors.index.json").upload_from_string(json.dumps(index))
    gcs.bucket(bucket).blob("meta/L/model-00001-of-00002.safetensors").upload_from_string(b"x")
    with pytest.raises(FieldError) as e:
        convert_service.source_check(gcs, c)
    assert "model-00002-of-00002.safetensors" in e.value.problem
    gcs.bucket(bucket).blob("meta/L/model-00002-of-00002.safetensors").upload_from_string(b"x")
    assert len(convert_service.source_check(gcs, c)) == 2
