"""`metrics RUN` knows the run's hardware: the slice shape and count read back from the run object.

Every runtime's rendered run (JobSet, Job, RayJob) is read back with
``workloads.observe.analysis.run_shape`` and must give the plan's own slice shape and
slice count; a run that asks for no TPU, or for one the catalog does not know, gives none.
The real API server's side is in tests/integration/test_rehearsal.py (metrics without --pool).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES
from toolkit.names import GKE_TPU_ACCELERATOR_LABEL, GKE_TPU_TOPOLOGY_LABEL
from workloads.observe.analysis import _tpu_pod_specs, run_shape
from workloads.planning.planner import Overrides, plan_run
from workloads.render import job, jobset, rayjob


def _run_object(runtime: str, plan) -> dict[str, Any]:
    if runtime == "ray":
        return rayjob.rayjob(plan)
    objects = (jobset if runtime == "jobset" else job).run_objects(plan)
    (top,) = [o for o in objects if o["kind"] in ("JobSet", "Job")]
    return top


CASES = [
    ("jobset", "default.yaml", "maxtext-6b", {"slices": 2}),
    ("jobset", "default.yaml", "maxtext-6b", {"slices": 1}),
    ("jobset", "v5p.yaml", "maxtext-6b", {}),
    ("jobset", "tpu7x-multislice.yaml", "maxtext-6b", {}),
    ("jobset", "v4.yaml", "maxtext-6b", {}),
    ("job", "default.yaml", "hello-tpu", {}),
    ("ray", "v6e-reservation.yaml", "llama3-8b", {"team": "research", "slices": 1}),
]


@pytest.mark.parametrize(("runtime", "spec_file", "recipe", "kw"), CASES, ids=[f"{c[0]}-{c[1]}-{c[3].get('slices', '')}" for c in CASES])
def test_the_run_object_gives_back_the_plan_s_shape_and_slices(runtime, spec_file, recipe, kw) -> None:
    spec = load_spec(EXAMPLES / spec_file)
    try:
        plan = plan_run(recipe, spec, Overrides(runtime=runtime, name="shape", **kw), rand="abc")
    except Exception as e:  # noqa: BLE001 - a case the planner refuses is a wrong case, said plainly
        pytest.fail(f"{runtime} {spec_file} {recipe}: the plan itself was refused: {e}")
    found = run_shape(_run_object(runtime, plan))
    assert found is not None
    shape, slices = found
    assert (shape.accelerator_type, shape.topology, shape.chips_per_vm) == (
        plan.target.shape.accelerator_type,
        plan.target.shape.topology,
        plan.target.shape.chips_per_vm,
    )
    assert shape == plan.target.shape
    assert slices == plan.target.slices


def test_a_single_host_slice_is_told_from_a_multi_host_one_of_the_same_topology() -> None:
    """v5e 2x4: one 8-chip VM (ct5lp-hightpu-8t) or two 4-chip VMs; the pods' TPU request tells them apart."""
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(name="shape", slices=1), rand="abc")
    obj = _run_object("jobset", plan)
    for pod_spec in _pod_specs(obj):
        pod_spec["nodeSelector"][GKE_TPU_TOPOLOGY_LABEL] = "2x4"
        for c in pod_spec["containers"]:
            c["resources"]["limits"]["google.com/tpu"] = 8
    shape, _ = run_shape(obj)
    assert (shape.topology, shape.chips_per_vm, shape.nodes) == ("2x4", 8, 1)
    for pod_spec in _pod_specs(obj):
        for c in pod_spec["containers"]:
            c["resources"]["limits"]["google.com/tpu"] = 4
    shape, _ = run_shape(obj)
    assert (shape.topology, shape.chips_per_vm, shape.nodes) == ("2x4", 4, 2)


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The TPU pod specs ``run_shape`` reads (its own walker), to change them in place."""
    out = list(_tpu_pod_specs(obj))
    assert out, "no TPU pod spec in the rendered run"
    return out


def test_no_tpu_or_an_unknown_one_gives_no_shape(capsys) -> None:
    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(name="shape", slices=1), rand="abc")
    obj = _run_object("jobset", plan)
    cpu_only = copy.deepcopy(obj)
    for pod_spec in _pod_specs(cpu_only):
        del pod_spec["nodeSelector"][GKE_TPU_ACCELERATOR_LABEL]
    assert run_shape(cpu_only) is None
    assert capsys.readouterr().err == ""  # nothing to say: the run asked for no TPU

    for pod_spec in _pod_specs(obj):
        pod_spec["nodeSelector"][GKE_TPU_ACCELERATOR_LABEL] = "tpu-v9-future"
    assert run_shape(obj) is None
    err = capsys.readouterr().err
    assert "tpu-v9-future" in err and "--shape" in err and err.count("\n") == 1
