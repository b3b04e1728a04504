"""The Kustomize tree: a base shared by every run, and overlays that each rebuild
exactly their own run's objects, which are what `submit` applies.

The `tools` tests run the real, pinned kustomize built by scripts/build-kustomize.sh
(cold build: a minute or two; cached outside the repo afterwards).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, REPO, cli
from workloads.planning.planner import Overrides, plan_run
from workloads.render import yamlio
from workloads.render.jobset import jobset
from workloads.render.kustomize import apply_json_patch, base_files, build, build_overlay, diff, render, run_objects, write_tree


@pytest.fixture(scope="session")
def kustomize_bin() -> str:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "build-kustomize.sh")], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        pytest.fail(f"scripts/build-kustomize.sh failed: {proc.stderr.strip()[-500:]}")
    path = proc.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK) and "kustomize-v5.5.0" in path
    version = subprocess.run([path, "version"], capture_output=True, text=True, check=True).stdout
    assert "v5.5.0" in version
    return path


CASES = [
    ("default", "maxtext-6b", Overrides(slices=2)),
    ("default", "hello-tpu", Overrides(slices=1, host_network=False)),
    ("v6e-reservation", "llama3-8b", Overrides(slices=2, team="research", sets=("ici_tensor_parallelism=8", "allow_split_physical_axes=true"))),
    ("tpu7x", "maxtext-6b", Overrides()),
]


@pytest.mark.parametrize("example, recipe, overrides", CASES)
def test_overlay_rebuilds_jobset_in_process(example, recipe, overrides) -> None:
    plan = plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), overrides, rand="k1k")
    assert build_overlay(render(plan), plan.name) == run_objects(plan)


def test_base_is_the_same_for_every_run() -> None:
    """The base holds nothing of any run: two very different runs render it byte for byte alike."""
    a = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(name="a", max_restarts=0, priority="low"))
    b = plan_run("llama3-8b", load_spec(EXAMPLES / "v6e-reservation.yaml"), Overrides(name="b", slices=2, max_restarts=5, priority="high", host_network=False))
    fa, fb = render(a), render(b)
    base = {k: v for k, v in fa.items() if k.startswith("base/")}
    assert base == {k: v for k, v in fb.items() if k.startswith("base/")} == base_files("jobset")
    assert "maxtext" not in "".join(base.values()) and "research" not in "".join(base.values())


def test_runs_rendered_into_one_directory_each_build_their_own(tmp_path: Path) -> None:
    """The bug this layout fixes: a later render must not change an earlier run's overlay build."""
    spec = load_spec(EXAMPLES / "default.yaml")
    a = plan_run("maxtext-6b", spec, Overrides(name="run-a", max_restarts=0, priority="low"))
    b = plan_run("maxtext-6b", spec, Overrides(name="run-b", slices=2, max_restarts=5, priority="high"))
    c = plan_run("hello-tpu", spec, Overrides(name="run-c", host_network=False))
    for plan in (a, b, c):
        write_tree(tmp_path, render(plan))
    files = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.yaml")}
    for plan in (a, b, c):
        assert build_overlay(files, plan.name) == run_objects(plan)
    built_a = build_overlay(files, "run-a")[0]
    assert built_a["spec"]["failurePolicy"]["maxRestarts"] == 0
    assert built_a["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["priorityClassName"] == "low"


def test_render_writes_units_and_keeps_other_overlays(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    a = plan_run("maxtext-6b", spec, Overrides(name="run-a"))
    b = plan_run("maxtext-6b", spec, Overrides(name="run-b", slices=2))
    write_tree(tmp_path, render(a))
    write_tree(tmp_path, render(b))
    assert (tmp_path / "overlays/run-a/kustomization.yaml").exists()
    assert (tmp_path / "overlays/run-b/patch-jobset.yaml").exists()
    kz = yamlio.load((tmp_path / "overlays/run-b/kustomization.yaml").read_text())
    assert kz["namespace"] == "research" and kz["resources"] == ["../../base/jobset"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".render-")]


def test_out_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = cli("workloads", "render", "hello-tpu", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: --out:"), r.stderr


@pytest.mark.parametrize(
    "base, final",
    [
        ({"a": 1, "b": [1, 2]}, {"a": 2, "b": [1, 2, 3], "c": {"d": "x/y~z"}}),
        ({"a": {"x/y": 1, "k": 2}}, {"a": {"x/y": 3}}),
        ([{"n": 1}, {"n": 2}], [{"n": 1}, {"n": 5, "m": True}]),
        ({"t": 1}, {"t": True}),
    ],
)
def test_diff_then_apply_round_trips(base, final) -> None:
    assert apply_json_patch(base, diff(base, final)) == final
    assert diff(final, final) == []


@pytest.mark.tools
@pytest.mark.parametrize("example, recipe, overrides", CASES)
def test_kustomize_build_equals_objects(tmp_path: Path, kustomize_bin: str, example, recipe, overrides) -> None:
    plan = plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), overrides, rand="k2k")
    write_tree(tmp_path, render(plan))
    assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == run_objects(plan)


@pytest.mark.tools
def test_kustomize_builds_each_of_several_runs_in_one_tree(tmp_path: Path, kustomize_bin: str) -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    plans = [plan_run("maxtext-6b", spec, Overrides(name=f"r{i}", slices=1 + i % 2, max_restarts=i)) for i in range(3)]
    for plan in plans:
        write_tree(tmp_path, render(plan))
    for plan in plans:
        assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == run_objects(plan)


@pytest.mark.tools
def test_cli_render_then_build_equals_submit_dry_run(tmp_path: Path, kustomize_bin: str) -> None:
    args = ["maxtext-6b", "--slices", "2", "--name", "eq-run", "--set", "per_device_batch_size=2", "--steps", "12"]
    r = cli("workloads", "render", *args, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    d = cli("workloads", "submit", *args, "--dry-run", "-o", "json")
    assert d.returncode == 0, d.stderr
    built = build(tmp_path / "overlays" / "eq-run", binary=kustomize_bin)
    assert built == json.loads(d.stdout)


def test_the_overlay_holds_the_renderers_jobset_plus_only_the_submission_digest() -> None:
    from toolkit.names import TGK_SUBMISSION_ANNOTATION
    from workloads.render import submission

    plan = plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), Overrides(slices=2, name="dg"))
    (stamped,) = run_objects(plan)
    annotations = dict(stamped["metadata"]["annotations"])
    assert annotations.pop(TGK_SUBMISSION_ANNOTATION) == submission.digest([jobset(plan)])
    stamped["metadata"]["annotations"] = annotations
    assert stamped == jobset(plan)


@pytest.mark.parametrize("runtime, recipe", [("jobset", "maxtext-6b"), ("job", "maxtext-6b"), ("ray", "llama3-8b")])
def test_the_digest_is_on_the_object_the_cluster_side_finds(runtime, recipe) -> None:
    """A resubmission is judged by the digest on what `Cluster.find_run` returns: the runtime's RunKind."""
    from toolkit.names import TGK_SUBMISSION_ANNOTATION
    from workloads.cluster.runkinds import BY_RUNTIME

    plan = plan_run(recipe, load_spec(EXAMPLES / "default.yaml"), Overrides(runtime=runtime, name="kd"))
    stamped = [o for o in run_objects(plan) if TGK_SUBMISSION_ANNOTATION in o["metadata"].get("annotations", {})]
    kind = BY_RUNTIME[runtime]
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in stamped] == [(kind.api_version, kind.kind, "kd")]


@pytest.mark.parametrize(
    "overrides, pod",
    [
        (Overrides(slices=2, name="pt"), "/spec/replicatedJobs/0/template/spec/template/spec/"),
        (Overrides(slices=2, name="pt", host_network=False), "/spec/replicatedJobs/0/template/spec/template/spec/"),
        (Overrides(runtime="job", name="pt"), "/spec/template/spec/"),
    ],
)
def test_the_overlay_only_adds_to_the_bases_worker_pod_template(overrides, pod) -> None:
    """The JobSet's and the Job's bases share their worker pod template: each run's pods keep all of it."""
    files = render(plan_run("maxtext-6b", load_spec(EXAMPLES / "default.yaml"), overrides))
    ops = [op for path, text in files.items() if "/patch-" in path for op in yamlio.load(text)]
    assert any(op["path"].startswith(pod) for op in ops)  # the prefix is the pod template's
    assert [op for op in ops if op["path"].startswith(pod) and op["op"] != "add"] == []
