"""MaxText's gcs_metrics files: written by the rehearsal as MaxText writes them, read back by
``metrics`` when Cloud Logging cannot answer — against a real GCS-compatible server (no mocks)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support.gcs_emulator import emulator_client
from workloads.local import cloudlogging
from workloads.local import rehearsal as rh
from workloads.observe import bucket_metrics, storage
from workloads.observe import metrics as m
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset as manifests


@pytest.fixture(scope="module")
def client():
    with emulator_client() as c:
        yield c


def _plan(steps: int = 35):
    return plan_run("maxtext-6b", load_spec(DEFAULT_SPEC_PATH), Overrides(slices=2, name="bm-run", steps=steps))


def test_the_run_names_its_metrics_directory_in_its_args() -> None:
    plan = _plan()
    (js,) = manifests.run_objects(plan)
    from workloads.observe.analysis import _tpu_pod_specs

    assert bucket_metrics.metrics_dir(list(_tpu_pod_specs(js))) == f"{plan.program.output_dir.rstrip('/')}/metrics/"
    off = plan_run("maxtext-6b", load_spec(DEFAULT_SPEC_PATH), Overrides(slices=2, name="bm-run", sets=("gcs_metrics=false",)))
    assert bucket_metrics.metrics_dir(list(_tpu_pod_specs(manifests.run_objects(off)[0]))) is None


def test_files_are_named_at_maxtexts_boundaries() -> None:
    r = replace(rh.Rehearsal.of(_plan(35), 35.0), config=(("log_period", "10"), ("gcs_metrics", "true")))
    named = {s: rh.metrics_file_name(r, s) for s in range(35)}
    assert {s: n for s, n in named.items() if n} == {
        9: "metrics_step_000000_to_step_000009.txt",
        19: "metrics_step_000010_to_step_000019.txt",
        29: "metrics_step_000020_to_step_000029.txt",
        34: "metrics_step_000030_to_step_000034.txt",  # the last step uploads what is left
    }


def test_a_record_says_what_the_steps_log_line_says() -> None:
    r = rh.Rehearsal.of(_plan(), 35.0)
    log = rh.MaxTextLog(r, "pod", 0)
    rec = log.metrics_record(7, 5)
    line = log.step(100.0, 7, 5)[0]
    parsed = m.parse_log(cloudlogging.cri_fields(line, 0.0)[2]).steps[0]
    (from_file,) = m.parse_metrics_file(json.dumps(rec))
    assert from_file.step == parsed.step == 7
    for f in ("seconds", "tflops_per_device", "tokens_per_device", "loss"):
        assert getattr(from_file, f) == pytest.approx(getattr(parsed, f), rel=2e-3), f


def test_read_puts_files_in_step_order_and_keeps_a_restarts_replacement(client) -> None:
    bucket = f"bm-{uuid.uuid4().hex[:8]}"
    client.create_bucket(bucket)
    d = f"gs://{bucket}/out/run-1/metrics/"
    b = client.bucket(bucket)

    def put(name: str, steps: range) -> None:
        b.blob(f"out/run-1/metrics/{name}").upload_from_string(
            "".join(json.dumps({"step": float(s), "perf/step_time_seconds": 1.0 + s / 100}) + "\n" for s in steps)
        )

    put("metrics_step_000010_to_step_000019.txt", range(10, 20))
    put("metrics_step_000000_to_step_000009.txt", range(0, 10))
    # Preempted at step 24 after saving 22: the next attempt's first file holds 23..29 and replaces
    # whatever the first attempt wrote for that period (it wrote nothing: it never reached 29).
    put("metrics_step_000020_to_step_000029.txt", range(23, 30))
    b.blob("out/run-1/metrics/notes.txt").upload_from_string("not MaxText's")
    b.blob("out/run-1/metrics/metrics_step_x_to_step_y.txt").upload_from_string("{}")
    text, files = bucket_metrics.read(client, d, limit_bytes=1 << 20)
    assert files == 3
    steps = [s.step for s in m.parse_metrics_file(text)]
    assert steps == [*range(0, 20), *range(23, 30)]
    assert bucket_metrics.read(client, f"gs://{bucket}/out/other/metrics/", limit_bytes=1 << 20) == ("", 0)
    with pytest.raises(storage.StorageError, match="over 100 bytes"):
        bucket_metrics.read(client, d, limit_bytes=100)


def test_a_missing_bucket_is_one_line(client) -> None:
    with pytest.raises(storage.StorageError, match="does not exist"):
        bucket_metrics.read(client, "gs://no-such-bucket-bm/x/metrics/", limit_bytes=1 << 20)
