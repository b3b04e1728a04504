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
from tests.support.recording_cluster import RecordingCluster
from toolkit.errors import FieldError
from workloads import runs
from workloads.planning.planner import Overrides
from workloads.runs import identity as ident

SPEC = load_spec(REPO / "examples" / "default.yaml")


@pytest.fixture(scope="module")
def gcs():
    with emulator_client() as client:
        yield client


def _plan(recipe: str, name: str, bucket: str, **kw):
    return runs.plan(recipe, SPEC, Overrides(name=name, sets=(f"base_output_directory=gs://{bucket}/runs",), **kw))


def _submit(plan, resume: bool = False) -> tuple[RecordingCluster, object]:
    cluster = RecordingCluster()
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
    assert sub.checkpoints.state == "foreign" and cluster.applied
    assert "which no toolkit run recorded; read, not adopted" in sub.checkpoints.line()
    assert _identity(gcs, bucket, "exp3") is None  # read, never adopted: no record that the toolkit made it
    again = _submit(plan)[1]  # and so the next submit under the name still needs --resume
    assert isinstance(again, FieldError) and "no toolkit run recorded" in str(again)


def test_files_nobody_recorded_besides_checkpoints_are_refused(gcs, bucket: str) -> None:
    """Metrics of another writer under <run>/ and no identity: a new run would write among them."""
    gcs.bucket(bucket).blob("runs/exp8/metrics/metrics_step_0.txt").upload_from_string(b"{}")
    cluster, err = _submit(_plan("maxtext-6b", "exp8", bucket))
    assert isinstance(err, FieldError) and "holds files no toolkit run recorded (e.g. metrics/" in str(err) and cluster.applied == []
    cluster, err = _submit(_plan("maxtext-6b", "exp8", bucket), resume=True)
    assert isinstance(err, FieldError) and "nothing to resume" in str(err) and _identity(gcs, bucket, "exp8") is None


def test_resume_with_nothing_to_resume_is_refused(gcs, bucket: str) -> None:
    cluster, err = _submit(_plan("maxtext-6b", "exp4", bucket), resume=True)
    assert isinstance(err, FieldError) and str(err).startswith("--resume: nothing to resume") and cluster.applied == []
    cluster, err = _submit(runs.plan("hello-tpu", SPEC, Overrides(name="exp4")), resume=True)
    assert isinstance(err, FieldError) and "saves no checkpoints" in str(err) and cluster.applied == []


def test_a_run_that_keeps_no_checkpoints_still_owns_its_directory(gcs, bucket: str) -> None:
    """MaxText writes metrics and TensorBoard traces under <run>/ whether or not it checkpoints: the directory is the run's all the same."""
    off = runs.plan("maxtext-6b", SPEC, Overrides(name="exp5", sets=(f"base_output_directory=gs://{bucket}/runs", "enable_checkpointing=false")))
    assert ident.guarded(off) and not ident.resumable(off)
    cluster, sub = _submit(off)
    assert sub.checkpoints.state == "new" and cluster.applied and _identity(gcs, bucket, "exp5")["run"] == "exp5"
    cluster, err = _submit(off, resume=True)
    assert isinstance(err, FieldError) and "saves no checkpoints" in str(err) and cluster.applied == []
    hello = runs.plan("hello-tpu", SPEC, Overrides(name="exp5"))
    assert not ident.guarded(hello)  # a plain command writes no directory of the toolkit's choosing


def test_a_missing_bucket_is_one_line_and_nothing_applied(gcs) -> None:
    cluster = RecordingCluster()
    with pytest.raises(Exception) as e:
        runs.apply(cluster, _plan("maxtext-6b", "exp6", f"nope-{uuid.uuid4().hex[:6]}"))
    assert "does not exist" in str(e.value) and "\n" not in str(e.value) and cluster.applied == []


def test_a_foreign_identity_file_is_refused(gcs, bucket: str) -> None:
    gcs.bucket(bucket).blob(f"runs/exp7/{ident.IDENTITY}").upload_from_string(b'{"hello": 1}')
    cluster = RecordingCluster()
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
        " write the run's identity there, and refuse the submit if another run (or files it did not record) is there"
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
        assert resume and state == "foreign"  # unrecorded checkpoints only on purpose, and never adopted
    if resume:
        assert state in ("resumed", "same", "foreign") and (checkpoints or found is not None)
    if state == "new":
        assert found is None and not checkpoints and not resume  # a record is made only for a directory the toolkit makes
    assert state in ("new", "same", "resumed", "foreign")


PLAN = runs.plan("maxtext-6b", SPEC, Overrides(name="run", slices=1))
MINE = ident.identity_of(PLAN)
FOUND = st.none() | st.sampled_from(
    [
        MINE,  # the same submission
        ident.Identity("run", "maxtext-6b", MINE.model, "sha256:other", "t"),  # same shape, other options
        ident.Identity("run", "gpt3-6b", {"model_name": "gpt3-6b"}, "sha256:x", "t"),  # another shape
    ]
)


class MemStore:
    """A directory in memory: what ``claim`` reads, and every write it makes."""

    where = "mem://run/"

    def __init__(self, found, checkpoints: bool, others: list[str]) -> None:
        self.record = None if found is None else found.encode()
        self.names = (["checkpoints/"] if checkpoints else []) + others + ([ident.IDENTITY] if found is not None else [])
        self.checkpoints = checkpoints
        self.writes: list[tuple[str, bool]] = []

    def read(self, name):
        return self.record if name == ident.IDENTITY else None

    def write(self, name, data, *, create):
        self.writes.append((name, create))
        self.record = data
        return True

    def has_any(self, prefix):
        return self.checkpoints

    def entries(self):
        return list(self.names)


@settings(max_examples=200, deadline=None)
@given(found=FOUND, checkpoints=st.booleans(), others=st.lists(st.sampled_from(["metrics/", "tensorboard/", "notes.txt"]), max_size=2), resume=st.booleans())
def test_claim_records_a_directory_only_when_the_toolkit_makes_it(found, checkpoints: bool, others: list[str], resume: bool) -> None:
    """The ledger's rule on a run's directory: recorded when the toolkit makes it, never when it merely uses it."""
    store = MemStore(found, checkpoints, others)
    try:
        verdict = ident.claim(store, PLAN, resume=resume)
    except FieldError:
        assert store.writes == []  # a refusal writes nothing
        return
    if store.writes == [(ident.IDENTITY, True)]:
        assert verdict.state == "new" and found is None and not checkpoints and not others  # created: only into an empty directory
    elif store.writes == [(ident.IDENTITY, False)]:
        assert verdict.state == "resumed" and found is not None  # replaced: only a record the toolkit wrote, on purpose
        assert ident.Identity.decode(store.record, "x").format == found.format  # a resume never upgrades how the directory came to be
    else:
        assert store.writes == [] and verdict.state in ("same", "foreign")
    if found is None and checkpoints:
        assert verdict.state == "foreign" and store.writes == []  # foreign checkpoints: read, not adopted


# ------------------------------------------------------------------ the storage's preconditions (fake-gcs-server checks them)


@pytest.fixture(scope="module")
def strict():
    from tests.support.gcs_emulator import precondition_client

    with precondition_client() as client:
        yield client


class _Racing(ident.GcsStore):
    """A store that lets another submit claim the directory between its look and its write."""

    def __init__(self, client, output_dir, other) -> None:
        super().__init__(client, output_dir)
        self.other = other

    def has_any(self, prefix):
        if self.other is not None:
            other, self.other = self.other, None
            ident.claim(ident.GcsStore(self.client, other.program.output_dir), other, resume=False)
        return super().has_any(prefix)


def test_two_submits_racing_to_one_directory_one_wins(strict) -> None:
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    strict.create_bucket(bucket)
    mine, theirs = _plan("maxtext-6b", "race", bucket), _plan("gpt3-6b", "race", bucket)
    with pytest.raises(FieldError, match="was claimed by another run just now"):
        ident.claim(_Racing(strict, mine.program.output_dir, theirs), mine, resume=False)
    doc = json.loads(strict.bucket(bucket).blob("runs/race/tgk-run.json").download_as_bytes())
    assert doc["recipe"] == "gpt3-6b"  # the winner's record stands: Cloud Storage refused the second create


def test_a_resume_replaces_the_identity_only_as_it_was_read(strict) -> None:
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    strict.create_bucket(bucket)
    first = _plan("maxtext-6b", "res", bucket)
    ident.claim(ident.GcsStore(strict, first.program.output_dir), first, resume=False)
    strict.bucket(bucket).blob("runs/res/checkpoints/5/items/state").upload_from_string(b"w")
    longer = _plan("maxtext-6b", "res", bucket, steps=500)
    store = ident.GcsStore(strict, longer.program.output_dir)
    raw = store.read(ident.IDENTITY)
    strict.bucket(bucket).blob("runs/res/tgk-run.json").upload_from_string(raw)  # another submit rewrote it meanwhile
    assert store.write(ident.IDENTITY, b"{}", create=False) is False
    with pytest.raises(FieldError, match="changed while this submit read it"):

        class Stale(ident.GcsStore):
            def read(self, name):
                got = super().read(name)
                strict.bucket(bucket).blob("runs/res/tgk-run.json").upload_from_string(got)
                return got

        ident.claim(Stale(strict, longer.program.output_dir), longer, resume=True)
