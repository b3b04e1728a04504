"""No code, test, script or example names something a reader cannot open.

"seed 003", "issue 22", "stop 18", "the playbook" or a path into a directory outside the
repository mean nothing to someone with only a clone: say the fact itself, or name a file of
the repository or a public URL. tests/test_docs.py holds the README and docs/ to the same rule.
"""

from __future__ import annotations

import re
import subprocess

from tests.support import REPO

UNOPENABLE = re.compile(r"(?<![-\w])(seed|issue|stop)s? #?\d+\b|\bthe playbook\b|\.\./shared/|/work/shared|\bshared/(docs|seeds)/", re.I)
# tests/test_docs.py shows such references on purpose (the ones its check must catch).
SHOWS_THEM = {"tests/test_docs.py", "tests/test_references.py"}
TEXT = (".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".go", ".json", ".cjs", ".md")


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    return [
        f for f in listed if f and (f.endswith(TEXT) or f.startswith("scripts/")) and not f.startswith(("tests/golden/", "tests/snapshots/", "tests/data/"))
    ]


def test_no_file_names_something_a_reader_cannot_open() -> None:
    files = _tracked()
    assert "workloads/__init__.py" in files, "git ls-files did not list the repository"
    found = []
    for name in files:
        if name in SHOWS_THEM or not (REPO / name).is_file():
            continue
        for n, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1):
            if m := UNOPENABLE.search(line):
                found.append(f"{name}:{n}: {m.group(0)!r}")
    assert found == [], "say the fact itself, or name a file of the repository or a public URL:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in (
        "as seed 003 said",
        "(issue 22)",
        "Issue 21 class 7",
        "stop 18",
        "the playbook's value",
        "../shared/docs/x.md",
        "shared/docs/facts/tpu-gke.md",
    ):
        assert UNOPENABLE.search(text), text
    for text in ("--seed 1", "[--seed 0]", "a session of its own", "issues", "steps 0-1"):
        assert not UNOPENABLE.search(text), text
