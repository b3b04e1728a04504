"""`python -m infra` end to end, as a user runs it (in process: tests/support/cli.py; real synth)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, cli


def infra(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return cli("infra", *args, env=env, stdin=stdin)


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


@pytest.mark.parametrize("example", ["tpu7x", "default"])  # default: deletion protection is on by default
def test_destroy_refuses_while_deletion_protection_is_on(tmp_path: Path, example: str) -> None:
    proc = infra("destroy", "--spec", f"examples/{example}.yaml", "--out", str(tmp_path / "o"), "--yes")
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
    # Deletion protection (on by default) refuses first: this spec turned it off, as the README says to before a destroy.
    spec = tmp_path / "unprotected.yaml"
    spec.write_text(Path("examples/default.yaml").read_text().replace("  release_channel: RAPID\n", "  release_channel: RAPID\n  deletion_protection: false\n"))
    proc = infra("destroy", "--spec", str(spec), "--out", str(tmp_path / "o"), env={"TGK_TERRAFORM": str(fake)}, stdin="")
    assert proc.returncode == 2, proc.stderr
    assert "--yes" in proc.stderr and "reached" not in proc.stderr


def test_missing_terraform_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "TGK_TERRAFORM": ""}
    proc = subprocess.run(
        [sys.executable, "-c", "from infra.terraform import find_terraform; find_terraform()"],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
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


def test_terraform_steps_run_through_the_one_runner(tmp_path: Path) -> None:
    from infra.terraform import Step, Terraform
    from toolkit.errors import ExternalToolError

    fake = tmp_path / "terraform"
    fake.write_text(
        '#!/bin/sh\necho "ran $*"\nif [ "$2" = plan ]; then printf \'\\n╷\\n│ Error: No valid credential sources found\\n│\\n│ more\\n╵\\n\' >&2; exit 1; fi\n'
    )
    fake.chmod(0o755)
    tf = Terraform(workdir=tmp_path, binary=str(fake))
    assert tf.run(tf.output_json(), capture=True) == f"ran -chdir={tmp_path} output -json\n"
    with pytest.raises(ExternalToolError) as err:
        tf.run(tf.plan(out="tfplan"), capture=True)
    assert str(err.value) == f"`{fake} -chdir={tmp_path} plan` failed with exit code 1: Error: No valid credential sources found"
    # An interactive step is never captured: terraform talks to the terminal itself.
    assert tf.run(Step((str(fake), "apply"), interactive=True), capture=True) == ""
    with pytest.raises(ExternalToolError, match="install terraform or set TGK_TERRAFORM"):
        Terraform(workdir=tmp_path, binary=str(tmp_path / "missing")).run(Step((str(tmp_path / "missing"), "init")))


# ------------------------------------------------------------------ outputs (terraform stood in for)


def _fake_terraform(tmp_path: Path, *, fail_output: bool = False, empty: bool = False) -> tuple[Path, Path]:
    """A terraform that logs its calls and answers `output -json` from the synthesized stack's own
    `output` block: one value per output the stack declares, as a real state would hold them."""
    log = tmp_path / "terraform.log"
    fake = tmp_path / "terraform"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "args = sys.argv[1:]\n"
        f"pathlib.Path({str(log)!r}).open('a').write(' '.join(args) + '\\n')\n"
        "chdir = args[0].removeprefix('-chdir=')\n"
        "if args[1] == 'output':\n"
        f"    if {fail_output!r}:\n"
        "        sys.stderr.write('\\n│ Error: Failed to load state: storage.NewClient() failed: dialing: google: could not find default credentials\\n│\\n')\n"
        "        sys.exit(1)\n"
        "    declared = json.loads((pathlib.Path(chdir) / 'cdk.tf.json').read_text()).get('output', {})\n"
        f"    state = {{}} if {empty!r} else {{k: {{'sensitive': k == 'cluster_endpoint', 'type': 'string', 'value': 'v-' + k}} for k in declared}}\n"
        "    print(json.dumps(state))\n"
    )
    fake.chmod(0o755)
    return fake, log


@pytest.mark.synth
def test_outputs_reads_every_stack_output_from_the_state(tmp_path: Path) -> None:
    fake, log = _fake_terraform(tmp_path)
    out = tmp_path / "o"
    text = infra("outputs", "--out", str(out), env={"TGK_TERRAFORM": str(fake)})
    assert text.returncode == 0, text.stderr
    (stack,) = out.glob("stacks/*/cdk.tf.json")
    declared = set(json.loads(stack.read_text())["output"])
    # The stack declares what the README promises: cluster, service accounts, buckets, registry.
    assert {"cluster_name", "cluster_endpoint", "node_service_account", "team_service_accounts", "buckets", "registry_url"} <= declared
    lines = dict(line.split(" = ", 1) for line in text.stdout.strip().splitlines())
    assert set(lines) == declared
    assert lines["cluster_name"] == '"v-cluster_name"'
    assert lines["cluster_endpoint"] == "(sensitive)"  # named, not shown, as terraform does
    # init against the stack's own directory (its GCS backend), then the state's outputs
    assert log.read_text().splitlines() == [f"-chdir={stack.parent} init -input=false -no-color", f"-chdir={stack.parent} output -json"]

    as_json = infra("outputs", "--out", str(out), "-o", "json", env={"TGK_TERRAFORM": str(fake)})
    assert as_json.returncode == 0, as_json.stderr
    values = json.loads(as_json.stdout)
    assert values == {k: f"v-{k}" for k in declared}  # -o json shows sensitive values, for scripts


@pytest.mark.synth
def test_outputs_of_an_empty_state_say_so(tmp_path: Path) -> None:
    fake, _ = _fake_terraform(tmp_path, empty=True)
    proc = infra("outputs", "--out", str(tmp_path / "o"), env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 0 and proc.stdout == ""
    assert "no outputs in the state of tpu-dev: nothing deployed yet" in proc.stderr


@pytest.mark.synth
def test_outputs_when_terraform_fails_is_one_line(tmp_path: Path) -> None:
    fake, _ = _fake_terraform(tmp_path, fail_output=True)
    proc = infra("outputs", "--out", str(tmp_path / "o"), env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: `") and "output` failed with exit code 1: Error: Failed to load state" in line


@pytest.mark.synth
def test_outputs_without_terraform_is_one_line(tmp_path: Path) -> None:
    proc = infra("outputs", "--out", str(tmp_path / "o"), env={"PATH": "/nonexistent", "TGK_TERRAFORM": ""})
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "terraform is not on PATH" in line


# ------------------------------------------------------------------ the summary tables are never cut


@pytest.mark.synth
def test_summary_piped_prints_every_cell_in_full(tmp_path: Path) -> None:
    # Not a terminal and no COLUMNS: rich used to assume 80 columns and cut cells ("v6e-16…", "on-dema…").
    proc = infra("synth", "--spec", "examples/v6e-reservation.yaml", "--out", str(tmp_path), "--summary", env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in proc.stdout.splitlines() if line.startswith("│")]
    pools = {r[0]: r for r in rows if len(r) == 8}
    assert pools["v6e-16-0"][1] == "ct6e-standard-4t" and pools["v6e-16-1"][6] == "reservation trillium-res-1"
    assert pools["cpu"][6] == "on-demand" and pools["v6e-16-0"][7] == "us-east5-b"


@pytest.mark.synth
def test_summary_on_a_narrow_terminal_wraps_instead_of_cutting(tmp_path: Path) -> None:
    import re

    # FORCE_COLOR makes rich treat the pipe as a terminal; COLUMNS is that terminal's width.
    proc = infra(
        "synth",
        "--spec",
        "examples/v6e-reservation.yaml",
        "--out",
        str(tmp_path),
        "--summary",
        env={"COLUMNS": "60", "FORCE_COLOR": "1", "NO_COLOR": ""},
    )
    assert proc.returncode == 0, proc.stderr
    plain = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)
    assert "…" not in plain
    assert max(len(line) for line in plain.splitlines()) <= 60
    # The folded pieces of a cell, read down its column, are the whole value.
    cells = [line.split("│")[7].strip() for line in plain.splitlines() if line.startswith("│") and line.count("│") == 9]
    assert "reservationtrillium-res-1" in "".join(cells).replace(" ", "")
