"""A fleet (infra.fleet) and its MultiKueue objects (workloads.render.multikueue): pure, no cluster.

The bad-input corpus in tests/bad_fleets: each fleet file has one mistake, announced by its
first line ``# expect: <field>``; ``queues apply --fleet --dry-run`` and ``local up --fleet``
must refuse it with exit 2 and one line naming the field, before anything is applied or started.
The objects are applied to real API servers by tests/integration/test_fleet.py.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
import yaml

from infra.fleet import Fleet, FleetManager, load_env, load_fleet, load_spec_or_fleet, maybe_fleet, members
from infra.spec import EnvSpec, load_spec
from tests.support import REPO, cli
from toolkit.errors import FieldError, SpecError
from workloads.render import multikueue

EXAMPLE = REPO / "examples" / "fleet" / "fleet.yaml"
BAD = sorted((REPO / "tests" / "bad_fleets").glob("*.yaml"))


def expected_field(path: Path) -> str:
    m = re.fullmatch(r"# expect: (\S+(?: \S+)?)", path.read_text().splitlines()[0].strip())
    assert m, path
    return m.group(1)


def test_corpus_covers_the_issue_s_bad_inputs():
    names = {p.stem for p in BAD}
    assert {"worker_named_twice", "manager_is_a_worker", "team_namespace_differs", "worker_without_a_slice_for_a_team"} <= names
    # A fleet is its members, each distinct: state, cluster, network and buckets, between workers and with the manager.
    assert {
        "cluster_name_shared_across_regions",
        "state_prefix_shared_by_two_workers",
        "manager_state_is_a_worker_s",
        "network_shared_by_two_workers",
        "bucket_shared_by_two_workers",
        "fleet_bucket_is_a_worker_s",
        "too_many_workers",
    } <= names


SHARED = [p for p in BAD if p.stem.endswith(("_shared_by_two_workers", "_is_a_worker_s", "_shared_across_regions"))]


@pytest.mark.parametrize("path", SHARED, ids=[p.stem for p in SHARED])
def test_a_name_two_members_share_is_refused_naming_both(path: Path):
    with pytest.raises(SpecError) as e:
        load_fleet(path)
    assert e.value.field == expected_field(path)
    line = str(e.value)
    assert re.search(r"of (worker \w+|the manager [\w-]+) is also worker \w+'s \(workers\[\d\]\.spec [\w.\[\]]+\)", line), line


def test_aliased_workers_are_refused_before_any_spec_is_read(tmp_path: Path, monkeypatch):
    """Ten thousand YAML aliases of one worker (more are refused by the YAML reader itself): one line, and no worker spec read."""
    import infra.fleet as fleet_mod

    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "west.yaml").write_text((REPO / "tests" / "bad_fleets" / "workers" / "west.yaml").read_text())
    doc = "name: f\nmanager: {cluster: fleet-mgr}\nworkers:\n  - &w {name: west, spec: workers/west.yaml}\n" + "  - *w\n" * 10_000
    (tmp_path / "fleet.yaml").write_text(doc)
    read = []
    monkeypatch.setattr(fleet_mod, "load_spec", lambda p: read.append(p))
    with pytest.raises(SpecError, match="10001 workers, and a MultiKueueConfig holds at most 20") as e:
        load_fleet(tmp_path / "fleet.yaml")
    assert e.value.field == "workers" and read == []


def test_a_spec_two_workers_name_is_read_once(tmp_path: Path, monkeypatch):
    import infra.fleet as fleet_mod

    calls = []
    real = fleet_mod.load_spec
    monkeypatch.setattr(fleet_mod, "load_spec", lambda p: calls.append(p) or real(p))
    with pytest.raises(SpecError):
        load_fleet(REPO / "tests" / "bad_fleets" / "same_cluster_twice.yaml")
    assert len(calls) == 1


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_queues_apply_refuses_a_bad_fleet(path: Path):
    field = expected_field(path)
    proc = cli("workloads", "queues", "apply", "--fleet", str(path.relative_to(REPO)), "--dry-run")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "", "nothing may be printed as applied"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    problem, sep, fix = lines[0].partition(" — ")
    assert sep and len(fix) >= 8, lines[0]


def test_local_up_refuses_a_bad_fleet_before_starting_anything(tmp_path: Path):
    state = tmp_path / "fleet"
    proc = cli("workloads", "local", "up", "--fleet", str(REPO / "tests" / "bad_fleets" / "manager_is_a_worker.yaml"), "--state-dir", str(state), "--no-build")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: workers[1]: "), proc.stderr
    assert not state.exists()


def test_the_manager_is_derived_from_the_workers():
    f = load_fleet(EXAMPLE)
    west, east = (load_spec(EXAMPLE.parent / n) for n in ("west.yaml", "east.yaml"))
    m = f.manager_env()
    assert m.cluster.name == "tpu-fleet-mgr" and m.region == "us-central1"
    assert [t.name for t in m.teams] == [t.name for t in west.teams]
    # Both workers name their pool v5e-16: each stays a pool of its own, the flavor's quota adds up.
    assert [p.name for p in m.tpu_pools] == ["west-v5e-16", "east-v5e-16"]
    assert m.flavor_slices() == {"v5e-4x4": west.flavor_slices()["v5e-4x4"] + east.flavor_slices()["v5e-4x4"]}
    assert [w.name for w in f.workers] == ["west", "east"]


def test_a_fleet_file_stands_for_its_manager_s_spec_where_a_spec_is_read():
    assert load_env(EXAMPLE) == load_fleet(EXAMPLE).manager_env()
    assert load_env(REPO / "examples" / "default.yaml") == load_spec(REPO / "examples" / "default.yaml")
    assert maybe_fleet(REPO / "examples" / "default.yaml") is None
    assert maybe_fleet(REPO / "no-such.yaml") is None  # unreadable: the spec's own load says why
    assert isinstance(maybe_fleet(EXAMPLE), Fleet)


def test_the_manager_is_a_model_of_its_own_not_an_environment_spec():
    """Its stack and queues read a FleetManager; only the explicit manager_env() view is an EnvSpec."""
    f = load_fleet(EXAMPLE)
    m = f.manager
    assert isinstance(m, FleetManager) and not isinstance(m, EnvSpec)
    assert not hasattr(m, "tpu_pools") and not hasattr(m, "datasets"), "the manager's cluster has no TPU pool and no dataset"
    assert [b.name for b in m.buckets] == ["my-tpu-project-tpu-fleet-ckpt"] and m.bucket_locations == ("US",)  # the fleet's, in both workers' multi-region
    # Its own Terraform state and VPC, whatever the first worker's say.
    assert m.state_prefix == "tpu-gke-toolkit/tpu-fleet-mgr" and m.network_name == "tpu-fleet-mgr-net"
    assert (m.name, m.region, m.zones) == ("tpu-fleet-mgr", "us-central1", ("us-central1-a",))
    assert [p.name for p in m.pools] == ["west-v5e-16", "east-v5e-16"]  # what its queues cover, not its nodes
    assert m.tpu_nodes == 0 and m.cidrs.nodes == "10.0.0.0/22"
    view = f.manager_env()
    assert isinstance(view, EnvSpec) and view.tpu_pools == list(m.pools) and view.teams == list(m.teams)
    # A run through the manager writes the fleet's buckets (granted to every worker), never one worker's.
    assert [b.name for b in view.buckets] == ["my-tpu-project-tpu-fleet-ckpt"] and view.datasets == [] and view.lustre is None
    assert view.xpk == f.workers[0].spec.xpk, "the sections a manager has no part in are the first worker's"
    assert [type(x.model) for x in members(f)] == [EnvSpec, EnvSpec, FleetManager]  # deploy order: workers, then the manager


def test_one_function_says_spec_or_fleet():
    default = REPO / "examples" / "default.yaml"
    assert isinstance(load_spec_or_fleet(EXAMPLE), Fleet)
    assert load_spec_or_fleet(default) == load_spec(default)
    # --spec of a spec-only command: a fleet file is refused as a spec is, in load_spec's words.
    with pytest.raises(SpecError) as as_spec:
        load_spec_or_fleet(EXAMPLE, want="spec")
    with pytest.raises(SpecError) as by_load_spec:
        load_spec(EXAMPLE)
    assert str(as_spec.value) == str(by_load_spec.value) and as_spec.value.field == "project"
    # --fleet: a spec file is refused as a fleet, naming what a fleet file lacks.
    with pytest.raises(SpecError) as as_fleet:
        load_spec_or_fleet(default, want="fleet")
    assert as_fleet.value.field in ("name", "manager", "workers"), as_fleet.value
    # A missing file names the flag it came from.
    for want, flag in (("either", "--spec"), ("spec", "--spec"), ("fleet", "--fleet")):
        with pytest.raises(SpecError) as missing:
            load_spec_or_fleet(REPO / "no-such.yaml", want=want)
        assert missing.value.field == flag


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def test_the_manager_dispatches_every_queue_through_multikueue():
    f = load_fleet(EXAMPLE)
    objs = multikueue.manager_objects(f)
    (check,) = by_kind(objs, "AdmissionCheck")
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    (config,) = by_kind(objs, "MultiKueueConfig")
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config["metadata"]["name"]}
    assert config["spec"]["clusters"] == ["west", "east"]
    clusters = {c["metadata"]["name"]: c["spec"]["clusterSource"]["kubeConfig"] for c in by_kind(objs, "MultiKueueCluster")}
    assert clusters == {w: {"locationType": "Secret", "location": f"{w}-multikueue"} for w in ("west", "east")}
    for cq in by_kind(objs, "ClusterQueue"):
        assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": check["metadata"]["name"]}]}
        (flavor,) = cq["spec"]["resourceGroups"][0]["flavors"]
        assert flavor["resources"][0] == {"name": "google.com/tpu", "nominalQuota": 32}  # 2 workers x one 16-chip slice
    # the worker's LocalQueues and namespaces, the same on the manager
    assert {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in by_kind(objs, "LocalQueue")} == {
        (q["metadata"]["namespace"], q["metadata"]["name"]) for q in by_kind(multikueue.worker_objects(f, f.workers[0]), "LocalQueue")
    }
    # the manager holds no provisioning, no KSA and no TPU node of its own
    assert not by_kind(objs, "ProvisioningRequestConfig") and not by_kind(objs, "ServiceAccount")


def test_the_manager_s_identity_on_a_worker_is_least_privilege():
    f = load_fleet(EXAMPLE)
    objs = multikueue.identity_objects(f)
    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(objs, "ClusterRole")}
    watch, write = roles[multikueue.WATCH_ROLE], roles[multikueue.WRITE_ROLE]
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in watch)
    granted = {res for r in watch + write for res in r["resources"]}
    assert granted == {"workloads", "workloads/status", "jobs", "jobs/status", "jobsets", "jobsets/status"}
    # writes are bound per team namespace only; the cluster-wide binding is the watch role
    (crb,) = by_kind(objs, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == multikueue.WATCH_ROLE
    assert {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in by_kind(objs, "RoleBinding")} == {("research", multikueue.WRITE_ROLE)}
    assert not by_kind(objs, "Secret"), "its token Secret is the flow's to create (workloads.runs.fleet.current_token_secret)"


def test_the_kubeconfig_secret_is_one_kueue_accepts():
    config = multikueue.kubeconfig("west", "https://127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\n", "tok")
    doc = yaml.safe_load(config)
    (cluster,) = doc["clusters"]
    assert "certificate-authority-data" in cluster["cluster"] and "certificate-authority" not in cluster["cluster"]
    assert not cluster["cluster"].get("insecure-skip-tls-verify")
    (user,) = doc["users"]
    assert user["user"] == {"token": "tok"}  # no tokenFile, exec plugin or auth provider: Kueue refuses those
    sec = multikueue.kubeconfig_secret("west", config)
    assert (sec["metadata"]["name"], sec["metadata"]["namespace"]) == ("west-multikueue", "kueue-system")
    assert sec["metadata"]["annotations"] == {multikueue.TOKEN_SOURCE_ANNOTATION: multikueue.IDENTITY}  # which worker token Secret it holds
    assert base64.b64decode(sec["data"]["kubeconfig"]).decode() == config


def test_manager_settings_scale_the_lost_worker_timeout():
    f = load_fleet(EXAMPLE)
    mk = multikueue.manager_settings(f)["multiKueue"]
    assert mk == {"gcInterval": "60s", "origin": "tpu-fleet", "workerLostTimeout": "900s"}
    assert multikueue.manager_settings(f, time_scale=0.1)["multiKueue"]["workerLostTimeout"] == "90s"


def test_submit_through_a_fleet_plans_against_the_workers_pools():
    proc = cli("workloads", "submit", "hello-tpu", "--spec", str(EXAMPLE.relative_to(REPO)), "--dry-run", "--name", "fl-dry")
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    (js,) = [d for d in docs if d["kind"] == "JobSet"]
    assert js["metadata"]["namespace"] == "research"
    assert js["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == load_fleet(EXAMPLE).manager.teams[0].queue


def test_an_unknown_worker_is_refused():
    with pytest.raises(SpecError, match="no worker named"):
        load_fleet(EXAMPLE).worker("north")


def test_local_fleet_refuses_a_directory_it_did_not_write(tmp_path: Path):
    from workloads.local import LocalClusterError
    from workloads.local.fleet import LocalFleet

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(LocalClusterError, match="did not write"):
        LocalFleet(tmp_path).up(load_fleet(EXAMPLE), build=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_each_member_runs_only_what_its_role_needs():
    from workloads.local.fleet import manager_role, worker_role

    f = load_fleet(EXAMPLE)
    m = manager_role(f)
    assert not m.tpu_nodes and set(m.skip) == {"rehearsal", "provisioner", "logging"}
    assert m.kueue_settings is not None and m.kueue_settings["multiKueue"]["origin"] == "tpu-fleet"
    w = worker_role(f, f.workers[0], "http://127.0.0.1:1")
    assert w.tpu_nodes and set(w.skip) == {"gcs", "provisioner"} and w.gcs_url == "http://127.0.0.1:1"
    assert w.kueue_settings is None  # a worker's Kueue is configured as a lone cluster's


# ------------------------------------------------------------------ every member its own cluster, workers over TLS


def gke_kubeconfig(path: Path, servers: dict[str, str]) -> Path:
    """A kubeconfig with gcloud's context name for each cluster (``gke_<project>_<region>_<cluster>``) -> its server."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": url, "certificate-authority-data": "Y2E="}} for n, url in servers.items()],
        "users": [{"name": "u", "user": {"token": "user-token-not-the-identity-s"}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in servers],
        "current-context": next(iter(servers)),
    }
    path.write_text(yaml.safe_dump(doc))
    return path


MEMBERS = {
    "mgr": "gke_my-tpu-project_us-central1_tpu-fleet-mgr",
    "west": "gke_my-tpu-project_us-west4_tpu-west",
    "east": "gke_my-tpu-project_us-east5_tpu-east",
}


def apply_fleet(kubeconfig: Path):
    return cli("workloads", "queues", "apply", "--fleet", str(EXAMPLE), "--kubeconfig", str(kubeconfig))


def one_line_refusal(proc, field: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {field}: "), line
    return line


def test_members_without_a_context_are_reached_by_gcloud_s_name_for_their_cluster_never_the_current_one(tmp_path: Path):
    """The shipped example names no context: each member is its own gke_<project>_<region>_<cluster>, so a kubeconfig with only
    the current context is refused (exit 2, the port behind it never asked) instead of applying all three to one cluster."""
    kc = gke_kubeconfig(tmp_path / "kc", {"somewhere": "https://127.0.0.1:9"})
    line = one_line_refusal(apply_fleet(kc), "manager.context")
    assert MEMBERS["mgr"] in line and "gcloud container clusters get-credentials tpu-fleet-mgr --region us-central1 --project my-tpu-project" in line


def test_two_members_reaching_one_api_server_are_refused(tmp_path: Path):
    kc = gke_kubeconfig(
        tmp_path / "kc", {MEMBERS["mgr"]: "https://127.0.0.1:9", MEMBERS["west"]: "https://127.0.0.1:9/", MEMBERS["east"]: "https://127.0.0.1:8"}
    )
    line = one_line_refusal(apply_fleet(kc), "workers[0].context")
    assert "worker west" in line and "the manager" in line and "cluster of its own" in line


def test_a_worker_reached_over_plain_http_is_refused_before_anything_is_applied(tmp_path: Path):
    url = "http://admin:s3cret@127.0.0.1:9"
    kc = gke_kubeconfig(tmp_path / "kc", {MEMBERS["mgr"]: "https://127.0.0.1:7", MEMBERS["west"]: "https://127.0.0.1:8", MEMBERS["east"]: url})
    line = one_line_refusal(apply_fleet(kc), "workers[1].context")
    assert "worker east is reached at http://127.0.0.1:9, not https://" in line
    assert "s3cret" not in line and "admin" not in line, "a password in the URL is never repeated"


def test_the_kubeconfig_secret_is_built_for_https_only():
    with pytest.raises(FieldError, match="not https://"):
        multikueue.kubeconfig("west", "http://10.0.0.1", b"-----BEGIN CERTIFICATE-----\n", "tok")
    with pytest.raises(FieldError, match="not https://"):
        multikueue.kubeconfig("west", "127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\n", "tok")


def test_rotation_of_an_unknown_worker_is_refused_before_any_cluster_is_reached(tmp_path: Path):
    proc = cli("workloads", "queues", "rotate-credentials", "--fleet", str(EXAMPLE), "--worker", "north", "--kubeconfig", str(tmp_path / "none"), "--yes")
    line = one_line_refusal(proc, "--worker")
    assert "use one of west, east" in line


def test_the_identity_s_token_secret_is_never_among_the_applied_objects():
    """Re-applying a fleet must not revive a token a rotation revoked: the flow creates one only where none is current."""
    f = load_fleet(EXAMPLE)
    for w in f.workers:
        assert not [o for o in multikueue.worker_objects(f, w) if o["kind"] == "Secret"]
    tok = multikueue.token_secret("tgk-multikueue-abc123")
    assert tok["type"] == "kubernetes.io/service-account-token" and tok["metadata"]["labels"][multikueue.TOKEN_LABEL] == multikueue.IDENTITY
    assert "data" not in tok, "the worker's token controller fills it"


class _OneSecret:
    """A worker answering one token Secret (the boundary ``worker_token`` reads through)."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def resource(self, api_version: str, kind: str) -> object:
        return object()

    def get(self, info: object, name: str, namespace: str) -> dict:
        return {"data": self.data}


@pytest.mark.parametrize(
    "data, problem",
    [
        ({"token": "not base64!", "ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()}, "not base64"),
        ({"token": base64.b64encode(b"eyJhbGciOi.secret-part").decode(), "ca.crt": base64.b64encode(b"\x00\x01binary").decode()}, "no PEM certificate"),
        ({"token": base64.b64encode(b"\xff\xfe").decode(), "ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()}, "not a token"),
    ],
)
def test_a_malformed_worker_token_secret_is_one_line_and_never_shown(data: dict[str, str], problem: str):
    from toolkit.errors import ClusterError
    from workloads.runs.fleet import worker_token

    with pytest.raises(ClusterError, match=problem) as e:
        worker_token(_OneSecret(data), timeout=1)  # type: ignore[arg-type]
    assert data["token"] not in str(e.value) and "secret-part" not in str(e.value) and "\n" not in str(e.value)


def test_a_worker_url_with_a_password_is_refused_without_repeating_it():
    with pytest.raises(FieldError) as e:
        multikueue.kubeconfig("west", "https://admin:s3cret@10.0.0.1", b"-----BEGIN CERTIFICATE-----\n", "tok")
    assert "s3cret" not in str(e.value) and "admin" not in str(e.value) and "https://10.0.0.1" in str(e.value)


@pytest.mark.parametrize("flag, value", [("--dataset", "c4-en"), ("--checkpoint-storage", "lustre")])
def test_a_run_through_the_manager_may_not_use_what_one_worker_alone_has(flag: str, value: str):
    """A dataset or a Lustre instance is one worker's; MultiKueue may run the job on another, whose identity cannot reach it."""
    proc = cli("workloads", "submit", "maxtext-6b", "--spec", str(EXAMPLE), flag, value, "--dry-run", "--name", "fl-one")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {flag}: ") and "another" in line, line


def test_a_run_through_the_manager_checkpoints_to_the_fleet_s_bucket():
    proc = cli("workloads", "submit", "maxtext-6b", "--spec", str(EXAMPLE), "--dry-run", "--name", "fl-ckpt")
    assert proc.returncode == 0, proc.stderr
    (js,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "JobSet"]
    args = " ".join(a for c in js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"] for a in c.get("args", []))
    assert "base_output_directory=gs://my-tpu-project-tpu-fleet-ckpt" in args and "tpu-west-ckpt" not in args
