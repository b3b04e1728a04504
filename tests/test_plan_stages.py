"""The planner as four stages (workloads.planning.planner): target -> sizing -> policy -> program.

* plan_run is exactly its stages composed: each takes the earlier stages' results and adds its own;
* every stage's result is frozen, and no stage changes an earlier one or the user's Overrides
  (the runtime the target stage chose lives in its result, not written back into the options);
* each number is read and checked once: a --set integer by ``maxtext_sets.read_int`` once, a
  flag's number by its ``Bounds`` (with the flag's own wording below the floor).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from workloads.planning import maxtext_sets, planner, policy
from workloads.planning.errors import PlanError
from workloads.planning.overrides import Overrides
from workloads.planning.policy import PolicyChoice, choose_policy
from workloads.planning.program import build_program
from workloads.planning.recipes import load_recipe
from workloads.planning.sizing import Sizing, size_run
from workloads.planning.target import Placement, place_run

SPEC = load_spec(EXAMPLES_DIR / "default.yaml")
NOW = datetime(2026, 3, 4, 5, 6)

CASES = [
    ("maxtext-6b", Overrides(slices=2)),
    ("maxtext-6b", Overrides(sets=("ici_fsdp_parallelism=16", "remat_policy=full"), checkpoint_every=5, profile_steps=3)),
    ("llama3-8b", Overrides(runtime="ray")),
    ("hello-tpu", Overrides(runtime="job")),
]


def _stages(recipe: str, o: Overrides) -> tuple[Placement, Sizing | None, PolicyChoice]:
    placed = place_run(load_recipe(recipe), SPEC, o, now=NOW, rand="abc")
    sizing = size_run(placed, o)
    return placed, sizing, choose_policy(placed, sizing, SPEC, o)


@pytest.mark.parametrize(("recipe", "o"), CASES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(CASES)])
def test_plan_run_is_its_four_stages_composed(recipe: str, o: Overrides) -> None:
    plan = planner.plan_run(recipe, SPEC, o, now=NOW, rand="abc")
    placed, sizing, chosen = _stages(recipe, o)
    assert (plan.name, plan.target, plan.runtime) == (placed.name, placed.target, placed.runtime)
    assert plan.policy == chosen.policy
    assert plan.program == build_program(placed, sizing, chosen, SPEC, o)
    assert (sizing is None) == (recipe == "hello-tpu")
    if sizing is not None:
        assert plan.program.sizing == sizing.summary() and plan.program.estimated_step_seconds == sizing.step_seconds


@pytest.mark.parametrize(("recipe", "o"), CASES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(CASES)])
def test_every_stage_result_is_frozen_and_the_options_stay_as_typed(recipe: str, o: Overrides) -> None:
    typed = dataclasses.replace(o)
    results = [r for r in _stages(recipe, o) if r is not None]
    for result in results:
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.__setattr__(dataclasses.fields(result)[0].name, None)
    plan = planner.plan_run(recipe, SPEC, o, now=NOW, rand="abc")
    assert o == typed and o.runtime is typed.runtime  # the runtime chosen is the plan's, never written back
    assert plan.runtime == (o.runtime or load_recipe(recipe).runtimes[0])


def test_each_set_integer_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = maxtext_sets.read_int

    def counting(key: str, value: str, where: str) -> int:
        read.append(key)
        return real(key, value, where)

    monkeypatch.setattr(maxtext_sets, "read_int", counting)
    monkeypatch.setattr(policy, "read_int", counting)
    sets = ("ici_fsdp_parallelism=4", "ici_tensor_parallelism=4", "base_emb_dim=4096", "max_target_length=1024", "checkpoint_period=10")
    plan = planner.plan_run("maxtext-6b", SPEC, Overrides(sets=sets))
    assert sorted(read) == sorted(s.split("=")[0] for s in sets)  # checkpoint_period by the policy stage, the rest by read_sets
    assert dict(plan.program.sizing.ici) == {"fsdp": 4, "tensor": 4} and plan.policy.checkpoint.period_steps == 10


@pytest.mark.parametrize(
    ("o", "field", "message"),
    [
        (Overrides(slices=0), "--slices", "must be at least 1, got 0 — pass --slices 1 or more"),
        (Overrides(steps=0), "--steps", "must be at least 1, got 0 — pass a positive step count"),
        (Overrides(max_restarts=-1), "--max-restarts", "must be >= 0, got -1 — pass 0 to fail on the first non-disruption failure"),
        (Overrides(checkpoint_every=float("nan")), "--checkpoint-every", "must be a number of minutes above 0, got nan — pass e.g. --checkpoint-every 30"),
        (Overrides(checkpoint_every=1e9), "--checkpoint-every", "is above 525600, the most minutes a checkpoint interval may be (a year)"),
        (Overrides(profile_steps=0), "--profile", "must be at least 1 step, got 0 — pass e.g. --profile 3"),
        (Overrides(profile_steps=2, profile_start=-1), "--profile-start", "must be >= 0, got -1 — pass e.g. --profile-start 5"),
        (Overrides(slices=2**31), "--slices", "is above 2147483647"),
    ],
)
def test_a_flags_number_is_checked_once_by_its_bounds_in_the_flags_own_words(o: Overrides, field: str, message: str) -> None:
    found = o.problem()
    assert found is not None and found[0] == field and message in f"{found[1]} — {found[2]}"
    with pytest.raises(PlanError) as e:
        planner.plan_run("maxtext-6b", SPEC, o)
    assert (e.value.field, e.value.problem, e.value.fix) == found


def test_the_planners_public_names_are_importable_where_they_were() -> None:
    for name in planner.__all__:
        assert getattr(planner, name) is not None, name
