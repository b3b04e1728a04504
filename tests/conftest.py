"""Shared test helpers: the repo root and a runner for the toolkit's CLIs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_module(module: str, *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` in a subprocess, as a user would run it."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("TGK_SPEC", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd or REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(autouse=True, scope="session")
def _no_user_recipes(tmp_path_factory):
    """A developer's own imported recipes (~/.config/tpu-gke-toolkit/recipes, $TGK_RECIPES) are
    found beside the shipped ones; they must not change what the tests see."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TGK_RECIPES", str(tmp_path_factory.mktemp("no-user-recipes")))
    yield
    mp.undo()


class MemoryStore:
    """A run's directory in an in-memory bucket (``workloads.runs.identity.Store``), for tests whose cluster is a fake."""

    def __init__(self, objects: dict[str, bytes], where: str) -> None:
        self.objects, self.where = objects, where

    def read(self, name: str) -> bytes | None:
        return self.objects.get(self.where + name)

    def write(self, name: str, data: bytes, *, create: bool) -> None:
        if create and self.where + name in self.objects:
            return
        self.objects[self.where + name] = data

    def has_any(self, prefix: str) -> bool:
        return any(k.startswith(self.where + prefix) for k in self.objects)


@pytest.fixture
def memory_buckets(monkeypatch) -> dict[str, bytes]:
    """Runs submitted to a fake cluster keep their identity (workloads.runs.identity) in memory, not in Cloud Storage:
    object URI -> bytes. The identity logic itself is tested against a real GCS-compatible server (tests/test_run_identity.py)."""
    import workloads.runs.service as service

    objects: dict[str, bytes] = {}
    monkeypatch.setattr(service, "checkpoint_store", lambda cluster, plan: MemoryStore(objects, plan.program.output_dir))
    return objects
