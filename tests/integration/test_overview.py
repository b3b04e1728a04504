"""`list`, `queues status` and `convert` against the real control plane (kube-apiserver, Kueue, JobSet, kwok).

Runs of two runtimes fill the default spec's quota and queue behind it: `list` shows each with its
state, slices and Kueue's reason, from one list call per kind; `queues status` shows the team's
quota in use and the waiting runs in Kueue's order (estimated: the local cluster's Kueue serves no
visibility API, as the note says); `--wide` reads a running run's log for its last step and
goodput. A team member whose Role is its namespace gets that namespace, and a note, not an error.
`convert` applies its Job (the API server takes it), records the base checkpoint in the cluster's
bucket, and refuses another source under the name.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest
import yaml

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support.cli import cli
from tests.support.local_cluster import wait_for
from toolkit.names import TGK_FIELD_MANAGER
from workloads import runs
from workloads.cluster.client import Cluster
from workloads.local import certs
from workloads.runs import hooks

MEMBER = "tgk-test-team-member"


def _json(kubeconfig: Path, *args: str) -> dict:
    done = cli("workloads", *args, "-o", "json", env={"KUBECONFIG": str(kubeconfig)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_and_queues_status_show_every_run_and_who_waits(kubeconfig: Path, cluster, tpu_quota) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    tag = secrets.token_hex(2)
    live = Cluster.connect(kubeconfig, "tgk-local", timeout=30)
    plans = [
        # The whole quota, at the highest priority of the three: nothing preempts it (the team's queue preempts lower priorities).
        runs.plan("maxtext-6b", spec, runs.Overrides(name=f"ov-run-{tag}", slices=2, priority="high")),
        runs.plan("hello-tpu", spec, runs.Overrides(name=f"ov-job-{tag}", runtime="job", priority="low")),
        runs.plan("maxtext-6b", spec, runs.Overrides(name=f"ov-urgent-{tag}", slices=1, priority="medium")),
    ]
    ns = plans[0].target.namespace
    try:
        runs.apply(live, plans[0], rehearse_seconds=120)
        wait_for(lambda: cluster.run_status(ns, plans[0].name).phase.value == "Running", 120, "the first run to run")
        for p in plans[1:]:
            runs.apply(live, p, rehearse_seconds=30)
        wait_for(lambda: len([w for w in cluster.list(cluster.kueue("Workload"), ns) if tag in w["metadata"]["name"]]) == 3, 60, "three Workloads")

        listed = _json(kubeconfig, "list")
        mine = {r["name"]: r for r in listed["runs"] if tag in r["name"]}
        run, job, urgent = (mine[p.name] for p in plans)
        assert (run["state"], run["runtime"], run["slices"], run["slices_running"], run["team"]) == ("Running", "jobset", 2, 2, "research")
        assert (job["state"], job["runtime"], job["slices"]) == ("Queued", "job", 1)
        assert urgent["state"] == "Queued" and "insufficient unused quota" in urgent["waiting"]
        assert listed["requests"] <= 6  # JobSets, Jobs, RayJobs (if served), Workloads, and the pods of the runtimes with runs

        queued = _json(kubeconfig, "list", "--state", "queued", "--runtime", "job")
        assert [r["name"] for r in queued["runs"] if tag in r["name"]] == [job["name"]]

        status = _json(kubeconfig, "queues", "status")
        (flavor,) = [f for f in status["flavors"] if f["cluster_queue"] == "research-cq"]
        assert (flavor["team"], flavor["nominal"], flavor["in_use"], flavor["borrowed"]) == ("research", 32, 32, 0)
        waiting = [p for p in status["pending"] if tag in p["run"]]
        # Kueue's order: the medium-priority run first, though it was submitted after the low-priority Job.
        assert [(p["run"], p["position"], p["position_source"]) for p in waiting] == [(plans[2].name, 0, "estimated"), (plans[1].name, 1, "estimated")]
        assert all("insufficient unused quota" in p["message"] for p in waiting)
        assert any("visibility" in n for n in status["notes"])

        def stepped():
            r = next(r for r in _json(kubeconfig, "list", "--wide", "--state", "running")["runs"] if r["name"] == plans[0].name)
            return r if r["last_step"] is not None and r["last_step"] > 0 else None

        wide = wait_for(stepped, 120, "the running run's log to have steps")
        assert 0 < wide["goodput"] <= 1
    finally:
        for p in plans:
            cluster.delete_run(ns, p.name)


@pytest.fixture(scope="module")
def member(local_cluster, tmp_path_factory) -> Path:
    """A kubeconfig of a team member: a Role in the research namespace to read runs, Workloads and pods; nothing cluster-wide."""
    admin = local_cluster.client()
    tmp = tmp_path_factory.mktemp("member")
    pki = certs.Pki(local_cluster.state_dir / "pki")
    cert, key = certs.write_client_cert(pki, tmp, MEMBER)
    server = yaml.safe_load(local_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    kubeconfig = tmp / "member.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)}}],
                "users": [{"name": MEMBER, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
                "contexts": [{"name": "member", "context": {"cluster": "local", "user": MEMBER, "namespace": "research"}}],
                "current-context": "member",
            }
        )
    )
    rules = [
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    ]
    admin.apply(
        [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": MEMBER, "namespace": "research"}, "rules": rules},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": MEMBER, "namespace": "research"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MEMBER},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MEMBER}],
            },
        ],
        field_manager=TGK_FIELD_MANAGER,
    )
    yield kubeconfig
    for kind in ("RoleBinding", "Role"):
        admin.delete(admin.resource("rbac.authorization.k8s.io/v1", kind), MEMBER, "research")


def test_a_team_member_lists_the_teams_namespace_and_is_told_why(member: Path, cluster) -> None:
    def listed() -> dict | None:
        done = cli("workloads", "list", "-o", "json", env={"KUBECONFIG": str(member)})
        return json.loads(done.stdout) if done.returncode == 0 else None

    got = wait_for(listed, 30, "the member's Role to take effect")
    assert any("not allowed to list the whole cluster" in n and "research" in n for n in got["notes"])
    assert {r["namespace"] for r in got["runs"]} <= {"research"}


def test_convert_applies_its_job_records_the_base_checkpoint_and_never_overwrites_it(kubeconfig: Path, cluster) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    live = Cluster.connect(kubeconfig, "tgk-local", timeout=30)
    store = hooks.storage_client(hooks.for_context(live.context), live)
    data = next(b.name for b in spec.buckets if b.purpose.value == "data")
    name = f"conv-{secrets.token_hex(2)}"
    store.bucket(data).blob(f"hf/{name}/model.safetensors").upload_from_string(b"the bytes do not matter: the local cluster runs no MaxText")
    env = {"KUBECONFIG": str(kubeconfig)}
    done = cli("workloads", "convert", "llama3.1-8b", "--from", f"gs://{data}/hf/{name}", "--name", name, "--wait", "--timeout", "120", "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    ckpt = doc["conversion"]["checkpoint"]
    bucket = ckpt.removeprefix("gs://").split("/", 1)[0]
    try:
        assert doc["applied"] == [{"kind": "Job", "name": f"convert-{name}", "namespace": "research"}] and doc["job"]["phase"] == "succeeded"
        record = json.loads(store.bucket(bucket).blob(f"_base/{name}/tgk-base.json").download_as_bytes())
        assert record["kind"] == "converted-base-checkpoint" and record["source"] == f"gs://{data}/hf/{name}/"
        job = cluster.get(cluster.resource("batch/v1", "Job"), f"convert-{name}", "research")
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": spec.cpu_pool.name} and pod["volumes"][0]["csi"]["readOnly"] is True
        # The same conversion again applies nothing; another source under the name is refused before anything is applied.
        again = cli("workloads", "convert", "llama3.1-8b", "--from", f"gs://{data}/hf/{name}", "--name", name, "-o", "json", env=env)
        assert again.returncode == 0 and json.loads(again.stdout)["applied"] == [], again.stderr
        store.bucket(data).blob(f"hf/{name}-b/model.safetensors").upload_from_string(b"x")
        other = cli("workloads", "convert", "llama3.1-8b", "--from", f"gs://{data}/hf/{name}-b", "--name", name, env=env)
        assert other.returncode == 2 and "never overwritten" in other.stderr and other.stderr.count("\n") == 1
        # A conversion Job is not a run: `list` leaves it out.
        assert not any(name in r["name"] for r in _json(kubeconfig, "list")["runs"])
        # The local cluster ran no MaxText: loading what it "converted" is refused, naming the flag.
        bad = cli("workloads", "submit", "llama3.1-8b", "--load-parameters", ckpt, "--no-wait", env=env)
        assert bad.returncode == 2 and bad.stderr.startswith("error: --load-parameters: no MaxText checkpoint"), bad.stderr
    finally:
        cluster.delete(cluster.resource("batch/v1", "Job"), f"convert-{name}", "research", propagation="Background")
