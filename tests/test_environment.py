"""The development environment: each checkout runs its own code, the toolkit finds its own tools,
and the tree stays formatted and lint-clean."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from toolkit import paths


def _lib_pin(name: str) -> str:
    m = re.search(rf'^{name}="([^"]+)"$', (REPO / "scripts" / "lib.sh").read_text(), re.M)
    assert m, f"scripts/lib.sh has no {name}"
    return m.group(1)


def test_tool_pins_are_spelled_alike_in_shell_and_python() -> None:
    assert _lib_pin("node_version") == paths.NODE_VERSION
    assert _lib_pin("cdktn_cli_version") == paths.CDKTN_CLI_VERSION
    assert _lib_pin("checkov_version") == paths.CHECKOV_VERSION


def test_tool_environ_points_at_the_cache_and_keeps_what_the_caller_chose(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_CACHE", str(tmp_path))
    node = tmp_path / f"node-{paths.NODE_VERSION}-cdktn-{paths.CDKTN_CLI_VERSION}" / "node_modules" / ".bin" / "node"
    env: dict[str, str] = {}
    paths.tool_environ(env)
    assert "JSII_NODE" not in env, "no Node built yet: jsii must fall back to the node on PATH"
    assert env["JSII_RUNTIME_PACKAGE_CACHE_ROOT"] == str(tmp_path / "jsii")
    node.parent.mkdir(parents=True)
    node.write_text("")
    env = {"JSII_RUNTIME_PACKAGE_CACHE_ROOT": "/elsewhere"}
    paths.tool_environ(env)
    assert env["JSII_NODE"] == str(node) and env["TGK_NODE_BIN"] == str(node.parent)
    assert env["JSII_RUNTIME_PACKAGE_CACHE_ROOT"] == "/elsewhere"


def test_importing_modules_prepares_jsii_before_cdktn_starts(tmp_path: Path) -> None:
    """A plain `python -c 'import modules...'` (no scripts/env.sh) gets the cached Node."""
    code = "import os, modules, sys; print(os.environ.get('JSII_NODE', '')); print('cdktn' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_") and k != "TGK_NODE_BIN"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    jsii_node, cdktn_loaded = r.stdout.splitlines()
    assert cdktn_loaded == "False"
    if (paths.node_bin_dir() / "node").exists():
        assert jsii_node == str(paths.node_bin_dir() / "node")


def test_two_checkouts_each_import_their_own_code(tmp_path: Path) -> None:
    """scripts/setup.sh gives each checkout a venv of its own over the shared dependency layer."""
    checkouts = []
    for name in ("a", "b"):
        root = tmp_path / name
        (root / "scripts").mkdir(parents=True)
        for f in ("scripts/setup.sh", "scripts/lib.sh", "pyproject.toml", "constraints.txt"):
            shutil.copy(REPO / f, root / f)
        (root / "toolkit").mkdir()
        (root / "toolkit" / "__init__.py").write_text(f"WHO = {name!r}\n")
        checkouts.append(root)
    env = {**os.environ, "TGK_CACHE": str(paths.cache_dir())}
    for root in checkouts:
        r = subprocess.run(["bash", str(root / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.splitlines()[-1] == str(root / ".venv")
    for root in checkouts:
        r = subprocess.run(
            [str(root / ".venv" / "bin" / "python"), "-c", "import toolkit, yaml; print(toolkit.WHO)"], cwd="/", capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == root.name


def test_tree_is_formatted_and_lint_clean() -> None:
    ruff = [sys.executable, "-m", "ruff"]
    check = subprocess.run([*ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-1000:]
    fmt = subprocess.run([*ruff, "format", "--check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert fmt.returncode == 0, "run `ruff format .`:\n" + fmt.stdout[-3000:]
