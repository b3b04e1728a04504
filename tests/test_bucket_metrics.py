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


# ------------------------------------------------------------------ every checkpoint storage: where the figures are


def _place(storage_kind: str | None, *sets: str):
    from workloads.observe.analysis import _tpu_pod_specs

    doc = load_spec(DEFAULT_SPEC_PATH)
    if storage_kind == "lustre":
        from tests.support import spec_from
        from tests.support.specs import example_doc

        d = example_doc("default")
        d["lustre"] = {"name": "ckpt", "capacity_gib": 18000, "ip": "10.0.0.2"}
        doc = spec_from(d)
    plan = plan_run("maxtext-6b", doc, Overrides(slices=2, name="bm-run", checkpoint_storage=storage_kind, sets=sets))
    (obj,) = manifests.run_objects(plan)
    return plan, bucket_metrics.metrics_place(list(_tpu_pod_specs(obj)))


def test_every_checkpoint_storage_says_where_its_step_figures_are() -> None:
    plan, gcs = _place(None)
    assert gcs == bucket_metrics.Place(bucket_metrics.METRICS, f"{plan.program.output_dir}metrics/")
    plan, off = _place(None, "gcs_metrics=false")
    assert off == bucket_metrics.Place(bucket_metrics.TENSORBOARD, f"{plan.program.output_dir}tensorboard/bm-run/")
    plan, fuse = _place("gcsfuse")
    bucket = plan.policy.checkpoint_storage.bucket
    # MaxText writes /checkpoints/bm-run/tensorboard/bm-run/ through the mount: the mounted bucket's bm-run/tensorboard/bm-run/
    assert fuse == bucket_metrics.Place(bucket_metrics.TENSORBOARD, f"gs://{bucket}/bm-run/tensorboard/bm-run/")
    assert rh.tensorboard_dir(rh.Rehearsal.of(plan, 30.0)) == fuse.directory  # the rehearsal writes where the reader looks
    plan, lustre = _place("lustre")
    assert lustre.kind == bucket_metrics.LUSTRE and lustre.directory == f"{plan.policy.checkpoint_storage.base_output}/bm-run/tensorboard/bm-run/"
    assert rh.tensorboard_dir(rh.Rehearsal.of(plan, 30.0)) is None
    assert _place("gcsfuse", "enable_tensorboard=false")[1] is None


def test_event_files_are_read_in_attempt_order_a_redone_step_the_later_ones(client) -> None:
    from workloads.observe import tb_events as tb

    bucket = f"bm-{uuid.uuid4().hex[:8]}"
    client.create_bucket(bucket)
    b = client.bucket(bucket)
    d = f"gs://{bucket}/run-1/tensorboard/"

    def attempt(t0: int, steps: range, host: str) -> None:
        records = [tb.Scalars(s, t0 + s, {"learning/loss": 10.0 - s / 10, "perf/step_time_seconds": 1.0 + t0 / 1e6}) for s in steps]
        b.blob(f"run-1/tensorboard/events.out.tfevents.{t0}.{host}").upload_from_string(tb.encode(t0, records))

    attempt(1_700_000_000, range(0, 25), "w0-a")  # preempted after step 24, saved 22
    attempt(1_700_000_500, range(23, 40), "w0-b")  # restored 22: steps 23 and 24 done again
    b.blob("run-1/tensorboard/plugins/profile/x.xplane.pb").upload_from_string(b"not scalars")
    text, files = bucket_metrics.read_events(client, d, limit_bytes=1 << 20)
    assert files == 2
    steps = m.parse_metrics_file(text)
    assert [s.step for s in steps] == list(range(40))
    assert steps[23].seconds == pytest.approx(1.0 + 1_700_000_500 / 1e6) and steps[22].seconds == pytest.approx(1.0 + 1_700_000_000 / 1e6)
    assert bucket_metrics.read_events(client, f"gs://{bucket}/other/tensorboard/", limit_bytes=1 << 20) == ("", 0)
    with pytest.raises(storage.StorageError, match="over 100 bytes"):
        bucket_metrics.read_events(client, d, limit_bytes=100)
    b.blob("run-1/tensorboard/events.out.tfevents.1700000900.w0-c").upload_from_string(b"\x00" * 64)
    with pytest.raises(storage.StorageError, match="cannot be read: it does not begin with a whole TFRecord"):
        bucket_metrics.read_events(client, d, limit_bytes=1 << 20)


def test_an_event_file_larger_than_one_answer_is_read_in_parts(client, monkeypatch) -> None:
    from workloads.observe import tb_events as tb

    monkeypatch.setattr(bucket_metrics, "PART", 1000)  # the transport's cap is 32 MiB; a long run's file is larger
    bucket = f"bm-{uuid.uuid4().hex[:8]}"
    client.create_bucket(bucket)
    data = tb.encode(1.0, [tb.Scalars(k, 1.0 + k, {"learning/loss": 1.0, "perf/step_time_seconds": 0.5}) for k in range(200)])
    assert len(data) > 10 * 1000
    client.bucket(bucket).blob("r/tensorboard/r/events.out.tfevents.1.h").upload_from_string(data)
    text, files = bucket_metrics.read_events(client, f"gs://{bucket}/r/tensorboard/r/", limit_bytes=1 << 20)
    assert files == 1 and [s.step for s in m.parse_metrics_file(text)] == list(range(200))


def test_a_lustre_run_says_in_one_line_where_its_event_files_are(capsys) -> None:
    """Cloud Logging cannot answer and the run's files are on Lustre: its last pod's log is read, and one line says where the rest is."""
    from workloads.cluster import runkinds
    from workloads.observe import analysis
    from workloads.observe.history import HistoryUnavailable

    plan, place = _place("lustre")
    (obj,) = manifests.run_objects(plan)

    class Lustre:
        context = "gke_p_us-west4_c"

        def find_run(self, ns, run):
            return runkinds.JOBSET, obj

        def find_pod(self, ns, run, found=None):
            return {"metadata": {"name": "bm-run-slice-0-0-x"}}

        def workload_for(self, ns, o):
            return None

        def logs(self, ns, pod):
            return iter(["I1127 10:00:00.000000 1 train.py:1] completed step: 7, seconds: 1.0"])

    def no_logging(cluster, project):
        raise HistoryUnavailable("Cloud Logging is off in this test")

    got = analysis.load_run(
        "bm-run", spec=lambda: load_spec(DEFAULT_SPEC_PATH), cluster=Lustre, metrics_file=None, namespace="research", team=None, logging_client=no_logging
    )
    assert [s.step for s in got.log.steps] == [7]
    lines = capsys.readouterr().err.splitlines()
    assert f"warning: the run's TensorBoard event files are on Lustre ({place.directory}), which the toolkit cannot read from here: " in lines[-1]
    assert lines[-1].endswith("pass one as --metrics-file")
