"""Mesh limits from what the compiler refuses: each structural rule of ``mesh.weight_dims``, just
inside and just outside, against MaxText's real ahead-of-time compile for the TPU topology.

For each limit the planner refuses the mesh one step past it, naming the weight dimension and a
fix (the rest on the data axis); the fix's plan compiles; and the refused mesh, handed to
MaxText anyway (the fix's command with the degrees put back), fails on the weights' sharding
— what would have happened after the slices were held. The models keep their dimensions and
lose layers, and one sets its latent rank small, so the limits fall inside slices this
machine can compile for.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.support import example_doc

# (name, preset, slice, the dimension it is about, --set that puts the limit where this slice crosses it,
#  the refused degrees as the planner is asked, the fix's degrees as the planner proposes them)
LIMITS = [
    (
        "mla-kv-rank-over-fsdp",
        "deepseek2-16b",
        "tpu7x-2x2x4",  # 32 devices
        "latent key/value rank",
        ("override_model_config=true", "base_num_decoder_layers=2", "kv_lora_rank=16", "per_device_batch_size=1", "max_target_length=1024"),
        {"ici_fsdp_parallelism": "32", "ici_data_parallelism": "1"},
        {"ici_fsdp_parallelism": "16", "ici_data_parallelism": "2"},
    ),
    (
        "kv-heads-over-tensor",
        "llama3-8b",
        "v6e-4x4",  # 16 devices
        "key/value heads",
        ("override_model_config=true", "base_num_decoder_layers=2", "per_device_batch_size=1", "max_target_length=1024"),
        {"ici_tensor_parallelism": "16", "ici_fsdp_parallelism": "1"},
        # 4, not 8: a logical axis must be a product of the 4x4 slice's physical axes (MaxText refuses 8 without
        # allow_split_physical_axes, and so does the planner: workloads/planning/device_mesh.py).
        {"ici_tensor_parallelism": "4", "ici_fsdp_parallelism": "4"},
    ),
    (
        "experts-over-expert",
        "mixtral-8x7b",
        "v5p-2x2x4",  # 16 devices
        "the experts",
        ("override_model_config=true", "base_num_decoder_layers=2", "per_device_batch_size=1", "max_target_length=1024"),
        {"ici_expert_parallelism": "16", "ici_fsdp_parallelism": "1"},
        {"ici_expert_parallelism": "8", "ici_fsdp_parallelism": "2"},
    ),
]


@pytest.fixture
def user_recipes(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "recipes"
    d.mkdir()
    monkeypatch.setenv("TGK_RECIPES", str(d))
    from workloads.planning import recipes

    recipes.load_recipe.cache_clear()
    yield d
    recipes.load_recipe.cache_clear()


def _recipe(dirpath: Path, preset: str) -> str:
    from workloads.planning.import_recipe import model_presets

    name = f"limit-{preset.replace('.', '-')}"[:30]
    doc = {
        "name": name,
        "description": f"mesh limit check on MaxText preset {preset}",
        "kind": "maxtext",
        "image": {"registry": "maxtext:0.2.5"},
        "steps": 10,
        "env": {"JAX_PLATFORMS": "tpu,cpu", "ENABLE_PJRT_COMPATIBILITY": "true"},
        "maxtext": {
            "model_name": preset,
            "model": model_presets()[preset],
            "args": {"remat_policy": "full", "dataset_type": "synthetic", "enable_goodput_recording": False, "monitor_goodput": False},
            "per_device_batch": [{"min_hbm_gib_per_device": 0, "per_device_batch_size": 1}],
            "parallelism": {"ici": {"fsdp": -1}, "dcn": {"data": -1}},
        },
    }
    (dirpath / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return name


def _spec(shape: str):
    from infra.spec import parse_spec

    gen, _, topology = shape.partition("-")
    doc = example_doc({"tpu7x": "tpu7x", "v6e": "v6e-reservation", "v5p": "v5p"}[gen])
    doc["tpu_pools"] = [{"name": "p", "generation": gen, "topology": topology, "slices": 1, "capacity": "on-demand"}]
    if doc.get("teams"):
        team = {k: v for k, v in doc["teams"][0].items() if k != "quota_share"}
        doc["teams"] = [team]
        doc["buckets"] = [b for b in doc.get("buckets", []) if b.get("team") in (None, team["name"])]
    doc["datasets"] = [d for d in doc.get("datasets", []) if d["bucket"] in {b["name"] for b in doc.get("buckets", [])}]
    return parse_spec(doc)


def _with(args: tuple[str, ...], degrees: dict[str, str]) -> tuple[str, ...]:
    """The args with these ici degrees (replaced in place, dropped when 1, appended when new)."""
    out = [a for a in args if a.partition("=")[0] not in degrees]
    return (*out, *(f"{k}={v}" for k, v in degrees.items() if v != "1"))


@pytest.mark.parametrize("case", LIMITS, ids=[c[0] for c in LIMITS])
def test_limit_just_inside_compiles_and_just_outside_is_refused_by_both(case, user_recipes, maxtext_venv):
    from workloads.maxtext.aot import CompileFailed, MaxTextRejected, compile_plan
    from workloads.planning.errors import PlanError
    from workloads.planning.planner import Overrides, plan_run

    _, preset, shape, what, sets, outside, inside = case
    name = _recipe(user_recipes, preset)
    spec = _spec(shape)
    with pytest.raises(PlanError) as refused:
        plan_run(name, spec, Overrides(sets=(*sets, *(f"{k}={v}" for k, v in outside.items()))))
    msg = str(refused.value)
    assert what in msg and "cannot split" in msg, msg
    fix = dict(re.findall(r"--set (ici_\w+_parallelism)=(\d+)", msg))
    plan = plan_run(name, spec, Overrides(sets=(*sets, *(f"{k}={v}" for k, v in inside.items() if k not in fix), *(f"{k}={v}" for k, v in fix.items()))))
    assert {k: v for k, v in inside.items() if v != "1"}.items() <= {a.partition("=")[0]: a.partition("=")[2] for a in plan.program.args}.items()
    ok = compile_plan(plan, maxtext_venv)
    assert ok.compiled or ok.oom is not None, ok  # past the sharding: XLA compiled the step (or measured it against HBM)
    wrong = replace(plan, program=replace(plan.program, args=_with(plan.program.args, outside)))
    with pytest.raises((CompileFailed, MaxTextRejected)) as failed:
        compile_plan(wrong, maxtext_venv)
    assert "divisible" in str(failed.value), str(failed.value)[-2000:]
