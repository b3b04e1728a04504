"""`import-recipe`: tpu-recipes run scripts (our own, in the published layout) -> recipes that plan.

The scripts under tests/data/recipes/ were written for these tests in the shape tpu-recipes
publishes: shell variables for the XLA flags and the MaxText overrides, expanded into the
--command of one `xpk workload create`. Each good script is imported, read back through the
ordinary recipe loader, and planned; its MaxText flags must reach the rendered args as written.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.support import EXAMPLES, REPO, cli, spec_from
from toolkit.errors import FieldError
from workloads.planning import import_recipe as ir
from workloads.planning import recipes as r
from workloads.planning import shellwords
from workloads.planning.images import MAXTEXT_IMAGE
from workloads.planning.maxtext_keys import MODEL_KEYS
from workloads.planning.planner import Overrides, plan_run

DATA = REPO / "tests" / "data" / "recipes"
FP8 = DATA / "llama3.1-8b-fp8-tpu7x-4x4x8" / "run_recipe.sh"
MULTI = DATA / "llama3.1-8b-int8-tpu7x-2x4x4-multislice" / "run_recipe.sh"
XPK_LINE = DATA / "xpk-v5e-default-model.txt"
CHECKOUT = DATA / "maxtext-checkout"
RUNNER = DATA / "runner" / "llama3-1-8b-1xv6e-16.sh"


@pytest.fixture()
def user_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "recipes"
    monkeypatch.setenv("TGK_RECIPES", str(d))
    r.load_recipe.cache_clear()
    yield d
    r.load_recipe.cache_clear()


def _spec(pool: dict) -> object:
    return spec_from("tpu7x", tpu_pools=[pool])


def _args(plan) -> dict[str, str]:
    return dict(a.split("=", 1) for a in plan.program.args[1:])


# ------------------------------------------------------------------ the shell


def test_shellwords_agrees_with_shlex_where_no_expansion_is_involved() -> None:
    # shlex splits quoted words the POSIX way but expands nothing; our reader must split the same.
    line = """python3 -m m a='x y' b="p q" c=\\"d\\" e='it'"'"'s' f=g\\ h"""
    ((words, _),) = list(shellwords.commands(line, {}))
    assert words == shlex.split(line)


def test_shellwords_default_expansions() -> None:
    env: dict[str, str] = {"E": ""}
    text = 'G="${G:-gcluster}"\nA="${A:-${G}/x}"\necho ${E:-d1} ${E-d2} "${U-d3}" ${U//a/b}'
    cmds = [w for w, _ in shellwords.commands(text, env)]
    assert env["G"] == "gcluster" and env["A"] == "gcluster/x"
    assert cmds[-1] == ["echo", "d1", "d3", "${U//a/b}"]  # ${E-d2}: E is set (empty), so nothing


def test_shellwords_expands_in_double_quotes_but_not_in_single() -> None:
    env: dict[str, str] = {}
    text = 'A="1 2"\nexport B="x-${A}" C=\'$A\'\necho "$B" $C ${UNSET} \\${A}'
    cmds = [w for w, _ in shellwords.commands(text, env)]
    assert env == {"A": "1 2", "B": "x-1 2", "C": "$A"}
    assert cmds[-1] == ["echo", "x-1 2", "$A", "${UNSET}", "${A}"]


def test_shellwords_command_substitution_is_one_word_never_run() -> None:
    env: dict[str, str] = {}
    text = 'N="$(printf "%.6s" "abcdefgh")-$(date +%Y %m)"\nM=$(printf "%.4s" "${USER//_/-}-x")\necho $N $M $(whoami) $((1 + 2))'
    *_, (words, _) = shellwords.commands(text, env)
    # printf of resolved words is expanded; date, whoami and a printf of an unresolved
    # expansion are opaque single words; arithmetic stays as written, one word.
    assert env["N"] == "abcdef-$(date)" and env["M"] == "$(printf)"
    assert words == ["echo", "abcdef-$(date)", "$(printf)", "$(whoami)", "$((1 + 2))"]


def test_unterminated_quote_is_one_line_error(tmp_path: Path) -> None:
    f = tmp_path / "run_recipe.sh"
    f.write_text('xpk workload create --device-type=tpu7x-4x4x8 --command="python3 -m maxtext.trainers.pre_train.train steps=1\n')
    res = cli("workloads", "import-recipe", str(f), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "quot" in res.stderr and not (tmp_path / "out").exists()


# ----------------------------------------------------------------- the mapping


def test_fp8_script_carries_every_maxtext_flag_intact() -> None:
    imp = ir.import_recipe(FP8.read_text(), source=FP8.name)
    rec = imp.recipe
    assert imp.device_type == "tpu7x-4x4x8" and imp.slices == 1
    assert rec["shapes"] == ["tpu7x-4x4x8"] and rec["generations"] == ["tpu7x"] and rec["slices"] == 1
    assert rec["steps"] == 40
    assert rec["image"] == {"ref": "us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"}
    mt = rec["maxtext"]
    assert mt["model_name"] == "llama3.1-8b" and mt["config"] == "src/maxtext/configs/base.yml"
    assert mt["args"]["quantization"] == "fp8_full"
    assert mt["args"]["use_qwix_quantization"] == "True"
    # The inner shell's quotes are gone, the value text is exactly what MaxText would receive.
    assert mt["args"]["weight_quantization_calibration_method"] == "fixed,-224,224"
    assert mt["args"]["act_quantization_calibration_method"] == "fixed,-224,224"
    assert mt["args"]["max_target_length"] == 8192
    assert mt["per_device_batch"] == [{"min_hbm_gib_per_device": 0, "per_device_batch_size": 2.0}]
    assert mt["parallelism"] == {"ici": {"fsdp": -1}, "dcn": {"data": -1}}
    assert rec["libtpu_init_args"]["tpu7x"][0] == "--xla_tpu_scoped_vmem_limit_kib=65536"
    assert len(rec["libtpu_init_args"]["tpu7x"]) == 5
    assert rec["env"] == {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"}
    # What the toolkit decides itself is reported, not silently dropped.
    joined = "\n".join(imp.unmapped)
    for needle in ("--cluster", "--zone", "--priority", "--max-restarts", "run_name", "base_output_directory", "gsutil", "tee"):
        assert needle in joined, needle
    assert imp.name == "llama3.1-8b-fp8-full"


def test_cluster_toolkit_layout_gives_the_same_recipe() -> None:
    # tpu-recipes' cluster_toolkit/ scripts: gcluster job submit, ${X:-default}, python3 -u -m.
    gcluster = DATA / "llama3.1-8b-fp8-tpu7x-4x4x8-gcluster" / "run_recipe.sh"
    imp = ir.import_recipe(gcluster.read_text(), source=gcluster.name)
    assert imp.recipe == ir.import_recipe(FP8.read_text(), source=FP8.name).recipe
    joined = "\n".join(imp.unmapped)
    assert "--queue=multislice-queue: not carried; the toolkit uses the team's Kueue queue" in joined
    assert "--location=us-east5-b: not carried; the toolkit uses the spec's pool zone" in joined and "gcloud storage cp" in joined
    assert "STATUS" not in imp.recipe.get("env", {})  # a plain shell variable of --command is not the program's env


def test_crlf_script_reads_the_same() -> None:
    text = FP8.read_text()
    assert ir.import_recipe(text.replace("\n", "\r\n"), source=FP8.name).recipe == ir.import_recipe(text, source=FP8.name).recipe


def test_multislice_script_prefix_env_and_unknown_keys() -> None:
    imp = ir.import_recipe(MULTI.read_text(), source=MULTI.name)
    rec = imp.recipe
    assert rec["slices"] == 2 and rec["shapes"] == ["tpu7x-2x4x4"]
    assert rec["maxtext"]["parallelism"] == {"ici": {"fsdp": -1}, "dcn": {"data": 2}}
    assert rec["maxtext"]["args"]["quantization"] == "int8"
    assert rec["env"]["EMIT_MEGASCALE_METRICS"] == "true"  # `K=v python3 ...` is the command's env
    assert rec["image"] == {"registry": MAXTEXT_IMAGE}  # `maxtext-base` has no tag: not carried
    joined = "\n".join(imp.unmapped)
    assert "output_dir" in joined and "cd /deps" in joined and "--docker-image=maxtext-base" in joined


def test_xpk_line_with_an_explicit_model() -> None:
    imp = ir.import_recipe(XPK_LINE.read_text(), source=XPK_LINE.name)
    mt = imp.recipe["maxtext"]
    assert imp.recipe["shapes"] == ["v5e-4x4"] and imp.recipe["slices"] == 2
    assert mt["model_name"] == "default"
    assert (mt["model"]["base_emb_dim"], mt["model"]["head_dim"], mt["model"]["base_mlp_dim"]) == (4096, 256, 16384)
    assert not set(mt["args"]) & MODEL_KEYS  # dimensions live in the model block
    assert imp.name == "xpk-v5e-default-model"


def test_imported_recipes_plan_with_their_flags(user_recipes: Path) -> None:
    user_recipes.mkdir()
    for f in (FP8, MULTI):
        imp = ir.import_recipe(f.read_text(), source=f.name)
        (user_recipes / f"{imp.name}.yaml").write_text(yaml.safe_dump(imp.recipe, sort_keys=False))
    spec = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "4x4x8", "slices": 1, "capacity": "on-demand"})
    plan = plan_run("llama3.1-8b-fp8-full", spec, Overrides())
    args = _args(plan)
    assert args["quantization"] == "fp8_full" and args["weight_quantization_calibration_method"] == "fixed,-224,224"
    assert args["per_device_batch_size"] == "2" and args["steps"] == "40" and args["max_target_length"] == "8192"
    assert args["ici_fsdp_parallelism"] == "256"  # -1 resolved against the 256 devices of tpu7x 4x4x8
    assert dict(plan.program.env)["LIBTPU_INIT_ARGS"].startswith("--xla_tpu_scoped_vmem_limit_kib=65536 ")
    spec2 = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "2x4x4", "slices": 2, "capacity": "on-demand"})
    plan2 = plan_run("llama3.1-8b-int8", spec2, Overrides())
    assert plan2.target.slices == 2  # the script's --num-slices is the default
    assert _args(plan2)["dcn_data_parallelism"] == "2"


def test_printf_name_and_src_module_path_import() -> None:
    imp = ir.import_recipe((DATA / "deepseek-printf-src-module.sh").read_text(), source="run_recipe.sh")
    assert imp.device_type == "tpu7x-4x8x8" and imp.recipe["maxtext"]["model_name"] == "deepseek3-671b"
    assert imp.recipe["image"] == {"ref": "us-docker.pkg.dev/p/images/maxtext:deepseek"}  # $(printf "%.8s" ...) expanded
    assert imp.recipe["maxtext"]["args"]["decoder_layer_input"] == "offload"
    assert any(line.startswith("--workload=$(printf)-$(date): not carried") for line in imp.unmapped)


def test_keys_of_another_maxtext_are_kept_for_its_image_and_refused_for_the_pinned_one(user_recipes: Path) -> None:
    text = (DATA / "deepseek-printf-src-module.sh").read_text()
    imp = ir.import_recipe(text, source="run_recipe.sh")
    args = imp.recipe["maxtext"]["args"]
    assert args["fsdp_shard_on_exp"] == "True" and args["wi_tile_fwd_buffer_count"] == 2
    kept = [line for line in imp.unmapped if line.startswith("kept ")]
    assert kept == [
        "kept 2 key(s) MaxText 0.2.5 does not have (fsdp_shard_on_exp, wi_tile_fwd_buffer_count):"
        " the recipe runs us-docker.pkg.dev/p/images/maxtext:deepseek, not the pinned MaxText"
    ]
    # Without an image of its own the recipe runs the pinned MaxText: the keys are dropped, each named.
    pinned = ir.import_recipe(text.replace("--docker-image=us-docker.pkg.dev/p/images/maxtext:${SHORT}", ""), source="run_recipe.sh")
    assert "fsdp_shard_on_exp" not in pinned.recipe["maxtext"]["args"]
    assert any(line.startswith("MaxText fsdp_shard_on_exp=True: not a MaxText 0.2.5 key") for line in pinned.unmapped)
    # Planned: its own image runs; --image of the pinned MaxText is refused with the fix.
    user_recipes.mkdir()
    (user_recipes / "ds.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": "ds"}))
    spec = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "4x8x8", "slices": 1, "capacity": "on-demand"})
    plan = plan_run("ds", spec, Overrides())
    assert "fsdp_shard_on_exp" in _args(plan) and plan.program.warnings == ()
    with pytest.raises(FieldError, match=r"--image: recipe ds sets fsdp_shard_on_exp, wi_tile_fwd_buffer_count, which MaxText 0.2.5"):
        plan_run("ds", spec, Overrides(image="us-docker.pkg.dev/p/r/maxtext:0.2.5"))


def test_set_keys_follow_the_image_the_run_uses() -> None:
    spec = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "4x4x4", "slices": 1, "capacity": "on-demand"})
    with pytest.raises(FieldError, match="--set: fsdp_shard_on_exp is not a MaxText 0.2.5 key"):
        plan_run("llama3-8b", spec, Overrides(sets=("fsdp_shard_on_exp=True",)))
    plan = plan_run("llama3-8b", spec, Overrides(sets=("fsdp_shard_on_exp=True",), image="us-docker.pkg.dev/p/r/maxtext:nightly-2026-11"))
    assert _args(plan)["fsdp_shard_on_exp"] == "True"
    assert plan.program.warnings == (
        "--set fsdp_shard_on_exp: not MaxText 0.2.5 keys, passed as written to us-docker.pkg.dev/p/r/maxtext:nightly-2026-11 (checked by that MaxText, not here)",
    )


def test_benchmark_runner_script_reads_the_checkout_as_data() -> None:
    imp = ir.import_recipe(RUNNER.read_text(), source=RUNNER.name, maxtext_repo=CHECKOUT)
    mt = imp.recipe["maxtext"]
    assert (imp.device_type, imp.slices, imp.recipe["shapes"]) == ("v6e-16", 2, ["v6e-4x4"])
    assert mt["model_name"] == "llama3.1-8b" and mt["per_device_batch"][0]["per_device_batch_size"] == 2.0
    assert mt["args"]["remat_policy"] == "full" and mt["args"]["enable_checkpointing"] == "False"  # **COMMON unpacked
    assert mt["args"]["max_target_length"] == 8192 and mt["parallelism"]["ici"] == {"fsdp": -1}
    assert imp.recipe["libtpu_init_args"]["v6e"] == [
        "--xla_tpu_scoped_vmem_limit_kib=98304",
        "--xla_enable_async_all_gather=true",
        "--xla_tpu_overlap_compute_collective_tc=true",
    ]
    # The runner's --num_steps (default 20) wins over the config's steps, as in its command.
    assert imp.recipe["steps"] == 20
    report = "\n".join(imp.unmapped)
    assert "tokenizer_path: computed by the checkout's code" in report and "--libtpu_version=20250101" in report
    older = ir.import_recipe((DATA / "runner" / "mixtral-older-layout.sh").read_text(), maxtext_repo=CHECKOUT)
    assert older.recipe["steps"] == 15 and older.recipe["maxtext"]["model_name"] == "mixtral-8x7b"
    assert older.recipe["libtpu_init_args"]["v6e"] == ["--xla_tpu_scoped_vmem_limit_kib=81920"]  # "...{kib}".format(kib=...)


def test_benchmark_runner_model_lookup_skips_names_built_at_run_time() -> None:
    from workloads.planning import benchmark_configs as bc

    models = bc.parse_models(bc.read_checkout(CHECKOUT))
    assert sorted(models) == ["llama3_1_8b_demo", "mixtral_8x7b_demo"]
    assert bc.lookup(models, "mixtral-8x7b-demo") is models["mixtral_8x7b_demo"]


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "script, extra, needle",
    [
        (RUNNER, [], "--maxtext-repo: the script runs MaxText's benchmark runner"),
        (DATA / "runner" / "unknown-model.sh", ["--maxtext-repo", str(CHECKOUT)], "--model_name: 'llama3_1_8b_dem' is not a model of"),
        (RUNNER, ["--maxtext-repo", str(DATA)], "is not a MaxText checkout (no benchmarks/benchmark_runner.py)"),
        (DATA / "bad" / "maxdiffusion.sh", [], "--command runs a MaxDiffusion"),
        (DATA / "bad" / "pytorch.sh", [], "this is a PyTorch script, not MaxText pre-training"),
        (DATA / "bad" / "maxtext-on-vm.sh", [], "runs MaxText on this machine (no xpk, gcluster or benchmark_runner launch)"),
    ],
    ids=["runner-without-checkout", "runner-unknown-model", "not-a-checkout", "maxdiffusion", "pytorch", "maxtext-on-vm"],
)
def test_unimportable_scripts_one_line_exit_2(script: Path, extra: list[str], needle: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = cli("workloads", "import-recipe", str(script), "--out", str(out), *extra)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    assert res.stdout == "" and not out.exists()


@pytest.mark.parametrize(
    "script, needle",
    [
        ("no-maxtext.sh", "no MaxText training command"),
        ("script-in-image.sh", "--command runs `bash /app/train.sh`, a script inside the image that the import cannot read"),
        ("no-xpk.sh", "runs MaxText on this machine"),
        ("no-launch.sh", "no launch command (`xpk workload create`, `gcluster job submit` or `python3 -m benchmarks.benchmark_runner xpk`)"),
        ("unknown-device.sh", "tpu9z-4x4x8"),
        ("conflicting-device.sh", "conflicting flags: --device-type"),
        ("conflicting-maxtext.sh", "conflicting flags: MaxText quantization"),
        ("conflicting-slices.sh", "conflicting flags: --num-slices=2"),
    ],
)
def test_bad_scripts_one_line_exit_2_nothing_written(script: str, needle: str, tmp_path: Path) -> None:
    with pytest.raises(FieldError, match=re.escape(needle)):
        ir.import_recipe((DATA / "bad" / script).read_text(), source=script)
    out = tmp_path / "out"
    res = cli("workloads", "import-recipe", str(DATA / "bad" / script), "--out", str(out))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    assert res.stdout == "" and not out.exists()


def test_unknown_model_and_preset_overrides_are_refused() -> None:
    line = 'xpk workload create --device-type=tpu7x-4x4x8 --command="python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml model_name={m} {extra} steps=5"'
    with pytest.raises(FieldError, match="'llama3.1-8bb' is not a MaxText 0.2.5 model"):
        ir.import_recipe(line.format(m="llama3.1-8bb", extra=""))
    with pytest.raises(FieldError, match="override_model_config=true"):
        ir.import_recipe(line.format(m="llama3.1-8b", extra="base_num_decoder_layers=4"))
    ok = ir.import_recipe(line.format(m="llama3.1-8b", extra="base_num_decoder_layers=4 override_model_config=true"))
    assert ok.recipe["maxtext"]["model"]["base_num_decoder_layers"] == 4


# ------------------------------------------------------------------------ CLI


def test_cli_writes_the_user_recipe_and_submit_dry_run_runs_it(user_recipes: Path) -> None:
    res = cli("workloads", "import-recipe", str(FP8), "--output", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    path = Path(data["path"])
    assert path == user_recipes / "llama3.1-8b-fp8-full.yaml" and path.exists()
    assert data["recipe"]["maxtext"]["args"]["quantization"] == "fp8_full" and data["unmapped"]
    assert "# not carried:" in path.read_text()  # the report travels with the file
    # The recipe the toolkit runs unchanged: submit --dry-run on the tpu7x example.
    sub = cli("workloads", "submit", "llama3.1-8b-fp8-full", "--spec", str(EXAMPLES / "tpu7x.yaml"), "--dry-run", "--output", "json")
    assert sub.returncode == 0, sub.stderr
    objs = json.loads(sub.stdout)
    js = next(o for o in objs if o["kind"] == "JobSet")
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    for flag in ("quantization=fp8_full", "use_qwix_quantization=True", "weight_quantization_calibration_method=fixed,-224,224", "steps=40"):
        assert flag in args, flag
    assert container["image"] == "us-docker.pkg.dev/my-project/images/maxtext-runner:2026-11-01"
    # Importing again does not overwrite without --force; a shipped name is refused.
    again = cli("workloads", "import-recipe", str(FP8))
    assert again.returncode == 2 and "--force" in again.stderr
    shipped = cli("workloads", "import-recipe", str(FP8), "--name", "llama3-8b", "--out", str(user_recipes / "x"))
    assert shipped.returncode == 2 and "--name" in shipped.stderr and not (user_recipes / "x").exists()


def test_cli_out_file_must_carry_the_recipe_name(tmp_path: Path) -> None:
    res = cli("workloads", "import-recipe", str(XPK_LINE), "--out", str(tmp_path / "other.yaml"))
    assert res.returncode == 2 and "--out" in res.stderr and not (tmp_path / "other.yaml").exists()
    res = cli("workloads", "import-recipe", str(XPK_LINE), "--name", "demo-6b", "--out", str(tmp_path / "demo-6b.yaml"))
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load((tmp_path / "demo-6b.yaml").read_text())["name"] == "demo-6b"


# ------------------------------------------------------- a recipe's mesh checked at plan time


def _ds_recipe(user_recipes: Path) -> None:
    """The printf/src-module deepseek3 script (tuned for 4x8x8), as user recipe `ds` on the pinned image."""
    text = (DATA / "deepseek-printf-src-module.sh").read_text()
    imp = ir.import_recipe(text.replace("--docker-image=us-docker.pkg.dev/p/images/maxtext:${SHORT}", ""), source="run_recipe.sh")
    user_recipes.mkdir(exist_ok=True)
    (user_recipes / "ds.yaml").write_text(yaml.safe_dump({**imp.recipe, "name": "ds"}))


def test_fsdp_beyond_the_model_limit_is_refused_with_the_playbook_fix(user_recipes: Path) -> None:
    _ds_recipe(user_recipes)
    big = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "8x8x8", "slices": 1, "capacity": "on-demand"})
    with pytest.raises(FieldError) as e:
        plan_run("ds", big, Overrides())
    msg = str(e.value)
    # The limit comes from the model: multi-head latent attention's key/value rank (512) is split over fsdp.
    assert "fsdp (ici x dcn) = 1024 cannot split the latent key/value rank" in msg and "of deepseek3-671b (512)" in msg
    assert "at most 512 ways" in msg
    assert "--set ici_data_parallelism=2" in msg
    # The fix it names plans: FSDP 512, data 2.
    plan = plan_run("ds", big, Overrides(sets=("ici_data_parallelism=2",)))
    assert dict(plan.program.sizing.ici) == {"data": 2, "fsdp": 512}


def test_a_recipe_run_on_another_shape_warns_naming_both(user_recipes: Path) -> None:
    _ds_recipe(user_recipes)
    tuned = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "4x8x8", "slices": 1, "capacity": "on-demand"})
    assert plan_run("ds", tuned, Overrides()).program.warnings == ()
    # A bigger pool than the recipe's shape (smaller ones are refused by min_chips_per_slice).
    other = _spec({"name": "ironwood", "generation": "tpu7x", "topology": "8x8x8", "slices": 1, "capacity": "on-demand"})
    (warning,) = plan_run("ds", other, Overrides(sets=("ici_data_parallelism=2",))).program.warnings
    assert warning.startswith("recipe ds was tuned for tpu7x-4x8x8 slices; this run is on tpu7x-8x8x8 (ICI data 2, fsdp 512)")
    # Shipped recipes list several shapes they were written for: no warning off their list either. (llama3-8b's own
    # tensor 4 is no product of the 8x8x8 slice's physical axes 8, 8, 8 and the core pair 2: MaxText would refuse it.)
    assert plan_run("llama3-8b", other, Overrides(sets=("ici_tensor_parallelism=8",))).program.warnings == ()
