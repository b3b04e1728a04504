"""`workloads cleanup`: the pure choice, bad input (exit 2, nothing touched), checkpoints on a real GCS emulator.

The cluster side (JobSets, Workloads on a real API server with Kueue) is
tests/integration/test_cleanup.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.support import EXAMPLES, REPO, cli, example_doc
from tests.support.gcs_emulator import precondition_client
from toolkit import ledger, names
from toolkit.errors import FieldError
from workloads.cluster import cleanup as cl
from workloads.planning import model
from workloads.runs import cleanup as service

NOW = 1_800_000_000.0


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(name: str) -> dict[str, str]:
    return {names.K8S_MANAGED_BY_LABEL: names.TGK, names.TGK_RUN_LABEL: name}


def _jobset(name: str, state: str | None, finished_ago: float = 0, kind: str = "JobSet", ns: str = "llm", ours: bool = True) -> dict:
    conds = []
    if state:
        ctype = {"ok": "Complete" if kind == "Job" else "Completed", "failed": "Failed"}[state]
        conds.append({"type": ctype, "status": "True", "lastTransitionTime": _iso(NOW - finished_ago)})
        conds.append({"type": "Suspended", "status": "False", "lastTransitionTime": _iso(NOW - 9e5)})
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", **({"labels": _labels(name)} if ours else {})}
    return {"kind": kind, "metadata": meta, "status": {"conditions": conds}}


def test_run_state_from_conditions() -> None:
    assert cl.run_from(_jobset("a", "ok", 60)) == cl.Run("llm", "a", "JobSet", True, "Succeeded", NOW - 60, "uid-a")
    assert cl.run_from(_jobset("b", "failed", 5)).state == "Failed"
    assert not cl.run_from(_jobset("c", None)).finished
    # A Job says Complete, a JobSet Completed: a Job with "Completed" is not finished.
    assert cl.run_from(_jobset("d", "ok", 1, kind="Job")).finished
    odd = _jobset("e", None, kind="Job")
    odd["status"]["conditions"] = [{"type": "Completed", "status": "True"}]
    assert not cl.run_from(odd).finished


def test_rayjob_state_from_its_status_fields() -> None:
    rj = {
        "kind": "RayJob",
        "metadata": {"name": "r", "namespace": "llm", "labels": _labels("r")},
        "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": _iso(NOW - 30)},
    }
    assert cl.run_from(rj) == cl.Run("llm", "r", "RayJob", True, "Succeeded", NOW - 30, "")
    rj["status"] = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    assert not cl.run_from(rj).finished
    rj["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "endTime": _iso(NOW)}
    assert cl.run_from(rj).state == "Failed"


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert cl.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "-1d", "1y", "1 d"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(FieldError) as e:
        cl.parse_duration(text)
    assert e.value.field == "--older-than"


def _runs() -> list[cl.Run]:
    return [cl.run_from(o) for o in (_jobset("old", "ok", 3 * 86400), _jobset("new", "failed", 600), _jobset("live", None))]


def test_finished_runs_older_than_go_running_ones_stay() -> None:
    plan = cl.choose(_runs(), [], now=NOW, older_than=3600)
    assert [r.name for r in plan.runs] == ["old"]
    kept = dict(plan.kept)
    assert "still queued or running" in kept["JobSet llm/live"]
    assert "younger than --older-than" in kept["JobSet llm/new"]
    assert [r.name for r in cl.choose(_runs(), [], now=NOW, older_than=0).runs] == ["old", "new"]


def test_force_takes_running_runs_too() -> None:
    assert [r.name for r in cl.choose(_runs(), [], now=NOW, older_than=0, force=True).runs] == ["old", "new", "live"]


def test_naming_a_running_run_is_refused_without_force() -> None:
    with pytest.raises(FieldError) as e:
        cl.choose(_runs(), [], now=NOW, older_than=0, names=["old", "live"])
    assert "llm/live is still queued or running" in str(e.value) and "--force" in str(e.value)
    plan = cl.choose(_runs(), [], now=NOW, older_than=0, names=["live"], force=True)
    assert [r.name for r in plan.runs] == ["live"]


def test_naming_a_missing_run_is_refused() -> None:
    with pytest.raises(FieldError):
        cl.choose(_runs(), [], now=NOW, older_than=0, names=["nope"])


def test_a_named_finished_run_goes_whatever_its_age() -> None:
    plan = cl.choose(_runs(), [], now=NOW, older_than=86400 * 30, names=["new"])
    assert [r.name for r in plan.runs] == ["new"]


def test_runs_the_toolkit_did_not_submit_are_kept_whatever_their_state() -> None:
    """A finished JobSet or Job without the toolkit's labels (xpk's, a user's) is never deleted: once it was."""
    runs = [
        cl.run_from(o) for o in (_jobset("mine", "ok", 9e5), _jobset("xpk-run", "ok", 9e5, ours=False), _jobset("hand", "failed", 9e5, kind="Job", ours=False))
    ]
    plan = cl.choose(runs, [], now=NOW, older_than=0)
    assert [r.name for r in plan.runs] == ["mine"]
    kept = dict(plan.kept)
    assert "not submitted by this toolkit" in kept["JobSet llm/xpk-run"] and "not submitted by this toolkit" in kept["Job llm/hand"]
    assert [r.name for r in cl.choose(runs, [], now=NOW, older_than=0, force=True).runs] == ["mine"]  # not even with --force
    with pytest.raises(FieldError) as e:  # named: refused, nothing deleted
        cl.choose(runs, [], now=NOW, older_than=0, names=["xpk-run"])
    assert e.value.field == "RUN" and "not submitted by this toolkit" in str(e.value)


def test_orphaned_finished_workloads() -> None:
    fin = {"type": "Finished", "status": "True", "lastTransitionTime": _iso(NOW - 7200)}
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "x", "uid": "gone"}
    wl = {
        "metadata": {"name": "jobset-x-1", "namespace": "llm", "ownerReferences": [owner], "labels": {names.TGK_RUN_LABEL: "x"}},
        "status": {"conditions": [fin]},
    }
    assert cl.orphan_from(wl, {"uid-a"}) == cl.OrphanWorkload("llm", "jobset-x-1", NOW - 7200)
    assert cl.orphan_from(wl, {"gone"}) is None  # its owner is still there: it goes with the owner
    pending = {**wl, "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    assert cl.orphan_from(pending, set()) is None  # never remove a Workload Kueue is still working on
    o = cl.orphan_from(wl, set())
    assert cl.choose([], [o], now=NOW, older_than=3600).orphans == (o,)
    assert cl.choose([], [o], now=NOW, older_than=3 * 3600).orphans == ()
    # A Workload whose owner is a kind cleanup does not list, or one without the run label, stays (both were deleted once).
    lws = {**wl, "metadata": {**wl["metadata"], "ownerReferences": [{**owner, "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}]}}
    unlabelled = {**wl, "metadata": {**wl["metadata"], "labels": {}}}
    plan = cl.choose([], [cl.orphan_from(lws, set()), cl.orphan_from(unlabelled, set())], now=NOW, older_than=0)
    assert plan.orphans == () and [w for w, _ in plan.kept] == ["Workload llm/jobset-x-1"] * 2
    assert "LeaderWorkerSet" in plan.kept[0][1] and "label" in plan.kept[1][1]


def _dir(run: str, last: float, owner: str | None = "", fmt: int = 2) -> cl.CheckpointDir:
    return cl.CheckpointDir(ledger.OutputDir(f"gs://b/{run}/", run, run if owner == "" else owner, fmt, NOW - 9e7, NOW - 9e7, last, 3, 300))


def test_checkpoints_past_retention_of_runs_that_are_gone() -> None:
    dirs = [
        _dir("old", NOW - 20 * 86400),  # its run is deleted in this cleanup
        _dir("live", NOW - 20 * 86400),  # its run is still on the cluster
        _dir("gone-recent", NOW - 86400),  # written within retention
        _dir("gone-old", NOW - 15 * 86400),
        _dir("base-ckpt", NOW - 90 * 86400, owner=None),  # no identity: not written by a toolkit run
        _dir("copied", NOW - 90 * 86400, owner="elsewhere"),  # its identity names another run
    ]
    plan = cl.choose(_runs(), [], now=NOW, older_than=14 * 86400, checkpoints=dirs, retention=14 * 86400)
    assert [c.run for c in plan.checkpoints] == ["gone-old"] and plan.checkpoints[0].permit is not None
    kept = dict(plan.kept)
    assert "no tgk-run.json beside it" in kept["gs://b/base-ckpt/"]
    assert "names run elsewhere" in kept["gs://b/copied/"]
    plan = cl.choose(_runs(), [], now=NOW, older_than=0, checkpoints=dirs, retention=14 * 86400)
    assert [c.run for c in plan.checkpoints] == ["old", "gone-old"]
    assert cl.choose(_runs(), [], now=NOW, older_than=0, checkpoints=dirs, retention=None).checkpoints == ()


def test_default_ttl_keeps_a_weekend() -> None:
    # A run that ends on Friday evening is still inspectable (status, logs) on Monday morning.
    assert model.DEFAULT_TTL_SECONDS >= 64 * 3600


# ------------------------------------------------------------------ the CLI: bad input before the cluster


def _cli(tmp_path: Path, *args: str):
    # An unreachable kubeconfig: any attempt to talk to a cluster would fail with exit 3, not 2.
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}],
            }
        )
    )
    return cli("workloads", "cleanup", "--kubeconfig", str(kc), "--spec", str(EXAMPLES / "tpu7x.yaml"), *args)


@pytest.mark.parametrize(
    "args,field",
    [
        (("--older-than", "soon"), "--older-than"),
        (("--checkpoints",), "--checkpoints"),
        (("--team", "nobody"), "team"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], field: str) -> None:
    r = _cli(tmp_path, *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert r.stdout == ""


def test_checkpoints_need_a_bucket(tmp_path: Path) -> None:
    data = example_doc("tpu7x")
    data["buckets"] = [b for b in data["buckets"] if b["purpose"] != "checkpoints"]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    r = cli("workloads", "cleanup", "--checkpoints", "--older-than", "7d", "--spec", str(f))
    assert r.returncode == 2 and "--checkpoints: team llm has no bucket with purpose: checkpoints" in r.stderr


def test_unreachable_cluster_is_exit_3(tmp_path: Path) -> None:
    r = _cli(tmp_path, "--dry-run")
    assert r.returncode == 3, (r.stdout, r.stderr)


# ------------------------------------------------------------------ checkpoints on a real GCS-compatible server


@pytest.fixture(scope="module")
def gcs_client():
    """fake-gcs-server: it checks the generation a delete names, as Cloud Storage does (tests/support/gcs_emulator.py)."""
    with precondition_client() as client:
        yield client


def test_checkpoint_dirs_and_their_deletion(gcs_client) -> None:
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    b = gcs_client.create_bucket(bucket)
    files = {
        "run-a/checkpoints/10/items/state": b"x" * 100,
        "run-a/checkpoints/20/items/state": b"y" * 50,
        "run-a/metrics/metrics_step_0.txt": b"{}",
        "run-a/tensorboard/events": b"keep me",
        "run-b/checkpoints/5/items/state": b"z",
        "loose-file": b"not a run",
    }
    from workloads.runs.identity import IDENTITY, Identity

    b.blob(f"run-a/{IDENTITY}").upload_from_string(Identity("run-a", "maxtext-6b", {"model_name": "default"}, "sha256:x", "2026-01-01T00:00:00Z").encode())
    for name, data in files.items():
        b.blob(name).upload_from_string(data)
    found = {d.run: (d, objects) for d, objects in service.bucket_dirs(gcs_client, bucket)}
    assert set(found) == {"run-a", "run-b"}
    a, a_objects = found["run-a"]
    assert (a.objects, a.size, a.owner, a.record_format) == (3, 152, "run-a", 2)
    assert found["run-b"][0].owner is None  # no identity: e.g. a converted base checkpoint
    assert abs(a.last_write - datetime.now(UTC).timestamp()) < 300
    plan = cl.choose([], [], now=NOW + 9e7, older_than=0, checkpoints=[cl.CheckpointDir(a), cl.CheckpointDir(found["run-b"][0])], retention=0)
    assert [c.run for c in plan.checkpoints] == ["run-a"]
    # One object rewritten since the listing: it stays (the delete names the generation listed).
    b.blob("run-a/checkpoints/20/items/state").upload_from_string(b"rewritten")
    assert service.delete_checkpoints(gcs_client, plan.checkpoints[0], a_objects) == 2
    left = sorted(bl.name for bl in gcs_client.list_blobs(bucket))
    assert left == [
        "loose-file",
        "run-a/checkpoints/20/items/state",
        "run-a/tensorboard/events",
        f"run-a/{IDENTITY}",
        "run-b/checkpoints/5/items/state",
    ]


def test_a_deletion_stops_when_the_identity_changed_since_the_listing(gcs_client) -> None:
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    b = gcs_client.create_bucket(bucket)
    from workloads.runs.identity import IDENTITY, Identity

    b.blob(f"r/{IDENTITY}").upload_from_string(Identity("r", "maxtext-6b", {"model_name": "default"}, "sha256:x", "t").encode())
    b.blob("r/checkpoints/1/items/state").upload_from_string(b"w")
    ((d, objects),) = service.bucket_dirs(gcs_client, bucket)
    (c,) = cl.choose([], [], now=NOW + 9e7, older_than=0, checkpoints=[cl.CheckpointDir(d)], retention=0).checkpoints
    b.blob(f"r/{IDENTITY}").upload_from_string(Identity("r", "maxtext-6b", {"model_name": "default"}, "sha256:y", "t").encode())  # resubmitted meanwhile
    assert service.delete_checkpoints(gcs_client, c, objects) == 0
    assert [bl.name for bl in gcs_client.list_blobs(bucket, prefix="r/checkpoints/")] == ["r/checkpoints/1/items/state"]


def test_an_older_toolkits_adopted_base_checkpoint_is_never_deleted(gcs_client) -> None:
    """An earlier toolkit's `submit --resume` beside a converted checkpoint wrote an identity (format 1), and cleanup deleted the checkpoint."""
    import json
    import time

    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    b = gcs_client.create_bucket(bucket)
    b.blob("llama-base/checkpoints/0/items/checkpoint").upload_from_string(b"converted weights")
    time.sleep(0.01)  # the server's clock orders the two
    doc = {"written_by": "tpu-gke-toolkit", "format": 1, "run": "llama-base", "recipe": "llama3-8b", "model": {}, "submission": "s", "created": "t"}
    b.blob("llama-base/tgk-run.json").upload_from_string(json.dumps(doc).encode())
    ((d, _),) = service.bucket_dirs(gcs_client, bucket)
    assert d.owner == "llama-base" and d.record_format == 1 and d.record_time > d.first_write
    plan = cl.choose([], [], now=NOW + 9e7, older_than=0, checkpoints=[cl.CheckpointDir(d)], retention=0)
    assert plan.checkpoints == () and "not provably the toolkit's" in dict(plan.kept)["gs://" + bucket + "/llama-base/"]


# ------------------------------------------------------------------ python -m infra pools


def test_scale_to_zero_dry_run_prints_exactly_the_resizes() -> None:
    from infra.spec import load_spec

    spec = load_spec(EXAMPLES / "flex-start.yaml")
    r = cli("infra", "pools", "scale-to-zero", "--dry-run", "-o", "json", "--spec", str(EXAMPLES / "flex-start.yaml"))
    assert r.returncode == 0, r.stderr
    cmds = __import__("json").loads(r.stdout)["commands"]
    want = [n for p in spec.tpu_pools for n in p.node_pool_names()]
    assert [c[5] for c in cmds] == [f"--node-pool={n}" for n in want]
    for c in cmds:
        assert c[:5] == ["gcloud", "container", "clusters", "resize", spec.cluster.name]
        assert c[6:] == ["--num-nodes=0", f"--location={spec.region}", f"--project={spec.project}", "--quiet"]


def test_scale_to_zero_refuses_a_fixed_size_pool(tmp_path: Path) -> None:
    data = example_doc("default")
    data["tpu_pools"].append({**data["tpu_pools"][0], "name": "auto", "autoscaling": True})
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    # Without --pool: only the pool that scales.
    r = cli("infra", "pools", "scale-to-zero", "--dry-run", "--spec", str(f))
    assert r.returncode == 0 and all("--node-pool=auto-" in ln for ln in r.stdout.splitlines()), r.stdout + r.stderr
    # Naming the fixed one: one line, exit 2, nothing printed to run.
    fixed = data["tpu_pools"][0]["name"]
    r = cli("infra", "pools", "scale-to-zero", "--dry-run", "--spec", str(f), "--pool", fixed)
    assert r.returncode == 2 and r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "tpu_pools[0]" in lines[0] and "delete-tpu" in lines[0]


def test_scale_to_zero_without_gcloud_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "infra", "pools", "scale-to-zero", "--yes", "--spec", str(EXAMPLES / "flex-start.yaml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "gcloud is not on PATH" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.synth
def test_delete_tpu_dry_run_targets_exactly_the_tpu_node_pools(tmp_path: Path) -> None:
    import json

    from infra import pools as pl
    from infra.spec import load_spec

    spec_path = EXAMPLES / "v6e-reservation.yaml"
    spec = load_spec(spec_path)
    out = tmp_path / "out"
    r = cli("infra", "pools", "delete-tpu", "--dry-run", "--spec", str(spec_path), "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[0].endswith("init -input=false -no-color") and lines[2].endswith("apply -input=false tfplan-delete-tpu")
    doc = json.loads(next(out.rglob("cdk.tf.json")).read_text())
    pools = doc["resource"][pl.NODE_POOL_TYPE]
    targeted = [t.split("=", 1)[1] for t in lines[1].split() if t.startswith("-target=")]
    assert "-destroy" in lines[1].split()
    # Every TPU node pool and nothing else (not the CPU pool, not the cluster).
    assert sorted(pools[a.split(".", 1)[1]]["name"] for a in targeted) == sorted(n for p in spec.tpu_pools for n in p.node_pool_names())
    assert spec.cpu_pool.name not in {pools[a.split(".", 1)[1]]["name"] for a in targeted}
