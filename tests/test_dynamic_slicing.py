"""Dynamic slicing: a run's sub-slice or super-slice (--topology), what it asks of Kueue and GKE, and the local nodes' partitions.

The annotations and the Topology's levels are the ones GKE's Kueue slice controller reads and
writes (its JobSet webhook, its topology parsing: SupportedSubsliceTopologies, 4x4x4 sub-blocks)
and Cluster Toolkit's dynamic-slicing Kueue template; the whole admission runs on the real
API server, Kueue and JobSet in tests/integration/test_ironwood.py.
"""

from __future__ import annotations

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, cli
from workloads.local import nodes, slices
from workloads.planning.dynamic_slices import partition_id_label, partition_state_label, run_name_budget
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import dynamic_slicing, jobset, kueue

SPEC = EXAMPLES / "tpu7x-dynamic-slicing.yaml"


def _plan(topology: str, **kw):
    return plan_run("maxtext-6b", load_spec(SPEC), Overrides(topology=topology, **kw))


@pytest.mark.parametrize(
    ("topology", "nodes", "kind", "level", "size"),
    [
        ("2x2x1", 1, "sub", "2x2x1", 1),
        ("2x2x2", 2, "sub", "2x2x2", 2),
        ("2x4x4", 8, "sub", "2x4x4", 8),
        ("4x4x4", 16, "super", "4x4x4", 16),
        ("4x4x8", 32, "super", "4x4x4", 16),
        ("4x8x8", 64, "super", "4x4x4", 16),
    ],
)
def test_the_run_asks_kueue_for_its_slice_in_one_partition_domain(topology: str, nodes: int, kind: str, level: str, size: int):
    plan = _plan(topology)
    t = plan.target
    assert (t.shape.topology, t.nodes, t.dynamic.kind) == (topology, nodes, kind)
    assert t.shape.machine_type == "tpu7x-ultranet-4t" or t.nodes == 1  # the pool's VM type
    assert t.placement_policy is None
    js = jobset.jobset(plan)
    assert "annotations" not in js["metadata"]  # no one-slice-per-node-pool rule: Kueue places the slices
    tmpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert tmpl["metadata"]["annotations"] == {
        "cloud.google.com/gke-tpu-slice-topology": topology,
        "kueue.x-k8s.io/podset-required-topology": "cloud.google.com/gce-topology-block",
        "kueue.x-k8s.io/podset-slice-required-topology": partition_id_label(level),
        "kueue.x-k8s.io/podset-slice-size": str(size),
    }
    assert tmpl["spec"]["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu7x"}
    (term,) = tmpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # the same term holds the toolkit's own: no pool with a VM cordoned as a bad host (workloads/runs/badhost.py)
    assert term == {
        "matchExpressions": [
            {"key": "tpu-gke-toolkit.io/degraded-slice", "operator": "DoesNotExist"},
            {"key": partition_state_label(level), "operator": "In", "values": ["HEALTHY"]},
        ]
    }
    # Every pod's chips fill its slice, as the slice controller's webhook requires.
    assert tmpl["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] * nodes == t.shape.chips


@pytest.mark.parametrize(
    ("topology", "words"),
    [
        ("1x2x2", "tpu7x has no dynamic slice '1x2x2'"),
        ("2x4x2", "tpu7x has no dynamic slice"),
        ("3x4x4", "tpu7x has no dynamic slice"),
        ("8x4x4", "tpu7x has no dynamic slice"),  # GKE wants the smallest side first
        ("4x8x16", "is 512 chips, and pool tpu7x-cubes's 4 sub-blocks hold 256"),
    ],
)
def test_a_slice_the_generation_or_the_pool_cannot_have_is_refused(topology: str, words: str):
    with pytest.raises(PlanError, match=words):
        _plan(topology)


def test_several_sub_slices_fit_the_pools_chips_not_its_node_pools():
    plan = _plan("2x2x2", slices=8)  # 8 x 8 chips on 4 sub-blocks of 64
    assert plan.target.slices == 8 and plan.target.nodes == 16
    with pytest.raises(PlanError, match="pass --slices 2 or fewer"):
        _plan("4x4x8", slices=3)


def test_topology_on_a_pool_that_is_not_sliced_is_refused_in_one_line():
    proc = cli("workloads", "submit", "maxtext-6b", "--spec", str(EXAMPLES / "tpu7x.yaml"), "--topology", "2x2x2", "--dry-run")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --topology: pool tpu7x-256 is not dynamically sliced (on-demand capacity")
    assert "spot, flex-start and on-demand cannot be sliced" in line


def test_other_runtimes_and_long_names_are_refused():
    with pytest.raises(PlanError, match="the job runtime has no slice controller integration"):
        _plan("2x2x2", runtime="job")
    budget = run_name_budget("llm", 1)
    assert budget == 49 - len("llm-jobset-") - len("-abcde") - len("-slice-0")
    with pytest.raises(PlanError, match=f"allow at most {budget}"):
        _plan("2x2x2", name="x" * (budget + 1))


def test_kueue_objects_name_the_topology_and_the_slice_check_on_the_pools_flavor_only():
    objs = kueue.queue_objects(load_spec(SPEC))
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    topo = by[("Topology", "tpu7x-cubes-slices")]
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [
        "cloud.google.com/gce-topology-block",
        *(partition_id_label(t) for t in ("4x4x4", "2x4x4", "2x2x4", "2x2x2", "2x2x1")),
        "kubernetes.io/hostname",
    ]
    assert by[("AdmissionCheck", "tpu7x-cubes-slice")]["spec"] == {"controllerName": "accelerator.gke.io/slice"}
    flavor = by[("ResourceFlavor", "tpu7x-cubes")]["spec"]
    assert flavor["topologyName"] == "tpu7x-cubes-slices" and "cloud.google.com/gke-tpu-topology" not in flavor["nodeLabels"]
    cq = by[("ClusterQueue", "llm-cq")]["spec"]
    assert cq["admissionChecksStrategy"] == {"admissionChecks": [{"name": "tpu7x-cubes-slice", "onFlavors": ["tpu7x-cubes"]}]}
    # The Topology and the check are applied before the flavor and the ClusterQueue that name them.
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert names.index(("Topology", "tpu7x-cubes-slices")) < names.index(("ResourceFlavor", "tpu7x-cubes"))
    # Other examples are untouched.
    assert not dynamic_slicing.queue_objects(load_spec(EXAMPLES / "tpu7x-multislice.yaml"))


def test_local_nodes_carry_gke_partitions_nested_in_their_sub_block():
    spec = load_spec(SPEC)
    tpu = [n for n in nodes.node_objects(spec) if "cloud.google.com/gke-tpu-accelerator" in n["metadata"]["labels"]]
    assert len(tpu) == 64
    for n in tpu:
        labels = n["metadata"]["labels"]
        assert "cloud.google.com/gke-tpu-topology" not in labels and "cloud.google.com/placement-policy-name" not in labels
        assert labels["cloud.google.com/gke-accelerator-topology-mode"] == "PROVISION_ONLY"
        assert all(labels[partition_state_label(t)] == "HEALTHY" for t in slices.HOSTS)
    # Each partition of a shape holds that shape's hosts, inside one sub-block; sub-blocks share the block.
    for shape, hosts in slices.HOSTS.items():
        groups: dict[str, set[str]] = {}
        for n in tpu:
            groups.setdefault(n["metadata"]["labels"][partition_id_label(shape)], set()).add(n["metadata"]["labels"]["cloud.google.com/gke-nodepool"])
        assert len(groups) == 64 // hosts and all(len(pools) == 1 for pools in groups.values())
    assert len({n["metadata"]["labels"]["cloud.google.com/gce-topology-block"] for n in tpu}) == 1
