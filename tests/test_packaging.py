"""Every data file inside the packages is declared as package data, so an installed (non-editable) copy has it."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib

from tests.support import REPO

PACKAGES = ("infra", "modules", "toolkit", "workloads")


def test_every_data_file_in_a_package_is_package_data() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    data = [f for f in tracked if not f.endswith(".py")]
    assert data, "no data files found: is this a git checkout?"
    missing = []
    for f in data:
        package, _, rest = f.partition("/")
        if not any(fnmatch.fnmatch(rest, g) for g in declared.get(package, [])):
            missing.append(f)
    assert missing == [], f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"
