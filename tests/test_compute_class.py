"""The ComputeClass path (`tpu_pools[].compute_class`): the spec, the class and flavor `queues apply` applies, the stack."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from infra import cloud_checks
from infra.catalog import gke_version_tuple
from infra.spec import COMPUTE_CLASS_MIN_GKE_VERSION
from tests.support import cli, example_doc, spec_from
from toolkit.errors import SpecError
from toolkit.names import GKE_COMPUTE_CLASS_LABEL
from workloads.render.kueue import queue_objects

CAPACITY = [
    {"mode": "reservation", "name": "trillium-res-1", "zone": "us-east5-b"},
    {"mode": "reservation", "name": "trillium-res-2", "zone": "us-east5-b"},
    "on-demand",
    {"mode": "flex-start", "max_run_seconds": 86400},
    "spot",
]


def class_doc(**pool: Any) -> dict[str, Any]:
    doc = copy.deepcopy(example_doc("fallback"))  # v6e-16 x 2 in us-east5-b
    doc["tpu_pools"][0] |= {"capacity": copy.deepcopy(CAPACITY), "compute_class": True, **pool}
    return doc


def test_the_pool_is_one_flavor_and_no_node_pools():
    spec = spec_from(class_doc())
    pool = spec.tpu_pools[0]
    assert pool.class_name == "v6e-16" and pool.node_pool_names() == []
    # Every listed option is a priority, reservations one by one: GKE tries them, nothing is folded.
    assert [o.mode for o in pool.capacity_options()] == ["reservation", "reservation", "on-demand", "flex-start", "spot"]
    assert spec.flavor_names() == ["v6e-16"] and spec.flavor_slices() == {"v6e-16": 2}
    assert spec.tpu_nodes == 2 * 4  # its slices once, whichever priority they come from
    assert pool.run_mode == "spot"  # runs are planned for the most interruption-prone priority
    assert spec_from(class_doc(compute_class={"name": "trillium", "active_migration": False})).tpu_pools[0].class_name == "trillium"


def test_the_gke_floor_is_the_compute_class_one_or_higher():
    doc = copy.deepcopy(example_doc("default"))  # v5e, whose own floor is lower
    assert spec_from(doc).gke_version_floor != COMPUTE_CLASS_MIN_GKE_VERSION
    doc["tpu_pools"][0]["compute_class"] = True
    assert spec_from(doc).gke_version_floor == COMPUTE_CLASS_MIN_GKE_VERSION
    floor = spec_from(class_doc()).gke_version_floor or ""
    assert gke_version_tuple(floor) > gke_version_tuple(COMPUTE_CLASS_MIN_GKE_VERSION)  # flex-start's is higher, and kept
    doc["cluster"]["min_version"] = "1.30.1-gke.1000000"
    with pytest.raises(SpecError) as e:
        spec_from(doc)
    assert e.value.field == "cluster.min_version" and "ComputeClasses" in e.value.problem and "tpu_pools[0].compute_class" in e.value.problem


def _objects(spec) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in queue_objects(spec)}


def test_the_class_lists_the_priorities_in_the_spec_order():
    spec = spec_from(class_doc())
    objs = _objects(spec)
    cls = objs[("ComputeClass", "v6e-16")]
    assert cls["apiVersion"] == "cloud.google.com/v1"
    prios = cls["spec"]["priorities"]
    assert [p["tpu"] for p in prios] == [{"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"}] * 5
    assert [p.get("reservations", {}).get("specific", [{}])[0].get("name") for p in prios] == ["trillium-res-1", "trillium-res-2", None, None, None]
    assert all(p.get("reservations", {"affinity": "Specific"})["affinity"] == "Specific" for p in prios)
    assert prios[3]["flexStart"] == {"enabled": True} and prios[3]["maxRunDurationSeconds"] == 86400
    assert prios[4]["spot"] is True and "spot" not in prios[2] and "flexStart" not in prios[2]
    assert cls["spec"]["nodePoolAutoCreation"] == {"enabled": True} and cls["spec"]["activeMigration"] == {"optimizeRulePriority": True}
    assert cls["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert cls["spec"]["nodePoolConfig"]["serviceAccount"] == "fallback-nodes@my-tpu-project.iam.gserviceaccount.com"
    # The flavor selects the class: Kueue writes its labels into the admitted pods' nodeSelector, and its toleration.
    flavor = objs[("ResourceFlavor", "v6e-16")]["spec"]
    assert flavor["nodeLabels"][GKE_COMPUTE_CLASS_LABEL] == "v6e-16"
    assert {"key": GKE_COMPUTE_CLASS_LABEL, "operator": "Equal", "value": "v6e-16", "effect": "NoSchedule"} in flavor["tolerations"]
    kinds = [o["kind"] for o in queue_objects(spec)]
    assert kinds.index("ComputeClass") < kinds.index("ResourceFlavor")


def test_a_pool_without_a_class_renders_none():
    assert not [o for o in queue_objects(spec_from("fallback")) if o["kind"] == "ComputeClass"]


def test_tpu7x_priorities_are_placed_by_the_workload_policy():
    doc = copy.deepcopy(example_doc("tpu7x"))
    doc["tpu_pools"][0]["compute_class"] = True
    spec = spec_from(doc)
    (cls,) = [o for o in queue_objects(spec) if o["kind"] == "ComputeClass"]
    policy = spec.workload_policy_name(spec.tpu_pools[0])
    assert policy and all(p["placement"] == {"policyName": policy} for p in cls["spec"]["priorities"])


@pytest.mark.parametrize(
    "pool, field, words",
    [
        ({"capacity": []}, "tpu_pools[0].capacity", "empty list"),  # a class with no options
        ({"capacity": ["on-demand", {"mode": "flex-start", "queued": True}]}, "tpu_pools[0].capacity[1].queued", "queued provisioning"),
        ({"autoscaling": True}, "tpu_pools[0].autoscaling", "implied"),
        ({"compute_class": {"nme": "x"}}, "tpu_pools[0].compute_class.nme", "unknown key"),
        ({"capacity": [CAPACITY[0], CAPACITY[0]]}, "tpu_pools[0].capacity[1]", "repeats capacity[0]"),  # a reservation named twice
    ],
)
def test_bad_classes_name_the_field(pool, field, words):
    with pytest.raises(SpecError) as e:
        spec_from(class_doc(**pool))
    assert e.value.field == field and words in str(e.value)


def test_an_option_the_generation_cannot_have_is_refused():
    doc = copy.deepcopy(example_doc("v4"))
    doc["tpu_pools"][0] |= {"capacity": ["on-demand", "flex-start"], "compute_class": True}
    with pytest.raises(SpecError) as e:
        spec_from(doc)
    assert e.value.field == "tpu_pools[0].capacity[1].mode" and "v4" in e.value.problem


def test_two_classes_of_one_name_are_refused():
    doc = class_doc(compute_class={"name": "tpus"})
    doc["tpu_pools"].append({"name": "v6e-8", "type": "v6e-8", "zone": "us-east5-b", "capacity": ["spot"], "compute_class": {"name": "tpus"}})
    with pytest.raises(SpecError) as e:
        spec_from(doc)
    assert e.value.field == "tpu_pools[1].compute_class.name"


def test_the_cli_refuses_with_one_line_and_writes_nothing(tmp_path: Path):
    import yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(class_doc(capacity=[])))
    proc = cli("infra", "synth", "--spec", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("error: tpu_pools[0].capacity: ") and not (tmp_path / "out").exists()


def test_quota_counts_the_class_slices_once_per_quota():
    spec = spec_from(class_doc())  # flex-start and spot both spend the preemptible quota: 32 chips at once, not 64
    needs = {q.quota_id: sum(u.chips for u in users) for q, users in cloud_checks._quota_plan(spec)[0].items()}
    assert needs == {"TPUS-PER-TPU-FAMILY-per-project-region": 32, "PREEMPTIBLE-TPU-V6E-per-project-region": 32}


@pytest.mark.synth
def test_the_stack_declares_no_tpu_node_pools_and_caps_auto_provisioning(tmp_path: Path):
    from infra.stack import synth

    spec = spec_from(class_doc())
    doc = json.loads(synth(spec, tmp_path / "s").read_text())
    assert [p["name"] for p in doc["resource"]["google_container_node_pool"].values()] == [spec.cpu_pool.name]
    (cluster,) = doc["resource"]["google_container_cluster"].values()
    nap = cluster["cluster_autoscaling"]
    limits = {r["resource_type"]: r["maximum"] for r in nap["resource_limits"]}
    assert limits == spec.auto_provisioning_limits() and limits["tpu-v6e-slice"] == 32
    assert limits["cpu"] == spec.cpu_nodes * 8 + 8 * 180  # n2-standard-8 CPU nodes + two slices of four ct6e-standard-4t VMs
    assert nap["auto_provisioning_locations"] == ["us-east5-b"]
    assert nap["auto_provisioning_defaults"]["service_account"].endswith(".email}")  # the node SA, not the Compute default
    # Without a class the cluster has no auto-provisioning at all (existing clusters' plans do not change).
    plain = json.loads(synth(spec_from("fallback"), tmp_path / "p").read_text())
    assert all("cluster_autoscaling" not in c for c in plain["resource"]["google_container_cluster"].values())


def test_pool_commands_leave_a_class_pool_alone(tmp_path: Path):
    """GKE owns a class pool's node pools: delete-tpu must never become an untargeted destroy plan."""
    import yaml

    spec = tmp_path / "class.yaml"
    spec.write_text(yaml.safe_dump(class_doc()))
    for cmd in (["pools", "delete-tpu", "--pool", "v6e-16"], ["pools", "scale-to-zero", "--pool", "v6e-16"], ["pools", "status", "--pool", "v6e-16"]):
        proc = (
            cli("infra", *cmd, "--spec", str(spec), "--out", str(tmp_path / "out"), "--dry-run")
            if cmd[1] == "delete-tpu"
            else cli("infra", *cmd, "--spec", str(spec), "--dry-run")
        )
        assert proc.returncode == 2 and proc.stderr.startswith("error: --pool: v6e-16 is a compute class pool"), (cmd, proc.stderr)
    proc = cli("infra", "pools", "delete-tpu", "--spec", str(spec), "--out", str(tmp_path / "out"), "--dry-run")
    assert proc.returncode == 2 and "nothing to delete" in proc.stderr and not (tmp_path / "out").exists()


def test_infra_spec_names_the_class(tmp_path: Path):
    import yaml

    spec = tmp_path / "class.yaml"
    spec.write_text(yaml.safe_dump(class_doc()))
    proc = cli("infra", "spec", "--spec", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert "compute class v6e-16 (GKE creates the slices)" in proc.stdout
    assert json.loads(cli("infra", "spec", "--spec", str(spec), "-o", "json").stdout)["tpu_pools"][0]["compute_class"] == "v6e-16"


# --------------------------------------------- rehearsal: the local cluster plays the class's autoscaler


def _pending_run(kube, spec, run: str = "run-1", slices: int = 2, ns: str = "default") -> None:
    """A run Kueue admitted to the class's flavor: per slice a Job whose pods carry the flavor's nodeSelector, unscheduled."""
    from toolkit.names import JOBSET_JOB_INDEX_LABEL, K8S_JOB_NAME_LABEL

    (flavor,) = [o for o in queue_objects(spec) if o["kind"] == "ResourceFlavor"]
    for j in range(slices):
        for i in range(spec.tpu_pools[0].shape.nodes):
            kube.put(
                {
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{run}-slice-{j}-{i}",
                        "namespace": ns,
                        "labels": {K8S_JOB_NAME_LABEL: f"{run}-slice-{j}", JOBSET_JOB_INDEX_LABEL: str(j)},
                    },
                    "spec": {"nodeSelector": dict(flavor["spec"]["nodeLabels"]), "tolerations": flavor["spec"]["tolerations"]},
                    "status": {"phase": "Pending"},
                }
            )


def _class_nodes(kube) -> list[dict[str, Any]]:
    from tests.test_capacity import _Info

    return kube.list(_Info("Node"))


def _tick(tmp_path: Path, kube, spec, class_refuse: int = 0) -> None:
    from workloads.local import provisioner

    provisioner.configure(tmp_path, class_refuse=class_refuse)
    p = provisioner.Provisioner(tmp_path, kube)
    p.spec = lambda: spec  # type: ignore[method-assign]
    p.tick(0.0)


def test_rehearsal_makes_whole_slices_from_the_first_priority(tmp_path: Path):
    from tests.test_capacity import FakeKube
    from toolkit.names import GKE_NODEPOOL_LABEL, TGK_RESERVATION_LABEL, TGK_SLICE_INDEX_LABEL

    spec, kube = spec_from(class_doc()), FakeKube()
    _pending_run(kube, spec)
    _tick(tmp_path, kube, spec)
    made = _class_nodes(kube)
    assert len(made) == 2 * 4  # two slices of four VMs, whole
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for n in made:
        by_pool.setdefault(n["metadata"]["labels"][GKE_NODEPOOL_LABEL], []).append(n)
    assert len(by_pool) == 2 and all(len(v) == 4 for v in by_pool.values())  # one auto-created node pool per slice
    labels = made[0]["metadata"]["labels"]
    assert labels[GKE_COMPUTE_CLASS_LABEL] == "v6e-16" and labels[TGK_RESERVATION_LABEL] == "trillium-res-1"
    assert {n["metadata"]["labels"][TGK_SLICE_INDEX_LABEL] for n in made} == {"0", "1"}
    assert {"key": GKE_COMPUTE_CLASS_LABEL, "value": "v6e-16", "effect": "NoSchedule"} in made[0]["spec"]["taints"]
    # Every label the run's pods select is on the nodes: the scheduler can place them.
    selector = next(o for (k, _, _), o in kube.objs.items() if k == "Pod")["spec"]["nodeSelector"]
    assert selector.items() <= labels.items()
    _tick(tmp_path, kube, spec)
    assert len(_class_nodes(kube)) == 8  # nothing twice for slices that have their nodes


def test_rehearsal_falls_to_the_next_priority_when_the_first_are_refused(tmp_path: Path):
    from tests.test_capacity import FakeKube
    from toolkit.names import GKE_SPOT_LABEL, TGK_CAPACITY_LABEL, TGK_RESERVATION_LABEL

    spec = spec_from(class_doc())  # res-1, res-2, on-demand, flex-start, spot
    kube = FakeKube()
    _pending_run(kube, spec, slices=1)
    _tick(tmp_path, kube, spec, class_refuse=2)  # both reservations out of capacity
    labels = _class_nodes(kube)[0]["metadata"]["labels"]
    assert labels[TGK_CAPACITY_LABEL] == "on-demand" and TGK_RESERVATION_LABEL not in labels and GKE_SPOT_LABEL not in labels
    kube2 = FakeKube()
    _pending_run(kube2, spec, slices=1)
    _tick(tmp_path, kube2, spec, class_refuse=4)
    assert _class_nodes(kube2)[0]["metadata"]["labels"][GKE_SPOT_LABEL] == "true"
    kube3 = FakeKube()
    _pending_run(kube3, spec, slices=1)
    _tick(tmp_path, kube3, spec, class_refuse=5)  # no priority has capacity: the pods stay pending
    assert _class_nodes(kube3) == []


def test_rehearsal_removes_a_slice_when_its_run_is_over(tmp_path: Path):
    from tests.test_capacity import FakeKube

    spec, kube = spec_from(class_doc()), FakeKube()
    _pending_run(kube, spec, run="a", slices=1)
    _pending_run(kube, spec, run="b", slices=1)
    _tick(tmp_path, kube, spec)
    assert len(_class_nodes(kube)) == 8
    for (kind, _ns, name), obj in list(kube.objs.items()):
        if kind == "Pod" and name.startswith("a-"):
            obj["status"]["phase"] = "Succeeded"  # run a finished; run b still runs
        elif kind == "Pod":
            obj["spec"]["nodeName"] = "somewhere"
            obj["status"]["phase"] = "Running"
    _tick(tmp_path, kube, spec)
    left = _class_nodes(kube)
    assert len(left) == 4 and all(n["metadata"]["annotations"]["tpu-gke-toolkit.io/class-slice"] == "default/b-slice-0" for n in left)


def test_the_local_crd_serves_the_class_queues_apply_renders():
    from workloads.local import addons

    (crd,) = addons.load_docs(addons.COMPUTE_CLASS_CRD)
    (cls,) = [o for o in queue_objects(spec_from(class_doc())) if o["kind"] == "ComputeClass"]
    group, version = cls["apiVersion"].split("/")
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["scope"]) == (group, "ComputeClass", "Cluster")
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == [version]
    assert "namespace" not in cls["metadata"]
