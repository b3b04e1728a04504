"""A fleet on loopback: a MultiKueue manager and two worker control planes (``local up --fleet``).

* wiring: each worker's MultiKueueCluster is Active on the manager, through the kubeconfig
  Secret ``queues apply --fleet``'s flow wrote; that identity can do on a worker what
  MultiKueue does (create a JobSet in a team namespace) and nothing else tried here (a
  JobSet in kube-system, reading Secrets);
* dispatch: with one worker full, the next run submitted to the manager lands on the
  other and runs there; `status` through the manager names the worker; deleting both from
  the manager removes them from the workers;
* rotating the manager's credentials (``queues rotate-credentials``): the old token is
  refused by the worker, the new one reaches it, both MultiKueueClusters stay Active and
  a run submitted after lands and runs;
* a worker lost (its API server stopped) gets its run requeued onto the other worker,
  where it runs again. Last in the module: the lost worker stays down.

Every member is a control plane of its own (state dirs under ``<test state>-fleet``), so
the tier's shared cluster is never touched. Figures are scripts/bench_fleet.py's.
"""

from __future__ import annotations

import base64
import json
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.fleet import load_fleet
from tests.support import run_module
from tests.support.local_cluster import own_spec, own_state_dir, wait_for
from toolkit.errors import ClusterError
from toolkit.names import JOBSET_API, KUEUE_API

NS = "research"


def worker_doc(name: str, region: str) -> dict[str, Any]:
    return {
        **own_spec(f"fleet-{name}", region=region, zones=[f"{region}-a"]),
        # One v5e 4x4 slice each: the shape MaxText recipes plan for (4 kwok VMs per worker).
        "tpu_pools": [{"name": "v5e-16", "type": "v5litepod-16", "slices": 1, "capacity": "spot"}],
        "teams": [{"name": "research", "namespace": NS}],
        "buckets": [{"name": f"my-tpu-project-fleet-{name}-ckpt", "purpose": "checkpoints"}],
    }


def write_fleet(tmp: Path, root: Path) -> Path:
    for name, region in (("west", "us-west4"), ("east", "us-east5")):
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(worker_doc(name, region), sort_keys=False))
    doc = {
        "name": "tgk-fleet",
        # Each member's kubeconfig: where `local up --fleet` writes it.
        "manager": {"cluster": "fleet-mgr", "kubeconfig": str(root / "manager" / "kubeconfig")},
        "workers": [{"name": n, "spec": f"{n}.yaml", "kubeconfig": str(root / f"worker-{n}" / "kubeconfig")} for n in ("west", "east")],
        # Where runs through the manager checkpoint, whichever worker they land on.
        "buckets": [{"name": "my-tpu-project-tgk-fleet-ckpt", "purpose": "checkpoints"}],
        # Scaled by the rehearsal's time factor like every other duration: a few seconds here.
        "multikueue": {"worker_lost_timeout_seconds": 300, "gc_interval_seconds": 60},
    }
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    from workloads.local import LocalClusterError
    from workloads.local.fleet import LocalFleet

    lf = LocalFleet(own_state_dir("fleet"), progress=lambda m: sys.stderr.write(f"[fleet] {m}\n"))
    path = write_fleet(tmp_path_factory.mktemp("fleet"), lf.root)
    try:
        r = run_module("workloads", "local", "up", "--fleet", str(path), "--state-dir", str(lf.root), "--timeout", "600", "-o", "json", timeout=1200)
        if r.returncode != 0:
            raise LocalClusterError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    except LocalClusterError as e:
        lf.down()
        pytest.fail(f"the local fleet could not start: {e}", pytrace=False)
    try:
        yield lf, path
    finally:
        lf.down()


def cli(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


def submit(lf, path: Path, run: str, seconds: int) -> None:
    r = cli(
        "submit",
        "hello-tpu",
        "--spec",
        str(path),
        "--kubeconfig",
        str(lf.manager_dir / "kubeconfig"),
        "--name",
        run,
        "--rehearse-seconds",
        str(seconds),
        "--no-wait",
    )
    assert r.returncode == 0, (r.stdout, r.stderr)


def landed_on(manager, run: str) -> str | None:
    """The worker the manager's Workload of ``run`` was dispatched to, once admitted there."""
    js = manager.jobset(NS, run)
    wl = manager.workload_for(NS, js) if js else None
    st = (wl or {}).get("status") or {}
    admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in st.get("conditions") or [])
    return st.get("clusterName") if admitted else None


def running_pods(kube, run: str) -> list[dict] | None:
    pods = [p for p in kube.pods(NS, run) if not p["metadata"].get("deletionTimestamp")]
    return pods if pods and all(p["status"].get("phase") == "Running" for p in pods) else None


def delete(lf, path: Path, *runs: str) -> None:
    for run in runs:
        cli("delete", run, "--yes", "--spec", str(path), "--kubeconfig", str(lf.manager_dir / "kubeconfig"))


def test_each_worker_is_reached_with_the_least_the_manager_needs(fleet, tmp_path) -> None:
    from workloads.cluster.client import Cluster

    lf, path = fleet
    f = load_fleet(path)
    manager, workers = lf.clients(f)
    for w in f.workers:
        mkc = manager.get(manager.resource(KUEUE_API, "MultiKueueCluster"), w.name)
        active = [c for c in mkc["status"]["conditions"] if c["type"] == "Active"]
        assert active and active[0]["status"] == "True", mkc["status"]
    # Speak as the identity in the Secret the manager's Kueue reads.
    sec = manager.get(manager.resource("v1", "Secret"), "west-multikueue", "kueue-system")
    kc = tmp_path / "west.kubeconfig"
    kc.write_bytes(base64.b64decode(sec["data"]["kubeconfig"]))
    as_manager = Cluster.connect(kc, timeout=30)
    probe = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": "rbac-probe", "namespace": NS},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
                }
            ]
        },
    }
    as_manager.create(probe, field_manager="test", dry_run=True)  # what MultiKueue does, in a team namespace
    with pytest.raises(ClusterError):
        as_manager.create({**probe, "metadata": {"name": "rbac-probe", "namespace": "kube-system"}}, field_manager="test", dry_run=True)
    with pytest.raises(ClusterError):
        as_manager.list(as_manager.resource("v1", "Secret"), namespace=NS)
    assert workers["west"].get(workers["west"].resource("v1", "ServiceAccount"), "tgk-multikueue", "kueue-system")


def test_a_run_lands_on_the_worker_with_capacity_and_is_deleted_everywhere(fleet) -> None:
    lf, path = fleet
    f = load_fleet(path)
    manager, workers = lf.clients(f)
    first, second = f"fl-a-{secrets.token_hex(2)}", f"fl-b-{secrets.token_hex(2)}"
    try:
        submit(lf, path, first, 600)
        full = wait_for(lambda: landed_on(manager, first), 120, f"{first} dispatched to a worker")
        wait_for(lambda: running_pods(workers[full], first), 120, f"{first} Running on {full}")
        assert manager.jobset(NS, first)["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
        assert not manager.pods(NS, first), "the manager must never run a pod of a dispatched run"

        t0 = time.monotonic()
        submit(lf, path, second, 600)
        other = wait_for(lambda: landed_on(manager, second), 120, f"{second} dispatched")
        assert other != full, f"{second} went to the full worker {full}"
        wait_for(lambda: running_pods(workers[other], second), 120, f"{second} Running on {other}")
        sys.stderr.write(f"submit -> Running on the second worker: {time.monotonic() - t0:.2f}s\n")
        assert workers[full].jobset(NS, second) is None, "the run must exist only where it landed"

        r = cli("status", second, "--spec", str(path), "--kubeconfig", str(lf.manager_dir / "kubeconfig"), "-o", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout).get("worker") == other
    finally:
        delete(lf, path, first, second)
    for run in (first, second):
        for name, kube in workers.items():
            wait_for(lambda kube=kube, run=run: kube.jobset(NS, run) is None, 120, f"{run} gone from {name}")


def test_metrics_through_the_manager_read_the_worker_s_logs(fleet) -> None:
    """A finished run's copy is gone from its worker; its lines are in that worker's Cloud Logging."""
    lf, path = fleet
    run = f"fl-mt-{secrets.token_hex(2)}"
    mk = str(lf.manager_dir / "kubeconfig")
    r = cli("submit", "maxtext-6b", "--spec", str(path), "--kubeconfig", mk, "--name", run, "--steps", "20", "--rehearse-seconds", "4", "--no-wait")
    assert r.returncode == 0, r.stderr
    try:
        r = cli("status", run, "--wait", "--timeout", "180", "--spec", str(path), "--kubeconfig", mk, "-o", "json")
        assert r.returncode == 0 and json.loads(r.stdout)["phase"] == "Succeeded", (r.stdout, r.stderr)
        r = cli("metrics", run, "--spec", str(path), "--kubeconfig", mk, "-o", "json")
        assert r.returncode == 0, r.stderr
        assert "was dispatched to fleet worker" in r.stderr
        doc = json.loads(r.stdout)
        assert doc["summary"]["steps_seen"] == 20, doc["summary"]  # every step of --steps 20, from the worker's logging server
        # cleanup through the manager removes the finished run there (its worker's copy is already gone)
        r = cli("cleanup", run, "--yes", "--spec", str(path), "--kubeconfig", mk, "-o", "json")
        assert r.returncode == 0, (r.stdout, r.stderr)
        manager, workers = lf.clients(load_fleet(path))
        wait_for(lambda: manager.jobset(NS, run) is None, 60, f"{run} cleaned up on the manager")
        assert all(w.jobset(NS, run) is None for w in workers.values())
    finally:
        delete(lf, path, run)


def manager_kubeconfig_of(manager, worker: str, path: Path) -> Path:
    """The kubeconfig the manager's Kueue reads for ``worker`` (its Secret), written to ``path``."""
    sec = manager.get(manager.resource("v1", "Secret"), f"{worker}-multikueue", "kueue-system")
    path.write_bytes(base64.b64decode(sec["data"]["kubeconfig"]))
    return path


def test_rotating_the_manager_s_credentials_revokes_the_old_token(fleet, tmp_path) -> None:
    from workloads.cluster.client import Cluster

    lf, path = fleet
    f = load_fleet(path)
    manager, workers = lf.clients(f)
    old = {w: manager_kubeconfig_of(manager, w, tmp_path / f"{w}-old") for w in workers}
    for kc in old.values():
        Cluster.connect(kc, timeout=30).server_version()  # the old token works before
    r = cli("queues", "rotate-credentials", "--fleet", str(path), "--yes", "-o", "json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rotated = {x["worker"]: x for x in json.loads(r.stdout)["rotated"]}
    assert set(rotated) == set(workers) and all(x["active"] == "True" for x in rotated.values()), rotated
    for w, kube in workers.items():
        with pytest.raises(ClusterError):
            Cluster.connect(old[w], timeout=30).server_version()  # revoked: the worker refuses it
        new = manager_kubeconfig_of(manager, w, tmp_path / f"{w}-new")
        assert new.read_bytes() != old[w].read_bytes()
        for kc in (old[w], new):  # neither token is ever printed
            (user,) = yaml.safe_load(kc.read_text())["users"]
            assert user["user"]["token"] not in r.stdout + r.stderr
        Cluster.connect(new, timeout=30).server_version()
        names = [s["metadata"]["name"] for s in kube.list(kube.resource("v1", "Secret"), "kueue-system", label_selector="tpu-gke-toolkit/multikueue-token")]
        assert names == [rotated[w]["new_secret_name"]], names
    # MultiKueue still reaches both workers with the new tokens: a run submitted now lands and runs.
    run = f"fl-rot-{secrets.token_hex(2)}"
    try:
        submit(lf, path, run, 600)
        on = wait_for(lambda: landed_on(manager, run), 120, f"{run} dispatched after the rotation")
        wait_for(lambda: running_pods(workers[on], run), 120, f"{run} Running on {on}")
    finally:
        delete(lf, path, run)
    # Applying the fleet again keeps the rotated token: it is never re-created from the old name.
    r = cli("queues", "apply", "--fleet", str(path), "-o", "json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    for w, kube in workers.items():
        names = [s["metadata"]["name"] for s in kube.list(kube.resource("v1", "Secret"), "kueue-system", label_selector="tpu-gke-toolkit/multikueue-token")]
        assert names == [rotated[w]["new_secret_name"]], names


def restarts(kube, run: str) -> int:
    st = (kube.jobset(NS, run) or {}).get("status") or {}
    return int(st.get("restarts") or 0)


def test_a_preempted_slice_on_a_worker_restarts_there(fleet) -> None:
    lf, path = fleet
    f = load_fleet(path)
    manager, workers = lf.clients(f)
    run = f"fl-pre-{secrets.token_hex(2)}"
    try:
        submit(lf, path, run, 600)
        on = wait_for(lambda: landed_on(manager, run), 120, f"{run} dispatched")
        wait_for(lambda: running_pods(workers[on], run), 120, f"{run} Running on {on}")
        r = cli("local", "preempt", run, "--state-dir", str(lf.worker_dir(on)), "--namespace", NS, "--replace-after", "2")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: restarts(workers[on], run) >= 1, 120, f"{run} restarted by JobSet on {on}")
        wait_for(lambda: running_pods(workers[on], run), 180, f"{run} Running again on {on}")
        assert landed_on(manager, run) == on, "a preemption on the worker is the worker's to handle: the run stays there"
        other = next(n for n in workers if n != on)
        assert workers[other].jobset(NS, run) is None
    finally:
        delete(lf, path, run)
    wait_for(lambda: workers[on].jobset(NS, run) is None, 120, f"{run} gone from {on}")


def test_a_lost_worker_gets_its_run_requeued_on_the_other(fleet) -> None:
    from workloads.local.controlplane import LocalCluster

    lf, path = fleet
    f = load_fleet(path)
    manager, workers = lf.clients(f)
    run = f"fl-lost-{secrets.token_hex(2)}"
    submit(lf, path, run, 600)
    lost = wait_for(lambda: landed_on(manager, run), 120, f"{run} dispatched")
    wait_for(lambda: running_pods(workers[lost], run), 120, f"{run} Running on {lost}")
    other = next(n for n in workers if n != lost)
    t0 = time.monotonic()
    LocalCluster(lf.worker_dir(lost)).daemon("kube-apiserver").stop()
    again = wait_for(lambda: landed_on(manager, run) if landed_on(manager, run) == other else None, 300, f"{run} requeued on {other}")
    assert again == other
    wait_for(lambda: running_pods(workers[other], run), 120, f"{run} Running on {other}")
    sys.stderr.write(f"worker lost -> Running on the other: {time.monotonic() - t0:.2f}s\n")
    delete(lf, path, run)
