"""The Kustomize tree: the overlay rebuilds exactly the JobSet that `submit` applies.

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
from workloads.render import yamlio
from workloads.render.kustomize import apply_json_patch, base_jobset, build, overlay_patch, render, write_tree
from workloads.render.jobset import jobset
from workloads.planning.planner import Overrides, plan_run

from tests.conftest import run_module

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def kustomize_bin() -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-kustomize.sh")], capture_output=True, text=True, timeout=900, check=False
    )
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
    ("v6e-reservation", "llama3-8b", Overrides(slices=2, team="research", sets=("ici_tensor_parallelism=8",))),
    ("tpu7x", "maxtext-6b", Overrides()),
]


@pytest.mark.parametrize("example, recipe, overrides", CASES)
def test_patch_rebuilds_jobset_in_process(example, recipe, overrides) -> None:
    plan = plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), overrides, rand="k1k")
    built = apply_json_patch(base_jobset(plan), overlay_patch(plan))
    built["metadata"]["namespace"] = plan.namespace
    assert built == jobset(plan)
    assert base_jobset(plan)["spec"]["replicatedJobs"][0]["replicas"] == 1


def test_render_writes_units_and_keeps_other_overlays(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "default.yaml")
    a = plan_run("maxtext-6b", spec, Overrides(name="run-a"))
    b = plan_run("maxtext-6b", spec, Overrides(name="run-b", slices=2))
    write_tree(tmp_path, render(a))
    write_tree(tmp_path, render(b))
    assert (tmp_path / "overlays/run-a/kustomization.yaml").exists()
    assert (tmp_path / "overlays/run-b/patch-run.yaml").exists()
    kz = yamlio.load((tmp_path / "overlays/run-b/kustomization.yaml").read_text())
    assert kz["namespace"] == "research" and kz["resources"] == ["../../base"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".render-")]


@pytest.mark.tools
@pytest.mark.parametrize("example, recipe, overrides", CASES)
def test_kustomize_build_equals_objects(tmp_path: Path, kustomize_bin: str, example, recipe, overrides) -> None:
    plan = plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), overrides, rand="k2k")
    write_tree(tmp_path, render(plan))
    assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == [jobset(plan)]


@pytest.mark.tools
def test_cli_render_then_build_equals_submit_dry_run(tmp_path: Path, kustomize_bin: str) -> None:
    args = ["maxtext-6b", "--slices", "2", "--name", "eq-run", "--set", "remat_policy=minimal", "--steps", "12"]
    r = run_module("workloads", "render", *args, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    d = run_module("workloads", "submit", *args, "--dry-run", "-o", "json")
    assert d.returncode == 0, d.stderr
    built = build(tmp_path / "overlays" / "eq-run", binary=kustomize_bin)
    assert built == json.loads(d.stdout)
