"""`python -m infra` end to end, as a user runs it (subprocesses, real synth)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def infra(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def default_synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("synth")
    proc = infra("synth", "--out", str(out), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


@pytest.mark.synth
def test_synth_without_spec_uses_the_default_example(default_synth: tuple[Path, dict]) -> None:
    out, summary = default_synth
    stack = Path(summary["stack"])
    assert stack.is_file() and stack.is_relative_to(out)
    doc = json.loads(stack.read_text())
    pools = doc["resource"]["google_container_node_pool"]
    # default example: 2 x v5litepod-16 → two 4-node TPU pools, plus the CPU pool
    tpu = [p for p in pools.values() if p["node_config"]["machine_type"].startswith("ct5lp")]
    assert len(tpu) == 2
    assert summary["tpu_chips"] == 32
    assert summary["cluster"] == "tpu-dev"
    assert {p["name"] for p in summary["node_pools"]} >= {"v5e-16-0", "v5e-16-1"}


@pytest.mark.synth
def test_spec_env_var_selects_the_spec(tmp_path: Path) -> None:
    proc = infra("synth", "--out", str(tmp_path), "--output", "json", env={"TGK_SPEC": str(REPO / "examples/tpu7x.yaml")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"] == "ironwood"


@pytest.mark.synth
def test_text_summary_names_pools_and_counts(tmp_path: Path) -> None:
    proc = infra("synth", "--spec", "examples/v5p.yaml", "--out", str(tmp_path), "--summary", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "v5p-128-0" in proc.stdout and "4x4x4" in proc.stdout
    assert "google_container_node_pool" in proc.stdout


@pytest.mark.synth
def test_plan_dry_run_prints_the_terraform_calls(tmp_path: Path) -> None:
    proc = infra("plan", "--out", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("terraform -chdir=") and " init " in lines[0] + " "
    assert "plan -input=false -out=tfplan" in lines[1]


@pytest.mark.synth
def test_deploy_dry_run_applies_the_saved_plan(tmp_path: Path) -> None:
    proc = infra("deploy", "--out", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith("apply -input=false tfplan")


def test_destroy_refuses_while_deletion_protection_is_on(tmp_path: Path) -> None:
    proc = infra("destroy", "--spec", "examples/tpu7x.yaml", "--out", str(tmp_path / "o"), "--yes")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "cluster.deletion_protection" in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.synth
def test_destroy_without_a_terminal_needs_yes(tmp_path: Path) -> None:
    # Point at a terraform that must never be reached: the confirmation comes first.
    fake = tmp_path / "terraform"
    fake.write_text("#!/bin/sh\necho reached >&2\nexit 0\n")
    fake.chmod(0o755)
    proc = infra("destroy", "--out", str(tmp_path / "o"), env={"TGK_TERRAFORM": str(fake)}, stdin="")
    assert proc.returncode == 2, proc.stderr
    assert "--yes" in proc.stderr and "reached" not in proc.stderr


def test_missing_terraform_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "TGK_TERRAFORM": ""}
    proc = subprocess.run(
        [sys.executable, "-c", "from infra.terraform import find_terraform; find_terraform()"],
        cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
    )
    assert proc.returncode != 0 and "terraform is not on PATH" in proc.stderr


def test_spec_command_needs_no_cdk() -> None:
    proc = infra("spec", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tpu_pools"][0]["node_pools"] == ["v5e-16-0", "v5e-16-1"]


def test_help_and_spec_imports_stay_light() -> None:
    code = (
        "import sys, infra.spec, infra.catalog, infra.cli\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('cdktn', 'cdktn_provider_google', 'jsii', 'kubernetes', 'matplotlib')]\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


@pytest.mark.parametrize("args", [["synth", "--bogus"], ["nosuchcommand"], ["synth", "--output", "yaml"]])
def test_usage_errors_are_one_line(args: list[str]) -> None:
    proc = infra(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
