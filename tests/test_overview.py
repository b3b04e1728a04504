"""`list` and `queues status`: rows from the objects one list call per kind returns, and the service that makes those calls.

The objects are shaped as the local cluster's real API server returned them (JobSet v0.10.1,
Kueue v0.17.1); the real thing is tests/integration/test_overview.py.
"""

from __future__ import annotations

import pytest

from tests.support.cli import cli
from tests.support.specs import spec_from
from toolkit.errors import Forbidden, NotFound, Unreachable
from workloads.cluster import queue_status as qs
from workloads.cluster import run_list as rl
from workloads.runs import overview

NOW = 1_800_000_000.0
T0 = "2027-01-15T08:00:00Z"  # 1_800_000_000 - 0 s is 2027-01-15T08:00:00Z


def _jobset(name: str, uid: str, *, ns="research", replicas=2, parallelism=4, suspend=False, conditions=(), restarts=0, created=T0) -> dict:
    return {
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": created, "labels": {"kueue.x-k8s.io/queue-name": "research-queue"}},
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": "slice", "replicas": replicas, "template": {"spec": {"parallelism": parallelism}}}]},
        "status": {"conditions": list(conditions), "restarts": restarts},
    }


def _wl(name: str, owner_uid: str, *, ns="research", state="pending", priority=500, created=T0, by_label=True, evicted_at=None) -> dict:
    conds = {
        "pending": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "insufficient unused quota for google.com/tpu in flavor v5e-4x4, 32 more needed",
            }
        ],
        "admitted": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True", "reason": "Admitted"}],
        "reserved": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "False", "reason": "NoReservation"}],
    }[state]
    if evicted_at:
        conds = [*conds, {"type": "Evicted", "status": "False", "reason": "PodsReadyTimeout", "lastTransitionTime": evicted_at}]
    meta = {
        "name": name,
        "namespace": ns,
        "creationTimestamp": created,
        "ownerReferences": [{"kind": "JobSet", "name": name.split("-")[1], "uid": owner_uid, "controller": True}],
    }
    if by_label:
        meta["labels"] = {"kueue.x-k8s.io/job-uid": owner_uid}
    status: dict = {"conditions": conds}
    if state == "admitted":
        status["admission"] = {"clusterQueue": "research-cq", "podSetAssignments": [{"name": "slice", "flavors": {"google.com/tpu": "v5e-4x4"}}]}
    return {"metadata": meta, "spec": {"queueName": "research-queue", "priority": priority, "active": True}, "status": status}


def _pod(run: str, slice_i: int, worker: int, phase="Running", ns="research") -> dict:
    labels = {
        "jobset.sigs.k8s.io/jobset-name": run,
        "jobset.sigs.k8s.io/job-index": str(slice_i),
        "batch.kubernetes.io/job-name": f"{run}-slice-{slice_i}",
        "batch.kubernetes.io/job-completion-index": str(worker),
        "tpu-gke-toolkit/run": run,
    }
    return {
        "metadata": {"name": f"{run}-slice-{slice_i}-{worker}", "namespace": ns, "labels": labels},
        "spec": {"nodeName": f"node-{slice_i}-{worker}"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}]},
    }


def _plain_job(name: str, uid: str, *, owner=None, labels=None) -> dict:
    meta = {"name": name, "namespace": "research", "uid": uid, "creationTimestamp": T0, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"kind": "Job", "metadata": meta, "spec": {"parallelism": 4, "completions": 4, "suspend": False}, "status": {}}


def test_rows_join_each_run_to_its_workload_and_pods() -> None:
    running = _jobset("r1", "u1")
    queued = _jobset("r2", "u2", suspend=True, created="2027-01-15T07:59:00Z")
    done = _jobset("r3", "u3", conditions=[{"type": "Completed", "status": "True", "message": "jobset completed"}], restarts=2)
    pods = [_pod("r1", s, w) for s in range(2) for w in range(4)] + [_pod("r3", 0, 0, "Succeeded")]
    # r2's Workload is found by its owner reference alone (no job-uid label), as `status` finds it too.
    wls = [_wl("jobset-r1-a", "u1", state="admitted"), _wl("jobset-r2-b", "u2", by_label=False)]
    out = rl.rows(rl.Listed((running, queued, done), tuple(wls), tuple(pods)), now=NOW, teams={"research": "research"})
    by = {r.name: r for r in out}
    assert [r.name for r in out] == ["r1", "r3", "r2"]  # newest first (r2 is a minute older)
    r1, r2, r3 = by["r1"], by["r2"], by["r3"]
    assert (r1.state, r1.slices, r1.slices_running, r1.pods_running, r1.flavors, r1.team) == ("Running", 2, 2, 8, {"slice": "v5e-4x4"}, "research")
    assert r2.state == "Queued" and r2.workload_state == "pending" and "32 more needed" in r2.waiting and r2.age_seconds == 60
    assert (r3.state, r3.restarts, r3.waiting) == ("Succeeded", 2, "")


def test_a_slice_with_a_pod_not_running_is_not_counted_running() -> None:
    pods = [_pod("r1", 0, w) for w in range(4)] + [_pod("r1", 1, w, "Pending" if w == 3 else "Running") for w in range(4)]
    (row,) = rl.rows(rl.Listed((_jobset("r1", "u1"),), (_wl("jobset-r1-a", "u1", state="admitted"),), tuple(pods)), now=NOW)
    assert (row.state, row.slices_running, row.pods_running) == ("Starting", 1, 7)


def test_plain_jobs_are_runs_only_when_nothing_owns_them_and_kueue_or_the_toolkit_submitted_them() -> None:
    mine = _plain_job("job-run", "j1", labels={"kueue.x-k8s.io/queue-name": "research-queue"})
    child = _plain_job("r1-slice-0", "j2", owner={"kind": "JobSet", "name": "r1", "uid": "u1"}, labels={"kueue.x-k8s.io/queue-name": "q"})
    system = _plain_job("backup", "j3")  # no queue, not the toolkit's: not a training run
    job_pod = {
        "metadata": {
            "name": "job-run-0",
            "namespace": "research",
            "labels": {"batch.kubernetes.io/job-name": "job-run", "batch.kubernetes.io/job-completion-index": "0"},
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    out = rl.rows(rl.Listed((mine, child, system), (), (job_pod, _pod("r1", 0, 0))), now=NOW)
    assert [(r.name, r.runtime, r.slices, r.pods_running) for r in out] == [("job-run", "job", 1, 1)]  # the JobSet's pod is not the Job's


def test_a_rayjob_counts_its_tpu_workers_only() -> None:
    ray = {
        "kind": "RayJob",
        "metadata": {"name": "rj", "namespace": "research", "uid": "ray1", "creationTimestamp": T0},
        "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": 2, "numOfHosts": 2}]}},
        "status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"},
    }
    worker = lambda i: {  # noqa: E731
        "metadata": {
            "name": f"rj-w{i}",
            "namespace": "research",
            "labels": {
                "tpu-gke-toolkit/run": "rj",
                "ray.io/node-type": "worker",
                "ray.io/worker-group-replica-index": str(i // 2),
                "ray.io/replica-host-index": str(i % 2),
            },
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    head = {
        "metadata": {"name": "rj-head", "namespace": "research", "labels": {"tpu-gke-toolkit/run": "rj", "ray.io/node-type": "head"}},
        "status": {"phase": "Running"},
    }
    (row,) = rl.rows(rl.Listed((ray,), (), (*(worker(i) for i in range(4)), head)), now=NOW)
    assert (row.runtime, row.slices, row.slices_running, row.pods_running, row.pods_expected) == ("ray", 2, 2, 4, 4)


def test_filters_narrow_by_state_runtime_team_and_member() -> None:
    rows = rl.rows(
        rl.Listed((_jobset("a", "1"), _jobset("b", "2", suspend=True, ns="other")), (_wl("jobset-b-x", "2", ns="other"),), ()),
        now=NOW,
        teams={"research": "research"},
    )
    assert [r.name for r in rl.keep(rows, rl.Filters(states=("queued",)))] == ["b"]
    assert [r.name for r in rl.keep(rows, rl.Filters(teams=("research",)))] == ["a"]
    assert rl.keep(rows, rl.Filters(runtimes=("ray",))) == []
    assert [r.team for r in rows] == [None, "research"]  # a namespace no team of the spec owns


# ------------------------------------------------------------------ queues

CQ = {
    "metadata": {"name": "research-cq"},
    "spec": {
        "cohortName": "tpu-dev",
        "resourceGroups": [
            {
                "coveredResources": ["google.com/tpu", "cpu", "memory"],
                "flavors": [
                    {"name": "v5e-4x4-res", "resources": [{"name": "google.com/tpu", "nominalQuota": "32"}, {"name": "cpu", "nominalQuota": "896"}]},
                    {"name": "v5e-4x4-spot", "resources": [{"name": "google.com/tpu", "nominalQuota": "16"}, {"name": "memory", "nominalQuota": "1536Gi"}]},
                ],
            }
        ],
    },
    "status": {
        "admittedWorkloads": 3,
        "pendingWorkloads": 2,
        "flavorsUsage": [
            {"name": "v5e-4x4-res", "resources": [{"name": "google.com/tpu", "total": "32", "borrowed": "0"}, {"name": "cpu", "total": "0", "borrowed": "0"}]},
            {"name": "v5e-4x4-spot", "resources": [{"name": "google.com/tpu", "total": "32", "borrowed": "16"}]},
        ],
    },
}
LQ = {"metadata": {"name": "research-queue", "namespace": "research"}, "spec": {"clusterQueue": "research-cq"}}


def test_flavor_rows_read_nominal_usage_and_borrowing_in_chips() -> None:
    rows = qs.flavor_rows(CQ, "research")
    assert [(r.flavor, r.nominal, r.in_use, r.borrowed, r.admitted, r.pending, r.cohort) for r in rows] == [
        ("v5e-4x4-res", 32, 32, 0, 3, 2, "tpu-dev"),
        ("v5e-4x4-spot", 16, 32, 16, 3, 2, "tpu-dev"),
    ]
    assert qs.chips("1536Gi") is None and qs.chips(" 64 ") == 64


def test_estimated_positions_follow_kueues_order_priority_then_time_queued() -> None:
    wls = [
        _wl("jobset-old-a", "1", created="2027-01-15T07:00:00Z"),
        _wl("jobset-new-b", "2", created="2027-01-15T07:30:00Z"),
        _wl("jobset-urgent-c", "3", created="2027-01-15T07:50:00Z", priority=1000),
        # created first, but evicted and requeued after the others: it goes behind them
        _wl("jobset-requeued-d", "4", created="2027-01-15T06:00:00Z", evicted_at="2027-01-15T07:40:00Z"),
        _wl("jobset-checks-e", "5", state="reserved"),  # holds quota, waits on admission checks: not in the heap
        _wl("jobset-running-f", "6", state="admitted"),
    ]
    rows = qs.pending_rows(wls, [LQ], teams={"research-cq": "research"})
    got = [(r.run, r.position, r.position_source) for r in rows]
    assert got == [("urgent", 0, "estimated"), ("old", 1, "estimated"), ("new", 2, "estimated"), ("requeued", 3, "estimated"), ("checks", None, "estimated")]
    assert rows[0].team == "research" and rows[0].cluster_queue == "research-cq" and "32 more needed" in rows[0].message
    assert rows[-1].state == "quota-reserved"


def test_kueues_own_positions_win_when_the_visibility_api_answers() -> None:
    wls = [_wl("jobset-a-1", "1", created="2027-01-15T07:00:00Z"), _wl("jobset-b-2", "2", created="2027-01-15T07:30:00Z")]
    vis = {"research-cq": [{"metadata": {"name": "jobset-b-2", "namespace": "research"}, "positionInClusterQueue": 0}]}
    rows = qs.pending_rows(wls, [LQ], visibility=vis)
    assert [(r.run, r.position, r.position_source) for r in rows] == [("b", 0, "kueue"), ("a", None, "kueue")]


# ------------------------------------------------------------------ the service over a stand-in cluster


class _Info:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Cluster:
    """The calls overview makes (resource, kueue, list, preferred_version, request), over canned objects; each list recorded."""

    def __init__(self, objects: dict[str, list[dict]], *, forbid_all=False, forbid_ns=(), context=None) -> None:
        self.objects = objects
        self.forbid_all, self.forbid_ns = forbid_all, set(forbid_ns)
        self.calls: list[tuple[str, str | None, str | None]] = []
        self.context = context

    def resource(self, api_version: str, kind: str) -> _Info:
        if kind == "RayJob":
            raise NotFound("no KubeRay")
        return _Info(kind)

    def kueue(self, kind: str) -> _Info:
        return _Info(kind)

    def preferred_version(self, group: str) -> str:
        raise NotFound(group)

    def list(self, info: _Info, namespace=None, *, label_selector=None, field_selector=None) -> list[dict]:
        self.calls.append((info.kind, namespace, label_selector))
        if (namespace is None and self.forbid_all) or namespace in self.forbid_ns:
            raise Forbidden(f"list {info.kind}: forbidden")
        items = self.objects.get(info.kind, [])
        if info.kind == "Pod" and label_selector:
            key = label_selector.split(",")[0]
            items = [p for p in items if key in p["metadata"].get("labels", {})]
        return [o for o in items if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace]


def _objects(n: int) -> dict[str, list[dict]]:
    return {
        "JobSet": [_jobset(f"r{i}", f"u{i}", suspend=i > 0) for i in range(n)],
        "Workload": [_wl(f"jobset-r{i}-x", f"u{i}", state="admitted" if i == 0 else "pending") for i in range(n)],
        "Pod": [_pod("r0", s, w) for s in range(2) for w in range(4)],
        "Job": [],
    }


def test_the_requests_do_not_grow_with_the_runs() -> None:
    sc = overview.scope(spec_from())
    counts = []
    for n in (3, 300):
        c = _Cluster(_objects(n))
        got = overview.list_runs(c, sc, now=NOW)
        assert len(got.rows) == n
        counts.append(got.requests)
        assert got.requests == len(c.calls)
    # JobSets, Jobs, Workloads, and the pods of the one runtime that has runs: 4, whatever the count.
    assert counts == [4, 4]


def test_refused_the_whole_cluster_it_lists_the_spec_team_namespaces_and_says_so() -> None:
    spec = spec_from()
    c = _Cluster(_objects(2), forbid_all=True)
    got = overview.list_runs(c, overview.scope(spec), now=NOW)
    assert {r.name for r in got.rows} == {"r0", "r1"}
    assert any("not allowed to list the whole cluster" in n and "research" in n for n in got.notes)
    assert {ns for _, ns, _ in c.calls} == {None, "research"}


def test_a_namespace_it_may_not_read_is_named_never_shown_empty() -> None:
    c = _Cluster(_objects(1), forbid_all=True, forbid_ns={"research"})
    got = overview.list_runs(c, overview.scope(spec_from()), now=NOW)
    assert got.rows == () and any("namespace research: not allowed" in n for n in got.notes)


def test_wide_reads_each_started_runs_log_and_names_the_ones_it_could_not() -> None:
    c = _Cluster(_objects(3))
    asked = []

    def analyse(ns: str, run: str) -> tuple[int | None, float | None]:
        asked.append(run)
        if run == "r0":
            return 41, 0.875
        raise RuntimeError("no log")

    got = overview.list_runs(c, overview.scope(spec_from()), now=NOW, wide=True, analyse=analyse)
    assert asked == ["r0"]  # the queued ones have no log to read
    r0 = next(r for r in got.rows if r.name == "r0")
    assert (r0.last_step, r0.goodput) == (41, 0.875)


def test_a_fleet_lists_every_member_and_the_managers_dispatched_copy_gives_way() -> None:
    manager = _Cluster({"JobSet": [_jobset("r0", "m0", suspend=True), _jobset("waits", "m1", suspend=True)], "Workload": [], "Pod": []})
    worker = _Cluster(_objects(1))

    def gone() -> _Cluster:
        raise Unreachable("connection refused")

    members = [overview.Member("mgr", lambda: manager, manager=True), overview.Member("west", lambda: worker), overview.Member("east", gone)]
    got = overview.list_fleet(members, overview.scope(spec_from()), now=NOW)
    assert sorted((r.cluster, r.name) for r in got.rows) == [("mgr", "waits"), ("west", "r0")]
    assert got.unreachable == ("east: connection refused",)


def test_queue_status_over_the_service_estimates_positions_when_visibility_is_not_served() -> None:
    c = _Cluster({"ClusterQueue": [CQ], "LocalQueue": [LQ], "Workload": [_wl("jobset-a-1", "1")]})
    got = overview.queue_status(c, overview.scope(spec_from()))
    assert [p.position_source for p in got.status.pending] == ["estimated"] and got.requests == 3
    assert any("visibility" in n for n in got.notes)


def test_a_run_just_queued_counts_before_its_cluster_queues_counter_catches_up() -> None:
    # Kueue writes the ClusterQueue's pendingWorkloads after the Workload: read in between, the
    # counter says 0 while the Workload already waits. The positions are still asked for (or noted as estimated).
    stale = {**CQ, "status": {**CQ["status"], "pendingWorkloads": 0}}
    c = _Cluster({"ClusterQueue": [stale], "LocalQueue": [LQ], "Workload": [_wl("jobset-a-1", "1")]})
    got = overview.queue_status(c, overview.scope(spec_from()))
    assert [p.position_source for p in got.status.pending] == ["estimated"]
    assert any("visibility" in n for n in got.notes)
    assert qs.waiting_cluster_queues([_wl("jobset-a-1", "1"), _wl("jobset-b-2", "2", state="admitted")], [LQ]) == {"research-cq"}
    assert qs.waiting_cluster_queues([_wl("jobset-b-2", "2", state="admitted")], [LQ]) == set()


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["list", "--state", "sleeping"], "--state"),
        (["list", "--runtime", "slurm"], "--runtime"),
        (["list", "--cluster", "west"], "--cluster"),
        (["list", "--team", "research", "--namespace", "x"], "--namespace"),
    ],
)
def test_bad_list_flags_are_one_line_exit_2(args: list[str], field: str, tmp_path) -> None:
    done = cli("workloads", *args, env={"KUBECONFIG": str(tmp_path / "none")})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and field in done.stderr


def test_list_without_a_cluster_is_exit_3(tmp_path) -> None:
    done = cli("workloads", "list", "-o", "json", env={"KUBECONFIG": str(tmp_path / "none")})
    assert done.returncode == 3, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1  # one line, nothing half-printed
