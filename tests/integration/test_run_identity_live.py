"""A reused run name on the real local cluster and its real Cloud Storage server: a run never reuses another run's checkpoints.

The local cluster plays GKE's buckets with a real gcp-storage-emulator process (scripts/setup-gcs-emulator.sh,
the server tests/support/gcs_emulator.py runs; workloads/local/bucket.py); the rehearsal daemon keeps a
run's checkpoints in ``<bucket>/<run>/checkpoints/`` as MaxText does, so a new JobSet under a
finished run's name would restore them, as on GKE. `submit` checks the run's identity there first:

1. `submit maxtext-6b --name N` trains and saves; the run is deleted;
2. `submit gpt3-6b --name N` is one line, exit 2, nothing applied — with --resume too (another shape);
3. `submit maxtext-6b --name N --steps more` is refused without --resume; with it, the rehearsal
   restores the first run's last step and continues from the next;
4. `cleanup --checkpoints` lists the run's directory, and keeps a converted base checkpoint
   (MaxText's documented layout, no identity) whatever its age;
5. `submit --resume` from the converted base checkpoint (the docs' way to continue from one)
   reads it without adopting it: no identity is written beside it, and cleanup still keeps it
   (the ownership ledger, toolkit/ledger.py).
"""

from __future__ import annotations

import json
import secrets

import pytest

from infra.spec import DEFAULT_SPEC_PATH, BucketPurpose, load_spec
from tests.integration.test_rehearsal import NS, RESTORED, STEP, _finished, _log, wl
from tests.support.local_cluster import wait_for


def _bucket_client(cluster):
    from workloads.local import bucket

    return bucket.SERVICE.client_of(cluster)


def _one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


@pytest.mark.usefixtures("tpu_quota")
def test_a_reused_name_restores_only_its_own_runs_checkpoints(cluster, kubeconfig) -> None:
    run = f"exp-{secrets.token_hex(3)}"
    spec = load_spec(DEFAULT_SPEC_PATH)
    ckpt_bucket = spec.bucket_for(BucketPurpose.CHECKPOINTS, spec.teams[0]).name
    gcs = _bucket_client(cluster)
    kc = ("--kubeconfig", str(kubeconfig))
    base = gcs.bucket(ckpt_bucket)
    converted = "llama-base/checkpoints/0/items/checkpoint"
    base.blob(converted).upload_from_string(b"converted weights")  # a base checkpoint laid out as MaxText documents it
    try:
        first = wl("submit", "maxtext-6b", "--slices", "1", "--name", run, "--steps", "20", "--rehearse-seconds", "5", "--no-wait", *kc)
        assert first.returncode == 0, first.stderr
        assert f"gs://{ckpt_bucket}/{run}/checkpoints/ is this run's (identity written to gs://{ckpt_bucket}/{run}/tgk-run.json)" in first.stderr
        assert wait_for(lambda: _finished(cluster, run), 240, "the first run to finish") == "Completed"
        ident = json.loads(base.blob(f"{run}/tgk-run.json").download_as_bytes())
        assert ident["run"] == run and ident["recipe"] == "maxtext-6b"
        saved = sorted({int(b.name.split("/")[2]) for b in gcs.list_blobs(ckpt_bucket, prefix=f"{run}/checkpoints/")})
        assert saved and saved[-1] == 19, saved  # the rehearsal saved into the bucket, the final step last
        cluster.delete_jobset(NS, run)
        wait_for(lambda: cluster.jobset(NS, run) is None and not cluster.pods(NS, run), 120, "the first run to go")

        # Another recipe under the name: refused before anything is applied, on purpose or not.
        other = wl("submit", "gpt3-6b", "--slices", "1", "--name", run, "--no-wait", *kc)
        line = _one_line(other)
        assert other.returncode == 2 and line.startswith(f"error: --name: gs://{ckpt_bucket}/{run}/checkpoints/ belongs to run {run} (maxtext-6b"), line
        assert cluster.jobset(NS, run) is None
        other = wl("submit", "gpt3-6b", "--slices", "1", "--name", run, "--resume", "--no-wait", *kc)
        assert other.returncode == 2 and "another shape" in _one_line(other) and cluster.jobset(NS, run) is None

        # The same model, more steps: only on purpose; then it restores the first run's last save.
        more = ("submit", "maxtext-6b", "--slices", "1", "--name", run, "--steps", "30", "--rehearse-seconds", "4", "--no-wait", *kc)
        refused = wl(*more)
        assert refused.returncode == 2 and "--resume" in _one_line(refused) and cluster.jobset(NS, run) is None
        resumed = wl(*more, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert f"--resume: continues from its latest checkpoint of run {run} (maxtext-6b" in resumed.stderr
        assert wait_for(lambda: _finished(cluster, run), 240, "the resumed run to finish") == "Completed"
        log = _log(cluster, run)
        restored = RESTORED.search(log)
        assert restored and int(restored.group(1)) == 19, log[-2000:]
        steps = [int(s) for s in STEP.findall(log)]
        assert steps[0] == 20 and steps[-1] == 29, steps  # continued, not from 0

        # From the converted base checkpoint, on purpose: read, never adopted.
        from_base = wl("submit", "maxtext-6b", "--slices", "1", "--name", "llama-base", "--steps", "4", "--rehearse-seconds", "2", "--resume", "--no-wait", *kc)
        assert from_base.returncode == 0, from_base.stderr
        assert "which no toolkit run recorded; read, not adopted" in from_base.stderr
        assert base.get_blob("llama-base/tgk-run.json") is None
        assert wait_for(lambda: _finished(cluster, "llama-base"), 240, "the run from the base checkpoint to finish") == "Completed"

        # cleanup lists the run's directory once the run is gone; the converted checkpoint is never a candidate.
        for name in (run, "llama-base"):
            cluster.delete_jobset(NS, name)
            wait_for(lambda name=name: cluster.jobset(NS, name) is None, 120, f"{name} to go")
        dry = wl("cleanup", "--checkpoints", "--older-than", "0s", "--dry-run", "-o", "json", "--spec", str(DEFAULT_SPEC_PATH), *kc)
        assert dry.returncode == 0, dry.stderr
        doc = json.loads(dry.stdout)
        assert {"uri": f"gs://{ckpt_bucket}/{run}/", "parts": ["checkpoints/", "metrics/"]}.items() <= next(
            c for c in doc["checkpoints"] if c["uri"].endswith(f"/{run}/")
        ).items()
        kept = {k["what"]: k["why"] for k in doc["kept"]}
        assert "no tgk-run.json beside it" in kept[f"gs://{ckpt_bucket}/llama-base/"]
        # What cleanup deletes (its own functions: an unnamed cleanup would take other tests' runs too).
        from workloads.cluster import cleanup as cl
        from workloads.runs import cleanup as svc

        found = {d.run: (d, objects) for d, objects in svc.bucket_dirs(gcs, ckpt_bucket)}
        assert found[run][0].owner == run and found["llama-base"][0].owner is None
        plan = cl.choose([], [], now=9e9, older_than=0, checkpoints=[cl.CheckpointDir(found[n][0]) for n in (run, "llama-base")], retention=0)
        (mine,) = plan.checkpoints
        assert mine.run == run and svc.delete_checkpoints(gcs, mine, found[run][1]) > len(saved)  # the first run's saves and the resumed run's
        assert not list(gcs.list_blobs(ckpt_bucket, prefix=f"{run}/checkpoints/"))
        assert base.blob(converted).download_as_bytes() == b"converted weights"
    finally:
        cluster.delete_jobset(NS, run)
        cluster.delete_jobset(NS, "llama-base")
        for b in gcs.list_blobs(ckpt_bucket, prefix="llama-base/"):
            b.delete()
