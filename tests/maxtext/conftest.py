"""The MaxText tier: real MaxText 0.2.5 in its own venv (scripts/setup-maxtext.sh).

Every test in this folder is marked ``maxtext`` by the folder (tests/conftest.py).
The session fixture builds the venv on first use (cold: a few minutes, ~2.8 GB, cached
under $TGK_CACHE) and reuses it afterwards. If it cannot be built the tier FAILS with the
reason: a missing MaxText must never look like a passing check.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from infra.spec import EnvSpec, load_spec
from tests.support import EXAMPLES


@pytest.fixture(scope="session")
def maxtext_venv() -> Path:
    from workloads.maxtext import env as maxtext_env

    start = time.monotonic()
    try:
        venv = maxtext_env.locate()
    except Exception as e:  # noqa: BLE001 — any reason is reported, none is skipped
        pytest.fail(f"the MaxText venv could not be built or found: {e}", pytrace=False)
    print(f"\n[maxtext tier] venv {venv} ready in {time.monotonic() - start:.1f} s")
    return venv


@pytest.fixture(scope="session")
def default_spec() -> EnvSpec:
    return load_spec(EXAMPLES / "default.yaml")
