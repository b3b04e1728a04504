"""A run's checkpoint directory belongs to that run: workloads/runs/identity.py.

`submit maxtext-6b --name exp1`, finished and gone; later `submit gpt3-6b --name exp1` would
restore the first run's latest checkpoint (the same <bucket>/exp1/checkpoints/). Against a real
GCS-compatible server (tests/support/gcs_emulator.py) and through the run service, as `submit` calls it:
another run under the name is refused before anything is applied unless it asks to --resume,
and even then only into a model of the same shape.
"""

from __future__ import annotations

import io
import json
import uuid
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.spec import load_spec
from tests.support import REPO
from tests.support.gcs_emulator import emulator_client
from toolkit.errors import FieldError
from workloads import runs
from workloads.planning.planner import Overrides
from workloads.runs import identity as ident

SPEC = load_spec(REPO / "examples" / "default.yaml")


@pytest.fixture(scope="module")
def gcs():
    with emulator_client() as client:
        yield client


class Cluster:
    """A real cluster's context (no hook), with nothing under the name: records what is applied."""

    context = "gke_p_us-west4_c"

    def __init__(self) -> None:
        self.applied: list[dict] = []

    def find_run(self, namespace, name):
        return None

    def apply(self, objects, **_):
        self.applied.extend(objects)


def _plan(recipe: str, name: str, bucket: str, **kw):
    return runs.plan(recipe, SPEC, Overrides(name=name, sets=(f"base_output_directory=gs://{bucket}/runs",), **kw))


def _submit(plan, resume: bool = False) -> tuple[Cluster, object]:
    cluster = Cluster()
    try:
        return cluster, runs.apply(cluster, plan, resume=resume)
    except FieldError as e:
        return cluster, e


@pytest.fixture()
def bucket(gcs) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:8]}"
    gcs.create_bucket(name)
    return name


def _identity(gcs, bucket: str, run: str) -> dict | None:
    blob = gcs.bucket(bucket).get_blob(f"runs/{run}/{ident.IDENTITY}")
    return None if blob is None else json.loads(blob.download_as_bytes())


def _save_checkpoint(gcs, bucket: str, run: str, step: int) -> None:
    gcs.bucket(bucket).blob(f"runs/{run}/checkpoints/{step}/items/state").upload_from_string(b"weights")


def test_the_issues_case_another_recipe_under_a_finished_runs_name_is_refused(gcs, bucket: str) -> None:
    first = _plan("maxtext-6b", "exp1", bucket)
    cluster, sub = _submit(first)
    assert sub.checkpoints.state == "new" and cluster.applied
    doc = _identity(gcs, bucket, "exp1")
    assert doc["run"] == "exp1" and doc["recipe"] == "maxtext-6b" and doc["submission"] == ident.submission_digest(first)
    assert doc["model"]["model_name"] == "default" and doc["model"]["base_emb_dim"] == "4096"
    _save_checkpoint(gcs, bucket, "exp1", 99)  # the run trained, then finished and was deleted

    other = _plan("gpt3-6b", "exp1", bucket)
    cluster, err = _submit(other)
    assert isinstance(err, FieldError) and cluster.applied == []  # nothing applied
    assert str(err).startswith(f"--name: gs://{bucket}/runs/exp1/checkpoints/ belongs to run exp1 (maxtext-6b, created ")
    assert "another shape" in str(err) and "model_name default vs gpt3-6b" in str(err)
    cluster, err = _submit(other, resume=True)  # not even on purpose: other weights cannot be restored into it
    assert isinstance(err, FieldError) and str(err).startswith("--resume: ") and cluster.applied == []
    assert _identity(gcs, bucket, "exp1")["recipe"] == "maxtext-6b"  # the owner is unchanged


def test_the_same_run_again_resumes_and_other_options_need_resume(gcs, bucket: str) -> None:
    plan = _plan("maxtext-6b", "exp2", bucket)
    assert _submit(plan)[1].checkpoints.state == "new"
    _save_checkpoint(gcs, bucket, "exp2", 40)
    again = _submit(plan)[1]  # resubmitted as it was (after a delete): the same run
    assert again.checkpoints.state == "same" and again.checkpoints.checkpoints
    assert "resumes from its latest checkpoint" in again.checkpoints.line()

    longer = _plan("maxtext-6b", "exp2", bucket, steps=500)
    cluster, err = _submit(longer)
    assert isinstance(err, FieldError) and "submitted with other options" in str(err) and "--resume" in str(err) and cluster.applied == []
    cluster, sub = _submit(longer, resume=True)
    assert sub.checkpoints.state == "resumed" and cluster.applied
    assert "--resume: continues from its latest checkpoint of run exp2 (maxtext-6b" in sub.checkpoints.line()
    doc = _identity(gcs, bucket, "exp2")
    assert doc["submission"] == ident.submission_digest(longer) and doc["updated"]  # the resumed run owns it now
    assert _submit(longer)[1].checkpoints.state == "same"


def test_unrecorded_checkpoints_are_refused_unless_resumed(gcs, bucket: str) -> None:
    """A converted base checkpoint (MaxText's documented layout) or an older toolkit's run: no identity."""
    _save_checkpoint(gcs, bucket, "exp3", 0)
    plan = _plan("maxtext-6b", "exp3", bucket)
    cluster, err = _submit(plan)
    assert isinstance(err, FieldError) and "holds checkpoints no toolkit run recorded" in str(err) and cluster.applied == []
    assert _identity(gcs, bucket, "exp3") is None
    cluster, sub = _submit(plan, resume=True)
    assert sub.checkpoints.state == "resumed" and "checkpoints no toolkit run recorded" in sub.checkpoints.line()
    assert _identity(gcs, bucket, "exp3")["recipe"] == "maxtext-6b"


def test_resume_with_nothing_to_resume_is_refused(gcs, bucket: str) -> None:
    cluster, err = _submit(_plan("maxtext-6b", "exp4", bucket), resume=True)
    assert isinstance(err, FieldError) and str(err).startswith("--resume: nothing to resume") and cluster.applied == []
    cluster, err = _submit(runs.plan("hello-tpu", SPEC, Overrides(name="exp4")), resume=True)
    assert isinstance(err, FieldError) and "saves no checkpoints" in str(err) and cluster.applied == []


def test_a_run_that_keeps_no_checkpoints_is_not_checked(gcs, bucket: str) -> None:
    plan = _plan("maxtext-6b", "exp5", bucket, checkpoint_every=None)
    off = runs.plan("maxtext-6b", SPEC, Overrides(name="exp5", sets=(f"base_output_directory=gs://{bucket}/runs", "enable_checkpointing=false")))
    assert ident.guarded(plan) and not ident.guarded(off)
    cluster, sub = _submit(off)
    assert sub.checkpoints is None and cluster.applied and _identity(gcs, bucket, "exp5") is None


def test_a_missing_bucket_is_one_line_and_nothing_applied(gcs) -> None:
    cluster = Cluster()
    with pytest.raises(Exception) as e:
        runs.apply(cluster, _plan("maxtext-6b", "exp6", f"nope-{uuid.uuid4().hex[:6]}"))
    assert "does not exist" in str(e.value) and "\n" not in str(e.value) and cluster.applied == []


def test_a_foreign_identity_file_is_refused(gcs, bucket: str) -> None:
    gcs.bucket(bucket).blob(f"runs/exp7/{ident.IDENTITY}").upload_from_string(b'{"hello": 1}')
    cluster = Cluster()
    with pytest.raises(Exception, match="is not a run identity the toolkit wrote"):
        runs.apply(cluster, _plan("maxtext-6b", "exp7", bucket))
    assert cluster.applied == []


def test_dry_run_says_what_it_would_check(capsys) -> None:
    from toolkit.clikit import run
    from workloads.cli import _register, app

    _register()
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(app, ["submit", "maxtext-6b", "--name", "exp1", "--dry-run"])
    assert rc == 0
    line = [ln for ln in err.getvalue().splitlines() if ln.startswith("would check")]
    assert line == [
        "would check gs://my-tpu-project-tpu-dev-ckpt/exp1/tgk-run.json and gs://my-tpu-project-tpu-dev-ckpt/exp1/checkpoints/ before applying,"
        " write the run's identity there, and refuse the submit if another run (or unrecorded checkpoints) is there"
    ]


# ------------------------------------------------------------------ run-local: the same rule on a local directory


def test_run_local_directories_follow_the_same_rule(tmp_path: Path) -> None:
    a = runs.plan("maxtext-6b", SPEC, Overrides(name="loc", slices=1))
    b = runs.plan("gpt3-6b", SPEC, Overrides(name="loc", slices=1))
    store = ident.DirStore(tmp_path / "loc")
    assert ident.claim(store, a, resume=False).state == "new"
    (tmp_path / "loc" / "checkpoints" / "5").mkdir(parents=True)
    assert ident.claim(store, a, resume=False).state == "same"
    with pytest.raises(FieldError, match="another shape"):
        ident.claim(store, b, resume=True)
    fresh = ident.DirStore(tmp_path / "other")
    (tmp_path / "other" / "checkpoints" / "0").mkdir(parents=True)  # laid there by hand
    with pytest.raises(FieldError, match="no toolkit run recorded"):
        ident.claim(fresh, a, resume=False)


# ------------------------------------------------------------------ the decision, as a property

MODELS = st.sampled_from([{"model_name": "default", "params": "6"}, {"model_name": "gpt3-6b", "params": "6"}, {"model_name": "default", "params": "8"}])
IDS = st.builds(
    lambda r, m, d: ident.Identity("run", r, m, d, "t"), st.sampled_from(["maxtext-6b", "gpt3-6b"]), MODELS, st.sampled_from(["sha256:a", "sha256:b"])
)


@settings(max_examples=300, deadline=None)
@given(mine=IDS, found=st.none() | IDS, checkpoints=st.booleans(), resume=st.booleans())
def test_decide_never_hands_a_run_another_runs_state_by_accident(mine, found, checkpoints: bool, resume: bool) -> None:
    try:
        state = ident.decide(mine, found, checkpoints, resume=resume, where="gs://b/run/")
    except FieldError:
        return
    if found is not None and found.submission != mine.submission:
        assert resume and found.model == mine.model  # another submission's state only on purpose, into the same shape
    if found is None and checkpoints:
        assert resume  # unrecorded checkpoints only on purpose
    if resume:
        assert state in ("resumed", "same") and (checkpoints or found is not None)
    assert state in ("new", "same", "resumed")
