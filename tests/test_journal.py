"""The training journal (``workloads journal``): records from real MaxText logs, appended, never overwritten.

The logs are real MaxText 0.2.5 CPU runs (tests/data/maxtext). The journal lives in a real
GCS-compatible server (gcp-storage-emulator) for the CLI's whole path; that server ignores
``ifGenerationMatch`` (checked below, so the day it changes this file says so), so the
read-then-write race is tested on a client that checks generations as Cloud Storage documents
them, and on fake-gcs-server where it is installed (scripts/build-fake-gcs-server.sh).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import cli
from tests.support.gcs_emulator import emulator_client
from toolkit.errors import FieldError
from workloads.observe import journal

BUCKET = "my-tpu-project-tpu-dev-artifacts"  # examples/default.yaml's artifacts bucket
LOG = "tests/data/maxtext/tiny_cpu_noprof.log"
LOG2 = "tests/data/maxtext/tiny_cpu.log"


@pytest.fixture(scope="module")
def gcs():
    with emulator_client("my-tpu-project") as client:
        client.create_bucket(BUCKET)
        yield client


def _journal(*args: str) -> Any:
    env = {"KUBECONFIG": "/nonexistent/kubeconfig", "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"]}
    return cli("workloads", "journal", *args, env=env)


def _object(client: Any, model: str) -> tuple[dict, int]:
    blob = client.bucket(BUCKET).get_blob(journal.object_name(model))
    generation = int(blob.generation)  # read before the download, which the emulator's answer resets
    return json.loads(blob.download_as_bytes()), generation


def test_three_runs_make_the_tables_and_a_repeat_is_refused(gcs: Any, tmp_path: Path):
    for log, note in ((LOG, "first"), (LOG2, "profiled")):
        proc = _journal("add", log, "--model", "tiny", "--shape", "tpu7x-2x2x1", "--note", note)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"appended {Path(log).stem} to gs://{BUCKET}/journals/tiny.json")
    doc, generation = _object(gcs, "tiny")
    assert [r["run"] for r in doc["records"]] == ["tiny_cpu_noprof", "tiny_cpu"]

    # The same run again: refused, one line, exit 2, the journal untouched.
    proc = _journal("add", LOG, "--model", "tiny", "--shape", "tpu7x-2x2x1")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: RUN: run tiny_cpu_noprof is already in the tiny journal")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert _object(gcs, "tiny") == (doc, generation)

    # A dry run shows the record it would add and writes nothing.
    copy = tmp_path / "tiny_cpu_noprof-again.log"
    copy.write_text(Path(LOG).read_text().replace("Config param run_name: tiny_cpu_noprof", "Config param run_name: tiny_cpu_noprof-again"))
    proc = _journal("add", str(copy), "--model", "tiny", "--shape", "tpu7x-2x2x1", "--dry-run")
    assert proc.returncode == 0 and "would append tiny_cpu_noprof-again" in proc.stdout
    assert _object(gcs, "tiny") == (doc, generation)

    proc = _journal("add", str(copy), "--model", "tiny", "--shape", "tpu7x-2x2x1", "--markdown", str(tmp_path / "tiny.md"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "tiny.md").read_text()
    shown = _journal("show", "tiny")
    assert shown.returncode == 0
    assert shown.stdout.splitlines() == md.splitlines()
    runs = md.split("## Runs")[1].split("\n### ")[0]
    rows = [ln for ln in runs.splitlines() if ln.startswith("| 20")]
    assert [r.split(" | ")[1] for r in rows] == ["tiny_cpu_noprof", "tiny_cpu", "tiny_cpu_noprof-again"]
    # The figures are metrics' own: steady state from step 2, per chip = per device x 2 on tpu7x.
    from workloads.observe import metrics as m

    steps = m.load(Path(LOG).read_text()).steps
    summ = m.summarize(steps, hardware=m.Hardware.from_shape(__import__("infra.catalog", fromlist=["x"]).shape("tpu7x", "2x2x1"), 1))
    assert f"{summ.step_seconds_mean:,.3f}" in rows[0] and f"{summ.tokens_per_chip:,.1f}" in rows[0]
    assert f"{steps[-1].loss:,.3f}" in rows[0] and "| first |" in rows[0]
    assert "JAX (latest run) | 0.12.0.1" in md and "### tiny_cpu: tpu7x-8 x 1" in md
    assert "- **Loss**: 6.014 → 5.946" in md


def test_a_log_without_a_model_name_needs_model(gcs: Any):
    proc = _journal("add", LOG, "--shape", "tpu7x-2x2x1")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --model: the run's log names no MaxText model (model_name default)")


def test_show_of_a_journal_that_does_not_exist(gcs: Any):
    proc = _journal("show", "nothing-here")
    assert proc.returncode == 2 and "no journal gs://" in proc.stderr


def test_a_journal_that_is_not_one_is_refused_not_rewritten(gcs: Any):
    gcs.bucket(BUCKET).blob("journals/broken.json").upload_from_string('{"format": 1, "model": "broken", "records": [{"run": "x", "step_seconds": NaN}]}')
    proc = _journal("add", LOG, "--model", "broken", "--shape", "tpu7x-2x2x1")
    assert proc.returncode == 2 and "is not a journal this toolkit can append to" in proc.stderr
    assert b"NaN" in gcs.bucket(BUCKET).get_blob("journals/broken.json").download_as_bytes()


def test_the_emulator_still_ignores_generation_preconditions(gcs: Any):
    """Why the race below is not tested on gcp-storage-emulator: it replaces a stale generation's object."""
    b = gcs.bucket(BUCKET).blob("probe/gen.txt")
    b.upload_from_string(b"one")
    b.upload_from_string(b"two", if_generation_match=0)  # Cloud Storage: 412
    assert gcs.bucket(BUCKET).get_blob("probe/gen.txt").download_as_bytes() == b"two"


# ------------------------------------------------------------------ another writer between read and write


class _Blob:
    def __init__(self, store: dict, name: str) -> None:
        self.store, self.name = store, name

    @property
    def generation(self) -> int:
        return self.store[self.name][1]

    @property
    def size(self) -> int:
        return len(self.store[self.name][0])

    def download_as_bytes(self, if_generation_match: int | None = None) -> bytes:
        self._check(if_generation_match)
        return self.store[self.name][0]

    def upload_from_string(self, data: str | bytes, content_type: str = "", if_generation_match: int | None = None) -> None:
        self._check(if_generation_match)
        old = self.store.get(self.name, (b"", 0))[1]
        self.store[self.name] = (data.encode() if isinstance(data, str) else data, old + 1)

    def _check(self, want: int | None) -> None:
        from google.api_core import exceptions as gexc

        have = self.store.get(self.name, (b"", 0))[1]  # 0: no live object, as Cloud Storage's ifGenerationMatch=0
        if want is not None and want != have:
            raise gexc.PreconditionFailed(f"generation {have} is not {want}")


class _Bucket:
    def __init__(self, store: dict) -> None:
        self.store = store

    def get_blob(self, name: str) -> _Blob | None:
        return _Blob(self.store, name) if name in self.store else None

    def blob(self, name: str) -> _Blob:
        return _Blob(self.store, name)


class GenerationCheckingClient:
    """Cloud Storage's documented generation preconditions, and nothing else: the boundary the race needs."""

    def __init__(self) -> None:
        self.store: dict[str, tuple[bytes, int]] = {}

    def bucket(self, name: str) -> _Bucket:
        return _Bucket(self.store)


def _rec(run: str) -> journal.Record:
    return journal.Record(
        run=run,
        date="2026-11-27",
        hardware="tpu7x-128 x 1",
        config="",
        precision="bf16",
        steady_steps="2–9",
        step_seconds=1.5,
        tflops_per_device=800.0,
        tflops_per_chip=1600.0,
        tokens_per_chip=3000.0,
        mfu=0.69,
        loss_first=10.0,
        loss_final=3.0,
    )


def _race(client: Any, bucket: str = "b") -> None:
    mine, gen = journal.read(client, bucket, "m")
    # Another writer appends between this read and this write.
    theirs, their_gen = journal.read(client, bucket, "m")
    journal.write(client, bucket, theirs.with_record(_rec("theirs")), their_gen)
    with pytest.raises(journal.JournalConflict) as e:
        journal.write(client, bucket, mine.with_record(_rec("mine")), gen)
    assert e.value.exit_code == 2 and "is never overwritten" in str(e.value) and "run the command again" in str(e.value)
    after, _ = journal.read(client, bucket, "m")
    assert [r.run for r in after.records] == ["theirs"]  # theirs kept; mine not written over it
    # Again, from the version now there: appended after theirs.
    now, g = journal.read(client, bucket, "m")
    journal.write(client, bucket, now.with_record(_rec("mine")), g)
    assert [r.run for r in journal.read(client, bucket, "m")[0].records] == ["theirs", "mine"]


def test_a_journal_changed_between_read_and_write_is_refused_not_replaced():
    _race(GenerationCheckingClient())


def test_the_race_on_a_server_that_checks_generations():
    from tests.support.gcs_emulator import precondition_client

    with precondition_client() as client:
        client.create_bucket("journal-race")
        _race(client, "journal-race")


def test_records_round_trip_and_numbers_stay_finite():
    j = journal.Journal("m").with_record(_rec("a"))
    assert journal.Journal.from_json(j.to_json(), "x") == j
    with pytest.raises(FieldError, match="not a journal"):
        journal.Journal.from_json(j.to_json().replace('"format": 1', '"format": 2'), "x")
    with pytest.raises(FieldError, match="already in the m journal"):
        j.with_record(_rec("a"))


def test_a_table_cell_cannot_break_the_table():
    text = journal.render(journal.Journal("m").with_record(journal.Record(**{**_rec("a").__dict__, "notes": "a | b\nc"})))
    row = next(ln for ln in text.splitlines() if ln.startswith("| 2026"))
    assert row.endswith("| a \\| b c |")
