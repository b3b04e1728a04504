"""The rendered failure policy against the real Job controller (Kubernetes 1.34.2) and JobSet v0.12.0.

A pod that fails with ``DisruptionTarget`` (what the kubelet's graceful node shutdown and
the Eviction API set) must end its child Job with the message the JobSet ``disruption``
rule matches, and restart the whole JobSet without spending ``maxRestarts``: proven here
with ``maxRestarts: 0``, where any other classification would fail the JobSet.
(Exit 1 failing at once and exit 42 spending restarts are in test_local_cluster.py.)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support.local_cluster import wait_for
from toolkit.names import JOBSET_NAME_LABEL, TGK_FIELD_MANAGER
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset as manifests

NS, NAME = "research", "disrupted"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def _running_pods(cluster) -> list[dict]:
    pods = cluster.pods(NS, NAME)
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def _disrupt(cluster, pod: dict) -> None:
    """What the kubelet does to a pod on a node that shuts down: DisruptionTarget, SIGTERM (143), Failed."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Failed",
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was terminated in response to imminent node shutdown.",
                "lastTransitionTime": now,
            }
        ],
        "containerStatuses": [
            {
                "name": "workload",
                "ready": False,
                "restartCount": 0,
                "image": pod["spec"]["containers"][0]["image"],
                "imageID": "",
                "state": {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": now, "finishedAt": now}},
            }
        ],
    }
    path = cluster.resource("v1", "Pod").path(NS, pod["metadata"]["name"], "status")
    resp = cluster.transport.request("PATCH", path, body={"status": status}, content_type="application/strategic-merge-patch+json")
    assert resp.ok, (resp.status, resp.body[:300])


@pytest.mark.usefixtures("tpu_quota")
def test_disruption_restarts_the_whole_jobset_without_spending_max_restarts(cluster):
    plan = plan_run("hello-tpu", load_spec(DEFAULT_SPEC_PATH), Overrides(slices=1, name=NAME, max_restarts=0))
    (js,) = manifests.run_objects(plan)
    pod_meta = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].setdefault("metadata", {})
    pod_meta.setdefault("annotations", {})[COMPLETE_DELAY] = "600s"  # keep them Running
    hosts = plan.target.shape.nodes
    pattern = re.compile(manifests.disruption_message_pattern())
    try:
        cluster.apply([js], field_manager=TGK_FIELD_MANAGER)
        assert cluster.wait_admitted(NS, NAME, timeout=120).admitted
        first = wait_for(lambda: (lambda p: p if len(p) == hosts else None)(_running_pods(cluster)), 120, "every pod Running")
        old_uids = {p["metadata"]["uid"] for p in first}
        job_info = cluster.resource("batch/v1", "Job")
        _disrupt(cluster, first[0])

        # The child Job fails at once, with the Kubernetes 1.34 message the JobSet rule matches.
        def failed_message() -> str | None:
            for job in cluster.list(job_info, NS, label_selector=f"{JOBSET_NAME_LABEL}={NAME}"):
                for c in (job.get("status") or {}).get("conditions") or []:
                    if c.get("type") in ("FailureTarget", "Failed") and c.get("status") == "True":
                        return f"{c.get('reason')}|{c.get('message')}"
            live = cluster.jobset(NS, NAME)
            return "restarted" if live and (live.get("status") or {}).get("restarts") else None

        seen = wait_for(failed_message, 60, "the child Job to fail (or the JobSet to restart)")
        print(f"\n[integration] child Job failure: {seen}")
        if seen != "restarted":
            reason, message = seen.split("|", 1)
            assert reason == "PodFailurePolicy" and pattern.search(message), seen

        def restarted() -> dict | None:
            live = cluster.jobset(NS, NAME)
            return live if live and (live.get("status") or {}).get("restarts") == 1 else None

        live = wait_for(restarted, 120, "the JobSet to restart once")
        assert not any(c.get("type") == "Failed" and c.get("status") == "True" for c in live["status"].get("conditions") or [])
        assert (live["status"].get("restartsCountTowardsMax") or 0) == 0  # free: maxRestarts is 0
        # Every slice's pods come back (the whole JobSet, not one replacement pod).
        again = wait_for(
            lambda: (lambda p: p if len(p) == hosts and not {x["metadata"]["uid"] for x in p} & old_uids else None)(_running_pods(cluster)),
            120,
            "a new set of pods Running",
        )
        assert all(p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == "1" for p in again)
    finally:
        cluster.delete_jobset(NS, NAME)
        wait_for(lambda: cluster.jobset(NS, NAME) is None and not cluster.pods(NS, NAME), 120, "the JobSet and its pods to go")
