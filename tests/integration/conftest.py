"""The integration tier: a real control plane with Kueue, JobSet and kwok nodes.

One session fixture builds the binaries (cached by scripts/build-local-cluster.sh;
the cold build takes ~25 min) and starts the cluster once in a state dir of its
own, so a developer's `local up` cluster is never touched. Nothing is skipped: if
the binaries cannot be built or the cluster cannot start, the fixture fails with
the reason.

Modules that need a spec of their own (capacity lists, teams, another TPU type) start
a second control plane beside it with ``start_own_cluster`` (tests/support/local_cluster.py,
state dir ``<test state>-<suffix>``), so the shared default-spec cluster is never changed.

pytest-xdist: each worker runs its own session. Workers share one cluster
through the state dir's lock; each registers itself in ``users/`` and the last
one out takes the cluster down. Tests that fill the default spec's TPU quota and
nodes take turns through ``tpu_quota``, whichever worker runs them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support.local_cluster import pid_alive, shared_state_dir
from workloads.local.procs import locked


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[object]:
    from workloads.local import LocalClusterError
    from workloads.local.controlplane import LocalCluster

    def progress(msg: str) -> None:
        sys.stderr.write(f"[local-cluster] {msg}\n")

    cluster = LocalCluster(shared_state_dir(), progress=progress)
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
        others = [p for p in users.iterdir() if p.name.isdigit() and pid_alive(int(p.name))]
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
