"""The pure parts of the local cluster (no processes): nodes, install rewriting, CLI wiring.

The fast tier; the same code against a real control plane is tested in
tests/integration/test_local_cluster.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from tests.support import EXAMPLE_FILES
from toolkit.names import GKE_PLACEMENT_POLICY_LABEL, KWOK_NODE_ANNOTATION, TPU_RESOURCE
from workloads.local import addons, nodes


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_nodes_match_the_spec(example):
    spec = load_spec(example)
    objs = nodes.node_objects(spec)
    names = [n["metadata"]["name"] for n in objs]
    assert len(names) == len(set(names))
    assert all(len(n) <= 63 for n in names)
    tpu = [n for n in objs if TPU_RESOURCE in n["status"]["capacity"]]
    # queued-provisioning node pools stay empty until the simulated DWS provisions them; a ComputeClass
    # pool has none until the simulated node auto-provisioning makes a slice for an admitted run
    standing = [(p, o) for p in spec.tpu_pools if p.compute_class is None for o in p.capacity_options() if not nodes.is_queued(o)]
    assert len(tpu) == sum(p.slices * p.shape.nodes for p, _ in standing)
    for pool, option in standing:
        for np_name in pool.option_node_pool_names(option):
            members = [n for n in tpu if n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == np_name]
            assert len(members) == pool.shape.nodes
            for n in members:
                labels = n["metadata"]["labels"]
                assert labels["cloud.google.com/gke-tpu-accelerator"] == pool.shape.accelerator_label
                # A dynamically sliced sub-block has no slice topology until a Slice on it is formed.
                assert labels.get("cloud.google.com/gke-tpu-topology") == (None if pool.dynamic_slicing else pool.shape.topology)
                assert labels["topology.kubernetes.io/zone"] == spec.pool_zone(pool)
                assert n["status"]["allocatable"][TPU_RESOURCE] == str(pool.shape.chips_per_vm)
                assert n["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
                assert n["metadata"]["annotations"][KWOK_NODE_ANNOTATION] == "fake"
                has_policy = GKE_PLACEMENT_POLICY_LABEL in labels
                assert has_policy == (pool.shape.generation.name == "tpu7x" and pool.shape.multi_host and not pool.dynamic_slicing)


def test_install_objects_point_webhooks_at_localhost():
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "kueue-system"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kueue-webhook-server-cert", "namespace": "kueue-system"}},
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "workloads.render.kueue.x-k8s.io"},
            "spec": {
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {"clientConfig": {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}}},
                }
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "kueue-validating-webhook-configuration"},
            "webhooks": [{"name": "v.kb.io", "clientConfig": {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system"}}}],
        },
    ]
    out = addons.install_objects(addons.KUEUE, docs, 19443)
    kinds = [o["kind"] for o in out]
    assert "Deployment" not in kinds
    assert kinds[0] == "Namespace" and kinds[-1] == "ValidatingWebhookConfiguration"
    svc = next(o for o in out if o["kind"] == "Service")
    assert svc["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    crd = next(o for o in out if o["kind"] == "CustomResourceDefinition")
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"] == 19443
    vwc = next(o for o in out if o["kind"] == "ValidatingWebhookConfiguration")
    assert vwc["webhooks"][0]["clientConfig"]["service"]["port"] == 19443
    assert "port" not in docs[3]["spec"]["conversion"]["webhook"]["clientConfig"]["service"]  # input untouched


def test_kueue_and_jobset_do_not_share_ports_or_cert_dirs(tmp_path):
    k = addons.kueue_config(webhook_port=1, health_port=2, cert_dir=tmp_path / "k")
    j = addons.jobset_config(webhook_port=3, health_port=4, cert_dir=tmp_path / "j")
    assert k["webhook"]["certDir"] != j["webhook"]["certDir"]
    assert k["webhook"]["port"] != j["webhook"]["port"]
    assert k["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
    assert k["featureGates"] == {"VisibilityOnDemand": False}


def test_local_kueue_gets_the_specs_wait_for_pods_ready_scaled_by_the_rehearsal_factor(tmp_path):
    from infra.spec import DEFAULT_SPEC_PATH, load_spec
    from workloads.render.kueue import manager_settings

    spec = load_spec(DEFAULT_SPEC_PATH)
    settings = manager_settings(spec, time_scale=0.03)
    k = addons.kueue_config(webhook_port=1, health_port=2, cert_dir=tmp_path / "k", settings=settings)
    w = k["waitForPodsReady"]
    # The spec's (derived) timeout x 0.03: the local timeline runs GKE's faster, by the same factor as the rehearsal.
    assert w["timeout"] == f"{round(spec.wait_for_pods_ready[0] * 0.03)}s"
    assert w["requeuingStrategy"]["timestamp"] == "Eviction"
    assert k["webhook"]["port"] == 1 and k["integrations"]  # the base is kept under the spec's part
    assert "waitForPodsReady" not in addons.kueue_config(webhook_port=1, health_port=2, cert_dir=tmp_path / "k")


def _published() -> list[dict]:
    def pod_stage(name: str, delay: dict) -> dict:
        return {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "selector": {"matchExpressions": []}, "delay": delay},
        }

    return [
        pod_stage("pod-complete", {"durationMilliseconds": 1000, "jitterDurationMilliseconds": 5000, "durationFrom": {"expressionFrom": "x"}}),
        pod_stage("pod-delete", {"durationMilliseconds": 1000, "jitterDurationFrom": {"expressionFrom": ".metadata.deletionTimestamp"}}),
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "node-heartbeat-with-lease"},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"}, "selector": {"matchExpressions": []}, "delay": {"durationMilliseconds": 600000}},
        },
    ]


def _keys(stage: dict) -> dict[str, dict]:
    return {e["key"]: e for e in stage["spec"]["selector"]["matchExpressions"]}


def test_kwok_stages_are_instant_by_default_and_end_pods_like_a_kubelet():
    out = {st["metadata"]["name"]: st for st in addons.kwok_stages(_published())}
    complete = out["pod-complete"]["spec"]
    assert complete["delay"] == {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": "x"}}
    keys = _keys(out["pod-complete"])
    # Pods labelled to fail, rehearsal pods (they end at their finish time) and disrupted pods never "complete".
    assert keys[f'.metadata.labels["{addons.FAIL_LABEL}"]']["operator"] == "DoesNotExist"
    assert keys[f'.metadata.labels["{addons.REHEARSAL_LABEL}"]']["operator"] == "DoesNotExist"
    assert [e for k, e in keys.items() if "DisruptionTarget" in k] == [{"key": addons._DISRUPTED, "operator": "In", "values": ["false"]}]
    # pod-delete: only once the containers stopped, and at once (no grace-period jitter).
    delete = out["pod-delete"]["spec"]
    assert delete["delay"] == {"durationMilliseconds": 0}
    assert _keys(out["pod-delete"])[".status.phase"] == {"key": ".status.phase", "operator": "NotIn", "values": ["Pending", "Running"]}
    # Node stages: untouched delays, and a node marked down stays down.
    node = out["node-heartbeat-with-lease"]["spec"]
    assert node["delay"] == {"durationMilliseconds": 600000}
    assert _keys(out["node-heartbeat-with-lease"])[f'.metadata.annotations["{addons.NODE_DOWN_ANNOTATION}"]']["operator"] == "DoesNotExist"
    assert list(out)[-3:] == ["tgk-pod-fail", "tgk-pod-terminate", "tgk-rehearsal-complete"]


def test_terminate_stage_stops_deleted_or_disrupted_pods_with_sigterm():
    st = {s["metadata"]["name"]: s for s in addons.kwok_stages([])}["tgk-pod-terminate"]
    keys = _keys(st)
    assert keys[".status.phase"]["values"] == ["Pending", "Running"]
    (deleted_or_disrupted,) = [k for k in keys if "deletionTimestamp" in k]
    assert "DisruptionTarget" in deleted_or_disrupted and keys[deleted_or_disrupted]["values"] == ["true"]
    tpl = st["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in tpl and f"$code := {addons.SIGTERM_EXIT_CODE}" in tpl
    assert "conditions" not in tpl  # a strategic merge patch: the DisruptionTarget condition stays
    done = {s["metadata"]["name"]: s for s in addons.kwok_stages([])}["tgk-rehearsal-complete"]
    assert done["spec"]["delay"]["durationFrom"] == {"expressionFrom": f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]'}
    assert _keys(done)[f'.metadata.annotations["{addons.FINISH_AT_ANNOTATION}"]']["operator"] == "Exists"


# ------------------------------------------------------------------ rehearsals (pure)


def _plan(recipe: str = "maxtext-6b", slices: int = 2):
    from infra.spec import DEFAULT_SPEC_PATH
    from workloads.planning.planner import Overrides, plan_run

    return plan_run(recipe, load_spec(DEFAULT_SPEC_PATH), Overrides(slices=slices, name="rh-pure"))


def test_rehearsal_seconds_come_from_the_plan_scaled_or_from_the_flag(monkeypatch):
    from toolkit.errors import FieldError
    from workloads.local import rehearsal

    plan = _plan()
    monkeypatch.delenv(rehearsal.TIME_FACTOR_ENV, raising=False)
    est = plan.program.estimated_run_seconds
    assert rehearsal.rehearsal_seconds(plan) == pytest.approx(est * rehearsal.DEFAULT_TIME_FACTOR)
    assert rehearsal.rehearsal_seconds(plan, 7) == 7.0
    monkeypatch.setenv(rehearsal.TIME_FACTOR_ENV, "0.01")
    assert rehearsal.rehearsal_seconds(plan) == pytest.approx(est * 0.01)
    monkeypatch.setenv(rehearsal.TIME_FACTOR_ENV, "1000")
    assert rehearsal.rehearsal_seconds(plan) == rehearsal.MAX_SECONDS
    monkeypatch.setenv(rehearsal.TIME_FACTOR_ENV, "fast")
    with pytest.raises(FieldError, match=rehearsal.TIME_FACTOR_ENV):
        rehearsal.rehearsal_seconds(plan)
    monkeypatch.delenv(rehearsal.TIME_FACTOR_ENV)
    assert rehearsal.rehearsal_seconds(_plan("hello-tpu", 1)) == rehearsal.COMMAND_SECONDS
    with pytest.raises(FieldError, match="--rehearse-seconds"):
        rehearsal.rehearsal_seconds(plan, -1)


def test_decorate_adds_only_the_rehearsal_label_and_annotation():
    import copy

    from workloads.local import rehearsal
    from workloads.render.jobset import run_objects

    plan = _plan()
    gke = run_objects(plan)
    kept = copy.deepcopy(gke)
    local = rehearsal.decorate(gke, plan, seconds=9)
    assert gke == kept  # what GKE gets is untouched
    meta = local[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert meta["labels"].pop(addons.REHEARSAL_LABEL) == "true"
    facts = rehearsal.Rehearsal.from_annotation(meta["annotations"].pop(addons.REHEARSAL_ANNOTATION))
    if not meta["annotations"]:
        meta.pop("annotations")
    assert local == kept
    assert facts.run == "rh-pure" and facts.workers == plan.target.nodes == 8 and facts.steps == plan.program.steps
    assert facts.wall_seconds == 9 and facts.step_seconds == pytest.approx(plan.program.estimated_step_seconds)
    assert facts.checkpoint_period == plan.policy.checkpoint.period_steps and facts.autocheckpoint
    assert rehearsal.Rehearsal.from_annotation(facts.to_annotation()) == facts


def test_decorate_gives_a_rayjob_its_stand_in_job_time():
    from infra.spec import DEFAULT_SPEC_PATH
    from workloads.local import kuberay, rehearsal
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render.rayjob import run_objects

    plan = plan_run("llama3-8b", load_spec(DEFAULT_SPEC_PATH), Overrides(runtime="ray", name="rh-ray"))
    gke = run_objects(plan)
    local = rehearsal.decorate(gke, plan, seconds=12.5)
    rayjob = next(o for o in local if o["kind"] == "RayJob")
    assert kuberay.job_seconds(rayjob) == 12.5
    assert all(addons.RAY_JOB_SECONDS_ANNOTATION not in (o["metadata"].get("annotations") or {}) for o in gke)
    planned = rehearsal.decorate(gke, plan)  # no flag: the plan's estimate x the time factor
    assert kuberay.job_seconds(next(o for o in planned if o["kind"] == "RayJob")) == pytest.approx(rehearsal.rehearsal_seconds(plan), abs=1e-3)
    assert "stand-in Ray job runs 12.5 s (--rehearse-seconds)" in rehearsal.summary(plan, 12.5)


def test_rehearsal_log_is_maxtext_format_and_follows_the_plan():
    from workloads.local import rehearsal
    from workloads.observe import metrics
    from workloads.observe.metrics import Hardware

    plan = _plan()
    r = rehearsal.Rehearsal.of(plan, 10.0)
    log = rehearsal.MaxTextLog(r, "rh-pure-slice-0-0-abcde", 0)
    t0 = 1_700_000_000.0
    lines = log.start(t0) + log.joined(t0, 41)
    for step in range(42, r.steps):
        lines += log.step(rehearsal.step_end(r, t0, 42, step), step, 42)
    assert all(" stderr F " in line and line.endswith("\n") for line in lines)  # CRI records, as kwok reads them
    text = "".join(line.split(" stderr F ", 1)[1] for line in lines)
    assert "restoring from this run's directory step 41" in text
    run = metrics.parse_log(text)
    assert [s.step for s in run.steps] == list(range(42, 100))
    assert run.num_devices == plan.target.devices and run.config["run_name"] == "rh-pure"
    steady = [s for s in run.steps if s.step >= 44]
    summ = metrics.summarize(steady, hardware=Hardware.from_shape(plan.target.shape, 2), first_steady_step=44)
    assert summ.step_seconds_median == pytest.approx(plan.program.estimated_step_seconds, rel=0.02)
    assert summ.mfu == pytest.approx(plan.program.estimated_mfu, rel=0.03)
    # The clock: every step the same wall time; the attempt ends after the steps left.
    assert rehearsal.finish_time(r, t0, 42) == pytest.approx(t0 + 58 * r.wall_step_seconds)
    assert rehearsal.steps_done_by(r, t0, 42, t0 + 3.5 * r.wall_step_seconds) == 45
    assert log.preempted(t0, 44) and "save for step 44" in log.preempted(t0, 44)[-1]


def test_rehearse_seconds_is_refused_off_the_local_cluster():
    from toolkit.errors import FieldError
    from workloads import runs

    plan = runs.plan("hello-tpu", load_spec(EXAMPLES_DIR / "default.yaml"), runs.Overrides(name="off-local"))

    class Other:
        context = "gke_my-project_us-east5_tpu-dev"

        def find_run(self, namespace, name):
            return None

        def apply(self, objects, **_):
            self.applied = objects

    other = Other()
    with pytest.raises(FieldError) as err:
        runs.apply(other, plan, rehearse_seconds=5.0)  # type: ignore[arg-type]
    assert str(err.value).startswith("--rehearse-seconds: the context is 'gke_my-project_us-east5_tpu-dev', not the local cluster's (tgk-local)")
    assert not hasattr(other, "applied")
    sub = runs.apply(other, plan)  # type: ignore[arg-type]
    assert sub.note == "" and list(sub.applied) == other.applied
    assert not any(addons.REHEARSAL_LABEL in str(o) for o in other.applied)  # applied as rendered, not as a rehearsal


def test_replacement_records_the_nodes_as_local_up_made_them(tmp_path):
    from workloads.local import disrupt

    spec = load_spec(EXAMPLES_DIR / "default.yaml")
    node = nodes.tpu_nodes(spec, spec.tpu_pools[0])[0]
    live = {
        **node,
        "metadata": {**node["metadata"], "uid": "u1", "resourceVersion": "9"},
        "spec": {"unschedulable": True, "taints": node["spec"]["taints"] + [dict(disrupt.IMPENDING_TERMINATION_TAINT)]},
    }
    snap = disrupt._snapshot(live)
    assert snap == node
    rec = disrupt.Replacement(pool="p", nodes=[snap], preempted_at=1.0, down_at=2.0, up_at=6.0)
    path = rec.save(tmp_path)
    assert path == disrupt.replacements_dir(tmp_path) / "p.json"
    assert disrupt.Replacement.load(path) == rec


def test_cli_registers_local_without_heavy_imports():
    code = (
        "import sys, workloads.cli as c; c._register();"
        "names = [g.name for g in c.app.registered_groups];"
        "assert 'local' in names, names;"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'cryptography') or m.startswith('workloads.local.')];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
