"""Ironwood on the local cluster: dynamic slicing through Kueue's topology-aware scheduling and the slice controllers.

The cluster (``<test state>-ironwood``, its own control plane) has a dynamically sliced tpu7x pool of
two 4x4x4 sub-blocks (32 kwok nodes labelled with GKE's block, sub-block and partition labels) and
a tpu7x 2x2x2 pool. The real Kueue admits each run through its topology-aware scheduling and the
``accelerator.gke.io/slice`` admission check, whose controller and GKE's slice forming the
rehearsal daemon plays (workloads/local/slices.py); the real JobSet controller makes the pods.

* a sub-slice (2x2x2) is admitted only once its Slice is ACTIVE, and its pods run on the nodes of
  exactly one 2x2x2 partition, the Slice's;
* a faulty sub-block (``local fault``) fails the Slice; Kueue evicts the run and places it again,
  on the healthy sub-block, with a new Slice; the time from the fault to Running is printed (a
  figure, not asserted);
* a super-slice (4x4x8) takes both sub-blocks, one Slice of two partitions;
* parallel containers are accepted by the API server and run;
* a Pathways run with an elastic slice (the real JobSet controller, its startup and success
  policies): its head runs on the CPU pool and its workers on the 2x2x2 slices; a preempted slice
  is replaced by its Job while the head and the other slice keep their pods (processes), and the
  program's step counter goes on from its last checkpoint; the time from the preemption to the
  next step is printed (a figure, not asserted).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import run_module
from tests.support.local_cluster import own_spec, start_own_cluster, wait_for
from toolkit.names import GKE_NODEPOOL_LABEL, GKE_TPU_TOPOLOGY_LABEL, JOBSET_NAME_LABEL
from workloads.planning.dynamic_slices import partition_id_label

NS = "llm"
SPEC: dict[str, Any] = own_spec(
    "ironwood",
    region="us-central1",
    zones=["us-central1-c"],
    cluster={"name": "ironwood", "release_channel": "RAPID"},
    cpu_pool={"machine_type": "n2-highmem-32", "min_nodes": 1, "max_nodes": 1},  # a Pathways head's size
    tpu_pools=[
        {
            "name": "cubes",
            "generation": "tpu7x",
            "topology": "4x4x4",
            "slices": 2,
            "dynamic_slicing": True,
            "capacity": {"mode": "reservation", "name": "ironwood-all-capacity", "zone": "us-central1-c"},
        },
        {"name": "pw", "generation": "tpu7x", "topology": "2x2x2", "slices": 2, "capacity": "on-demand"},
    ],
    teams=[{"name": "llm", "namespace": NS}],
    buckets=[{"name": "my-tpu-project-ironwood-ckpt", "purpose": "checkpoints"}, {"name": "my-tpu-project-ironwood-artifacts", "purpose": "artifacts"}],
)


@pytest.fixture(scope="module")
def ironwood(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    yield from start_own_cluster("ironwood", SPEC, tmp_path_factory.mktemp("ironwood"))


def wl(*args: str, timeout: float = 300):
    return run_module("workloads", *args, timeout=timeout)


def _submit(lc: Any, spec: Path, run: str, *extra: str) -> None:
    r = wl("submit", "maxtext-6b", "--spec", str(spec), "--kubeconfig", str(lc.kubeconfig), "--name", run, "--no-wait", *extra)
    assert r.returncode == 0, (r.stdout, r.stderr)


def _pods(kube: Any, run: str) -> list[dict[str, Any]]:
    return kube.list(kube.resource("v1", "Pod"), NS, label_selector=f"{JOBSET_NAME_LABEL}={run}")


def _slices(kube: Any) -> list[dict[str, Any]]:
    return kube.list(kube.resource("accelerator.gke.io/v1beta1", "Slice"))


def _running(kube: Any, run: str, n: int) -> list[dict[str, Any]] | None:
    pods = [p for p in _pods(kube, run) if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods) else None


def _nodes(kube: Any) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in kube.list(kube.resource("v1", "Node"))}


def test_a_sub_slice_runs_on_one_partition_and_moves_off_a_faulty_sub_block(ironwood):
    lc, spec = ironwood
    kube = lc.client()
    _submit(lc, spec, "sub", "--topology", "2x2x2", "--rehearse-seconds", "600")
    pods = wait_for(lambda: _running(kube, "sub", 2), 180, "the sub-slice run Running")
    (sl,) = _slices(kube)
    assert sl["spec"]["topology"] == "2x2x2" and len(sl["spec"]["partitionIds"]) == 1
    assert next(c for c in sl["status"]["conditions"] if c["type"] == "Ready")["reason"] == "ACTIVE"
    nodes = _nodes(kube)
    level = partition_id_label("2x2x2")
    placed = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][level] for p in pods}
    assert placed == set(sl["spec"]["partitionIds"])  # both pods on the Slice's one partition
    for p in pods:
        assert nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_TPU_TOPOLOGY_LABEL] == "2x2x2"  # formed by the slice
    sub_block = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_NODEPOOL_LABEL] for p in pods}
    assert len(sub_block) == 1
    faulty = sub_block.pop()

    t0 = time.monotonic()
    r = wl("local", "fault", faulty, "--state-dir", str(lc.state_dir))
    assert r.returncode == 0, r.stderr
    old = {p["metadata"]["uid"] for p in pods}

    def moved() -> list[dict[str, Any]] | None:
        now = _running(kube, "sub", 2)
        return now if now and not ({p["metadata"]["uid"] for p in now} & old) else None

    pods2 = wait_for(moved, 240, "the run Running again off the faulty sub-block")
    elapsed = time.monotonic() - t0
    nodes = _nodes(kube)
    assert {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_NODEPOOL_LABEL] for p in pods2} != {faulty}
    (sl2,) = _slices(kube)
    assert sl2["spec"]["partitionIds"] != sl["spec"]["partitionIds"]
    sys.stderr.write(f"\n[figure] faulty sub-block -> the run Running on a healthy one: {elapsed:.1f} s\n")
    assert wl("delete", "sub", "--spec", str(spec), "--kubeconfig", str(lc.kubeconfig), "--yes").returncode == 0
    wait_for(lambda: not _slices(kube) or None, 120, "the run's Slice deleted with it")
    assert wl("local", "fault", faulty, "--repair", "--state-dir", str(lc.state_dir)).returncode == 0


def test_a_super_slice_takes_whole_sub_blocks(ironwood):
    lc, spec = ironwood
    kube = lc.client()
    _submit(lc, spec, "super", "--topology", "4x4x8", "--rehearse-seconds", "600")
    pods = wait_for(lambda: _running(kube, "super", 32), 240, "the super-slice run Running")
    (sl,) = [s for s in _slices(kube) if "super" in s["metadata"]["name"]]
    assert sl["spec"]["topology"] == "4x4x8" and len(sl["spec"]["partitionIds"]) == 2
    nodes = _nodes(kube)
    assert len({nodes[p["spec"]["nodeName"]]["metadata"]["labels"][GKE_NODEPOOL_LABEL] for p in pods}) == 2
    assert wl("delete", "super", "--spec", str(spec), "--kubeconfig", str(lc.kubeconfig), "--yes").returncode == 0


def test_parallel_containers_are_accepted_and_run(ironwood):
    lc, spec = ironwood
    kube = lc.client()
    _submit(lc, spec, "par", "--pool", "pw", "--parallel-containers", "--rehearse-seconds", "30")
    pods = wait_for(lambda: _running(kube, "par", 2), 180, "the parallel-container run Running")
    for p in pods:
        assert [c["name"] for c in p["spec"]["containers"]] == ["workload", "workload-2"]
        assert [c["resources"]["limits"]["google.com/tpu"] for c in p["spec"]["containers"]] == ["2", "2"]
    assert wl("delete", "par", "--spec", str(spec), "--kubeconfig", str(lc.kubeconfig), "--yes").returncode == 0


def _head_log(lc: Any, kube: Any, run: str) -> tuple[dict[str, Any], str]:
    from workloads.local.rehearsald import pod_log_file

    (head,) = [p for p in _pods(kube, run) if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "pathways-head"]
    path = pod_log_file(lc.state_dir, NS, head["metadata"]["name"])
    return head, path.read_text() if path.is_file() else ""


def _steps(text: str) -> list[int]:
    import re

    return [int(m) for m in re.findall(r"completed step: (\d+),", text)]


def test_an_elastic_slice_is_replaced_while_the_head_and_the_other_slice_keep_running(ironwood):
    lc, spec = ironwood
    kube = lc.client()
    args = ("--runtime", "pathways", "--pool", "pw", "--slices", "2", "--elastic-slices", "1", "--max-slice-restarts", "3")
    _submit(lc, spec, "elastic", *args, "--checkpoint-every", "0.5", "--rehearse-seconds", "300")
    pods = wait_for(lambda: _running(kube, "elastic", 5), 180, "the Pathways head and 4 workers Running")
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    slice_of = {p["metadata"]["uid"]: p["metadata"]["labels"].get("jobset.sigs.k8s.io/job-index") for p in pods}
    role = {p["metadata"]["uid"]: p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods}
    head, _ = _head_log(lc, kube, "elastic")
    assert head["spec"]["nodeName"].startswith("gke-ironwood-cpu-")
    wait_for(lambda: max(_steps(_head_log(lc, kube, "elastic")[1]) or [0]) >= 8 or None, 120, "8 steps done")
    # A save after step 0 before the slice goes, so the resume shows the counter going on (a loaded host saves later).
    wait_for(
        lambda: any(int(x) > 0 for x in re.findall(r"checkpoint save for step (\d+)", _head_log(lc, kube, "elastic")[1])) or None, 180, "a save after step 0"
    )

    t0 = time.monotonic()
    r = wl("local", "preempt", "elastic", "--slice", "1", "--spec", str(spec), "--state-dir", str(lc.state_dir))
    assert r.returncode == 0, r.stderr

    def resumed() -> str | None:
        text = _head_log(lc, kube, "elastic")[1]
        after = text.split("Elastic: slice 1 back", 1)
        return text if len(after) == 2 and "completed step" in after[1] else None

    text = wait_for(resumed, 240, "the program's next step after the slice came back")
    elapsed = time.monotonic() - t0
    before, after = text.split("Elastic: slice 1 back", 1)
    lost_at, first_after = max(_steps(before)), _steps(after)[0]
    assert "Elastic: slice 1 lost after step" in before
    saved = [int(x) for x in re.findall(r"checkpoint save for step (\d+)", before)]
    assert saved and first_after == max(saved) + 1 and first_after > 1  # the counter goes on from the last checkpoint
    assert first_after <= lost_at + 1
    now = {p["metadata"]["uid"] for p in _running(kube, "elastic", 5) or []}
    kept = {u for u in uid.values() if role[u] == "pathways-head" or slice_of[u] == "0"}
    assert kept <= now  # the head and slice 0 kept their pods (processes)
    assert not ({u for u in uid.values() if role[u] == "worker" and slice_of[u] == "1"} & now)  # slice 1's were replaced
    sys.stderr.write(f"\n[figure] elastic slice replacement -> the next step: {elapsed:.1f} s (lost after step {lost_at}, resumed at step {first_after})\n")
    assert wl("delete", "elastic", "--spec", str(spec), "--kubeconfig", str(lc.kubeconfig), "--yes").returncode == 0
