"""Parallel containers on tpu7x (``--parallel-containers``): what they change in the pod and in MaxText's process layout.

The pods are compared with the layout xpk and Cluster Toolkit render for tpu7x (the training
container twice, each with 2 of the VM's 4 chips, the same command) and the process layout with
GKE's TPU device plugin's environment per container (TPU_CHIPS_PER_HOST_BOUNDS 1,2,1 for two
chips); the objects are validated by the real API server in tests/integration/test_ironwood.py.
"""

from __future__ import annotations

import pytest

from infra.spec import load_spec
from tests.support import EXAMPLES, cli
from tests.support.specs import spec_from
from workloads.planning import parallel_containers as pc
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import job, jobset


def _plan(example: str = "tpu7x", recipe: str = "maxtext-6b", **kw):
    return plan_run(recipe, load_spec(EXAMPLES / f"{example}.yaml"), Overrides(name="pc", **kw))


def _pod(plan) -> dict:
    return jobset.jobset(plan)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_the_pod_holds_two_containers_of_two_chips_running_the_same_program():
    one, two = _pod(_plan()), _pod(_plan(parallel_containers=True))
    assert [c["name"] for c in one["containers"]] == ["workload"]
    assert [c["name"] for c in two["containers"]] == ["workload", "workload-2"]
    assert one["containers"][0]["resources"]["limits"]["google.com/tpu"] == 4
    assert [c["resources"]["limits"]["google.com/tpu"] for c in two["containers"]] == [2, 2]
    a, b = two["containers"]
    assert (a["image"], a["command"], a["args"], a["env"]) == (b["image"], b["command"], b["args"], b["env"])
    assert "ports" in a and "ports" not in b  # two processes of a pod cannot hold the same ports
    # Everything else about the pod is what it was.
    assert {k: v for k, v in one.items() if k != "containers"} == {k: v for k, v in two.items() if k != "containers"}


def test_the_process_layout_doubles_processes_not_devices():
    plain, par = _plan(), _plan(parallel_containers=True)
    assert par.target.devices == plain.target.devices == 256  # tpu7x 4x4x8: 128 chips x 2 TensorCores
    assert (plain.target.processes, par.target.processes) == (32, 64)
    assert par.program.args == plain.program.args  # MaxText's mesh and batch: the same devices
    layout = par.summary()["parallel_containers"]
    assert layout == {
        "containers_per_pod": 2,
        "chips_per_container": 2,
        "jax_processes": 64,
        "devices_per_process": 4,
        "tpu_chips_per_host_bounds": "1,2,1",
        "tpu_host_bounds": "4,2,8",  # 4x4x8 chips over 1x2x1 per container
    }
    assert "parallel_containers" not in plain.summary()


def test_device_plugin_bounds_match_its_table():
    # GKE's TPU device plugin: 4 chips -> 2,2,1 per host, so a 4x4x8 slice has 2,2,8 hosts; 2 chips -> 1,2,1 and 4,2,8 processes.
    assert (pc.chips_per_host_bounds(4), pc.host_bounds("4x4x8", 4)) == ("2,2,1", "2,2,8")
    assert (pc.chips_per_host_bounds(2), pc.host_bounds("4x4x8", 2)) == ("1,2,1", "4,2,8")


def test_multislice_leaves_megascale_to_gke_per_container():
    plain = _pod(_plan("tpu7x-multislice", slices=2))
    par = _pod(_plan("tpu7x-multislice", slices=2, parallel_containers=True))
    names = lambda c: {e["name"] for e in c["env"]}  # noqa: E731
    assert {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_PORT"} <= names(plain["containers"][0])
    for c in par["containers"]:
        assert not any(n.startswith("MEGASCALE_") for n in names(c))
        libtpu = next(e["value"] for e in c["env"] if e["name"] == "LIBTPU_INIT_ARGS")
        assert libtpu.endswith(jobset.MEGASCALE_GRPC_FLAG)  # the DCN interfaces are still the run's to name


def test_either_container_failing_with_a_program_error_fails_the_run():
    plan = _plan(parallel_containers=True)
    rule = jobset.pod_failure_policy(plan)["rules"][jobset.PROGRAM_ERROR_INDEX]["onExitCodes"]
    assert "containerName" not in rule and rule["values"] == [1, 2]
    import re

    pattern = re.compile(jobset.program_error_message_pattern(parallel=True))
    for c in ("workload", "workload-2"):
        assert pattern.match(f"Container {c} for pod llm/pc-slice-0-0-abcde failed with exit code 1 matching FailJob rule at index 1")


def test_the_job_runtime_gives_both_containers_the_worker_environment():
    plan = _plan(parallel_containers=True, runtime="job")
    pod = next(o for o in job.run_objects(plan) if o["kind"] == "Job")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 2 and pod["containers"][0]["env"] == pod["containers"][1]["env"]
    assert any(e["name"] == "TPU_WORKER_HOSTNAMES" for e in pod["containers"][1]["env"])


@pytest.mark.parametrize(
    ("example", "kw", "words"), [("default", {}, "a v5e VM runs one container"), ("v6e-reservation", {"runtime": "ray", "recipe": "llama3-8b"}, "a v6e VM")]
)
def test_refused_where_a_vm_cannot_run_them(example: str, kw: dict, words: str):
    with pytest.raises(PlanError, match=words):
        _plan(example, parallel_containers=True, **kw)


def test_the_cli_refuses_them_on_v5e_in_one_line():
    proc = cli("workloads", "submit", "maxtext-6b", "--parallel-containers", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --parallel-containers: GKE's multi-container setup binds one container to each NUMA node of tpu7x VMs (two per VM); "
        "a v5e VM runs one container — drop --parallel-containers"
    ]


def test_parallel_containers_restart_by_recreating():
    """JobSet's in-place agent runs one program per pod: on a cluster that restarts in place, a run with two containers
    per VM is a recreate run, and asking for in-place is refused."""
    spec = spec_from("tpu7x", recovery={"restart": "in-place"})
    plan = lambda **kw: plan_run("maxtext-6b", spec, Overrides(name="pc", **kw))  # noqa: E731
    assert plan().policy.restart == "in-place"
    assert plan(parallel_containers=True).policy.restart == "recreate"
    with pytest.raises(PlanError) as e:
        plan(parallel_containers=True, restart="in-place")
    assert e.value.field == "--restart" and "--parallel-containers" in str(e.value)
