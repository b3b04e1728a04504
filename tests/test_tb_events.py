"""MaxText's TensorBoard event files read as its metrics file: against the file real MaxText wrote
(scripts/gen_maxtext_log.sh tensorboard: tensorboardX in the pinned MaxText venv, beside the
metrics file of the same steps), the rehearsal's writer, and bytes that are not an event file."""

from __future__ import annotations

import json
import struct

import pytest

from tests.support import REPO, cli
from workloads.observe import metrics as m
from workloads.observe import tb_events as tb

DATA = REPO / "tests" / "data" / "maxtext"
EVENTS = (DATA / "tiny_cpu_tb.tfevents").read_bytes()
RECORDS = [json.loads(line) for line in (DATA / "tiny_cpu_tb.metrics.jsonl").read_text().splitlines()]


def test_maxtexts_own_event_file_says_what_its_metrics_file_says() -> None:
    assert tb.is_event_file(EVENTS) and not tb.is_event_file((DATA / "tiny_cpu_tb.metrics.jsonl").read_bytes())
    steps = tb.steps([EVENTS])
    assert sorted(steps) == [int(r["step"]) for r in RECORDS] == list(range(6))
    for rec in RECORDS:
        got = steps[int(rec["step"])]
        for key, value in rec.items():
            if key in ("step", "run_name"):
                continue
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key  # tensorboardX keeps a float32
    from_events = m.parse_metrics_file(tb.as_metrics_file(steps))
    from_file = m.parse_metrics_file((DATA / "tiny_cpu_tb.metrics.jsonl").read_text())
    assert [(s.step, round(s.loss, 5), round(s.seconds, 5)) for s in from_events] == [(s.step, round(s.loss, 5), round(s.seconds, 5)) for s in from_file]


def test_metrics_takes_an_event_file_as_its_metrics_file(tmp_path) -> None:
    ev = tmp_path / "events.out.tfevents.1.host"
    ev.write_bytes(EVENTS)
    a = cli("workloads", "metrics", str(DATA / "tiny_cpu_tb.metrics.jsonl"), "-o", "json")
    b = cli("workloads", "metrics", str(ev), "-o", "json")
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    assert [s["step"] for s in sa["steps"]] == [s["step"] for s in sb["steps"]] == list(range(6))
    assert [round(s["loss"], 5) for s in sa["steps"]] == [round(s["loss"], 5) for s in sb["steps"]]


def test_the_rehearsals_writer_writes_what_the_reader_reads() -> None:
    scalars = [tb.Scalars(k, 100.0 + k, {"learning/loss": 5.0 - k / 8, "perf/step_time_seconds": 0.5}) for k in range(3)]
    data = tb.encode(100.0, scalars)
    assert tb.steps([data]) == {s.step: s.values for s in scalars}
    assert [r[:1] for r in tb.records(data)][0] == data[12:13]  # the version record first, as tensorboardX writes it


def test_a_cut_tail_ends_the_file_and_a_later_attempt_wins() -> None:
    whole = tb.encode(1.0, [tb.Scalars(k, 1.0, {"learning/loss": float(k)}) for k in range(5)])
    cut = whole[:-7]  # a writer killed mid-record
    assert sorted(tb.steps([cut])) == [0, 1, 2, 3]
    later = tb.encode(2.0, [tb.Scalars(3, 2.0, {"learning/loss": 30.0})])
    assert tb.steps([whole, later])[3] == {"learning/loss": 30.0}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"not an event file at all", "does not begin with a whole TFRecord"),
        (b"\x00" * 64, "does not begin with a whole TFRecord"),
    ],
)
def test_bytes_that_are_not_an_event_file_are_refused_in_words(data: bytes, words: str) -> None:
    with pytest.raises(tb.BadEvents, match=words):
        tb.steps([data])


def _framed(body: bytes) -> bytes:
    header = struct.pack("<Q", len(body))
    return header + struct.pack("<I", tb._masked_crc(header)) + body + struct.pack("<I", tb._masked_crc(body))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"\x12" + b"\xff" * 11, "a varint longer than 10 bytes"),
        (b"\x2a\x05ab", "a field runs past the record"),
        (b"\x0b", "wire type 3 is not one an Event uses"),
        (b"\x09\x00\x00", "a 64-bit field runs past the record"),
    ],
    ids=["endless-varint", "short-field", "group-wire-type", "short-double"],
)
def test_a_hostile_record_is_refused_in_words(body: bytes, words: str) -> None:
    with pytest.raises(tb.BadEvents, match=words):
        tb.steps([_framed(body)])


def test_a_length_past_the_cap_ends_the_file_without_reading_it() -> None:
    header = struct.pack("<Q", tb.MAX_RECORD + 1)
    with pytest.raises(tb.BadEvents, match="does not begin with a whole TFRecord"):
        tb.steps([header + struct.pack("<I", tb._masked_crc(header)) + b"x" * 100])
