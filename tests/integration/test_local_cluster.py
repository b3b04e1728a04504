"""The rendered objects against a real apiserver, Kueue, JobSet and kwok TPU nodes.

Stage A (schemas): every object the toolkit renders for every example
environment is accepted by the real apiserver with the real CRDs and webhooks
(server-side apply, dry run), and broken objects are refused at each layer.
Stage B (admission): Kueue admits a JobSet with the spec's flavor, holds one
beyond quota until the first finishes, and preempts a lower priority.
Stage C (placement and lifecycle): a 2-slice JobSet lands one slice per node
pool, its pods go Running then Succeeded via kwok's stages; failing pods restart
the JobSet up to maxRestarts.

Stages B and C share the default spec's TPU quota and nodes: each of their
tests holds the ``tpu_quota`` lock, so pytest-xdist workers running them at the
same time take turns. Waits poll a condition with a deadline (the toolkit's own
workloads.cluster.wait); none is a fixed sleep.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support import EXAMPLE_FILES
from tests.support.local_cluster import wait_for
from toolkit.errors import ToolkitError
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL, TGK_FIELD_MANAGER
from workloads.local.addons import FAIL_EXIT_CODE_ANNOTATION, FAIL_LABEL
from workloads.planning.planner import Overrides, plan_run
from workloads.planning.recipes import recipe_names
from workloads.render import jobset as manifests
from workloads.render import kueue

# The field manager `queues apply` and `submit` use: the tests apply as the toolkit does.
FM = TGK_FIELD_MANAGER
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


def _cond(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def _true(obj: dict | None, type_: str) -> bool:
    c = _cond(obj, type_)
    return bool(c and c.get("status") == "True")


# ------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def spec():
    return load_spec(DEFAULT_SPEC_PATH)


def _jobset(
    spec,
    name: str,
    *,
    slices: int,
    priority: str | None = None,
    complete_after: str | None = None,
    fail_exit_code: int | None = None,
    max_restarts: int = 0,
) -> dict:
    """The toolkit's own JobSet for hello-tpu, with kwok's per-pod timing."""
    plan = plan_run("hello-tpu", spec, Overrides(slices=slices, name=name, priority=priority, max_restarts=max_restarts))
    (js,) = copy.deepcopy(manifests.run_objects(plan))
    meta = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].setdefault("metadata", {})
    _valid_rule_names(js)
    if complete_after:
        meta.setdefault("annotations", {})[COMPLETE_DELAY] = complete_after
    if fail_exit_code is not None:
        meta.setdefault("labels", {})[FAIL_LABEL] = "true"
        meta.setdefault("annotations", {})[FAIL_EXIT_CODE_ANNOTATION] = str(fail_exit_code)
    return js


_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def _valid_rule_names(js: dict) -> None:
    # JobSet's webhook refuses failure-policy rule names outside this pattern;
    # the renderer once emitted 'program-error'. Fail here with the name, before the webhook does.
    for rule in (js["spec"].get("failurePolicy") or {}).get("rules") or []:
        assert _RULE_NAME.match(rule["name"]), f"rendered failure-policy rule name {rule['name']!r} is one JobSet refuses"


def _workload(cluster, js: dict) -> dict | None:
    live = cluster.jobset(js["metadata"]["namespace"], js["metadata"]["name"])
    return cluster.workload_for(js["metadata"]["namespace"], live) if live else None


def _pods(cluster, js: dict) -> list[dict]:
    return cluster.pods(js["metadata"]["namespace"], js["metadata"]["name"])


def _delete_and_wait(cluster, *jobsets: dict) -> None:
    for js in jobsets:
        cluster.delete_jobset(js["metadata"]["namespace"], js["metadata"]["name"])
    for js in jobsets:
        ns, name = js["metadata"]["namespace"], js["metadata"]["name"]
        wait_for(lambda ns=ns, name=name: cluster.jobset(ns, name) is None and not cluster.pods(ns, name), 120, f"JobSet {name} and its pods to go")
    wl_info = cluster.kueue("Workload")
    names = {js["metadata"]["name"] for js in jobsets}
    wait_for(
        lambda: not [w for w in cluster.list(wl_info, "research") if any(n in w["metadata"]["name"] for n in names)],
        120,
        "their Workloads to go",
    )


def _finished(cluster, js: dict) -> str | None:
    live = cluster.jobset(js["metadata"]["namespace"], js["metadata"]["name"])
    if _true(live, "Completed"):
        return "Completed"
    if _true(live, "Failed"):
        return "Failed"
    return None


# ------------------------------------------------------------- Stage A: schemas


def test_server_is_stamped_1_34(cluster):
    # Kueue refuses an unstamped server; the build must have set the version.
    assert cluster.server_version().startswith("v1.34.")


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_rendered_object_is_accepted(cluster, example: Path, tmp_path):
    from workloads.cluster import capabilities

    spec = load_spec(example)
    # The shared cluster is the default spec's: JobSet's InPlaceRestart gate off and no multi-tier checkpointing
    # add-on, as a GKE cluster deployed from it. What needs them is what submit refuses there before anything is
    # applied (capabilities); it is accepted on a cluster that has them in test_in_place_restart.py.
    in_place = capabilities.in_place_problem(cluster, "default") is None
    multi_tier = capabilities.multi_tier_problem(cluster) is None
    queue_objs = [o for o in kueue.queue_objects(spec) if multi_tier or o["kind"] != "CheckpointConfiguration"]
    # Namespaced dry runs need their namespace to exist: those are created for real.
    cluster.apply([o for o in queue_objs if o["kind"] == "Namespace"], field_manager=FM)
    cluster.apply(queue_objs, field_manager=FM, dry_run=True)

    from workloads.local.controlplane import build_root
    from workloads.render import kustomize as kz

    kustomize_bin = str(build_root() / "bin" / "kustomize")
    accepted = 0
    for recipe in recipe_names():
        for pool in spec.tpu_pools:
            try:
                plan = plan_run(recipe, spec, Overrides(pool=pool.name, slices=pool.slices, restart=None if in_place else "recreate"))
            except ToolkitError:
                continue  # this recipe does not fit this pool (the planner says why)
            objs = kz.run_objects(plan)  # what the overlay holds: the JobSet + its submission digest
            cluster.apply(objs, field_manager=FM, dry_run=True)
            # The Kustomize tree users apply must build to the same objects, and be accepted.
            kz.write_tree(tmp_path, kz.render(plan))
            built = kz.build(tmp_path / "overlays" / plan.name, binary=kustomize_bin)
            assert built == objs
            cluster.apply(built, field_manager=FM, dry_run=True)
            accepted += 1
    assert accepted, f"no recipe planned on any pool of {example.name}"


def test_kueue_serves_v1beta1_through_its_conversion_webhook(local_cluster):
    # `local up` applied the default spec's queues (v1beta2); reading them as
    # v1beta1 goes through Kueue's conversion webhook on localhost.
    kube = local_cluster.client()
    items = kube.request("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues")["items"]
    assert any(i["metadata"]["name"] == "research-cq" for i in items)
    assert all(i["apiVersion"] == "kueue.x-k8s.io/v1beta1" for i in items)


def test_broken_objects_are_rejected(cluster, spec):
    good = _jobset(spec, "broken-probe", slices=1)

    # 1. apiserver object-name validation.
    bad_name = copy.deepcopy(good)
    bad_name["metadata"]["name"] = "Not_A_DNS_Name"
    # 2. CRD OpenAPI schema: replicas is an integer.
    bad_schema = copy.deepcopy(good)
    bad_schema["spec"]["replicatedJobs"][0]["replicas"] = "two"
    # 3. Kueue's CRD schema/webhook: a quantity that is not one.
    (cq,) = [copy.deepcopy(o) for o in kueue.queue_objects(spec) if o["kind"] == "ClusterQueue"][:1]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    # 4. JobSet's validating webhook: child Job names would exceed 63 characters.
    too_long = copy.deepcopy(good)
    too_long["metadata"]["name"] = "a" * 60

    messages = {}
    for label, obj in (("name", bad_name), ("schema", bad_schema), ("kueue-quantity", cq), ("jobset-webhook", too_long)):
        with pytest.raises(ToolkitError) as err:
            cluster.apply([obj], field_manager=FM, dry_run=True)
        messages[label] = str(err.value)
    assert "Not_A_DNS_Name" in messages["name"]
    assert "replicas" in messages["schema"]
    assert "lots" in messages["kueue-quantity"] or "quantity" in messages["kueue-quantity"].lower()
    assert "63" in messages["jobset-webhook"] or "too long" in messages["jobset-webhook"].lower()


# ----------------------------------------------------------- Stage B: admission


@pytest.mark.usefixtures("tpu_quota")
def test_admitted_with_flavor_then_queued_beyond_quota(cluster, spec):
    flavor = spec.tpu_pools[0].flavor_name()
    first = _jobset(spec, "quota-first", slices=1, complete_after="20s")
    second = _jobset(spec, "quota-second", slices=2, complete_after="1s")
    try:
        cluster.apply([first], field_manager=FM)
        res = cluster.wait_admitted("research", "quota-first", timeout=120)
        assert res.admitted, res.reason
        wl = _workload(cluster, first)
        assigned = [f for psa in wl["status"]["admission"]["podSetAssignments"] for f in psa["flavors"].values()]
        assert assigned and set(assigned) == {flavor}

        # 16 of 32 chips are in use: a 32-chip job must wait, and say why.
        cluster.apply([second], field_manager=FM)
        pending = wait_for(
            lambda: (w := _workload(cluster, second)) and _cond(w, "QuotaReserved") and not _true(w, "QuotaReserved") and w,
            120,
            "the second Workload to be evaluated and left pending",
        )
        assert "insufficient" in _cond(pending, "QuotaReserved")["message"].lower()
        assert not _true(pending, "Admitted")

        assert wait_for(lambda: _finished(cluster, first), 180, "the first JobSet to finish") == "Completed"
        res = cluster.wait_admitted("research", "quota-second", timeout=180)
        assert res.admitted, res.reason
    finally:
        _delete_and_wait(cluster, first, second)


@pytest.mark.usefixtures("tpu_quota")
def test_higher_priority_preempts_lower(cluster, spec):
    low = _jobset(spec, "prio-low", slices=2, priority="low", complete_after="3600s")
    high = _jobset(spec, "prio-high", slices=1, priority="high", complete_after="3600s")
    try:
        cluster.apply([low], field_manager=FM)
        assert cluster.wait_admitted("research", "prio-low", timeout=120).admitted
        wait_for(lambda: len([p for p in _pods(cluster, low) if p["status"].get("phase") == "Running"]) == 8, 180, "the low-priority pods to run")

        cluster.apply([high], field_manager=FM)
        res = cluster.wait_admitted("research", "prio-high", timeout=240)
        assert res.admitted, res.reason
        low_wl = wait_for(lambda: (w := _workload(cluster, low)) and _true(w, "Evicted") and w, 60, "the low Workload to be evicted")
        assert _cond(low_wl, "Evicted")["reason"] == "Preempted"
        assert not _true(low_wl, "Admitted")
    finally:
        _delete_and_wait(cluster, low, high)


# ------------------------------------------------- Stage C: placement, lifecycle


@pytest.mark.usefixtures("tpu_quota")
def test_two_slices_one_node_pool_each_then_succeed(cluster, spec, local_cluster):
    js = _jobset(spec, "two-slices", slices=2, complete_after="5s")
    kube = local_cluster.client()
    pool_of = {n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL] for n in kube.list(kube.resource("v1", "Node"))}
    try:
        cluster.apply([js], field_manager=FM)
        assert cluster.wait_admitted("research", "two-slices", timeout=120).admitted
        running = wait_for(
            lambda: (ps := _pods(cluster, js)) and len(ps) == 8 and all(p["status"].get("phase") == "Running" for p in ps) and ps,
            180,
            "all 8 pods Running",
        )
        pools_by_slice: dict[str, set[str]] = {}
        for p in running:
            idx = p["metadata"]["labels"][JOBSET_JOB_INDEX_LABEL]
            pools_by_slice.setdefault(idx, set()).add(pool_of[p["spec"]["nodeName"]])
        assert sorted(pools_by_slice) == ["0", "1"]
        assert all(len(pools) == 1 for pools in pools_by_slice.values()), pools_by_slice
        assert pools_by_slice["0"] != pools_by_slice["1"], pools_by_slice
        assert {next(iter(v)) for v in pools_by_slice.values()} == set(spec.tpu_pools[0].node_pool_names())

        assert wait_for(lambda: _finished(cluster, js), 180, "the JobSet to finish") == "Completed"
        assert all(p["status"]["phase"] == "Succeeded" for p in _pods(cluster, js))
    finally:
        _delete_and_wait(cluster, js)


@pytest.mark.usefixtures("tpu_quota")
def test_failing_pods_restart_the_jobset_up_to_max_restarts(cluster, spec):
    # Exit code 42 is retryable under the toolkit's podFailurePolicy (1 and 2 fail fast).
    js = _jobset(spec, "restarts", slices=1, fail_exit_code=42, max_restarts=2)
    try:
        cluster.apply([js], field_manager=FM)
        assert cluster.wait_admitted("research", "restarts", timeout=120).admitted
        assert wait_for(lambda: _finished(cluster, js), 240, "the JobSet to fail after its restarts") == "Failed"
        live = cluster.jobset("research", "restarts")
        assert live["status"].get("restarts") == 2
    finally:
        _delete_and_wait(cluster, js)


@pytest.mark.usefixtures("tpu_quota")
def test_non_retryable_exit_code_fails_without_restart(cluster, spec):
    js = _jobset(spec, "fail-fast", slices=1, fail_exit_code=1, max_restarts=3)
    try:
        cluster.apply([js], field_manager=FM)
        assert cluster.wait_admitted("research", "fail-fast", timeout=120).admitted
        assert wait_for(lambda: _finished(cluster, js), 180, "the JobSet to fail") == "Failed"
        assert (cluster.jobset("research", "fail-fast")["status"].get("restarts") or 0) == 0
    finally:
        _delete_and_wait(cluster, js)
