"""Fixtures and hooks for every test; the helpers tests import live in tests/support/.

The tiers are marked here, by folder: every test under tests/integration/ is ``integration``
(a real control plane), every test under tests/maxtext/ is ``maxtext`` (real MaxText), and
nothing else carries either mark. ``scripts/test`` selects the tiers with ``-m``
(``--fast`` is ``not integration and not maxtext``); tests/test_tiers.py keeps it so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.memory_store import MemoryStore
from tests.support.paths import REPO

TIER_FOLDERS = {"integration": REPO / "tests" / "integration", "maxtext": REPO / "tests" / "maxtext"}


def tier_of(path: Path) -> str | None:
    """The tier a test file belongs to, from its folder: "integration", "maxtext", or None (the fast tier)."""
    for tier, folder in TIER_FOLDERS.items():
        if folder in Path(path).resolve().parents:
            return tier
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Before `-m` deselects (pytest's own hook of this name runs after this one).
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


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


@pytest.fixture
def memory_buckets(monkeypatch) -> dict[str, bytes]:
    """Runs submitted to a fake cluster keep their identity (workloads.runs.identity) in memory, not in Cloud Storage:
    object URI -> bytes. The identity logic itself is tested against a real GCS-compatible server (tests/test_run_identity.py)."""
    import workloads.runs.service as service

    objects: dict[str, bytes] = {}
    monkeypatch.setattr(service, "checkpoint_store", lambda cluster, plan: MemoryStore(objects, plan.program.output_dir))
    return objects
