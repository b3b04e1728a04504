"""``data upload``: a local directory's dataset files into the dataset's prefix, checked first, never overwriting.

The plan is pure (which files, under which object names, and why a file is refused); the
upload is the one side effect. Before a byte moves, every file is checked against the
dataset's declared format (``workloads.data.formats``) and the prefix is listed: an object
that is already there is never replaced (the toolkit did not write it, or an earlier
upload did and its data may be in use). Each object is created with
``ifGenerationMatch=0``, so Cloud Storage itself refuses to replace one that appeared
since the listing.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.spec import DatasetSpec, EnvSpec
from toolkit.errors import SpecError, shown
from workloads.data import checks, formats

CHUNK = 8 * 1024 * 1024  # resumable upload chunk: progress moves at least this often


@dataclass(frozen=True)
class UploadItem:
    path: Path
    name: str  # object name
    size: int


@dataclass(frozen=True)
class UploadPlan:
    dataset: str
    uri: str
    items: tuple[UploadItem, ...]

    @property
    def bytes(self) -> int:
        return sum(i.size for i in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "uri": self.uri,
            "files": [{"path": str(i.path), "object": i.name, "bytes": i.size} for i in self.items],
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class UploadResult:
    plan: UploadPlan
    seconds: float

    @property
    def mib_per_s(self) -> float:
        return self.plan.bytes / 2**20 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "seconds": round(self.seconds, 3), "mib_per_s": round(self.mib_per_s, 2)}


def plan_upload(spec: EnvSpec, d: DatasetSpec, src: Path) -> UploadPlan:
    """The files of ``src`` (a directory: its top level) that the dataset's glob matches, plus its tokenizer file."""
    if not src.is_dir():
        raise SpecError("SRC", f"{shown(str(src))} is not a directory", "pass the directory that holds the dataset's files")
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith(".") and fnmatch.fnmatchcase(p.name, d.file_glob))
    if not files:
        raise SpecError(
            "SRC",
            f"no file in {shown(str(src))} matches {d.file_glob} (the dataset's files)",
            "point SRC at the files, or set the dataset's files: glob in the spec",
        )
    items = []
    for p in files:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(formats.HEAD_BYTES)
            f.seek(max(0, size - formats.TAIL_BYTES))
            tail = f.read(formats.TAIL_BYTES)
        bad = formats.problem(d.format, head, tail, size)
        if bad is not None:
            raise SpecError(
                checks.field_of(spec, d, "format"),
                f"{shown(str(p))} {bad}, and the dataset says {d.format.value}",
                "convert the file, or declare the format it is in",
            )
        items.append(UploadItem(p, d.object_prefix() + p.name, size))
    if not d.bundled_tokenizer:
        tok = src / d.tokenizer
        if not tok.is_file() or tok.stat().st_size == 0:
            raise SpecError(
                checks.field_of(spec, d, "tokenizer"),
                f"{shown(str(tok))} is missing or empty, and the dataset reads its tokenizer from beside the data",
                "put the tokenizer file in SRC, or name one of MaxText's (assets/tokenizers/...)",
            )
        items.append(UploadItem(tok, d.object_prefix() + d.tokenizer, tok.stat().st_size))
    return UploadPlan(d.name, checks.uri(d), tuple(items))


def refuse_existing(client: Any, spec: EnvSpec, d: DatasetSpec, plan: UploadPlan) -> None:
    """A SpecError when any target object already exists (nothing is uploaded then)."""
    checks.require_bucket(client, spec, d)
    wanted = {i.name for i in plan.items}
    there = sorted(b.name for b in client.list_blobs(d.bucket, prefix=d.object_prefix()) if b.name in wanted)
    if there:
        more = f" and {len(there) - 1} more" if len(there) > 1 else ""
        raise SpecError(
            checks.field_of(spec, d, "path"),
            f"gs://{d.bucket}/{there[0]}{more} already exist(s); upload never replaces objects",
            "upload to a new path (a new dataset version), or delete those objects yourself first",
        )


def upload(client: Any, d: DatasetSpec, plan: UploadPlan, on_bytes: Callable[[int], None] = lambda n: None) -> UploadResult:
    """Upload every item (create-only), calling ``on_bytes`` as data is sent."""
    from workloads.observe.storage import storage_call

    bucket = client.bucket(d.bucket)
    start = time.monotonic()
    for item in plan.items:
        blob = bucket.blob(item.name, chunk_size=CHUNK)
        with item.path.open("rb") as f:
            reader = _Counting(f, on_bytes)
            storage_call(
                f"upload {item.path.name} to gs://{d.bucket}/{item.name}",
                d.bucket,
                lambda blob=blob, reader=reader, size=item.size: blob.upload_from_file(
                    reader, size=size, content_type="application/octet-stream", if_generation_match=0
                ),
            )
    return UploadResult(plan, time.monotonic() - start)


class _Counting:
    """A file wrapper that reports the bytes read from it (the client reads what it sends)."""

    def __init__(self, f: Any, on_bytes: Callable[[int], None]) -> None:
        self._f, self._on = f, on_bytes

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._on(len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)
