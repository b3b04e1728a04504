"""tpu7x multislice DCN networking (spec network.dcn): spec checks, the run's JobSet, the
in-cluster objects and the CRDs they need, and (synth tier) the Terraform side.

Expected values come from the spec and from published settings, not from the renderer:
the TCP receive buffers Google's TPU collectives benchmark expects on every TPU node
(https://github.com/AI-Hypercomputer/tpu-recipes/blob/main/microbenchmarks/trillium/collectives/cluster_toolkit/README.md)
and MegaScale's gRPC told to use the DCN NICs. The local cluster applies the objects in
tests/integration/test_multinetwork.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from infra.spec import load_spec, parse_spec
from tests.support import EXAMPLES
from toolkit.errors import SpecError
from workloads.local import addons
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset as js
from workloads.render import multinetwork as mn

EXAMPLE = EXAMPLES / "tpu7x-multislice.yaml"
PLAYBOOK_RMEM = "4096 41943040 314572800"  # net.ipv4.tcp_rmem as that benchmark README sets it
PLAYBOOK_FLAG = "--megascale_grpc_interface_prefixes=eth1,eth2,lo"


def _raw() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _pod(obj: dict) -> dict:
    return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def _env(obj: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _pod(obj)["spec"]["containers"][0]["env"]}


def test_example_defaults_are_the_playbooks() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.network.dcn is not None and spec.network.dcn.tcp_rmem == PLAYBOOK_RMEM
    assert spec.cluster.dataplane_v2


def test_multislice_run_uses_eth1_on_the_pod_network() -> None:
    spec = load_spec(EXAMPLE)
    plan = plan_run("maxtext-6b", spec, Overrides(slices=2, name="ms"))
    assert plan.target.dcn is not None and not plan.policy.host_network
    obj = js.jobset(plan)
    env = _env(obj)
    assert PLAYBOOK_FLAG in env["LIBTPU_INIT_ARGS"].split()
    # The recipe's own LIBTPU flags are all still there, before the added one.
    recipe_flags = dict(plan.program.env).get("LIBTPU_INIT_ARGS", "").split()
    assert env["LIBTPU_INIT_ARGS"].split()[: len(recipe_flags)] == recipe_flags
    ann = _pod(obj)["metadata"]["annotations"]
    assert ann["networking.gke.io/default-interface"] == "eth0"
    ifaces = json.loads(ann["networking.gke.io/interfaces"])
    assert ifaces == [{"interfaceName": "eth0", "network": "default"}, {"interfaceName": "eth1", "network": spec.network.dcn.gke_network}]
    assert _pod(obj)["spec"]["securityContext"]["sysctls"] == [{"name": "net.ipv4.tcp_rmem", "value": PLAYBOOK_RMEM}]


def test_single_slice_and_plain_specs_are_unchanged() -> None:
    spec = load_spec(EXAMPLE)
    one = js.jobset(plan_run("maxtext-6b", spec, Overrides(slices=1, name="one")))
    assert "annotations" not in _pod(one)["metadata"] and "sysctls" not in _pod(one)["spec"]["securityContext"]
    assert PLAYBOOK_FLAG not in (_env(one).get("LIBTPU_INIT_ARGS") or "")
    plain = load_spec(EXAMPLES / "default.yaml")
    two = js.jobset(plan_run("maxtext-6b", plain, Overrides(slices=2, name="two")))
    assert PLAYBOOK_FLAG not in (_env(two).get("LIBTPU_INIT_ARGS") or "")


def test_host_network_run_uses_the_hosts_eth1_and_the_daemonsets_sysctl() -> None:
    data = _raw()
    data["teams"][0]["host_network"] = True
    spec = parse_spec(data)
    obj = js.jobset(plan_run("maxtext-6b", spec, Overrides(slices=2, name="hn", host_network=True)))
    pod = _pod(obj)
    assert pod["spec"]["hostNetwork"] is True
    # A host-network pod may not set network sysctls, and has no interfaces of its own to ask for.
    assert "sysctls" not in pod["spec"]["securityContext"] and "annotations" not in pod["metadata"]
    assert PLAYBOOK_FLAG in _env(obj)["LIBTPU_INIT_ARGS"]


def test_flag_is_not_added_twice() -> None:
    env = [{"name": "LIBTPU_INIT_ARGS", "value": "--a=1 --megascale_grpc_interface_prefixes=eth1"}]
    assert js._libtpu_args(env, PLAYBOOK_FLAG)[0]["value"] == "--a=1 --megascale_grpc_interface_prefixes=eth1"
    assert js._libtpu_args([], PLAYBOOK_FLAG) == [{"name": "LIBTPU_INIT_ARGS", "value": PLAYBOOK_FLAG}]


def test_network_objects_name_the_stacks_vpc_and_subnet() -> None:
    spec = load_spec(EXAMPLE)
    gnp, net, ds = mn.network_objects(spec)
    assert gnp["kind"] == "GKENetworkParamSet" and net["kind"] == "Network"
    assert gnp["spec"] == {"vpc": "ironwood-ms-dcn", "vpcSubnet": "ironwood-ms-dcn", "deviceMode": "NetDevice"}
    assert net["spec"]["type"] == "Device" and net["spec"]["parametersRef"]["name"] == gnp["metadata"]["name"]
    assert net["metadata"]["name"] == spec.network.dcn.gke_network
    # The DaemonSet: only TPU nodes, in the host's network namespace, the spec's value.
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "cloud.google.com/gke-tpu-accelerator", "operator": "Exists"}]
    (init,) = pod["initContainers"]
    assert {"name": "TCP_RMEM", "value": PLAYBOOK_RMEM} in init["env"]
    assert mn.network_objects(load_spec(EXAMPLES / "default.yaml")) == []


def test_daemonset_script_sets_and_checks_the_value(tmp_path: Path) -> None:
    """Run the init container's script with a stand-in sysctl that records what it is asked."""
    import os
    import subprocess

    spec = load_spec(EXAMPLE)
    (init,) = mn.tcp_tuning_daemonset(spec)["spec"]["template"]["spec"]["initContainers"]
    state = tmp_path / "rmem"
    fake = tmp_path / "sysctl"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-w" ]; then echo "${{2#*=}}" > {state}; else tr " " "\\t" < {state}; fi\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "TCP_RMEM": PLAYBOOK_RMEM}
    r = subprocess.run(init["command"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert state.read_text().strip() == PLAYBOOK_RMEM
    # A kernel that does not take the value fails the init container (the pod never turns Ready).
    fake.write_text("#!/bin/sh\necho '4096 131072 6291456'\n")
    assert subprocess.run(init["command"], env=env, capture_output=True, timeout=120).returncode != 0


def test_crds_serve_the_kinds_the_renderer_uses() -> None:
    crds = {d["spec"]["names"]["kind"]: d for d in addons.gke_networking_crds()}
    spec = load_spec(EXAMPLE)
    for obj in mn.network_objects(spec)[:2]:
        crd = crds[obj["kind"]]
        group, version = obj["apiVersion"].split("/")
        assert crd["spec"]["group"] == group and crd["spec"]["scope"] == "Cluster"
        (v,) = crd["spec"]["versions"]
        assert v["name"] == version and v["served"] and v["storage"]
        props = v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        assert set(obj["spec"]) <= set(props), obj["kind"]
    assert (
        "NetDevice" in crds["GKENetworkParamSet"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["deviceMode"]["enum"]
    )


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda d: d["cluster"].update(dataplane_v2=False), "network.dcn"),
        (lambda d: d["network"]["dcn"].update(cidr="10.200.0.0/28"), "network.dcn.cidr"),
        (lambda d: d["network"]["dcn"].update(cidr="10.0.0.0/16"), "network.dcn.cidr"),
        (lambda d: d["network"]["dcn"].update(tcp_rmem="4096 big 1"), "network.dcn.tcp_rmem"),
    ],
)
def test_bad_dcn_settings_name_the_field(change, field: str) -> None:
    data = _raw()
    change(data)
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert e.value.field == field, str(e.value)


# ------------------------------------------------------------------ the Terraform side (real synth)


@pytest.mark.synth
def test_stack_has_the_second_vpc_on_every_tpu_node(tmp_path: Path) -> None:
    from infra.stack import synth

    spec = load_spec(EXAMPLE)
    doc = json.loads(synth(spec, tmp_path).read_text())
    res = doc["resource"]
    (cluster,) = res["google_container_cluster"].values()
    assert cluster["datapath_provider"] == "ADVANCED_DATAPATH" and cluster["enable_multi_networking"] is True
    nets = {k: v for k, v in res["google_compute_network"].items() if v["name"] == "ironwood-ms-dcn"}
    ((net_id, net),) = nets.items()
    assert net["mtu"] == spec.network.dcn.mtu
    subnets = {k: v for k, v in res["google_compute_subnetwork"].items() if v["name"] == "ironwood-ms-dcn"}
    ((sub_id, sub),) = subnets.items()
    assert sub["ip_cidr_range"] == spec.network.dcn.cidr and "secondary_ip_range" not in sub
    (fw,) = [f for f in res["google_compute_firewall"].values() if f["name"] == "ironwood-ms-dcn-internal"]  # (the example's Lustre has its own)
    assert fw["source_ranges"] == [spec.network.dcn.cidr] and fw["direction"] == "INGRESS" and net_id in fw["network"]
    tpu_pools = {p["name"]: p for p in res["google_container_node_pool"].values() if p["name"] != spec.cpu_pool.name}
    assert set(tpu_pools) == set(spec.tpu_pools[0].node_pool_names())
    for p in tpu_pools.values():
        (extra,) = p["network_config"]["additional_node_network_configs"]
        assert net_id in extra["network"] and sub_id in extra["subnetwork"]
    cpu = [p for p in res["google_container_node_pool"].values() if p["name"] == spec.cpu_pool.name]
    assert all("network_config" not in p for p in cpu)
    # xpk.enabled: the workload policy carries xpk's name, which its pods select.
    (policy,) = res["google_compute_resource_policy"].values()
    assert policy["name"] == "tpu7x-256-4x4x8-placement-policy"


# ------------------------------------------------------------------ checkov's Kubernetes policies on the DaemonSet

# What the TCP-tuning DaemonSet is flagged for, and why each is accepted, is listed once: in
# tests/test_k8s_policy.py's ACCEPTED (kind DaemonSet), which scans it with every other manifest.


@pytest.mark.tools
def test_daemonset_findings_are_exactly_the_accepted_ones(tmp_path: Path) -> None:
    from tests.test_k8s_policy import ACCEPTED, run_checkov
    from workloads.render import yamlio

    accepted = {a.check for a in ACCEPTED if a.kind == "DaemonSet"}

    ds = mn.tcp_tuning_daemonset(load_spec(EXAMPLE))
    (tmp_path / "ds.yaml").write_text(yamlio.dump_all([ds]))
    report = run_checkov(tmp_path)
    failed = {f["check_id"] for f in report["results"]["failed_checks"] if f["resource"].startswith("DaemonSet.")}
    assert report["summary"]["passed"] > 0
    assert not failed - accepted, f"unaccepted: {sorted(failed - accepted)}"
    assert not accepted - failed, f"accepted but passing now (remove): {sorted(accepted - failed)}"


def test_local_up_applies_what_queues_apply_does_with_the_crds_gke_serves(tmp_path) -> None:
    """`local up` (and its reuse) applies kueue.cluster_objects, after the GKE networking CRDs when the spec has network.dcn."""
    from workloads.local import addons
    from workloads.local.controlplane import LocalCluster
    from workloads.render import kueue
    from workloads.render.admission import admission_objects
    from workloads.render.netpol import network_policies

    class Kube:
        def __init__(self) -> None:
            self.applied: list[list[str]] = []

        def apply(self, objs, **_):
            self.applied.append([o["kind"] for o in objs])
            return objs

    dcn = load_spec(EXAMPLES / "tpu7x-multislice.yaml")
    plain = load_spec(EXAMPLES / "default.yaml")
    assert [o["kind"] for o in kueue.cluster_objects(dcn)][-3:] == ["GKENetworkParamSet", "Network", "DaemonSet"]
    assert kueue.cluster_objects(plain) == [*kueue.queue_objects(plain), *network_policies(plain), *admission_objects(plain)]
    for spec, crds in ((dcn, True), (plain, False)):
        kube = Kube()
        LocalCluster(state_dir=tmp_path)._apply_cluster_objects(kube, spec)
        expected = [[o["kind"] for o in kueue.cluster_objects(spec)]]
        if crds:
            expected.insert(0, [o["kind"] for o in addons.gke_networking_crds()])
        assert kube.applied == expected
