"""The integration tier's control planes: where their state lives, a module's own cluster, and the tier's one wait.

The shared cluster itself is the ``local_cluster`` fixture (tests/integration/conftest.py); a
module that needs a spec of its own (capacity lists, teams, another TPU type) starts a second
control plane beside it with ``start_own_cluster`` (state dir ``<test state>-<suffix>``), so the
shared default-spec cluster is never changed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from infra.spec import load_spec
from toolkit.paths import cache_dir

TEST_STATE_DIR_ENV = "TGK_LOCAL_TEST_STATE"


T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """The toolkit's one wait (workloads.cluster.wait), failing the test with the last state seen."""
    from workloads.cluster import wait

    try:
        return wait.wait_for(check, timeout=timeout, what=what, interval=interval)
    except wait.WaitTimeout as e:
        raise AssertionError(f"{e} (last: {str(e.last)[:300]})") from None


def shared_state_dir() -> Path:
    """The state dir of the tier's shared cluster: $TGK_LOCAL_TEST_STATE, or one under the cache."""
    if os.environ.get(TEST_STATE_DIR_ENV):
        return Path(os.environ[TEST_STATE_DIR_ENV])
    return cache_dir() / "local-cluster" / "test-state"


def own_state_dir(suffix: str) -> Path:
    """The state dir of a module's own cluster: beside the shared one, ``-<suffix>`` appended."""
    base = os.environ.get(TEST_STATE_DIR_ENV)
    return Path(f"{base}-{suffix}") if base else cache_dir() / "local-cluster" / f"test-state-{suffix}"


def own_spec(cluster_name: str, **fields: Any) -> dict[str, Any]:
    """A spec document for a module's own cluster: a project, one zone and one CPU node, then ``fields``."""
    return {
        "project": "my-tpu-project",
        "region": "us-west4",
        "zones": ["us-west4-a"],
        "cluster": {"name": cluster_name},
        "cpu_pool": {"min_nodes": 1, "max_nodes": 1},
        **fields,
    }


def start_own_cluster(suffix: str, spec_doc: dict[str, Any], tmp: Path) -> Iterator[tuple[Any, Path]]:
    """A control plane of a module's own, built from ``spec_doc``; taken down afterwards.

    For a module-scoped fixture: ``yield from start_own_cluster("name", doc, tmp_path_factory.mktemp("name"))``
    yields ``(LocalCluster, spec path)``; a cluster that cannot start fails the fixture with the reason.
    """
    from workloads.local import LocalClusterError
    from workloads.local.controlplane import LocalCluster

    spec_path = tmp / f"{suffix}.yaml"
    spec_path.write_text(yaml.safe_dump(spec_doc, sort_keys=False))
    lc = LocalCluster(own_state_dir(suffix), progress=lambda m: sys.stderr.write(f"[{suffix}] {m}\n"))
    try:
        lc.up(load_spec(spec_path), spec_path=str(spec_path), build=True, timeout=600)
    except LocalClusterError as e:
        lc.down()
        pytest.fail(f"the {suffix} cluster could not start: {e}", pytrace=False)
    try:
        yield lc, spec_path
    finally:
        lc.down()


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
