"""The real API server enforces what tests/test_isolation.py assumes of the team namespaces.

A team that did not opt in to hostNetwork runs gets Pod Security ``restricted`` (its pods run
as non-root by default; ``baseline`` if it opted into root) on its namespace
(workloads.render.kueue.pod_security_labels): a host-network pod there, which
would act as the TPU nodes' service account instead of the team's, is refused at
admission, while the toolkit's own pod-network worker pod is accepted. A namespace of a
team that opted in admits the host-network pod. Server-side dry runs: nothing is created.
"""

from __future__ import annotations

import copy

import pytest

from infra.spec import DEFAULT_SPEC_PATH, TeamSpec, load_spec
from toolkit.errors import Forbidden, Rejected
from toolkit.names import TGK_FIELD_MANAGER
from workloads.planning.planner import Overrides, plan_run
from workloads.render import kueue
from workloads.render.jobset import run_objects

OPTED_IN_NS = "tgk-psa-opted-in"


def _worker_pod(namespace: str, name: str) -> dict:
    """A pod exactly like the toolkit's TPU worker (the JobSet's pod template) in ``namespace``."""
    plan = plan_run("hello-tpu", load_spec(DEFAULT_SPEC_PATH), Overrides(name="psa"))
    (js,) = run_objects(plan)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": copy.deepcopy(template["spec"])}


def _on_host_network(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["spec"].update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    return pod


def test_a_team_namespace_refuses_host_network_pods(cluster):
    spec = load_spec(DEFAULT_SPEC_PATH)
    (team,) = spec.teams
    assert not team.host_network
    cluster.apply([o for o in kueue.queue_objects(spec) if o["kind"] in ("Namespace", "ServiceAccount")], field_manager=TGK_FIELD_MANAGER)
    pod = _worker_pod(team.ns, "psa-pod-network")
    assert cluster.create(pod, dry_run=True)["spec"].get("hostNetwork") in (None, False)
    with pytest.raises(Rejected) as refused:
        cluster.create(_on_host_network(pod), dry_run=True)
    assert "PodSecurity" in str(refused.value) and "hostNetwork" in str(refused.value), str(refused.value)
    # A 403 from admission, not from RBAC: the line does not send the user after permissions.
    assert refused.value.status == 403 and not isinstance(refused.value, Forbidden) and "RBAC" not in str(refused.value)


def test_an_opted_in_team_namespace_admits_them(cluster):
    labels = kueue.pod_security_labels(TeamSpec(name="optin", host_network=True))
    pod = _on_host_network(_worker_pod(OPTED_IN_NS, "psa-host-network"))
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPTED_IN_NS, "labels": labels}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": pod["spec"]["serviceAccountName"], "namespace": OPTED_IN_NS}},
        ],
        field_manager=TGK_FIELD_MANAGER,
    )
    try:
        stored = cluster.create(pod, dry_run=True)
        assert stored["spec"]["hostNetwork"] is True
    finally:
        cluster.delete(cluster.resource("v1", "Namespace"), OPTED_IN_NS)
