"""The DCN network's Kubernetes objects on the real API server (examples/tpu7x-multislice.yaml).

First the toolkit's own GKE networking CRDs (GKE serves its own; the local cluster has
none), then the rendered GKENetworkParamSet, Network and TCP-tuning DaemonSet, applied as
``queues apply`` applies them. The DaemonSet's pods land on the TPU nodes only. The run's
pod template (eth1 annotations, the tcp_rmem sysctl) is created, server-side dry run, in a
namespace that enforces Pod Security ``baseline``, as a team's namespace does.
"""

from __future__ import annotations

import copy

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES
from tests.support.local_cluster import wait_for
from toolkit.errors import ClusterError
from toolkit.names import K8S_PSA_ENFORCE_LABEL, TGK_FIELD_MANAGER
from workloads.local import addons
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset as js
from workloads.render import multinetwork as mn

EXAMPLE = EXAMPLES / "tpu7x-multislice.yaml"
PROBE_NS = "dcn-probe"


def _install_crds(cluster) -> None:
    crds = addons.gke_networking_crds()
    cluster.apply(crds, field_manager=TGK_FIELD_MANAGER)
    info = cluster.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")

    def established():
        for crd in crds:
            live = cluster.get(info, crd["metadata"]["name"]) or {}
            if not any(c["type"] == "Established" and c["status"] == "True" for c in (live.get("status") or {}).get("conditions") or []):
                return None
        return True

    wait_for(established, 60, "the GKE networking CRDs to be established", interval=0.5)
    cluster.forget_discovery()


def test_network_objects_apply_and_tune_every_tpu_node(cluster) -> None:
    spec = load_spec(EXAMPLE)
    _install_crds(cluster)
    objects = mn.network_objects(spec)
    stored = cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    gnp, net, ds = stored
    assert gnp["spec"]["deviceMode"] == "NetDevice" and net["spec"]["type"] == "Device"

    # The CRDs' schemas hold: a device mode GKE does not have is refused.
    bad = copy.deepcopy(objects[0])
    bad["metadata"]["name"] = "dcn-bad"
    bad["spec"]["deviceMode"] = "Turbo"
    with pytest.raises(ClusterError) as e:
        cluster.apply([bad], field_manager=TGK_FIELD_MANAGER, dry_run=True)
    assert "deviceMode" in str(e.value)

    ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
    node_info = cluster.resource("v1", "Node")
    tpu_nodes = {n["metadata"]["name"] for n in cluster.list(node_info) if "cloud.google.com/gke-tpu-accelerator" in n["metadata"]["labels"]}
    assert tpu_nodes, "the local cluster has no TPU nodes"
    pod_info = cluster.resource("v1", "Pod")

    def on_every_tpu_node():
        pods = cluster.list(pod_info, ns, label_selector=f"app.kubernetes.io/name={name}")
        placed = {p["spec"].get("nodeName") for p in pods}
        return pods if placed == tpu_nodes else None

    try:
        pods = wait_for(on_every_tpu_node, 120, "a tuning pod on every TPU node and on no other", interval=0.5)
        assert all(p["spec"]["hostNetwork"] for p in pods)
    finally:
        cluster.delete(cluster.resource("apps/v1", "DaemonSet"), name, ns)


def test_run_pod_with_eth1_and_tcp_rmem_passes_pod_security_baseline(cluster) -> None:
    spec = load_spec(EXAMPLE)
    plan = plan_run("maxtext-6b", spec, Overrides(slices=2, name="dcn-run"))
    template = js.jobset(plan)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    cluster.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NS, "labels": {K8S_PSA_ENFORCE_LABEL: "baseline"}}}],
        field_manager=TGK_FIELD_MANAGER,
    )
    spec_ = copy.deepcopy(template["spec"])
    spec_["serviceAccountName"] = "default"
    spec_.pop("priorityClassName", None)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dcn-run-0", "namespace": PROBE_NS, **copy.deepcopy(template["metadata"])}, "spec": spec_}
    stored = cluster.create(pod, dry_run=True)
    assert stored["spec"]["securityContext"]["sysctls"] == [{"name": "net.ipv4.tcp_rmem", "value": spec.network.dcn.tcp_rmem}]
    assert "eth1" in stored["metadata"]["annotations"]["networking.gke.io/interfaces"]
    # The same pod on the host network is refused by baseline: the tuning for such runs is the DaemonSet's.
    host = copy.deepcopy(pod)
    host["spec"]["hostNetwork"] = True
    host["spec"].pop("securityContext")
    with pytest.raises(ClusterError) as e:
        cluster.create(host, dry_run=True)
    assert "hostNetwork" in str(e.value)
