"""`import-recipe` over every launch layout and construct tpu-recipes publishes, and what planning does with the result.

tests/data/recipes/published/ is a miniature tpu-recipes tree written for these tests (not
copies of published files): a Cluster Toolkit script whose training is piped through tee,
a `bash -c` wrapper with a fallback per MaxText layout, machine-type / shorthand / tpu7x-64 /
tpu-v5p compute types, a JobSet manifest, the -gcs and -lustre variants with their mounts,
a here-document command, a helper script, and READMEs carrying step figures both ways
(sample log lines, a summary table). The published repository itself is imported by
scripts/bench_import_recipes.py (the world test, whose table goes in the change's report).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, cli, example_doc, spec_from
from toolkit.errors import FieldError
from workloads.planning import compute_types, shellwords, step_figures
from workloads.planning import import_recipe as ir
from workloads.planning import recipes as r
from workloads.planning.planner import Overrides, plan_run

DATA = REPO / "tests" / "data" / "recipes"
TREE = DATA / "published" / "training"
IRONWOOD = TREE / "ironwood" / "llama3.1-8b"
TEE = IRONWOOD / "8k-bf16-tpu7x-4x4x4" / "cluster_toolkit" / "run_recipe.sh"
MANIFEST = IRONWOOD / "8k-bf16-tpu7x-4x4x4" / "k8s" / "k8s_manifest.yaml"
GCS = IRONWOOD / "8k-bf16-tpu7x-4x4x4-gcs" / "cluster_toolkit" / "run_recipe.sh"
LUSTRE = IRONWOOD / "8k-bf16-tpu7x-4x4x4-lustre" / "cluster_toolkit" / "run_recipe.sh"
LUSTRE_XPK = IRONWOOD / "8k-bf16-tpu7x-4x4x4-lustre" / "xpk" / "run_recipe.sh"
SHORTHAND_64 = IRONWOOD / "8k-fp8-tpu7x-4x4x4" / "cluster-toolkit" / "run_recipe.sh"
BASH_C = TREE / "trillium" / "Llama3.1-8B-MaxText" / "v6e-32" / "cluster_toolkit" / "run_recipe.sh"
HEREDOC = TREE / "trillium" / "Llama3.1-8B-MaxText" / "v6e-8" / "llama3-1-8b-gcluster.sh"
NO_TOPOLOGY = TREE / "trillium" / "Mixtral-8x7B-MaxText" / "cluster_toolkit" / "run_recipe.sh"
V5P = TREE / "v5p" / "Llama3.1-8B-MaxText" / "cluster_toolkit" / "run_recipe.sh"
HELPER = TREE / "v5p" / "Llama3.1-8B-MaxText" / "scripts" / "run_long_context.sh"


def _import(path: Path) -> ir.Imported:
    return ir.import_recipe(path.read_text(), source=ir.source_path(path), readmes=ir.readmes_near(path), date="2026-11-27")


@pytest.fixture()
def user_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "recipes"
    d.mkdir()
    monkeypatch.setenv("TGK_RECIPES", str(d))
    r.load_recipe.cache_clear()
    yield d
    r.load_recipe.cache_clear()


def _save(user_recipes: Path, imp: ir.Imported, name: str) -> None:
    (user_recipes / f"{name}.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": name}, sort_keys=False))
    r.load_recipe.cache_clear()


def _pool_spec(imp: ir.Imported, base: str = "tpu7x", **top: object) -> object:
    gen, _, topology = imp.recipe["shapes"][0].partition("-")
    return spec_from(base, tpu_pools=[{"name": "p", "generation": gen, "topology": topology, "slices": imp.slices, "capacity": "on-demand"}], **top)


def _one_team(doc: dict) -> dict:
    """The example with its first team only (one pool of one slice cannot be shared out by quota)."""
    if doc.get("teams"):
        team = {k: v for k, v in doc["teams"][0].items() if k != "quota_share"}
        doc["teams"] = [team]
        doc["buckets"] = [b for b in doc.get("buckets", []) if b.get("team") in (None, team["name"])]
        doc["datasets"] = [d for d in doc.get("datasets", []) if d["bucket"] in {b["name"] for b in doc["buckets"]}]
    return doc


def _args(plan) -> dict[str, str]:
    return dict(a.split("=", 1) for a in plan.program.args[1:])


# ------------------------------------------------------------------ layouts


@pytest.mark.parametrize(
    "script, shape, slices, base",
    [
        (TEE, "tpu7x-4x4x4", 1, "tpu7x"),
        (MANIFEST, "tpu7x-4x4x4", 1, "tpu7x"),
        (SHORTHAND_64, "tpu7x-4x4x4", 1, "tpu7x"),
        (BASH_C, "v6e-4x8", 1, "v6e-reservation"),
        (HEREDOC, "v6e-2x4", 1, "v6e-reservation"),
        (NO_TOPOLOGY, "v6e-16x16", 1, "v6e-reservation"),
        (V5P, "v5p-4x4x4", 1, "v5p"),
    ],
    ids=["tee-pipe", "k8s-manifest", "tpu7x-64", "bash-c-machine-type", "heredoc-computed-gcluster", "v6e-256-no-topology", "tpu-v5p"],
)
def test_every_layout_imports_and_plans(script: Path, shape: str, slices: int, base: str, user_recipes: Path) -> None:
    imp = _import(script)
    assert (imp.recipe["shapes"], imp.slices) == ([shape], slices)
    _save(user_recipes, imp, "layout")
    plan = plan_run("layout", _pool_spec(imp, _one_team(example_doc(base))), Overrides())
    assert plan.target.shape.key == shape and plan.target.slices == slices
    assert _args(plan)["model_name"] == imp.recipe["maxtext"]["model_name"]


def test_tee_pipe_and_placement_array_keep_the_training_command_whole() -> None:
    imp = _import(TEE)
    mt = imp.recipe["maxtext"]
    # Before, `2>&1` became a MaxText argument and the script was refused.
    assert not any(">" in str(v) or "&" in str(v) for v in mt["args"].values())
    assert mt["args"]["remat_policy"] == "full" and mt["per_device_batch"][0]["per_device_batch_size"] == 2.0
    assert imp.recipe["libtpu_init_args"]["tpu7x"] == [
        "--xla_tpu_scoped_vmem_limit_kib=61440",
        "--xla_tpu_enable_async_collective_fusion=true",
        "--xla_enable_async_all_gather=true",
    ]
    assert imp.recipe["image"] == {"ref": "us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"}
    report = "\n".join(imp.unmapped)
    assert "--command runs `tee train.log`: not carried" in report and "gcloud storage cp" in report
    # The array the `if` fills (read as if the branch ran) spreads into the launch's words: listed, not lost.
    assert "--placement-policy=${PLACEMENT_POLICY}: not carried; the toolkit uses the spec's node pools (their placement)" in imp.unmapped


def test_every_gcluster_flag_is_carried_or_listed() -> None:
    # The script's own launch words, read independently of the importer's bookkeeping.
    for script in (TEE, GCS, LUSTRE, BASH_C, HEREDOC, SHORTHAND_64, NO_TOPOLOGY):
        imp = _import(script)
        launch, _ = ir.find_launch(script.read_text())
        given = {k for k, _ in launch.flags}
        listed = {line.split(":", 1)[0].split("=", 1)[0].split(" ", 1)[0].removeprefix("--") for line in imp.unmapped if line.startswith("--")}
        carried = {c.removeprefix("--") for c in imp.carried}
        assert given <= carried | listed, (script, given - carried - listed)
        assert given & carried, script


def test_gcluster_places_its_placement_and_pathways_flags() -> None:
    text = TEE.read_text().replace("set -e\n", "set -e\nexport PLACEMENT_POLICY=compact-1\n", 1)
    imp = ir.import_recipe(text)
    assert "--placement-policy=compact-1: not carried; the toolkit uses the spec's node pools (their placement)" in imp.unmapped
    with pytest.raises(FieldError, match=r"runs MaxText on Pathways \(--pathways-proxy-server-image\)"):
        ir.import_recipe(text.replace("--verbose", "--pathways-proxy-server-image=us-docker.pkg.dev/p/proxy:1"))


def test_bash_c_wrapper_and_layout_fallback_are_one_training() -> None:
    imp = _import(BASH_C)
    assert imp.recipe["maxtext"]["args"]["decoder_layer_input"] == "offload"
    assert imp.recipe["libtpu_init_args"]["v6e"] == ["--xla_tpu_scoped_vmem_limit_kib=98304", "--xla_tpu_enable_async_collective_fusion=true"]
    assert imp.recipe["env"] == {"JAX_PLATFORMS": "tpu,cpu"}
    assert "--command runs MaxText in 2 places (a fallback on the image's layout) with the same arguments: carried once" in imp.unmapped
    # Two trainings with different arguments are not one recipe.
    two = BASH_C.read_text().replace(
        "python3 -u MaxText/train.py MaxText/configs/base.yml ${MAXTEXT_ARGS}", "python3 -u MaxText/train.py MaxText/configs/base.yml steps=3"
    )
    with pytest.raises(FieldError, match="runs MaxText 2 times with different arguments"):
        ir.import_recipe(two)


def test_heredoc_command_and_an_inference_word_in_the_image_name() -> None:
    imp = _import(HEREDOC)
    assert imp.recipe["image"] == {"ref": "us-docker.pkg.dev/my-project/jetstream-maxtext/base:2026-10-01"}
    assert imp.recipe["steps"] == 30 and imp.recipe["maxtext"]["per_device_batch"][0]["per_device_batch_size"] == 3.0
    assert imp.recipe["libtpu_init_args"]["v6e"] == ["--xla_tpu_scoped_vmem_limit_kib=98304"]
    assert "--cluster=trillium-8: not carried; the toolkit uses the spec's cluster" in imp.unmapped  # a global flag before `job submit`


def test_manifest_carries_its_command_and_lists_every_field(tmp_path: Path) -> None:
    imp = _import(MANIFEST)
    # The same training as the Cluster Toolkit script of the recipe.
    script = _import(TEE).recipe["maxtext"]
    assert imp.recipe["maxtext"]["args"] == script["args"] and imp.recipe["maxtext"]["model"] == script["model"]
    assert imp.recipe["env"]["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "false" and imp.recipe["env"]["TPU_MIN_LOG_LEVEL"] == "0"
    report = "\n".join(imp.unmapped)
    for field in ("spec.ttlSecondsAfterFinished", "spec.failurePolicy", "job.backoffLimit", "pod.hostNetwork", "pod.tolerations", "pod.volumes"):
        assert f"manifest {field}: not carried; the toolkit sets" in report, field
    assert "2 containers per VM (parallel containers, 2 running the same command)" in report
    assert "container env MY_POD_IP: taken from a reference (valueFrom), not carried" in report
    assert "--docker-image=${WORKLOAD_IMAGE}: not a tagged image reference" in report
    # Containers running different commands are not one training.
    text = MANIFEST.read_text()
    second = text.rindex("steps=20")
    with pytest.raises(FieldError, match="the manifest's containers run different commands"):
        ir.import_recipe(text[:second] + "steps=21" + text[second + len("steps=20") :])


def test_helper_script_is_refused_saying_what_it_is() -> None:
    with pytest.raises(FieldError, match="this is a script that runs MaxText on this machine"):
        _import(HELPER)


# ------------------------------------------------------------------ compute types


@pytest.mark.parametrize(
    "compute, topology, key",
    [
        ("tpu7x", "4x8x8", "tpu7x-4x8x8"),
        ("tpu7x-standard-4t", "4x4x4", "tpu7x-4x4x4"),
        ("tpu7x-64", "4x4x4", "tpu7x-4x4x4"),
        ("ct6e-standard-4t", "8x8", "v6e-8x8"),
        ("ct6e-standard-8t", "2x4", "v6e-2x4"),
        ("v6e-256", None, "v6e-16x16"),
        ("v6e-16", None, "v6e-4x4"),
        ("v6e-4", "2x4", "v6e-2x4"),
        ("tpu-v5p", "4x4x4", "v5p-4x4x4"),
        ("v5p", "4x4x8", "v5p-4x4x8"),
        ("v5p-128", None, "v5p-4x4x8"),
        ("ct5p-hightpu-4t", "2x2x1", "v5p-2x2x1"),
    ],
)
def test_compute_types_read_as_gcluster_reads_them(compute: str, topology: str | None, key: str) -> None:
    shape, _ = compute_types.slice_shape(compute, topology)
    assert shape.key == key


@pytest.mark.parametrize(
    "compute, topology, needle",
    [
        ("tpu7x-64", None, "gcluster takes a tpu7x slice's size from --topology only"),
        ("tpu7x", None, "names no slice size and the script gives no --topology"),
        ("ct6e-standard-4t", None, "names no slice size"),
        ("v6e-300", None, "asks for 300 v6e chips, which no v6e slice has"),
        ("a3-megagpu-8g", "2x2", "is not a TPU compute type gcluster resolves"),
        ("v6e", "4x4x4", "'4x4x4' is not a v6e slice"),
    ],
)
def test_compute_types_gcluster_refuses_are_refused(compute: str, topology: str | None, needle: str) -> None:
    with pytest.raises(FieldError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        compute_types.slice_shape(compute, topology)


# ------------------------------------------------------------------ published figures


def test_sample_lines_give_the_last_step_and_name_the_readme() -> None:
    fig = _import(BASH_C).recipe["published"]
    assert fig == {
        "step_seconds": 3.598,
        "tflops": 381.4,
        "per": "device",
        "step": 9,
        "tokens_per_second": 6829.905,
        "basis": "sample log line",
        "source": "training/trillium/Llama3.1-8B-MaxText/v6e-32/cluster_toolkit/README.md",
        "date": "2026-11-27",
    }
    # A README one level above a launcher directory is the recipe's too; this one omits "completed".
    fig = _import(NO_TOPOLOGY).recipe["published"]
    assert (fig["step_seconds"], fig["tflops"], fig["source"]) == (12.1, 150.25, "training/trillium/Mixtral-8x7B-MaxText/README.md")


def test_summary_table_row_matches_model_chips_and_precision() -> None:
    bf16 = _import(TEE).recipe["published"]
    assert (bf16["step_seconds"], bf16["tflops"], bf16["tokens_per_second"], bf16["per"]) == (2.5, 700.1, 13107.2, "chip")
    assert bf16["source"] == "training/ironwood/README.md" and bf16["basis"] == "summary table row llama3.1-8b, 64 chips, bf16"
    assert _import(SHORTHAND_64).recipe["published"]["step_seconds"] == 1.9  # the fp8_full row
    # No row of that size (two slices: 128 chips, but bf16 with 8192 needs the row's GBS to tell): none is guessed.
    facts = step_figures.RecipeFacts("llama3.1-8b", ("ironwood",), chips=32, seq=8192, quantization="", global_batch=None)
    assert step_figures.from_table((TREE / "ironwood" / "README.md").read_text(), facts) is None


def test_table_row_is_not_taken_when_two_rows_fit_and_the_batch_does_not_tell() -> None:
    table = "| Model ID | Number of chips | GBS | Sequence length | Precision | Step time (seconds) |\n|---|---|---|---|---|---|\n"
    table += "| qwen3-8b | 64 | 128 | 4096 | bf16 | 3.0 |\n| qwen3-8b-moe | 64 | 256 | 4096 | bf16 | 4.0 |\n"
    facts = step_figures.RecipeFacts("qwen3-14b", (), chips=64, seq=4096, quantization="", global_batch=None)
    assert step_figures.from_table(table, facts) is None  # two rows of the family, no batch to choose
    assert step_figures.from_table(table, facts.__class__(**{**facts.__dict__, "global_batch": 256}))["step_seconds"] == 4.0


def test_a_readme_above_the_recipe_lends_no_sample_line(tmp_path: Path) -> None:
    model = tmp_path / "training" / "trillium" / "Model"
    (model / "v6e-8").mkdir(parents=True)
    (model / "README.md").write_text("completed step: 3, seconds: 9.000, TFLOP/s/device: 1.0\n")  # another shape's run
    script = model / "v6e-8" / "run_recipe.sh"
    script.write_text(NO_TOPOLOGY.read_text())
    readmes = ir.readmes_near(script)
    assert [(x.path, x.recipe_level) for x in readmes] == [("training/trillium/Model/README.md", False)]
    imp = ir.import_recipe(script.read_text(), source=ir.source_path(script), readmes=readmes)
    assert "published" not in imp.recipe and any(line.startswith("no published step time for this recipe in") for line in imp.unmapped)


def test_recipes_and_dry_run_show_the_published_figure(user_recipes: Path) -> None:
    res = cli("workloads", "import-recipe", str(TEE), "--name", "l8b-tee")
    assert res.returncode == 0, res.stderr
    assert "published step time: 2.5 s/step (700.1 TFLOP/s/chip, 13107.2 tokens/s/chip), training/ironwood/README.md" in res.stderr
    listed = cli("workloads", "recipes")
    assert "[published: 2.5 s/step]" in next(line for line in listed.stdout.splitlines() if line.startswith("l8b-tee"))
    as_json = next(d for d in json.loads(cli("workloads", "recipes", "--output", "json").stdout) if d["name"] == "l8b-tee")
    assert as_json["published"]["source"] == "training/ironwood/README.md"
    spec = user_recipes.parent / "spec.yaml"
    doc = example_doc("tpu7x")
    doc["tpu_pools"][0]["topology"] = "4x4x4"
    spec.write_text(yaml.safe_dump(doc))
    sub = cli("workloads", "submit", "l8b-tee", "--spec", str(spec), "--dry-run")
    assert sub.returncode == 0, sub.stderr
    line = next(ln for ln in sub.stderr.splitlines() if ln.startswith("published step time:"))
    assert "2.5 s/step" in line and "(the plan estimates " in line and "measured on" not in line  # same shape: nothing to caveat


# ------------------------------------------------------------------ mounts (plan time)


def test_gcs_variant_records_its_mount_and_is_refused_at_plan_time_naming_the_users_file(user_recipes: Path) -> None:
    imp = _import(GCS)
    assert imp.recipe["mounts"] == [{"kind": "gcs", "source": "gs://my-data-bucket", "path": "/tmp/dataset", "read_only": True}]
    assert imp.recipe["maxtext"]["args"]["grain_train_files"] == "/tmp/dataset/c4/en/3.0.1/*.array_record*"
    assert any(line.startswith("--mount gs://my-data-bucket;/tmp/dataset: options=") for line in imp.unmapped)
    _save(user_recipes, imp, "l8b-gcs")
    spec = _pool_spec(imp, "tpu7x-multislice")
    with pytest.raises(FieldError) as e:
        plan_run("l8b-gcs", spec, Overrides())
    msg = str(e.value)
    assert msg.startswith("recipe l8b-gcs maxtext.args.grain_train_files: MaxText grain_train_files=/tmp/dataset/c4/en/3.0.1/*.array_record*")
    assert "no volume of this run mounts (the published script mounted gs://my-data-bucket there)" in msg
    assert f"`dataset: NAME` in {user_recipes / 'l8b-gcs.yaml'}" in msg and "workloads/recipes/" not in msg


def test_gcs_variant_plans_with_the_dataset_the_fix_names(user_recipes: Path) -> None:
    imp = _import(GCS)
    _save(user_recipes, imp, "l8b-gcs")
    doc = example_doc("tpu7x-multislice")
    doc["datasets"] = [
        {
            "name": "c4",
            "bucket": "my-tpu-project-ironwood-ms-data",
            "path": "c4/en/3.0.1",
            "format": "arrayrecord",
            "tokenizer": "assets/tokenizers/tokenizer_llama3.tiktoken",
            "tokenizer_type": "tiktoken",
        }
    ]
    plan = plan_run("l8b-gcs", _pool_spec(imp, doc), Overrides(dataset="c4"))
    assert _args(plan)["grain_train_files"].startswith("/data/c4/")


def test_lustre_variant_maps_its_paths_onto_the_specs_lustre(user_recipes: Path) -> None:
    for script in (LUSTRE, LUSTRE_XPK):
        imp = _import(script)
        assert imp.recipe["checkpoint_storage"] == "lustre"
        assert imp.recipe["mounts"][0]["kind"] == "lustre" and imp.recipe["mounts"][0]["path"] == "/mnt/lustre"
        _save(user_recipes, imp, "l8b-lustre")
        plan = plan_run("l8b-lustre", _pool_spec(imp, "tpu7x-multislice"), Overrides())
        args = _args(plan)
        assert args["grain_train_files"] == "/checkpoints/datasets/c4/en/3.0.1/*.array_record*"
        assert args["base_output_directory"] == "/checkpoints/llm"
        assert any(
            w.startswith("grain_train_files: /mnt/lustre/datasets/c4/en/3.0.1/*.array_record* is on the recipe's Lustre mount") for w in plan.program.warnings
        )
    # A spec without Lustre: refused with the fix, before anything is held.
    with pytest.raises(FieldError, match="the spec declares no lustre: instance"):
        plan_run("l8b-lustre", _pool_spec(imp, "tpu7x"), Overrides())
    # Checkpoints to GCS instead: the data path is then on no volume, and the refusal names both fixes.
    with pytest.raises(FieldError, match=r"--checkpoint-storage lustre \(the spec's Lustre instance, mounted at /checkpoints\)"):
        plan_run("l8b-lustre", _pool_spec(imp, "tpu7x-multislice"), Overrides(checkpoint_storage="gcs"))


def test_xpk_storage_without_a_readable_mount_path_is_said_so() -> None:
    text = LUSTRE_XPK.read_text().replace('export BASE_OUTPUT_DIR="/mnt/lustre/checkpoints"', 'export BASE_OUTPUT_DIR="gs://b/out"')
    imp = ir.import_recipe(text)
    assert imp.recipe["mounts"] == [{"kind": "lustre", "source": "xpk storage lustre-volume", "path": None, "read_only": False}]
    assert "xpk storage lustre-volume: its mount path lives with the xpk storage object, not in the script; not known here" in imp.unmapped
    assert "checkpoint_storage" not in imp.recipe


def test_set_path_on_no_volume_is_refused_on_any_recipe(user_recipes: Path) -> None:
    spec = spec_from("tpu7x", tpu_pools=[{"name": "p", "generation": "tpu7x", "topology": "4x4x4", "slices": 1, "capacity": "on-demand"}])
    with pytest.raises(FieldError, match=r"^--set: MaxText load_parameters_path=/ckpt/0/items is a container path no volume of this run mounts"):
        plan_run("llama3-8b", spec, Overrides(sets=("load_parameters_path=/ckpt/0/items",)))
    plan = plan_run("llama3-8b", spec, Overrides(sets=("load_parameters_path=gs://b/ckpt/0/items",)))
    assert _args(plan)["load_parameters_path"] == "gs://b/ckpt/0/items"
    # A data key of another dataset_type is not read, so not checked.
    plan = plan_run("llama3-8b", spec, Overrides(sets=("dataset_type=synthetic", "dataset_path=/nowhere")))
    assert _args(plan)["dataset_path"] == "/nowhere"


def test_fix_texts_name_the_users_recipe_file(user_recipes: Path) -> None:
    imp = _import(TEE)
    (user_recipes / "mine.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": "mine", "runtimes": ["jobset"]}))
    r.load_recipe.cache_clear()
    spec = _pool_spec(imp)
    with pytest.raises(FieldError, match=rf"add job to runtimes in {user_recipes / 'mine.yaml'}$"):
        plan_run("mine", spec, Overrides(runtime="job"))


# ------------------------------------------------------------------ refusals, one line, nothing written


@pytest.mark.parametrize(
    "script, needle",
    [
        ("cleanup.sh", "this is a cleanup script (`xpk storage detach`)"),
        ("post-training.sh", "--command runs MaxText post-training (reinforcement learning or fine-tuning from a checkpoint), not MaxText pre-training"),
        ("pathways.sh", "runs MaxText on Pathways (`xpk workload create-pathways`)"),
        ("settings.env.sh", "this is a settings file: it sets variables and launches nothing"),
        ("config.json.sh", "this is a JSON file"),
        ("tpu-vm.sh", "this is a TPU VM script (`gcloud compute tpus tpu-vm ssh`)"),
        ("tpu7x-no-topology.sh", "--compute-type: 'tpu7x-64': gcluster takes a tpu7x slice's size from --topology only"),
        ("mount-without-path.sh", "--mount: 'gs://my-bucket' is not SOURCE;/PATH[;ro|rw]"),
        ("compute-type-unknown.sh", "--compute-type: 'a3-megagpu-8g' is not a TPU compute type gcluster resolves"),
        ("job-manifest.yaml", "this is a Kubernetes Job manifest; the import reads JobSet manifests"),
    ],
)
def test_refusals_are_one_line_exit_2_nothing_written(script: str, needle: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = cli("workloads", "import-recipe", str(DATA / "bad" / script), "--out", str(out))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    assert res.stdout == "" and not out.exists()


def test_cli_imports_a_manifest(tmp_path: Path) -> None:
    res = cli("workloads", "import-recipe", str(MANIFEST), "--name", "l8b-k8s", "--out", str(tmp_path), "--output", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["device_type"] == "tpu7x-4x4x4" and "--command" in data["carried"]
    text = (tmp_path / "l8b-k8s.yaml").read_text()
    assert "# Imported by `python -m workloads import-recipe` from training/ironwood/llama3.1-8b/8k-bf16-tpu7x-4x4x4/k8s/k8s_manifest.yaml." in text


# ------------------------------------------------------------------ the shell


def test_redirections_are_not_words() -> None:
    text = "python3 -m m a=1 2>&1 | tee log; cmd >out 2>>err &> both <in b=2"
    cmds = list(shellwords.read_commands(text, {}))
    assert [c.words for c in cmds] == [["python3", "-m", "m", "a=1"], ["tee", "log"], ["cmd", "b=2"]]
    assert [(x.op, x.target) for x in cmds[0].redirects] == [(">&", "1")]
    assert [(x.op, x.target) for x in cmds[2].redirects] == [(">", "out"), (">>", "err"), ("&>", "both"), ("<", "in")]


def test_heredoc_read_and_arrays() -> None:
    env: dict[str, str] = {"A": "x"}
    text = "read -r -d '' Q << 'EOF' || true\n$A stays\nEOF\nread -r W <<EOF\n$A expands\nEOF\nARR=(--f v)\nEMPTY=()\ncmd \"${ARR[@]}\" \"${EMPTY[@]}\" end\n"
    cmds = [c.words for c in shellwords.read_commands(text, env)]
    assert env["Q"] == "$A stays\n" and env["W"] == "x expands\n"
    assert cmds[-1] == ["cmd", "--f", "v", "end"]


def test_subshell_and_function_body_separate_commands() -> None:
    text = "_t() (kill -TERM $! 2>/dev/null;);\n(export K=v && python3 -m m a=1 | tee l) & PID=$!;\n"
    cmds = [c.words for c in shellwords.read_commands(text, {})]
    assert ["export", "K=v"] in cmds and ["python3", "-m", "m", "a=1"] in cmds and ["PID=$!"] in cmds
