"""Every recipe's rendered MaxText arguments pass MaxText's OWN config validation.

Real MaxText 0.2.5 (maxtext.configs.pyconfig + train_compile's topology mesh), one process
for all cases. Each recipe is planned on every shape it lists (a spec with one pool per
shape) at 1 and 2 slices; the args and env are the RunPlan's — what the JobSet runs — with
the local substitutions of workloads.maxtext.env and compile_topology set to the plan's
target, so MaxText sizes the config for that slice instead of this CPU.

The negative cases prove the check can fail: an unknown value, a mesh that does not match
the devices, and a key given both as an argument and as an M_* env var.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.spec import parse_spec
from tests.support import EXAMPLES, REPO, example_doc
from workloads.maxtext import env as maxtext_env
from workloads.planning.model import RunPlan
from workloads.planning.planner import Overrides, plan_run
from workloads.planning.recipe_model import Kind
from workloads.planning.recipes import all_recipes
from workloads.planning.select import why_not

MAXTEXT_RECIPES = [r for r in all_recipes() if r.kind is Kind.MAXTEXT]


def _every_shape_spec():
    data = example_doc("default")
    shapes = sorted({s for r in MAXTEXT_RECIPES for s in r.shapes})
    data["tpu_pools"] = [
        {"name": re.sub(r"[^a-z0-9]", "-", s), "generation": s.split("-", 1)[0], "topology": s.split("-", 1)[1], "slices": 2, "capacity": "spot"}
        for s in shapes
    ]
    return parse_spec(data)


def _case(plan: RunPlan, workdir: Path, extra_args: dict[str, str] | None = None, extra_env: dict[str, str] | None = None):
    program, target = plan.program, plan.target
    args = maxtext_env.local_args(program.args, workdir, {**maxtext_env.topology_args(target.shape, target.slices), **(extra_args or {})})
    env = {**dict(program.env), **(extra_env or {})}
    return args, env


@pytest.fixture(scope="module")
def results(maxtext_venv, default_spec, tmp_path_factory):
    """Validate every case in one MaxText process; id -> (plan, result)."""
    work = tmp_path_factory.mktemp("validate")
    spec = _every_shape_spec()
    plans: dict[str, RunPlan] = {}
    for r in MAXTEXT_RECIPES:
        assert r.shapes, f"recipe {r.name} lists no shapes to validate on"
        for pool in spec.tpu_pools:
            if pool.shape.key not in r.shapes:
                continue
            for slices in (1, 2):
                plans[f"{r.name}@{pool.name}x{slices}"] = plan_run(r.name, spec, Overrides(pool=pool.name, slices=slices))
        # The default environment's pool (what `render`/`submit` use without --pool), for the
        # recipes that run there (the tpu7x-only fp8/int8 variants are covered on their shapes).
        if any(why_not(r, p.shape) is None for p in default_spec.tpu_pools):
            for slices in (1, 2):
                plans[f"{r.name}@default x{slices}"] = plan_run(r.name, default_spec, Overrides(slices=slices))
    # An imported tpu-recipes script (tests/data/recipes, fp8): every flag it carried, as MaxText reads it.
    from infra.spec import load_spec
    from workloads.planning.import_recipe import import_recipe
    from workloads.planning.recipes import load_recipe
    from workloads.render import yamlio

    script = REPO / "tests" / "data" / "recipes" / "llama3.1-8b-fp8-tpu7x-4x4x8" / "run_recipe.sh"
    imported = import_recipe(script.read_text(), source=script.name)
    user_dir = tmp_path_factory.mktemp("user-recipes")
    (user_dir / f"{imported.name}.yaml").write_text(yamlio.dump(imported.recipe))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TGK_RECIPES", str(user_dir))
        load_recipe.cache_clear()
        plans[f"import:{imported.name}@tpu7x"] = plan_run(imported.name, load_spec(EXAMPLES / "tpu7x.yaml"), Overrides())
    load_recipe.cache_clear()
    # --profile: the profiler and Vertex TensorBoard keys it writes are MaxText's own.
    plans["maxtext-6b@default x2 --profile"] = plan_run("maxtext-6b", default_spec, Overrides(slices=2, profile_steps=3, profile_start=2))
    # --dataset (Grain over the FUSE mount), --multi-tier-checkpointing, --checkpoint-storage: the keys they write are MaxText's own.
    v6e = load_spec(EXAMPLES / "v6e-reservation.yaml")
    plans["llama3-8b@v6e x2 --dataset --multi-tier-checkpointing"] = plan_run(
        "llama3-8b", v6e, Overrides(slices=2, team="pretrain", dataset="c4-en", multi_tier_checkpointing=True)
    )
    plans["maxtext-6b@default x2 --checkpoint-storage gcsfuse"] = plan_run("maxtext-6b", default_spec, Overrides(slices=2, checkpoint_storage="gcsfuse"))
    cases = [(cid, *_case(p, work)) for cid, p in plans.items()]

    base = plans["maxtext-6b@default x2"]
    cases.append(("neg:bad-value", *_case(base, work, {"dataset_type": "not_a_dataset"})))
    cases.append(("neg:unknown-key", *_case(base, work, {"not_a_maxtext_key": "1"})))
    cases.append(("neg:mesh", *_case(base, work, {"ici_fsdp_parallelism": "8"})))
    cases.append(("neg:env-twice", *_case(base, work, extra_env={"M_LOG_PERIOD": "5"})))
    cases.append(("neg:env-value", *_case(base, work, extra_env={"M_SCAN_LAYERS": "maybe"})))
    out = maxtext_env.validate(cases, maxtext_venv, work)
    print(
        f"\n[maxtext tier] {len(cases)} validations, import {out['_import']['seconds']} s, "
        f"checks {sum(v.get('seconds', 0) for k, v in out.items() if k != '_import'):.1f} s"
    )
    return plans, out


def test_every_rendered_recipe_passes_maxtext_validation(results):
    plans, out = results
    failures = {cid: out.get(cid, {}).get("error", "no result") for cid in plans if not out.get(cid, {}).get("ok")}
    assert not failures, "MaxText rejected rendered recipes:\n" + "\n".join(f"  {k}: {v}" for k, v in failures.items())
    assert len(plans) >= 3 * 2 * 2  # every MaxText recipe, >= 1 shape + default pool, 1 and 2 slices


def test_maxtext_sees_the_plans_devices_slices_and_mesh(results):
    plans, out = results
    for cid, plan in plans.items():
        r, sizing = out[cid], plan.program.sizing
        assert sizing is not None, cid
        assert r["num_target_devices"] == plan.target.devices, (cid, r)
        assert r["num_slices"] == plan.target.slices, (cid, r)
        expected = {a: d for a, d in (*sizing.ici, *sizing.dcn)}
        # MaxText's mesh multiplies ICI and DCN degrees per axis.
        want: dict[str, int] = {}
        for a, d in (*sizing.ici, *sizing.dcn):
            want[a] = want.get(a, 1) * d
        assert r["mesh"] == {a: d for a, d in want.items() if d != 1}, (cid, r["mesh"], expected)


@pytest.mark.parametrize(
    "cid, fragment",
    [
        ("neg:bad-value", "dataset_type"),
        ("neg:unknown-key", "not_a_maxtext_key"),
        ("neg:mesh", "16"),  # 8 x 2 = 16 devices asked for, the topology has 32
        ("neg:env-twice", "M_LOG_PERIOD"),
        ("neg:env-value", "maybe"),  # an M_* value is validated like an argument
    ],
)
def test_maxtext_rejects_bad_args(results, cid, fragment):
    _, out = results
    r = out[cid]
    assert not r["ok"], r
    assert fragment in r["error"], r["error"]


def test_the_secret_keys_are_the_ones_maxtext_keeps_out_of_its_log_and_read_from_the_environment(maxtext_venv, tmp_path):
    """_maxtext_keys.yaml's secret_keys against the installed MaxText: its KEYS_NO_LOGGING, and the variable each is read from."""
    import json
    import subprocess

    from workloads.planning.maxtext_keys import secret_env_name, secret_keys

    code = (
        "import json, os\n"
        "from maxtext.configs import pyconfig\n"
        "os.environ['HF_TOKEN'] = 'from-the-secret'\n"
        "print(json.dumps({'no_logging': list(pyconfig.KEYS_NO_LOGGING), 'prefix': pyconfig._MAX_PREFIX,"
        " 'hf': pyconfig._resolve_or_infer_addl_config().get('hf_access_token')}))\n"
    )
    env = maxtext_env.local_env(())
    env.pop("HF_TOKEN", None)
    done = subprocess.run([str(maxtext_env.python(maxtext_venv)), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(got["no_logging"]) == secret_keys()
    assert got["hf"] == "from-the-secret" and secret_env_name("hf_access_token") == "HF_TOKEN"
    assert secret_env_name("some_key") == f"{got['prefix']}SOME_KEY"  # any key from M_<KEY> (pyconfig's environment overrides)
