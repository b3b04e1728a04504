"""The integration tier: a real control plane with Kueue, JobSet and kwok nodes.

One session fixture builds the binaries (cached by scripts/build-local-cluster.sh;
the cold build takes ~25 min) and starts the cluster once in a state dir of its
own, so a developer's `local up` cluster is never touched. Nothing is skipped: if
the binaries cannot be built or the cluster cannot start, the fixture fails with
the reason.

Modules that need a spec of their own (capacity lists, teams, another TPU type) start
a second control plane beside it with ``start_own_cluster`` (state dir
``<test state>-<suffix>``), so the shared default-spec cluster is never changed.

pytest-xdist: each worker runs its own session. Workers share one cluster
through the state dir's lock; each registers itself in ``users/`` and the last
one out takes the cluster down. Tests that fill the default spec's TPU quota and
nodes take turns through ``tpu_quota``, whichever worker runs them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from toolkit.paths import cache_dir
from workloads.local.procs import locked

TEST_STATE_DIR_ENV = "TGK_LOCAL_TEST_STATE"


T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """The toolkit's one wait (workloads.cluster.wait), failing the test with the last state seen."""
    from workloads.cluster import wait

    try:
        return wait.wait_for(check, timeout=timeout, what=what, interval=interval)
    except wait.WaitTimeout as e:
        raise AssertionError(f"{e} (last: {str(e.last)[:300]})") from None


def _state_dir() -> Path:
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[object]:
    from workloads.local import LocalClusterError
    from workloads.local.controlplane import LocalCluster

    def progress(msg: str) -> None:
        sys.stderr.write(f"[local-cluster] {msg}\n")

    cluster = LocalCluster(_state_dir(), progress=progress)
    users = cluster.state_dir / "users"
    users.mkdir(parents=True, exist_ok=True)
    me = users / str(os.getpid())
    me.touch()
    t0 = time.monotonic()
    try:
        cluster.up(load_spec(DEFAULT_SPEC_PATH), spec_path=str(DEFAULT_SPEC_PATH), build=True, timeout=600)
    except LocalClusterError as e:
        me.unlink(missing_ok=True)
        pytest.fail(f"the local cluster could not start: {e}", pytrace=False)
    progress(f"cluster ready for tests after {time.monotonic() - t0:.1f}s")
    yield cluster
    me.unlink(missing_ok=True)
    with cluster._lock():
        others = [p for p in users.iterdir() if p.name.isdigit() and _pid_alive(int(p.name))]
    if not others:
        cluster.down()


@pytest.fixture(scope="session")
def kubeconfig(local_cluster) -> Path:
    return local_cluster.kubeconfig


@pytest.fixture(scope="session")
def cluster(kubeconfig):
    """The toolkit's own cluster client (workloads.cluster.client.Cluster), connected to the local cluster."""
    from workloads.cluster.client import Cluster

    return Cluster.connect(kubeconfig, "tgk-local", timeout=30)


@pytest.fixture()
def tpu_quota(local_cluster) -> Iterator[None]:
    """Exclusive use of the default spec's TPU quota and nodes for one test.

    The admission and lifecycle tests each fill the quota (and the nodes); pytest-xdist's
    default distribution may hand them to different workers at once, so they take turns
    on a lock beside the shared cluster.
    """
    with locked(local_cluster.state_dir / ".tpu-quota.lock"):
        yield
