"""workloads.local.builds: finding a cached build, and building it when allowed (a fake build script)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workloads.local import LocalClusterError
from workloads.local.builds import Build

STAMP = ".complete-7"
# The contract of scripts/build-local-cluster.sh and scripts/build-kuberay.sh, in miniature:
# --key prints the cache dir; a plain run builds (here: as $FAKE_BUILD says) and touches the stamp.
FAKE = """#!/usr/bin/env bash
set -euo pipefail
root="{root}"
echo "$*" >>"{calls}"
case "${{1:-}}" in
  --key) [ "${{FAKE_KEY:-ok}}" = ok ] || {{ [ "$FAKE_KEY" = empty ] && exit 0; echo "fake-build: no go" >&2; exit 2; }}; echo "$root"; exit 0 ;;
esac
echo "compiling" >&2
case "${{FAKE_BUILD:-ok}}" in
  ok) mkdir -p "$root"; touch "$root/{stamp}" ;;
  nostamp) mkdir -p "$root" ;;
  fail) exit 3 ;;
esac
echo "$root"
"""


@pytest.fixture()
def fake(tmp_path: Path) -> tuple[Build, Path, Path]:
    root, calls = tmp_path / "cache" / "thing-1.0", tmp_path / "calls"
    script = tmp_path / "build-thing.sh"
    script.write_text(FAKE.format(root=root, calls=calls, stamp=STAMP))
    return Build("thing", "Thing 1.0", script, STAMP, cold="~1 min"), root, calls


def _calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_complete_build_is_reused_without_running_the_build(fake) -> None:
    b, root, calls = fake
    root.mkdir(parents=True)
    (root / STAMP).touch()
    said: list[str] = []
    assert b.ensure(said.append) == root
    assert said == [] and _calls(calls) == ["--key"]


def test_a_missing_build_is_built_with_progress(fake) -> None:
    b, root, calls = fake
    said: list[str] = []
    assert b.ensure(said.append) == root
    assert (root / STAMP).is_file()
    assert said == [f"building Thing 1.0 into {root} (cold: ~1 min on 2 cores; cached afterwards)"]
    assert _calls(calls) == ["--key", ""]


def test_a_missing_build_is_an_error_naming_the_script_when_building_is_not_allowed(fake) -> None:
    b, root, calls = fake
    with pytest.raises(LocalClusterError, match=re.escape(f"Thing 1.0 is not built in {root} — run scripts/build-thing.sh (cold: ~1 min)")):
        b.ensure(lambda m: None, build=False)
    assert _calls(calls) == ["--key"]


def test_plural_products_read_as_plural(fake) -> None:
    b, root, _ = fake
    many = Build("things", "the things", b.script, STAMP, cold="~1 min", plural=True)
    with pytest.raises(LocalClusterError, match="the things are not built in"):
        many.ensure(lambda m: None, build=False)


@pytest.mark.parametrize("how, code", [("fail", 3), ("nostamp", 0)])
def test_a_failed_or_incomplete_build_is_an_error_naming_the_script(fake, monkeypatch, how, code) -> None:
    b, root, _ = fake
    monkeypatch.setenv("FAKE_BUILD", how)
    with pytest.raises(LocalClusterError, match=re.escape(f"scripts/build-thing.sh failed (exit {code}); see its output above")):
        b.ensure(lambda m: None)


def test_the_cache_dir_comes_from_key(fake, monkeypatch) -> None:
    b, root, _ = fake
    assert b.root() == root
    monkeypatch.setenv("FAKE_KEY", "fail")
    with pytest.raises(LocalClusterError, match=re.escape("cannot locate the thing build: scripts/build-thing.sh --key failed (exit 2): fake-build: no go")):
        b.root()
    monkeypatch.setenv("FAKE_KEY", "empty")
    with pytest.raises(LocalClusterError, match=re.escape("cannot locate the thing build: scripts/build-thing.sh --key printed no path")):
        b.root()


@pytest.mark.parametrize("module", ["controlplane", "kuberay"])
def test_the_real_builds_match_their_scripts(module) -> None:
    """The stamp each script touches is the one Python checks (a mismatch rebuilds forever, or never)."""
    import importlib

    build = importlib.import_module(f"workloads.local.{module}").BUILD
    text = build.script.read_text()
    assert build.script.is_file()
    assert re.search(r'^stamp="([^"]+)"', text, re.M).group(1) == build.stamp
