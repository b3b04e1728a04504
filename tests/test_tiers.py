"""The test tiers are marked one way, by folder (tests/conftest.py), and ``scripts/test --fast`` is exactly the fast tier.

One pytest collection of the whole tree, in a process of its own, with the fast tier's ``-m``
expression as scripts/test passes it: what it keeps and what it deselects (with the marks each
item carries) are recorded by a small plugin and compared with the folders.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

TESTS = REPO / "tests"
TIERS = {"integration": TESTS / "integration", "maxtext": TESTS / "maxtext"}

# Records every collected item, kept or deselected by -m, with the tier marks it carries.
_PROBE = """
import json, os

_seen = {"kept": [], "deselected": []}

def _row(item):
    return {"path": str(item.path), "nodeid": item.nodeid, "marks": sorted({m.name for m in item.iter_markers()} & {"integration", "maxtext"})}

def pytest_deselected(items):
    _seen["deselected"].extend(_row(i) for i in items)

def pytest_collection_finish(session):
    _seen["kept"] = [_row(i) for i in session.items]
    with open(os.environ["TIER_PROBE_OUT"], "w") as f:
        json.dump(_seen, f)
"""


def _fast_expression() -> str:
    found = re.search(r'^FAST="([^"]+)"$', (REPO / "scripts" / "test").read_text(), re.M)
    assert found, 'scripts/test no longer sets FAST="..." (the fast tier\'s -m expression)'
    return found.group(1)


def _tier_of(path: str) -> str | None:
    parents = Path(path).resolve().parents
    return next((tier for tier, folder in TIERS.items() if folder in parents), None)


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict[str, list[dict]]:
    probe = tmp_path_factory.mktemp("probe")
    (probe / "tier_probe.py").write_text(_PROBE)
    out = probe / "seen.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-p",
            "tier_probe",
            "--collect-only",
            "-q",
            "-m",
            _fast_expression(),
            "tests",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{probe}:{REPO}", "TIER_PROBE_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_fast_expression_is_neither_tier() -> None:
    assert _fast_expression() == "not integration and not maxtext"


def test_every_test_file_in_a_tier_folder_is_collected_in_that_tier(collected) -> None:
    for tier, folder in TIERS.items():
        files = {str(p) for p in folder.rglob("test_*.py")}
        assert files, f"no test files under {folder}"
        marked = {row["path"] for row in collected["deselected"] if row["marks"] == [tier]}
        assert files == marked, f"{tier}: files with no test marked {tier}: {sorted(files - marked)}; outside {folder}: {sorted(marked - files)}"


def test_the_fast_tier_is_everything_outside_the_tier_folders(collected) -> None:
    assert collected["kept"], "the fast tier collected nothing"
    for row in collected["kept"]:
        assert _tier_of(row["path"]) is None and not row["marks"], f"{row['nodeid']} is in the fast tier with marks {row['marks']}"
    for row in collected["deselected"]:
        assert row["marks"] == [_tier_of(row["path"])], f"{row['nodeid']}: marks {row['marks']}, folder tier {_tier_of(row['path'])}"


def test_no_test_file_marks_a_tier_itself() -> None:
    # The folder is the one way: a `pytestmark = pytest.mark.integration` line (or a decorator)
    # would mark a test the folder does not, or say twice what the folder says.
    pattern = re.compile(r"\bmark\.(integration|maxtext)\b")
    offenders = [
        f"{p.relative_to(REPO)}:{n}"
        for p in sorted(TESTS.rglob("*.py"))
        if p != Path(__file__)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
