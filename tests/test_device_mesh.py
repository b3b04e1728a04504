"""The ICI mesh on the slice's physical axes (workloads/planning/device_mesh.py), and the planner's refusal.

JAX's ``create_device_mesh`` (what MaxText builds a slice's mesh with) gives every logical axis
whole physical axes, greedily from the most network-intensive axis, unless a device-kind handler
lays the slice out first; without ``allow_split_physical_axes`` an axis that fits nowhere stops
MaxText at start. The verdicts here are the cases worked by hand; tests/maxtext/test_device_mesh.py
holds thousands more to JAX's own function.
"""

from __future__ import annotations

import pytest

from infra.catalog import GENERATIONS, shape
from tests.support import EXAMPLES, cli
from tests.support.specs import one_pool
from workloads.planning.device_mesh import (
    DEVICE_KINDS,
    MAXTEXT_MESH_AXES,
    Layout,
    PhysicalMesh,
    Unplaceable,
    lay_out,
    maxtext_axes,
    maxtext_mesh,
    physical_mesh,
)
from workloads.planning.planner import Overrides, PlanError, plan_run


def logical(**degrees: int) -> list[tuple[str, int]]:
    """MaxText's default logical mesh with these degrees (the rest 1)."""
    return [(a, degrees.get(a, 1)) for a in MAXTEXT_MESH_AXES]


def on(key: str, **degrees: int) -> Layout | Unplaceable:
    gen, _, topo = key.partition("-")
    return lay_out(physical_mesh(shape(gen, topo)), logical(**degrees))


def placed(layout: Layout | Unplaceable) -> dict[str, tuple[str, ...]]:
    assert isinstance(layout, Layout), layout
    return {p.axis: p.physical for p in layout.placed if p.size > 1}


# ------------------------------------------------------------------ the physical mesh


def test_every_catalog_generation_has_the_physical_mesh_jax_builds() -> None:
    assert set(DEVICE_KINDS) == set(GENERATIONS)
    assert physical_mesh(shape("v5e", "4x4")).axes == (("x", 4), ("y", 4), ("z", 1))
    assert physical_mesh(shape("v6e", "8x16")).axes == (("x", 8), ("y", 16), ("z", 1))
    assert physical_mesh(shape("v5p", "2x2x4")).axes == (("x", 2), ("y", 2), ("z", 4))
    assert physical_mesh(shape("v4", "2x2x1")).axes == (("x", 2), ("y", 2), ("z", 1))
    seven = physical_mesh(shape("tpu7x", "4x4x8"))  # two TensorCores per chip: a fourth axis
    assert seven.axes == (("x", 4), ("y", 4), ("z", 8), ("core", 2)) and seven.devices == 256 == shape("tpu7x", "4x4x8").devices
    # v5p with both cores of a chip as devices (not the catalog's megacore) is 4-D too, as JAX builds it.
    assert PhysicalMesh("TPU v5", (2, 2, 2), 2).axes[-1] == ("core", 2)


# ------------------------------------------------------------------ the torus assignment


def test_tensor_8_on_a_v5e_4x4_fits_no_physical_axes() -> None:
    got = on("v5e-4x4", tensor=8, fsdp=2)
    assert isinstance(got, Unplaceable)
    # autoregressive (1, the last axis, so assigned first) took the size-1 z: only x and y are left.
    assert (got.axis, got.size, got.free) == ("tensor", 8, (("x", 4), ("y", 4)))
    assert [p for p in got.taken if p.size > 1] == [] and got.sizes == [4, 16]


def test_degrees_that_are_products_of_whole_axes_are_laid_out() -> None:
    assert placed(on("v5e-4x4", tensor=4, fsdp=4)) == {"tensor": ("x",), "fsdp": ("y",)}
    assert placed(on("v5p-4x4x4", tensor=4, fsdp=16)) == {"tensor": ("x",), "fsdp": ("y", "z")}
    assert placed(on("v5p-4x4x4", fsdp=64)) == {"fsdp": ("x", "y", "z")}
    assert placed(on("v4-2x2x1", tensor=2, fsdp=2)) == {"tensor": ("x",), "fsdp": ("y",)}


def test_the_most_network_intensive_axis_chooses_first_and_the_greedy_choice_can_strand_the_rest() -> None:
    # v5p 2x2x4: tensor 4 takes x and y (the first two-axis set), so fsdp 2 finds only z (4) — though
    # tensor on z, fsdp on x and data on y would have fitted. JAX does not look back; neither does the plan.
    got = on("v5p-2x2x4", data=2, fsdp=2, tensor=4)
    assert isinstance(got, Unplaceable) and got.axis == "fsdp" and got.free == (("z", 4),)
    assert [(p.axis, p.physical) for p in got.taken if p.size > 1] == [("tensor", ("x", "y"))]
    assert placed(on("v5p-2x2x4", data=2, fsdp=4, tensor=2)) == {"tensor": ("x",), "fsdp": ("z",), "data": ("y",)}


def test_tpu7x_gives_the_core_axis_first() -> None:
    assert placed(on("tpu7x-2x4x4", tensor=2, fsdp=32))["tensor"] == ("core",)
    # tensor 16 takes z (8) and the core (2) before x and y: fsdp 8 then finds only 4s.
    got = on("tpu7x-4x4x8", data=2, fsdp=8, tensor=16)
    assert isinstance(got, Unplaceable) and got.axis == "fsdp" and [p.physical for p in got.taken if p.size > 1] == [("z", "core")]
    # The same degrees on a v5p 4x4x8, which has no core axis, fit (tensor x and y, fsdp z) but for data 2.
    assert isinstance(lay_out(PhysicalMesh("TPU v5", (4, 4, 8)), logical(fsdp=8, tensor=16)), Layout)


@pytest.mark.parametrize(
    "mesh, degrees",
    [
        (PhysicalMesh("TPU v5 lite", (2, 2, 1)), {"fsdp": 2, "tensor": 2}),  # v5e 2x2: a ring
        (PhysicalMesh("TPU v5 lite", (2, 4, 1)), {"fsdp": 2, "tensor": 2, "expert": 2}),  # any 8 devices
        (PhysicalMesh("TPU v6 lite", (2, 4, 1)), {"data": 2, "tensor": 2, "expert": 2}),
        (PhysicalMesh("TPU v5 lite", (4, 4, 1)), {"tensor": 16}),  # 4x4 with one axis over all 16
        (PhysicalMesh("TPU v5", (2, 2, 2)), {"fsdp": 2, "tensor": 2, "expert": 2}),  # v5p 2x2x2
        (PhysicalMesh("TPU7x", (2, 2, 4), 2), {"fsdp": 8, "expert": 4}),  # tpu7x up to 32 devices, x and y <= 2
        (PhysicalMesh("TPU v4 lite", (2, 2, 1)), {"fsdp": 4}),  # v4i: 4 devices
        (PhysicalMesh("TPU v3", (4, 4, 1), 2), {"fsdp": 2, "tensor": 16}),  # v2/v3 always
    ],
)
def test_device_kinds_that_lay_small_slices_out_themselves_never_refuse(mesh, degrees) -> None:
    got = lay_out(mesh, logical(**degrees))
    assert isinstance(got, Layout) and got.handler, got


def test_handlers_stop_where_jax_stops_them() -> None:
    # v5e 4x4 takes its ring only when one axis holds every device; 16 as 4 x 4 goes through the torus.
    assert isinstance(lay_out(PhysicalMesh("TPU v5 lite", (4, 4, 1)), logical(tensor=8, fsdp=2)), Unplaceable)
    assert isinstance(lay_out(PhysicalMesh("TPU v5", (2, 2, 4)), logical(data=2, fsdp=2, tensor=4)), Unplaceable)  # v5p beyond 2x2x2
    assert isinstance(lay_out(PhysicalMesh("TPU v4", (2, 2, 4)), logical(data=2, fsdp=2, tensor=4)), Unplaceable)
    assert isinstance(lay_out(PhysicalMesh("TPU v4", (2, 2, 1)), logical(fsdp=2, tensor=2)), Layout)  # v4 (not lite): the torus
    # tpu7x 2x4x4 (64 devices, y 4): no tray ring; expert 4 takes x and the core, and tensor 2 finds only 4s.
    got = lay_out(PhysicalMesh("TPU7x", (2, 4, 4), 2), logical(fsdp=8, tensor=2, expert=4))
    assert isinstance(got, Unplaceable) and got.axis == "tensor" and got.free == (("y", 4), ("z", 4))


def test_a_mesh_that_does_not_hold_the_devices_is_the_callers_error() -> None:
    with pytest.raises(ValueError, match="does not hold the 16 devices"):
        on("v5e-4x4", tensor=8)


# ------------------------------------------------------------------ MaxText's logical mesh


def test_maxtext_order_puts_stage_ahead_of_data_when_pipelining_and_drops_sequence() -> None:
    ici = {"data": 2, "pipeline": 2, "fsdp": 4, "sequence": 1}
    m = maxtext_mesh(MAXTEXT_MESH_AXES, ici, {"data": 2})
    assert m.axes[:4] == ("diloco", "stage", "data", "fsdp") and dict(m.ici)["stage"] == 2 and not m.dropped
    assert maxtext_mesh(MAXTEXT_MESH_AXES, {"data": 2, "fsdp": 8}, {}).axes[:3] == ("diloco", "data", "stage")
    assert maxtext_mesh(MAXTEXT_MESH_AXES, {"sequence": 2, "fsdp": 8}, {}).dropped == (("ici", "sequence", 2),)
    assert maxtext_mesh(MAXTEXT_MESH_AXES, {"fsdp": 16}, {"sequence": 2}).dropped == (("dcn", "sequence", 2),)


def test_maxtext_axes_follow_a_custom_rule_or_mesh_axes() -> None:
    assert maxtext_axes({}) == MAXTEXT_MESH_AXES
    assert maxtext_axes({"custom_mesh_and_rule": "pure-fsdp"}) == ("fsdp",)
    assert maxtext_axes({"mesh_axes": "['data', 'fsdp', 'tensor']"}) == ("data", "fsdp", "tensor")
    assert maxtext_axes({"custom_mesh_and_rule": "no-such-rule"}) is None  # MaxText refuses it itself
    assert maxtext_mesh(("fsdp",), {"fsdp": 4, "tensor": 4}, {}).dropped == (("ici", "tensor", 4),)


# ------------------------------------------------------------------ the planner


def _spec(gen: str, topo: str, slices: int = 1):
    return one_pool(gen, topo, slices)


def _refusal(recipe: str, spec, *sets: str, slices: int = 1) -> PlanError:
    with pytest.raises(PlanError) as e:
        plan_run(recipe, spec, Overrides(sets=sets, slices=slices))
    assert "\n" not in str(e.value)
    return e.value


def test_the_planner_refuses_tensor_8_on_a_v5e_4x4_naming_the_key_and_the_fix() -> None:
    e = _refusal("maxtext-6b", _spec("v5e", "4x4"), "ici_tensor_parallelism=8")
    assert e.field == "--set"
    assert "ici_tensor_parallelism=8 is not a product of the v5e 4x4 slice's free physical axes (x 4, y 4)" in e.problem
    assert e.fix.startswith("use --set ici_tensor_parallelism=4 or 16") and "--set allow_split_physical_axes=true" in e.fix
    # Every slice of a multislice run is laid out alike (create_hybrid_device_mesh): refused there too.
    assert "ici_tensor_parallelism=8" in str(_refusal("maxtext-6b", _spec("v5e", "4x4", 2), "ici_tensor_parallelism=8", slices=2))


def test_allow_split_physical_axes_lets_the_mesh_through_to_maxtext() -> None:
    p = plan_run("maxtext-6b", _spec("v5e", "4x4"), Overrides(sets=("ici_tensor_parallelism=8", "allow_split_physical_axes=true")))
    assert {"ici_tensor_parallelism=8", "ici_fsdp_parallelism=2", "allow_split_physical_axes=true"} <= set(p.program.args)
    e = _refusal("maxtext-6b", _spec("v5e", "4x4"), "ici_tensor_parallelism=8", "allow_split_physical_axes=yes")
    assert e.field == "--set" and "allow_split_physical_axes='yes' is neither true nor false" in str(e)
    _refusal("maxtext-6b", _spec("v5e", "4x4"), "ici_tensor_parallelism=8", "allow_split_physical_axes=false")


def test_a_recipes_own_mesh_is_blamed_on_the_recipe_field() -> None:
    # llama3-8b's rule is tensor 4 and fsdp the rest: a v6e 8x16 slice has physical axes 8 and 16.
    e = _refusal("llama3-8b", _spec("v6e", "8x16"))
    assert e.field == "recipe llama3-8b parallelism.ici.tensor", str(e)
    assert "ici_tensor_parallelism=4 is not a product" in e.problem and "use --set ici_tensor_parallelism=8, 16 or 128" in e.fix
    assert plan_run("llama3-8b", _spec("v6e", "8x16"), Overrides(sets=("ici_tensor_parallelism=8",))).program.sizing is not None


def test_the_refusal_names_the_axes_that_took_the_physical_ones() -> None:
    e = _refusal(
        "maxtext-6b", _spec("tpu7x", "4x4x8"), "ici_tensor_parallelism=16", "ici_fsdp_parallelism=8", "ici_data_parallelism=2", "per_device_batch_size=1"
    )
    assert "ici_fsdp_parallelism=8 is not a product of the tpu7x 4x4x8 slice's free physical axes (x 4, y 4; ici_tensor_parallelism=16 took z and core)" in str(
        e
    )
    assert "use --set ici_fsdp_parallelism=4 or 16" in e.fix


def test_a_sequence_degree_is_refused_maxtext_has_no_such_mesh_axis() -> None:
    e = _refusal("maxtext-6b", _spec("v5e", "4x4"), "ici_sequence_parallelism=2")
    assert e.field == "--set" and "ici_sequence_parallelism=2 is not in MaxText 0.2.5's mesh" in e.problem and "ici_context_parallelism" in e.fix


def test_pipeline_meshes_are_laid_out_with_stage_before_data() -> None:
    p = plan_run("maxtext-6b", _spec("v5p", "2x2x4"), Overrides(sets=("ici_fsdp_parallelism=8", "ici_pipeline_parallelism=2")))
    assert "ici_pipeline_parallelism=2" in p.program.args
    e = _refusal("maxtext-6b", _spec("v5p", "2x2x4"), "ici_tensor_parallelism=4", "ici_fsdp_parallelism=2", "ici_pipeline_parallelism=2")
    assert "ici_fsdp_parallelism=2 is not a product" in str(e)


# ------------------------------------------------------------------ the CLI


def _one_line(r, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert r.stdout == ""
    return lines[0]


@pytest.mark.parametrize("command", ["submit-dry-run", "render", "preflight-compile"])
def test_every_command_that_plans_refuses_in_one_line_and_writes_nothing(command: str, tmp_path) -> None:
    spec = ["--spec", str(EXAMPLES / "default.yaml")]
    sets = ["--set", "ici_tensor_parallelism=8"]
    args = {
        "submit-dry-run": ["submit", "maxtext-6b", *sets, *spec, "--dry-run"],
        "render": ["render", "maxtext-6b", *sets, *spec, "--out", str(tmp_path / "tree")],
        # planned before any MaxText venv is looked for or compile started
        "preflight-compile": ["preflight", "maxtext-6b", "--compile", *sets, *spec, "--keep-logs", str(tmp_path / "logs")],
    }[command]
    _one_line(cli("workloads", *args), "error: --set: ici_tensor_parallelism=8", "v5e 4x4", "allow_split_physical_axes=true")
    assert list(tmp_path.iterdir()) == []
    ok = cli("workloads", "submit", "maxtext-6b", *sets, "--set", "allow_split_physical_axes=true", *spec, "--dry-run", "-o", "json")
    assert ok.returncode == 0, ok.stderr
