"""Report upload against a real GCS-compatible server process on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.gcs_emulator import running_emulator
from workloads.observe import metrics as m
from workloads.observe import report as rp
from workloads.observe import storage

DATA = Path(__file__).parent / "data" / "maxtext"


@pytest.fixture(scope="session")
def gcs_url() -> str:
    with running_emulator() as url:
        yield url


@pytest.fixture()
def client(gcs_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(storage.EMULATOR_ENV, gcs_url)
    return storage.make_client(project="test-project")


@pytest.fixture()
def report_dir(tmp_path: Path) -> Path:
    log = m.load((DATA / "tiny_cpu.log").read_text(), (DATA / "tiny_cpu.metrics.jsonl").read_text())
    summ = m.summarize(log.steps, profiler=log.profiler_window())
    rp.write_report(tmp_path / "report", rp.RunFacts.from_log("tiny_cpu", "local", log), log, summ, profiler=log.profiler_window())
    return tmp_path / "report"


def test_upload_round_trip(client, report_dir: Path) -> None:
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    client.create_bucket(bucket)
    uploaded = storage.upload(report_dir, bucket, "/reports/tiny_cpu/", client=client)
    assert [u.uri for u in uploaded] == [
        f"gs://{bucket}/reports/tiny_cpu/metrics.png",
        f"gs://{bucket}/reports/tiny_cpu/report.md",
        f"gs://{bucket}/reports/tiny_cpu/summary.json",
    ]
    blobs = {b.name: b for b in client.list_blobs(bucket, prefix="reports/")}
    assert sorted(blobs) == ["reports/tiny_cpu/metrics.png", "reports/tiny_cpu/report.md", "reports/tiny_cpu/summary.json"]
    # The media type must survive (the emulator drops the charset parameter; GCS keeps it).
    media = {name.rsplit("/", 1)[1]: (b.content_type or "").split(";")[0] for name, b in blobs.items()}
    assert media == {"metrics.png": "image/png", "report.md": "text/markdown", "summary.json": "application/json"}
    for name, blob in blobs.items():
        local = report_dir / name.rsplit("/", 1)[1]
        assert blob.download_as_bytes() == local.read_bytes()


def test_upload_keeps_subdirectories(client, tmp_path: Path) -> None:
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    client.create_bucket(bucket)
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "x.log").write_text("hello\n")
    (uploaded,) = storage.upload(tmp_path / "d", bucket, "", client=client)
    assert uploaded.uri == f"gs://{bucket}/sub/x.log" and uploaded.content_type.startswith("text/plain")
    assert client.bucket(bucket).blob("sub/x.log").download_as_text() == "hello\n"


def test_missing_bucket_is_one_line(client, report_dir: Path) -> None:
    with pytest.raises(storage.StorageError) as e:
        storage.upload(report_dir, f"nope-{uuid.uuid4().hex[:8]}", "reports/x", client=client)
    assert "does not exist" in str(e.value) and "\n" not in str(e.value)


def test_empty_or_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(storage.StorageError, match="is not a directory"):
        storage.upload(tmp_path / "none", "b", "p", client=object())
    (tmp_path / "empty").mkdir()
    with pytest.raises(storage.StorageError, match="is empty"):
        storage.upload(tmp_path / "empty", "b", "p", client=object())


def test_content_types() -> None:
    assert storage.content_type_for(Path("a.md")).startswith("text/markdown")
    assert storage.content_type_for(Path("a.PNG")) == "image/png"
    assert storage.content_type_for(Path("a.jsonl")) == "application/x-ndjson"
    assert storage.content_type_for(Path("a.unknownext")) == "application/octet-stream"
