"""status.py: API objects (as a cluster returns them) into a typed RunStatus."""

from __future__ import annotations

import json

import pytest

from workloads.cluster import status as st


def _jobset(*, suspend=False, conditions=(), restarts=0, replicas=2, parallelism=4) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "r1", "namespace": "research", "uid": "u1"},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [{"name": "slice", "replicas": replicas, "template": {"spec": {"parallelism": parallelism, "completions": parallelism}}}],
        },
        "status": {"conditions": list(conditions), "restarts": restarts},
    }


def _pod(slice_i: int, worker: int, phase="Running", node="gke-tpu-0", **status) -> dict:
    return {
        "metadata": {
            "name": f"r1-slice-{slice_i}-{worker}-x",
            "labels": {"jobset.sigs.k8s.io/job-index": str(slice_i), "batch.kubernetes.io/job-completion-index": str(worker)},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}], **status},
    }


PENDING_WL = {
    "metadata": {"name": "jobset-r1-1a2b3"},
    "spec": {"queueName": "research-queue", "priority": 500, "active": True},
    "status": {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set slice: insufficient quota for google.com/tpu in flavor v5e-4x4, 16 more needed",
            }
        ]
    },
}
ADMITTED_WL = {
    "metadata": {"name": "jobset-r1-1a2b3"},
    "spec": {"queueName": "research-queue"},
    "status": {
        "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True", "reason": "Admitted"}],
        "admission": {
            "clusterQueue": "tpu-cq",
            "podSetAssignments": [{"name": "slice", "flavors": {"cpu": "default-flavor", "google.com/tpu": "v5e-4x4"}, "count": 8}],
        },
    },
}


def test_workload_pending_carries_kueues_reason() -> None:
    w = st.workload_status(PENDING_WL)
    assert w.state is st.WorkloadState.PENDING and w.queue == "research-queue" and w.priority == 500
    assert "16 more needed" in w.message and "16 more needed" in w.describe()


def test_workload_admitted_reports_the_tpu_flavor() -> None:
    w = st.workload_status(ADMITTED_WL)
    assert w.state is st.WorkloadState.ADMITTED and w.cluster_queue == "tpu-cq"
    assert w.flavors == {"slice": "v5e-4x4"}  # the TPU flavor, not the cpu one


def test_quota_reserved_but_waiting_on_admission_checks() -> None:
    wl = {
        "metadata": {"name": "w"},
        "spec": {"queueName": "q"},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "False", "reason": "NoChecks"}],
            "admissionChecks": [{"name": "dws-prov", "state": "Pending", "message": "Waiting for resources"}],
        },
    }
    w = st.workload_status(wl)
    assert w.state is st.WorkloadState.QUOTA_RESERVED and "dws-prov: Pending (Waiting for resources)" in w.message


@pytest.mark.parametrize(
    ("conds", "active", "want"),
    [
        ([{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted by a higher priority"}], True, st.WorkloadState.EVICTED),
        ([{"type": "Evicted", "status": "True", "reason": "InactiveWorkload"}], False, st.WorkloadState.INACTIVE),
        ([{"type": "Admitted", "status": "True"}, {"type": "Finished", "status": "True", "reason": "Succeeded"}], True, st.WorkloadState.FINISHED),
    ],
)
def test_other_workload_states(conds, active, want) -> None:
    assert st.workload_status({"metadata": {"name": "w"}, "spec": {"active": active}, "status": {"conditions": conds}}).state is want


def test_queued_run() -> None:
    r = st.run_status("research", "r1", _jobset(suspend=True), PENDING_WL, [])
    assert r.phase is st.RunPhase.QUEUED and "insufficient quota" in r.message and r.expected_pods == 8


def test_suspended_without_workload_points_at_the_queue_label() -> None:
    r = st.run_status("research", "r1", _jobset(suspend=True), None, [])
    assert r.phase is st.RunPhase.SUSPENDED and "queue-name" in r.message


def test_running_run_groups_pods_by_slice_and_worker() -> None:
    pods = [_pod(s, w, node=f"gke-v5e-16-{s}-{w}") for s in (1, 0) for w in (3, 2, 1, 0)]
    r = st.run_status("research", "r1", _jobset(), ADMITTED_WL, pods)
    assert r.phase is st.RunPhase.RUNNING and r.message == "8/8 pods running"
    assert [s.index for s in r.slices] == [0, 1]
    assert [p.worker for p in r.slices[0].pods] == [0, 1, 2, 3]
    assert r.slices[1].pods[2].node == "gke-v5e-16-1-2"


def test_starting_run_explains_the_stuck_pod() -> None:
    pods = [
        _pod(0, 0),
        _pod(
            0,
            1,
            phase="Pending",
            node=None,
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient google.com/tpu."}
            ],
        ),
    ]
    pods.append(
        _pod(
            0,
            2,
            phase="Pending",
            containerStatuses=[{"restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}],
        )
    )
    r = st.run_status("research", "r1", _jobset(replicas=1), ADMITTED_WL, pods)
    assert r.phase is st.RunPhase.STARTING
    assert "1/4 pods running" in r.message and "Unschedulable" in r.message
    assert r.pods[2].detail.startswith("ImagePullBackOff")


def test_failed_and_succeeded_runs() -> None:
    failed = _jobset(
        conditions=[{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed due to one or more job failures"}], restarts=2
    )
    pods = [_pod(0, 0, phase="Failed", containerStatuses=[{"restartCount": 1, "state": {"terminated": {"reason": "Error", "exitCode": 137}}}])]
    r = st.run_status("research", "r1", failed, ADMITTED_WL, pods)
    assert r.phase is st.RunPhase.FAILED and "FailedJobs" in r.message and r.restarts == 2
    assert r.pods[0].detail == "Error (exit 137)" and r.pods[0].restarts == 1
    done = _jobset(conditions=[{"type": "Completed", "status": "True", "message": "jobset completed successfully"}])
    assert st.run_status("research", "r1", done, ADMITTED_WL, []).phase is st.RunPhase.SUCCEEDED


def test_not_found_and_json_shape() -> None:
    r = st.run_status("research", "nope", None, None, [])
    assert r.phase is st.RunPhase.NOT_FOUND
    d = json.loads(json.dumps(st.run_status("research", "r1", _jobset(), ADMITTED_WL, [_pod(0, 0)]).to_dict()))
    assert d["phase"] == "Starting" and d["workload"]["state"] == "admitted" and d["slices"][0]["pods"][0]["worker"] == 0


# ------------------------------------------------------------------ one line per slice


def test_a_large_slice_is_one_line_with_counts_vms_and_restarts() -> None:
    # One tpu7x 4x4x8 slice: 128 chips, 32 TPU VMs of 4 chips, one worker per VM.
    pods = [_pod(0, w, node=f"gke-tpu7x-0-{w}") for w in range(32)]
    r = st.run_status("research", "r1", _jobset(replicas=1, parallelism=32), ADMITTED_WL, pods)
    (s,) = r.slices
    assert s.phases == {"Running": 32} and s.vms == 32 and s.restarts == 0 and s.abnormal == ()
    assert s.summary() == "slice 0: 32 workers (32 Running), on 32 VMs, 0 restarts"


def test_slice_summary_counts_each_phase_and_names_the_abnormal_workers() -> None:
    restarted = {"containerStatuses": [{"restartCount": 2, "state": {"running": {}}}]}
    pods = [
        _pod(1, 0, node="n0"),
        _pod(1, 1, node="n1", **restarted),  # running, but restarted twice
        _pod(
            1,
            2,
            phase="Pending",
            node=None,
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}],
        ),
        _pod(1, 3, phase="Pending", node="n3", containerStatuses=[{"restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]),
        _pod(1, 4, phase="Failed", node="n4", containerStatuses=[{"restartCount": 0, "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]),
        _pod(1, 5, phase="Succeeded", node="n5", containerStatuses=[{"restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]),
    ]
    r = st.run_status("research", "r1", _jobset(replicas=1, parallelism=6), ADMITTED_WL, pods)
    (s,) = r.slices
    assert s.phases == {"Running": 2, "Pending": 2, "Succeeded": 1, "Failed": 1}
    assert s.summary() == "slice 1: 6 workers (2 Running, 2 Pending, 1 Succeeded, 1 Failed), on 5 VMs, 2 restarts"
    # Restarted, unschedulable and failed are abnormal; creating a container and finishing are not.
    assert [p.worker for p in s.abnormal] == [1, 2, 4]


def test_a_slice_of_one_worker_reads_in_the_singular() -> None:
    (s,) = st.run_status("research", "r1", _jobset(replicas=1, parallelism=1), ADMITTED_WL, [_pod(0, 0, node="n")]).slices
    assert s.summary() == "slice 0: 1 worker (1 Running), on 1 VM, 0 restarts"


@pytest.mark.parametrize(
    ("jobset", "wl", "pods", "want"),
    [
        (_jobset(suspend=True), PENDING_WL, [], "Queued: Workload jobset-r1-1a2b3 pending in queue research-queue: couldn't assign"),
        (_jobset(), ADMITTED_WL, [_pod(0, 0)], "Starting: 1/8 pods running"),
        (_jobset(replicas=1, parallelism=1), ADMITTED_WL, [_pod(0, 0)], "Running: 1/1 pods running"),
        (
            _jobset(conditions=[{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "m"}]),
            ADMITTED_WL,
            [_pod(0, 0)],
            "Failed: 1/8 pods running — FailedJobs: m",
        ),
        (
            _jobset(conditions=[{"type": "Completed", "status": "True", "message": "jobset completed successfully"}]),
            ADMITTED_WL,
            [_pod(0, 0, phase="Succeeded")],
            "Succeeded: jobset completed successfully",
        ),
    ],
)
def test_progress_line_says_the_pod_count_once(jobset, wl, pods, want) -> None:
    line = st.run_status("research", "r1", jobset, wl, pods).progress()
    assert line.startswith(want)
    assert line.count("pods running") <= 1


def test_a_finished_worker_is_not_named_as_the_stuck_one() -> None:
    done = {"containerStatuses": [{"restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}
    creating = {"containerStatuses": [{"restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    pods = [_pod(0, 0, phase="Succeeded", **done), _pod(0, 1, phase="Pending", **creating), _pod(0, 2)]
    r = st.run_status("research", "r1", _jobset(replicas=1), ADMITTED_WL, pods)
    assert r.phase is st.RunPhase.STARTING and r.message == "1/4 pods running"
    pods.append(_pod(0, 3, phase="Pending", containerStatuses=[{"restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}}]))
    r = st.run_status("research", "r1", _jobset(replicas=1), ADMITTED_WL, pods)
    assert r.message == "1/4 pods running; r1-slice-0-3-x: ErrImagePull"
