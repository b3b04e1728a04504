"""Run planning: numbers that must agree, and one clear error for each bad input."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.catalog import GENERATIONS, valid_topologies
from infra.spec import load_spec
from tests.support import EXAMPLES, spec_from
from tests.support.specs import MINIMAL
from workloads.planning.maxtext_keys import MESH_AXES
from workloads.planning.planner import Overrides, PlanError, name_budget, plan_run
from workloads.render.jobset import coordinator_address

NOW = datetime(2026, 3, 4, 5, 6)


def spec_with(pools: list[dict], **extra) -> object:
    return spec_from(MINIMAL, tpu_pools=pools, **extra)


def product(d: dict[str, int]) -> int:
    return math.prod(d.values())


def mesh(plan, level: str) -> dict[str, int]:
    """Mesh degrees as MaxText will read them from the args (not from the plan's own fields)."""
    out = {a: 1 for a in MESH_AXES}
    for a in plan.program.args:
        key, _, value = a.partition("=")
        if key.startswith(f"{level}_") and key.endswith("_parallelism"):
            out[key[len(level) + 1 : -len("_parallelism")]] = int(value)
    return out


def arg(plan, key: str) -> str | None:
    for a in plan.program.args:
        k, _, v = a.partition("=")
        if k == key:
            return v
    return None


# ------------------------------------------------------------------ happy paths


def test_default_multislice_v5e() -> None:
    p = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=2), now=NOW, rand="abc")
    assert p.name == "maxtext-6b-0304-0506-abc"
    assert (p.target.slices, p.target.shape.nodes, p.target.shape.chips_per_vm, p.target.chips, p.target.devices) == (2, 4, 4, 32, 32)
    assert mesh(p, "ici")["fsdp"] == 16 and mesh(p, "dcn")["data"] == 2
    assert arg(p, "per_device_batch_size") == "4"  # v5e: 16 GiB
    assert arg(p, "run_name") == p.name
    assert p.program.output_dir == f"gs://my-tpu-project-tpu-dev-ckpt/{p.name}/"
    assert p.target.namespace == "research" and p.target.local_queue == "research-queue" and p.target.priority == "medium"
    assert p.target.node_pools == ("v5e-16-0", "v5e-16-1")
    assert p.program.image == "us-west4-docker.pkg.dev/my-tpu-project/tpu-training/maxtext:0.2.5"
    assert coordinator_address(p) == f"{p.name}-slice-0-0.{p.name}"


def test_v4_gets_batch_16() -> None:
    p = plan_run("maxtext-6b", load_spec(EXAMPLES / "v4.yaml"), Overrides(slices=2), now=NOW)
    assert arg(p, "per_device_batch_size") == "16"
    assert "TPU_MEGACORE=MEGACORE_DENSE" in dict(p.program.env)["LIBTPU_INIT_ARGS"]


def test_llama3_tutorial_mesh() -> None:
    p = plan_run("llama3-8b", load_spec(EXAMPLES / "v6e-reservation.yaml"), now=NOW)
    assert (mesh(p, "ici")["fsdp"], mesh(p, "ici")["tensor"]) == (4, 4)
    assert arg(p, "max_target_length") == "4096" and arg(p, "per_device_batch_size") == "1"
    assert arg(p, "model_name") == "llama3-8b"
    assert arg(p, "base_emb_dim") is None  # the preset supplies the dims
    assert p.target.priority == "high"  # the first team's default


def test_tpu7x_devices_are_two_per_chip() -> None:
    p = plan_run("maxtext-6b", load_spec(EXAMPLES / "tpu7x.yaml"), now=NOW)
    assert p.target.shape.devices == 2 * p.target.shape.chips == 256
    assert mesh(p, "ici")["fsdp"] == 256
    assert p.target.shape.chips_per_vm == 4 and p.target.shape.nodes == 32


def test_set_overrides_and_team_priority() -> None:
    spec = load_spec(EXAMPLES / "v6e-reservation.yaml")
    p = plan_run(
        "llama3-8b",
        spec,
        # tensor 8 on the 4x4 slice's physical axes (4, 4) needs allow_split_physical_axes (MaxText refuses it otherwise).
        Overrides(
            team="research", priority="low", sets=("ici_tensor_parallelism=8", "allow_split_physical_axes=true", "remat_policy=minimal"), steps=7, name="run1"
        ),
    )
    assert p.name == "run1" and p.program.steps == 7 and arg(p, "steps") == "7"
    assert (mesh(p, "ici")["fsdp"], mesh(p, "ici")["tensor"]) == (2, 8) and arg(p, "allow_split_physical_axes") == "true"
    assert arg(p, "remat_policy") == "minimal"
    assert p.target.namespace == "research" and p.target.priority == "low" and p.target.priority_value == 250


def test_name_is_deterministic_when_given_and_unique_otherwise() -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    a = plan_run("hello-tpu", spec, Overrides(name="x1"), now=NOW, rand="aaa")
    b = plan_run("hello-tpu", spec, Overrides(name="x1"), now=datetime(2030, 1, 1), rand="zzz")
    assert a.name == b.name == "x1"
    c = plan_run("hello-tpu", spec, now=NOW, rand="aaa")
    d = plan_run("hello-tpu", spec, now=NOW, rand="aab")
    assert c.name != d.name


def test_name_budget_matches_pod_name_limit() -> None:
    for slices, nodes in [(1, 1), (2, 4), (10, 4), (64, 16), (1, 128)]:
        budget = name_budget(slices, nodes)
        pod = f"{'a' * budget}-slice-{slices - 1}-{nodes - 1}-abcde"
        assert len(pod) == 63


def test_no_bucket_is_an_error_unless_output_given() -> None:
    spec = spec_with([{"name": "p", "type": "v5litepod-16"}], buckets=[])
    with pytest.raises(PlanError, match="^buckets:"):
        plan_run("maxtext-6b", spec)
    p = plan_run("maxtext-6b", spec, Overrides(sets=("base_output_directory=gs://elsewhere/x",)))
    assert p.program.output_dir == f"gs://elsewhere/x/{p.name}/"


# --------------------------------------------------------------- error cases


@pytest.mark.parametrize(
    "recipe, overrides, field, needle",
    [
        ("maxtext-6b", Overrides(slices=3), "--slices", "has 2"),
        ("maxtext-6b", Overrides(slices=0), "--slices", "at least 1"),
        ("maxtext-6b", Overrides(pool="nope"), "--pool", "no TPU pool"),
        ("maxtext-6b", Overrides(sets=("oops",)), "--set", "not key=value"),
        ("maxtext-6b", Overrides(sets=("ici_fsdp_paralelism=4",)), "--set", "did you mean ici_fsdp_parallelism"),
        ("maxtext-6b", Overrides(sets=("run_name=x",)), "--set", "use --name"),
        ("maxtext-6b", Overrides(sets=("steps=3",)), "--set", "use --steps"),
        ("maxtext-6b", Overrides(sets=("remat_policy=full", "remat_policy=minimal")), "--set", "given twice"),
        ("maxtext-6b", Overrides(sets=("ici_fsdp_parallelism=8",)), "--set", "16"),
        ("maxtext-6b", Overrides(sets=("ici_tensor_parallelism=3",)), "--set", "does not divide"),
        ("maxtext-6b", Overrides(sets=("base_num_query_heads=12", "ici_tensor_parallelism=8")), "--set", "cannot split the query heads"),
        ("maxtext-6b", Overrides(sets=("per_device_batch_size=32",)), "--set", "GiB"),
        ("maxtext-6b", Overrides(sets=("dcn_fsdp_parallelism=2",)), "--set", "DCN"),
        ("maxtext-6b", Overrides(steps=0), "--steps", "at least 1"),
        ("maxtext-6b", Overrides(priority="urgent"), "--priority", "very-high"),
        ("maxtext-6b", Overrides(image="maxtext"), "--image", "no tag"),
        ("maxtext-6b", Overrides(name="Bad_Name"), "--name", "DNS-1035"),
        ("maxtext-6b", Overrides(name="a" * 60), "--name", "at most"),
        ("hello-tpu", Overrides(sets=("steps=1",)), "--set", "plain command"),
    ],
)
def test_plan_errors(recipe, overrides, field, needle) -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    with pytest.raises(PlanError) as e:
        plan_run(recipe, spec, overrides, now=NOW)
    assert e.value.field.startswith(field), str(e.value)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_tensor_16_cannot_split_mlp_or_heads_of_llama() -> None:
    # llama3-8b: 32 query heads, mlp 14336 = 2^11 * 7: tensor 64 cannot split the heads.
    spec = spec_with([{"name": "big", "generation": "v5p", "topology": "4x4x4"}])
    with pytest.raises(PlanError, match="query heads"):
        plan_run("llama3-8b", spec, Overrides(sets=("ici_tensor_parallelism=64",)))


def test_fsdp_must_divide_embedding() -> None:
    # gpt3-6b emb 3072 = 2^10 * 3: fsdp 2048 (tpu7x 8x8x16 has 2048 devices) cannot split it.
    spec = spec_with([{"name": "huge", "generation": "tpu7x", "topology": "8x8x16"}])
    with pytest.raises(PlanError, match="embedding dimension"):
        plan_run("gpt3-6b", spec)


def test_pool_with_wrong_shape_for_recipe() -> None:
    spec = spec_with([{"name": "small", "type": "v5p-8"}, {"name": "big", "type": "v6e-16"}])
    with pytest.raises(PlanError, match=r"^--pool: small .*at least 16 chips"):
        plan_run("llama3-8b", spec, Overrides(pool="small"))
    assert plan_run("llama3-8b", spec).target.pool == "big"


def test_no_usable_pool() -> None:
    spec = spec_with([{"name": "small", "type": "v5p-8"}])
    with pytest.raises(PlanError, match="no pool in the spec can run recipe llama3-8b"):
        plan_run("llama3-8b", spec)


def test_unknown_team() -> None:
    from toolkit.errors import SpecError

    with pytest.raises(SpecError, match="--team"):
        plan_run("hello-tpu", load_spec(EXAMPLES / "default.yaml"), Overrides(team="nobody"))


def test_slices_count_across_pools_of_one_shape() -> None:
    spec = spec_with([{"name": "a", "type": "v5litepod-16", "slices": 2}, {"name": "b", "type": "v5litepod-16", "slices": 3}])
    p = plan_run("maxtext-6b", spec, Overrides(slices=5))
    assert p.target.node_pools == ("a-0", "a-1", "b-0", "b-1", "b-2")
    with pytest.raises(PlanError, match="has 5"):
        plan_run("maxtext-6b", spec, Overrides(slices=6))


def test_obvious_oom_is_rejected_the_doubtful_warned_and_measured_fit_is_not() -> None:
    """Against MaxText's compiles (scripts/hbm_calibration_results.json): batch 4 compiled to 14.1 GiB
    of a v5e's 16 (fits) and plans without a word; batch 8 does not fit (its step's temporaries alone
    outgrow the device) and is at least warned about; as the batch grows a plan goes from fine to
    warned to refused, never back."""
    spec = load_spec(EXAMPLES / "default.yaml")

    def verdict(batch: int) -> str:
        try:
            p = plan_run("maxtext-6b", spec, Overrides(slices=2, sets=(f"per_device_batch_size={batch}",)))
        except PlanError as e:
            assert f"per_device_batch_size={batch} needs ~" in str(e) and "more than a v5e device's 16 GiB" in str(e)
            return "refused"
        said = [w for w in p.program.warnings if "GiB per device" in w]
        assert p.program.sizing.hbm.measured
        if said:
            assert "it may not fit" in said[0] and "preflight <recipe> --compile" in said[0], said
            return "warned"
        return "fine"

    seen = [verdict(b) for b in (4, 5, 6, 7, 8, 12, 16, 32)]
    assert seen[0] == "fine" and seen[4] in ("warned", "refused") and seen[-1] == "refused", seen
    order = ["fine", "warned", "refused"]
    assert [order.index(v) for v in seen] == sorted(order.index(v) for v in seen), seen


# ------------------------------------------------------------- properties


def _multi_host_topologies(gen: str) -> list[str]:
    from infra.catalog import shape

    out = []
    for t in valid_topologies(gen):
        try:
            s = shape(gen, t)
        except Exception:
            continue
        if s.chips <= 512:
            out.append(t)
    return out


POOLS = [(g, t) for g in GENERATIONS for t in _multi_host_topologies(g)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=st.sampled_from(POOLS), slices_in_spec=st.integers(1, 8), data=st.data())
def test_plan_invariants(pool, slices_in_spec, data) -> None:
    gen, topo = pool
    from infra.catalog import shape as mk

    if not mk(gen, topo).multi_host:
        slices_in_spec = 1
    spec = spec_with([{"name": "p", "generation": gen, "topology": topo, "slices": slices_in_spec}])
    slices = data.draw(st.integers(1, slices_in_spec))
    recipe = data.draw(st.sampled_from(["maxtext-6b", "gpt3-6b", "hello-tpu"]))
    try:
        p = plan_run(recipe, spec, Overrides(slices=slices, sets=("per_device_batch_size=1",) if recipe != "hello-tpu" else ()), now=NOW)
    except PlanError as e:
        # Only sizing verdicts are acceptable failures here (memory, small slices, sharding).
        assert any(s in str(e) for s in ("GiB", "chips per slice", "cannot split", "no pool")), str(e)
        return
    from workloads.render.jobset import jobset

    js = jobset(p)
    rjob = js["spec"]["replicatedJobs"][0]
    job = rjob["template"]["spec"]
    tpu = job["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"]
    shape = spec.tpu_pools[0].shape
    assert rjob["replicas"] == slices
    assert job["parallelism"] == job["completions"] == shape.nodes
    assert tpu * job["parallelism"] == shape.chips
    assert tpu * job["parallelism"] * rjob["replicas"] == p.target.chips
    assert len(f"{p.name}-slice-{slices - 1}-{shape.nodes - 1}-abcde") <= 63
    if recipe != "hello-tpu":
        assert product(mesh(p, "ici")) == shape.devices
        assert product(mesh(p, "dcn")) == slices
        assert product(mesh(p, "ici")) * product(mesh(p, "dcn")) == p.target.devices


# ------------------------------------------------- bad input, by class


def _plan_error(sets: tuple[str, ...], recipe: str = "maxtext-6b") -> PlanError:
    spec = load_spec(EXAMPLES / "default.yaml")
    with pytest.raises(PlanError) as e:
        plan_run(recipe, spec, Overrides(sets=sets), now=NOW)
    assert "\n" not in str(e.value)
    return e.value


@pytest.mark.parametrize(
    "item, needle",
    [
        ("max_target_length=0", "max_target_length=0 must be a positive integer"),
        ("max_target_length=-2048", "must be a positive integer"),
        ("max_target_length= 2048", "not a plain integer"),
        ("base_emb_dim=0", "base_emb_dim=0 must be a positive integer"),
        ("vocab_size=3.5", "not a plain integer"),
        ("ici_fsdp_parallelism=1_6", "not a plain integer"),
        ("ici_fsdp_parallelism=016", "not a plain integer"),
        ("per_device_batch_size=inf", "positive finite"),
        ("per_device_batch_size=nan", "positive finite"),
        ("per_device_batch_size=-1", "positive finite"),
        ("per_device_batch_size=lots", "not a number"),
        ("override_model_config=maybe", "neither true nor false"),
        ("base_output_directory=gs://", "not a gs:// path"),
        ("base_output_directory=gs://b/has space", "not a gs:// path"),
    ],
)
def test_set_values_outside_their_domain(item, needle) -> None:
    err = _plan_error((item,))
    assert err.field == "--set" and needle in str(err), str(err)


def test_set_dimension_the_recipe_mesh_cannot_split_blames_the_set() -> None:
    # maxtext-6b shards the embedding over fsdp = all 16 devices of a v5e 4x4 (its recipe's rule);
    # 5000 is not a multiple of 16, and it was the --set that made it so.
    err = _plan_error(("base_emb_dim=5000",))
    assert err.field == "--set", str(err)
    assert err.problem.startswith("base_emb_dim=5000 cannot be split by fsdp") and "4992 or 5008" in err.fix, str(err)


def test_set_sequence_length_the_recipe_mesh_cannot_split_blames_the_set() -> None:
    spec = spec_with([{"name": "p", "type": "v5litepod-16"}])
    # a recipe whose mesh splits the sequence: here via --set too, so the axis (set) is named
    with pytest.raises(PlanError, match="^--set: sequence"):
        plan_run("maxtext-6b", spec, Overrides(sets=("ici_sequence_parallelism=2", "ici_fsdp_parallelism=-1", "max_target_length=2047")))


def test_recipe_mesh_still_blamed_on_the_recipe_without_a_set() -> None:
    spec = spec_with([{"name": "huge", "generation": "tpu7x", "topology": "8x8x16"}])
    with pytest.raises(PlanError) as e:
        plan_run("gpt3-6b", spec)
    assert e.value.field.startswith("recipe gpt3-6b"), str(e.value)


@settings(max_examples=40, deadline=None)
@given(seq=st.integers(-(10**6), 10**6), pdb=st.sampled_from(["1", "2"]))
def test_accepted_sets_give_a_non_negative_hbm_estimate(seq, pdb) -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    try:
        p = plan_run("maxtext-6b", spec, Overrides(sets=(f"max_target_length={seq}", f"per_device_batch_size={pdb}")), now=NOW)
    except PlanError as e:
        assert e.field == "--set" or e.field.startswith("recipe "), str(e)
        assert seq < 1 or "GiB" in str(e), str(e)
        return
    hbm = p.program.sizing.hbm
    assert seq >= 1
    assert min(hbm.state_bytes, hbm.activation_bytes, hbm.logits_bytes) >= 0


# Recipes are YAML files too: the same rules for encodings, duplicate keys and domains.


@pytest.fixture
def recipe_dir(tmp_path, monkeypatch):
    import shutil

    from workloads.planning import recipes

    for p in recipes.RECIPES_DIR.glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    monkeypatch.setattr(recipes, "RECIPES_DIR", tmp_path)
    recipes.load_recipe.cache_clear()
    yield tmp_path
    recipes.load_recipe.cache_clear()


def _edit(recipe_dir: Path, name: str, old: str, new: str) -> None:
    path = recipe_dir / f"{name}.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "old, new, needle",
    [
        ("steps: 100\n", "steps: 100\nsteps: 5\n", "recipe maxtext-6b: steps: is given twice"),
        ("min_chips_per_slice: 4\n", "min_chips_per_slice: 4\ngenerations: []\n", "recipe maxtext-6b: generations"),
        ("    log_period: 10\n", "    log_period: 10\n    max_target_length: 0\n", "args.max_target_length is 0"),
        ("    log_period: 10\n", "    log_period: 10\n    max_target_length: long\n", "args.max_target_length is 'long'"),
    ],
)
def test_bad_recipe_files_are_refused(recipe_dir, old, new, needle) -> None:
    from workloads.planning.recipes import RecipeError, load_recipe

    _edit(recipe_dir, "maxtext-6b", old, new)
    with pytest.raises(RecipeError) as e:
        load_recipe("maxtext-6b")
    assert needle in str(e.value) and " — " in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("encode, needle", [(lambda t: t.encode("utf-16"), "UTF-16"), (lambda t: t.encode().replace(b"#", b"\xe9", 1), "not UTF-8")])
def test_recipe_that_is_not_utf8_is_refused(recipe_dir, encode, needle) -> None:
    from workloads.planning.recipes import RecipeError, load_recipe

    path = recipe_dir / "maxtext-6b.yaml"
    path.write_bytes(encode(path.read_text()))
    with pytest.raises(RecipeError, match=needle):
        load_recipe("maxtext-6b")


def test_command_recipe_needs_non_empty_items(recipe_dir) -> None:
    from workloads.planning.recipes import RecipeError, load_recipe

    path = recipe_dir / "hello-tpu.yaml"
    path.write_text(path.read_text().split("command:")[0] + "command: ['']\n")
    with pytest.raises(RecipeError, match="command"):
        load_recipe("hello-tpu")
