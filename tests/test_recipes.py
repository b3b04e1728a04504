"""Recipes: every shipped file validates, and the model is strict about typos."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from workloads.planning import recipes as r
from workloads.planning.maxtext_keys import maxtext_keys
from workloads.planning.recipe_model import Kind


def test_shipped_recipes_load() -> None:
    names = r.recipe_names()
    assert {"maxtext-6b", "llama3-8b", "hello-tpu", "gpt3-6b"} <= set(names)
    for name in names:
        recipe = r.load_recipe(name)
        assert recipe.name == name


def test_unknown_recipe_lists_known() -> None:
    with pytest.raises(r.RecipeError) as e:
        r.load_recipe("maxtext-7b")
    msg = str(e.value)
    assert "maxtext-7b" in msg and "maxtext-6b" in msg and "llama3-8b" in msg


def test_maxtext6b_matches_reference_dims() -> None:
    m = r.load_recipe("maxtext-6b").maxtext
    assert m is not None and m.model_name == "default"
    d = m.model
    assert (d.base_emb_dim, d.base_num_query_heads, d.head_dim, d.base_num_decoder_layers, d.base_mlp_dim, d.vocab_size, d.max_target_length) == (
        4096,
        16,
        256,
        32,
        16384,
        32768,
        2048,
    )
    assert m.args["remat_policy"] == "full"
    # Batch depends on HBM: v5e (16 GiB) gets 4, v4/v6e (32) get 16.
    assert m.batch_for(16) == 4
    assert m.batch_for(32) == 16
    assert m.batch_for(8) is None


def test_offline_safe_defaults() -> None:
    """Recipes keep goodput recording and Vertex TensorBoard off (MaxText fails fast on them
    without Google credentials); `submit --profile` turns the TensorBoard on for one run, and
    nothing else: the rendered args say so. GCS metrics are on: they go to the run's own
    output directory, where its checkpoints already go with the same identity, and a local
    invocation (run-local, preflight --compile) turns them off with the bucket."""
    from infra.spec import EXAMPLES_DIR, load_spec
    from workloads.maxtext.env import local_args
    from workloads.planning.planner import Overrides, plan_run

    specs = [load_spec(EXAMPLES_DIR / "default.yaml"), load_spec(EXAMPLES_DIR / "tpu7x.yaml")]
    for recipe in r.all_recipes():
        if recipe.maxtext is None:
            continue
        args = recipe.maxtext.args
        for k in ("enable_goodput_recording", "monitor_goodput", "use_vertex_tensorboard"):
            assert args[k] is False, (recipe.name, k)
        assert args["gcs_metrics"] is True, recipe.name
        if recipe.kind is Kind.SFT:
            assert "dataset_type" not in args, recipe.name  # it reads the spec's dataset (--dataset), never synthetic data
            continue  # planned with one in tests/test_fine_tuning.py
        assert args["dataset_type"] == "synthetic"
        spec = specs[0] if "v5e" in recipe.generations else specs[1]
        for profile, tensorboard in ((None, "false"), (2, "true")):
            plan = plan_run(recipe.name, spec, Overrides(profile_steps=profile, profile_start=2 if profile else None))
            rendered = dict(a.split("=", 1) for a in plan.program.args[1:])
            assert rendered["use_vertex_tensorboard"] == tensorboard, (recipe.name, profile)
            for k in ("enable_goodput_recording", "monitor_goodput"):
                assert rendered[k] == "false", (recipe.name, profile, k)
            assert rendered["gcs_metrics"] == "true", (recipe.name, profile)
            local = dict(a.split("=", 1) for a in local_args(plan.program.args[1:], Path("/tmp/w")) if "=" in a)
            assert local["gcs_metrics"] == "false" and not local["base_output_directory"].startswith("gs://"), recipe.name


def test_every_recipe_arg_is_a_maxtext_key() -> None:
    keys = maxtext_keys()
    assert "ici_fsdp_parallelism" in keys and "per_device_batch_size" in keys and len(keys) > 500
    for recipe in r.all_recipes():
        if recipe.maxtext:
            assert set(recipe.maxtext.args) <= keys


def test_params_count() -> None:
    # llama3-8b is ~8.03B parameters; the formula must land there.
    assert abs(r.load_recipe("llama3-8b").maxtext.model.params() / 1e9 - 8.03) < 0.05  # type: ignore[union-attr]


def _base() -> dict:
    return yaml.safe_load((r.RECIPES_DIR / "maxtext-6b.yaml").read_text())


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.update(stepz=3), "stepz"),
        (lambda d: d["maxtext"]["args"].update(ici_fsdp_parallelism=4), "parallelism"),
        (lambda d: d["maxtext"]["args"].update(run_name="x"), "planner"),
        (lambda d: d["maxtext"]["args"].update(not_a_key=1), "not_a_key is not a MaxText 0.2.5 key"),
        (lambda d: d["maxtext"]["parallelism"]["ici"].update(tensr=2), "unknown mesh axis"),
        (lambda d: d["maxtext"]["parallelism"]["ici"].update(tensor=-1), "at most one axis"),
        (lambda d: d.update(generations=["v9"]), "unknown generation"),
        (lambda d: d.update(command=["echo"]), "no command"),
        (lambda d: d.update(image={"ref": "a:1", "registry": "b:2"}), "exactly one"),
    ],
)
def test_recipe_model_rejects(mutate, needle) -> None:
    data = _base()
    mutate(data)
    with pytest.raises(ValidationError) as e:
        r.Recipe.model_validate(data)
    assert needle in str(e.value)
