"""Host maintenance GKE announces, read and planned for (workloads/cluster/maintenance.py), and one `maintain` pass
(workloads/runs/maintain.py) over a fake API boundary; the real API server's part is
tests/integration/test_upgrade_maintenance.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolkit.errors import FieldError, Rejected
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL
from workloads.cluster import maintenance as mt
from workloads.runs.maintain import Watch, maintain_once

NOW = 1_800_000_000.0


def node(name: str, pool: str, *, window: Any = None, ongoing: bool = False, uid: str | None = None, kubelet: str = "v1.33.5-gke.1", **spec: Any) -> dict:
    labels = {GKE_NODEPOOL_LABEL: pool}
    if window is not None:
        labels[mt.SCHEDULED_MAINTENANCE_LABEL] = str(window)
    if ongoing:
        labels[mt.ACTIVE_MAINTENANCE_LABEL] = mt.ACTIVE_MAINTENANCE_VALUE
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "labels": labels, "annotations": {}},
        "spec": dict(spec),
        "status": {"nodeInfo": {"kubeletVersion": kubelet}},
    }


def pod(name: str, node_name: str, slice_index: int, phase: str = "Running", *, disrupted: str | None = None) -> dict:
    conds = [{"type": "DisruptionTarget", "status": "True", "reason": disrupted}] if disrupted else []
    return {
        "metadata": {"name": name, "namespace": "research", "labels": {JOBSET_JOB_INDEX_LABEL: str(slice_index)}},
        "spec": {"nodeName": node_name},
        "status": {"phase": phase, "conditions": conds},
    }


# ------------------------------------------------------------------ reading GKE's labels


def test_a_node_label_is_read_as_gke_writes_it_epoch_seconds_or_ongoing() -> None:
    assert mt.of_node(node("a", "p")) is None
    m = mt.of_node(node("a", "p", window=int(NOW) + 600))
    assert (m.node, m.pool, m.window_start, m.ongoing) == ("a", "p", NOW + 600, False)
    assert m.describe(NOW) == "a (pool p): window starts 2027-01-15T08:10:00Z (in 10m)"
    assert mt.of_node(node("a", "p", ongoing=True)).describe(NOW) == "a (pool p): maintenance ONGOING"
    bad = mt.of_node(node("a", "p", window="2026-12-01T00:00:00Z"))
    assert bad.window_start is None and "is not epoch seconds" in bad.describe(NOW)


def test_announced_lists_ongoing_first_then_the_soonest_window() -> None:
    found = mt.announced([node("c", "p", window=int(NOW) + 900), node("b", "p"), node("a", "q", window=int(NOW) + 60), node("d", "q", ongoing=True)])
    assert [m.node for m in found] == ["d", "a", "c"]


@pytest.mark.parametrize(
    ("seconds", "words"), [(0, "in 0s"), (59, "in 59s"), (600, "in 10m"), (3 * 3600 + 5, "in 3h"), (-90, "1m 30s ago"), (8 * 86400, "in 8d")]
)
def test_in_words(seconds: float, words: str) -> None:
    assert mt.in_words(seconds) == words


# ------------------------------------------------------------------ planning a move


def _fleet() -> tuple[list[dict], list[dict]]:
    nodes = [node(f"p0-{i}", "p0") for i in range(2)] + [node(f"p1-{i}", "p1", window=int(NOW) + 600) for i in range(2)]
    pods = [pod(f"w0-{i}", f"p0-{i}", 0) for i in range(2)] + [pod(f"w1-{i}", f"p1-{i}", 1) for i in range(2)]
    return pods, nodes


def test_a_window_within_the_lead_moves_only_the_slice_on_it_and_cordons_the_announced_nodes() -> None:
    pods, nodes = _fleet()
    plan = mt.plan_move(pods, nodes, NOW, lead_s=900)
    assert plan.moves and plan.slices == (1,) and plan.pods == ("research/w1-0", "research/w1-1")
    assert plan.cordon == ("p1-0", "p1-1") and not plan.later


def test_a_window_further_than_the_lead_is_listed_and_nothing_moves() -> None:
    pods, nodes = _fleet()
    plan = mt.plan_move(pods, nodes, NOW, lead_s=300)
    assert not plan.moves and not plan.cordon and [m.node for m in plan.later] == ["p1-0", "p1-1"]


def test_ongoing_maintenance_and_finished_pods_are_not_moved() -> None:
    pods, nodes = _fleet()
    nodes[2] = node("p1-0", "p1", ongoing=True)
    nodes[3] = node("p1-1", "p1", ongoing=True)
    assert not mt.plan_move(pods, nodes, NOW, lead_s=3600).moves  # GKE is already stopping them
    pods, nodes = _fleet()
    done = [{**p, "status": {"phase": "Succeeded"}} for p in pods]
    assert not mt.plan_move(done, nodes, NOW, lead_s=3600).moves


def test_a_window_on_a_node_the_run_does_not_use_does_not_move_it() -> None:
    pods, nodes = _fleet()
    nodes.append(node("spare-0", "spare", window=int(NOW) + 60))
    plan = mt.plan_move(pods[:2], nodes, NOW, lead_s=900)  # only slice 0's pods, on p0
    assert not plan.moves and not plan.due


# ------------------------------------------------------------------ naming a disruption


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (dict(kubelet="v1.33.5-gke.1"), dict(kubelet="v1.34.1-gke.2", uid="new"), "upgrade"),
        (dict(window=int(NOW)), dict(uid="new"), "maintenance"),
        (dict(), dict(uid="new"), "preemption"),
        (dict(), dict(uid="new"), "node-recreated"),
        (dict(), dict(), None),
    ],
    ids=["upgrade", "maintenance", "preemption", "recreated", "same-node"],
)
def test_classify_names_what_came_back(before: dict, after: dict, kind: str | None, request) -> None:
    reasons = ("TerminationByKubelet",) if request.node.callspec.id == "preemption" else ()
    seen = mt.NodeSeen.of(node("n", "p", **before), reasons)
    assert mt.classify(seen, node("n", "p", **after)) == kind


def test_recorded_disruptions_keep_the_newest_and_skip_garbage() -> None:
    js: dict = {"metadata": {"annotations": {}}}
    for i in range(mt.MAX_DISRUPTIONS + 3):
        js["metadata"]["annotations"][mt.DISRUPTIONS_ANNOTATION] = mt.with_disruption(js, mt.Disruption("upgrade", f"t{i}", "p"))
    got = mt.parse_disruptions(js)
    assert len(got) == mt.MAX_DISRUPTIONS and got[-1].at == f"t{mt.MAX_DISRUPTIONS + 2}" and got[0].at == "t3"
    assert mt.parse_disruptions({"metadata": {"annotations": {mt.DISRUPTIONS_ANNOTATION: "{not json"}}}) == []
    assert mt.parse_disruptions({"metadata": {"annotations": {mt.DISRUPTIONS_ANNOTATION: json.dumps([1, {"kind": "x"}])}}})[0].kind == "x"


# ------------------------------------------------------------------ one maintain pass over a fake boundary


class _Info:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def path(self, ns: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        return "/".join(x for x in (self.kind, ns, name, sub) if x)


class _Kind:
    api_version, kind = "jobset.x-k8s.io/v1alpha2", "JobSet"


class FakeCluster:
    """The run's pods and the nodes; records every PATCH and eviction; a budget may refuse evictions."""

    def __init__(self, pods: list[dict], nodes: list[dict], *, budget_refuses: bool = False) -> None:
        self.pods_, self.nodes, self.budget_refuses = pods, nodes, budget_refuses
        self.jobset: dict = {"metadata": {"name": "r", "annotations": {}}}
        self.patches: list[tuple[str, dict]] = []
        self.evictions: list[str] = []

    def find_run(self, ns: str, run: str):
        return (_Kind, self.jobset) if run == "r" else None

    def resource(self, api_version: str, kind: str) -> _Info:
        return _Info(kind)

    def pods(self, ns: str, run: str, kind=None) -> list[dict]:
        return self.pods_

    def list(self, info: _Info, *_, **__) -> list[dict]:
        return self.nodes

    def get(self, info: _Info, name: str, ns: str | None = None) -> dict:
        return self.jobset

    def evict(self, ns: str, name: str) -> None:
        if self.budget_refuses:
            raise Rejected("Cannot evict pod as it would violate the pod's disruption budget. (HTTP 429)", status=429)
        self.evictions.append(f"Pod/{ns}/{name}/eviction")

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict:
        self.patches.append((path, body))
        if path.startswith("JobSet/"):
            self.jobset["metadata"]["annotations"].update(body["metadata"]["annotations"])
        return {}


def test_a_pass_cordons_evicts_and_records_and_a_dry_run_changes_nothing() -> None:
    pods, nodes = _fleet()
    fake = FakeCluster(pods, nodes)
    dry = maintain_once(fake, "research", "r", lead_s=900, now=NOW, dry_run=True)
    assert dry.plan.moves and not fake.patches and not fake.evictions
    res = maintain_once(fake, "research", "r", lead_s=900, now=NOW)
    assert res.cordoned == ("p1-0", "p1-1") and res.evicted == ("research/w1-0", "research/w1-1")
    cordons = {p: b for p, b in fake.patches if p.startswith("Node/")}
    assert cordons["Node/p1-0"] == {"metadata": {"annotations": {mt.CORDONED_FOR_ANNOTATION: str(int(NOW) + 600)}}, "spec": {"unschedulable": True}}
    assert fake.evictions == ["Pod/research/w1-0/eviction", "Pod/research/w1-1/eviction"]
    assert [d.kind for d in mt.parse_disruptions(fake.jobset)] == ["moved-ahead-of-maintenance"]


def test_a_budget_that_refuses_is_reported_for_the_next_pass_and_a_node_someone_else_cordoned_is_left_alone() -> None:
    pods, nodes = _fleet()
    nodes[2]["spec"]["unschedulable"] = True  # an operator's cordon, not the toolkit's
    fake = FakeCluster(pods, nodes, budget_refuses=True)
    res = maintain_once(fake, "research", "r", lead_s=900, now=NOW)
    assert res.blocked == ("research/w1-0", "research/w1-1") and not res.evicted
    assert res.cordoned == ("p1-1",) and "Node/p1-0" not in {p for p, _ in fake.patches}


def test_only_the_toolkits_own_cordon_is_undone_once_gke_took_the_label_off() -> None:
    pods, nodes = _fleet()
    mine = node("p1-0", "p1", unschedulable=True)
    mine["metadata"]["annotations"][mt.CORDONED_FOR_ANNOTATION] = str(int(NOW))
    theirs = node("p1-1", "p1", unschedulable=True)
    fake = FakeCluster(pods, [nodes[0], nodes[1], mine, theirs])
    res = maintain_once(fake, "research", "r", lead_s=900, now=NOW)
    assert res.uncordoned == ("p1-0",)
    assert fake.patches == [("Node/p1-0", {"metadata": {"annotations": {mt.CORDONED_FOR_ANNOTATION: None}}, "spec": {"unschedulable": None}})]


def test_a_watch_names_an_upgrade_when_the_nodes_come_back_at_another_kubelet() -> None:
    pods, nodes = _fleet()
    for n in nodes[2:]:
        del n["metadata"]["labels"][mt.SCHEDULED_MAINTENANCE_LABEL]
    fake = FakeCluster(pods, nodes)
    memory = Watch()
    assert not maintain_once(fake, "research", "r", lead_s=900, now=NOW, watch=memory).recorded
    fake.pods_ = pods[:2] + [pod(f"w1-{i}", f"p1-{i}", 1, "Failed", disrupted="EvictionByEvictionAPI") for i in range(2)]
    maintain_once(fake, "research", "r", lead_s=900, now=NOW + 1, watch=memory)
    fake.nodes = nodes[:2] + [node(f"p1-{i}", "p1", uid=f"new-{i}", kubelet="v1.34.1-gke.2") for i in range(2)]
    res = maintain_once(fake, "research", "r", lead_s=900, now=NOW + 30, watch=memory)
    assert [(d.kind, d.pool, d.nodes) for d in res.recorded] == [("upgrade", "p1", ("p1-0", "p1-1"))]
    assert res.recorded[0].detail == "kubelet v1.33.5-gke.1 -> v1.34.1-gke.2, pods EvictionByEvictionAPI"
    assert [d.kind for d in mt.parse_disruptions(fake.jobset)] == ["upgrade"]


def test_a_watch_follows_a_surge_upgrade_to_new_node_names() -> None:
    pods, nodes = _fleet()
    for n in nodes[2:]:
        del n["metadata"]["labels"][mt.SCHEDULED_MAINTENANCE_LABEL]
    fake = FakeCluster(pods, nodes)
    memory = Watch()
    maintain_once(fake, "research", "r", lead_s=900, now=NOW, watch=memory)
    fake.nodes = nodes[:2] + [node(f"p1-surge-{i}", "p1", kubelet="v1.34.1-gke.2") for i in range(2)]
    res = maintain_once(fake, "research", "r", lead_s=900, now=NOW + 30, watch=memory)
    assert [(d.kind, d.nodes) for d in res.recorded] == [("upgrade", ("p1-0", "p1-1"))]


def test_an_unknown_run_is_a_field_error() -> None:
    with pytest.raises(FieldError, match="no run 'x'"):
        maintain_once(FakeCluster([], []), "research", "x", lead_s=60, now=NOW)


def test_a_watch_does_not_charge_the_run_with_maintenance_of_nodes_it_was_moved_off() -> None:
    pods, nodes = _fleet()
    fake = FakeCluster(pods, nodes)
    memory = Watch()
    moved = maintain_once(fake, "research", "r", lead_s=900, now=NOW, watch=memory)
    assert [d.kind for d in moved.recorded] == ["moved-ahead-of-maintenance"]
    fake.pods_ = pods[:2] + [pod(f"w1-{i}", f"p1-{i}", 1, "Failed", disrupted="EvictionByEvictionAPI") for i in range(2)]
    assert not maintain_once(fake, "research", "r", lead_s=900, now=NOW + 1, watch=memory).recorded
    fake.pods_ = pods[:2]
    fake.nodes = nodes[:2] + [node(f"p1-{i}", "p1", uid=f"new-{i}") for i in range(2)]  # maintained while the run was elsewhere
    assert not maintain_once(fake, "research", "r", lead_s=900, now=NOW + 700, watch=memory).recorded


def test_a_pool_whose_nodes_come_back_one_pass_at_a_time_is_one_disruption() -> None:
    pods, nodes = _fleet()
    for n in nodes[2:]:
        del n["metadata"]["labels"][mt.SCHEDULED_MAINTENANCE_LABEL]
    fake = FakeCluster(pods, nodes)
    memory = Watch()
    maintain_once(fake, "research", "r", lead_s=900, now=NOW, watch=memory)
    fake.pods_ = pods[:2]
    fake.nodes = nodes[:2] + [node("p1-0", "p1", uid="new-0", kubelet="v1.34.1-gke.2")]  # p1-1 not back yet
    first = maintain_once(fake, "research", "r", lead_s=900, now=NOW + 10, watch=memory)
    fake.nodes = nodes[:2] + [node(f"p1-{i}", "p1", uid=f"new-{i}", kubelet="v1.34.1-gke.2") for i in range(2)]
    second = maintain_once(fake, "research", "r", lead_s=900, now=NOW + 11, watch=memory)
    assert [(d.kind, d.nodes) for d in first.recorded] == [("upgrade", ("p1-0", "p1-1"))] and not second.recorded
