"""Is a file what its dataset says it is? Answered from its first and last bytes, with no reader library.

A dataset file can be large and sit in a bucket, so the checks read only a head and a
tail (two ranged reads) and compare them with each format's own framing:

- ArrayRecord files are Riegeli files, which begin with a fixed 64-byte file signature:
  a block header (its hash, previous chunk 0, next chunk 64) whose 24 bytes are the same
  in every file, then a chunk header whose chunk type byte is ``'s'`` (signature).
- Parquet files begin and end with the magic ``PAR1``.
- TFRecord files are a sequence of records framed as ``uint64 length`` + ``uint32
  masked CRC-32C of those 8 bytes`` + data + ``uint32 masked CRC-32C of the data``: the
  first frame's length CRC must match, and the length must fit in the file.
"""

from __future__ import annotations

import struct

from infra.datasets import DatasetFormat

HEAD_BYTES = 64
TAIL_BYTES = 4

_RIEGELI_BLOCK_HEADER = bytes.fromhex("83af70d10d884a3f" + "00" * 8 + "4000000000000000")
_RIEGELI_SIGNATURE_CHUNK_TYPE = 0x73  # 's', at byte 24 + 8 (hash) + 8 (data size) + 8 (data hash)
_PARQUET_MAGIC = b"PAR1"
_TFRECORD_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    import google_crc32c

    crc = int.from_bytes(google_crc32c.Checksum(data).digest(), "big")
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _TFRECORD_MASK_DELTA) & 0xFFFFFFFF


def problem(fmt: DatasetFormat, head: bytes, tail: bytes, size: int) -> str | None:
    """Why a file of ``size`` bytes starting with ``head`` and ending with ``tail`` is not ``fmt``, or None."""
    found = _mismatch(fmt, head, tail, size)
    if found is None or size == 0:
        return found
    other = detect(head, tail, size)
    if other is not None:
        return f"{found} (it looks like {other.value})"
    if head[:2] == b"\x1f\x8b":
        return f"{found} (it looks gzip-compressed)"
    text = head[:32]
    if text and all(32 <= b < 127 or b in (9, 10, 13) for b in text):
        return f"{found} (it looks like plain text)"
    return found


def _mismatch(fmt: DatasetFormat, head: bytes, tail: bytes, size: int) -> str | None:
    if size == 0:
        return "is empty"
    if fmt is DatasetFormat.ARRAYRECORD:
        if len(head) < 49 or head[:24] != _RIEGELI_BLOCK_HEADER or head[48] != _RIEGELI_SIGNATURE_CHUNK_TYPE:
            return "does not begin with the Riegeli file signature of an ArrayRecord file"
        return None
    if fmt is DatasetFormat.PARQUET:
        if size < 12 or head[:4] != _PARQUET_MAGIC or tail[-4:] != _PARQUET_MAGIC:
            return "does not begin and end with Parquet's PAR1 magic"
        return None
    if len(head) < 12:
        return f"is {size} bytes, shorter than one TFRecord frame"
    (length,) = struct.unpack("<Q", head[:8])
    (crc,) = struct.unpack("<I", head[8:12])
    if crc != masked_crc32c(head[:8]):
        return "does not begin with a TFRecord frame (the length's CRC-32C does not match)"
    if 16 + length > size:
        return f"begins with a TFRecord of {length} bytes, longer than the file ({size} bytes): it is cut short"
    return None


def detect(head: bytes, tail: bytes, size: int) -> DatasetFormat | None:
    """The format the bytes show, if any (to say what a file is when it is not what was declared)."""
    for fmt in DatasetFormat:
        if size and _mismatch(fmt, head, tail, size) is None:
            return fmt
    return None
