"""MaxText's TensorBoard event files, read as its metrics file: one record per step, its scalars by tag.

Process 0 of a MaxText run writes every step's scalars (``learning/loss``,
``perf/step_time_seconds``, ...: the names of its ``metrics_file`` records) with tensorboardX
into ``<base_output_directory>/<run_name>/tensorboard/``, one ``events.out.tfevents.<time>.<host>``
file per process start, i.e. per attempt, closed when training stops (completed, crashed or
stopped by SIGTERM). Where MaxText's own metrics files cannot be written (``gcs_metrics``
uploads only to a ``gs://`` output, and a run checkpointing through a mount has none), these
are the step figures that outlive the run's pods (``workloads.observe.bucket_metrics``).

The format, parsed here with bounds because the bytes come from a bucket: TFRecord framing
(a little-endian uint64 length, its masked CRC-32C, the record, the record's masked CRC-32C)
around ``tensorflow.Event`` protocol buffers: ``wall_time`` (1, double), ``step`` (2, int64),
``summary`` (5) of ``Summary.Value``s with ``tag`` (1) and ``simple_value`` (2, float), which
is how tensorboardX writes a scalar. Anything else in a file (the version record, images,
histograms) is skipped; a record whose framing or checksum is wrong ends the file there
(tensorboardX's last record of a killed writer can be cut short).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_RECORD = 16 * 1024 * 1024  # an Event of a step's scalars is under a KiB; an image summary a few MiB
MAX_TAGS = 10_000  # distinct scalar tags a file may bring (MaxText writes a few dozen)
_MASK_DELTA = 0xA282EAD8


class BadEvents(ValueError):
    """Bytes that are not a TensorBoard event file, in words."""


@dataclass(frozen=True)
class Scalars:
    step: int
    wall_time: float
    values: dict[str, float]


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = int.from_bytes(google_crc32c.Checksum(data).digest(), "big")
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def records(data: bytes) -> Iterator[bytes]:
    """The TFRecord records of ``data``; a cut or corrupt tail ends it (BadEvents if not even the first record is whole)."""
    pos, n = 0, 0
    while pos + 12 <= len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if header_crc != _masked_crc(header) or length > MAX_RECORD or pos + 12 + length + 4 > len(data):
            break
        body = data[pos + 12 : pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        if body_crc != _masked_crc(body):
            break
        yield body
        n += 1
        pos += 16 + length
    if n == 0 and data:
        raise BadEvents("it does not begin with a whole TFRecord (a TensorBoard event file does)")


def is_event_file(data: bytes) -> bool:
    """Whether ``data`` begins with a whole TFRecord header (its length's checksum right): an event file, not text."""
    return len(data) >= 12 and struct.unpack("<I", data[8:12])[0] == _masked_crc(data[:8])


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise BadEvents("a varint runs past the record")
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos + i + 1
        shift += 7
    raise BadEvents("a varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of a protocol buffer message: bytes for length-delimited and fixed, int for varints."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            if pos + 8 > len(buf):
                raise BadEvents("a 64-bit field runs past the record")
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise BadEvents("a field runs past the record")
            yield number, wire, buf[pos : pos + size]
            pos += size
        elif wire == 5:
            if pos + 4 > len(buf):
                raise BadEvents("a 32-bit field runs past the record")
            yield number, wire, buf[pos : pos + 4]
            pos += 4
        else:
            raise BadEvents(f"wire type {wire} is not one an Event uses")


def event_scalars(record: bytes) -> Scalars | None:
    """The step and scalar values of one Event record; None for an Event with no scalar (the version record)."""
    step, wall, summary = 0, 0.0, b""
    for number, wire, value in _fields(record):
        if number == 1 and wire == 1:
            (wall,) = struct.unpack("<d", value)  # type: ignore[arg-type]
        elif number == 2 and wire == 0:
            step = value if isinstance(value, int) and value < 1 << 63 else -1  # int64: negatives are 10-byte varints
        elif number == 5 and wire == 2:
            summary = value  # type: ignore[assignment]
    if not summary or step < 0:
        return None
    values: dict[str, float] = {}
    for number, wire, value in _fields(summary):
        if number != 1 or wire != 2:
            continue
        tag, simple = None, None
        for n2, w2, v2 in _fields(value):  # type: ignore[arg-type]
            if n2 == 1 and w2 == 2:
                tag = v2.decode("utf-8", errors="replace")[:200]  # type: ignore[union-attr]
            elif n2 == 2 and w2 == 5:
                (simple,) = struct.unpack("<f", v2)  # type: ignore[arg-type]
        if tag is not None and simple is not None and math.isfinite(simple):
            values[tag] = simple
    return Scalars(step, wall if math.isfinite(wall) else 0.0, values) if values else None


def steps(files: Iterable[bytes]) -> dict[int, dict[str, float]]:
    """Every step's scalars over ``files`` in attempt order: a step a later attempt did again is the later one's."""
    out: dict[int, dict[str, float]] = {}
    tags: set[str] = set()
    for data in files:
        seen: dict[int, dict[str, float]] = {}
        for rec in records(data):
            s = event_scalars(rec)
            if s is None:
                continue
            tags.update(s.values)
            if len(tags) > MAX_TAGS:
                raise BadEvents(f"more than {MAX_TAGS:,} scalar tags, more than a MaxText run writes")
            seen.setdefault(s.step, {}).update(s.values)
        out.update(seen)
    return out


def as_metrics_file(by_step: dict[int, dict[str, float]]) -> str:
    """The steps as MaxText's ``metrics_file`` JSONL (``step`` and its scalars by tag), in step order."""
    return "\n".join(json.dumps({"step": k, **v}) for k, v in sorted(by_step.items()))


# ------------------------------------------------------------------ writing (what tensorboardX writes; the rehearsal's)


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint_bytes(number << 3 | wire)
    return key + (_varint_bytes(len(payload)) + payload if wire == 2 else payload)


def _record(body: bytes) -> bytes:
    header = struct.pack("<Q", len(body))
    return header + struct.pack("<I", _masked_crc(header)) + body + struct.pack("<I", _masked_crc(body))


def encode(wall_time: float, scalars: Iterable[Scalars]) -> bytes:
    """An event file as tensorboardX writes one: the version record, then an Event per scalar (tag, simple_value)."""
    out = [_record(_field(1, 1, struct.pack("<d", wall_time)) + _field(3, 2, b"brain.Event:2"))]
    for s in scalars:
        for tag, value in s.values.items():
            value_msg = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
            event = _field(1, 1, struct.pack("<d", s.wall_time)) + _field(2, 0, _varint_bytes(s.step)) + _field(5, 2, _field(1, 2, value_msg))
            out.append(_record(event))
    return b"".join(out)
