"""The pure parts of the local cluster (no processes): nodes, install rewriting, CLI wiring.

These run in the default tier; they live here beside the integration tests of
the same code.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from toolkit.names import GKE_PLACEMENT_POLICY_LABEL, KWOK_NODE_ANNOTATION, TPU_RESOURCE
from workloads.local import addons, nodes

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_nodes_match_the_spec(example):
    spec = load_spec(example)
    objs = nodes.node_objects(spec)
    names = [n["metadata"]["name"] for n in objs]
    assert len(names) == len(set(names))
    assert all(len(n) <= 63 for n in names)
    tpu = [n for n in objs if TPU_RESOURCE in n["status"]["capacity"]]
    assert len(tpu) == sum(p.total_nodes for p in spec.tpu_pools)
    for pool in spec.tpu_pools:
        for np_name in pool.node_pool_names():
            members = [n for n in tpu if n["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == np_name]
            assert len(members) == pool.shape.nodes
            for n in members:
                labels = n["metadata"]["labels"]
                assert labels["cloud.google.com/gke-tpu-accelerator"] == pool.shape.accelerator_label
                assert labels["cloud.google.com/gke-tpu-topology"] == pool.shape.topology
                assert labels["topology.kubernetes.io/zone"] == spec.pool_zone(pool)
                assert n["status"]["allocatable"][TPU_RESOURCE] == str(pool.shape.chips_per_vm)
                assert n["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
                assert n["metadata"]["annotations"][KWOK_NODE_ANNOTATION] == "fake"
                has_policy = GKE_PLACEMENT_POLICY_LABEL in labels
                assert has_policy == (pool.shape.generation.name == "tpu7x" and pool.shape.multi_host)


def test_install_objects_point_webhooks_at_localhost():
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "kueue-system"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kueue-webhook-server-cert", "namespace": "kueue-system"}},
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "workloads.render.kueue.x-k8s.io"},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}}}}},
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


def test_kwok_stages_are_instant_by_default_and_fail_stage_is_exclusive():
    published = [
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "pod-complete"},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {"matchExpressions": []},
                "delay": {"durationMilliseconds": 1000, "jitterDurationMilliseconds": 5000, "durationFrom": {"expressionFrom": "x"}},
            },
        },
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "node-heartbeat-with-lease"},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"}, "delay": {"durationMilliseconds": 600000}},
        },
    ]
    out = addons.kwok_stages(published)
    complete = out[0]["spec"]
    assert complete["delay"] == {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": "x"}}
    assert {"key": f'.metadata.labels["{addons.FAIL_LABEL}"]', "operator": "DoesNotExist"} in complete["selector"]["matchExpressions"]
    assert out[1]["spec"]["delay"] == {"durationMilliseconds": 600000}  # node stages untouched
    assert out[-1]["metadata"]["name"] == "tgk-pod-fail"


def test_cli_registers_local_without_heavy_imports():
    code = (
        "import sys, workloads.cli as c; c._register();"
        "names = [g.name for g in c.app.registered_groups];"
        "assert 'local' in names, names;"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'cryptography') or m.startswith('workloads.local.')];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
