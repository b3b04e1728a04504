"""``data upload``: a local directory's dataset files into the dataset's prefix, checked first, never overwriting.

The plan is pure (which files, under which object names, and why a file is refused); the
upload is the one side effect. Before a byte moves, every file is checked against the
dataset's declared format (``workloads.data.formats``) and the prefix is listed: an object
that is already there is never replaced (the toolkit did not write it, or an earlier
upload did and its data may be in use). Each object is created with
``ifGenerationMatch=0``, so Cloud Storage itself refuses to replace one that appeared
since the listing.

Only regular files inside the directory are read (``regular_inside``): a symlink that leaves it
(``data/x.array_record -> ~/.ssh/id_rsa``) is refused, never followed, and so is a FIFO, a device
or a socket named like a data file (a FIFO would hang the read, a device never end it). The
upload opens each file again without following a symlink and checks it is the file the plan
checked (device and inode), so one swapped in between is refused too.
"""

from __future__ import annotations

import fnmatch
import os
import stat
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
    path: Path  # a regular file inside the source directory (a symlink within it: resolved)
    name: str  # object name
    size: int
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino) the plan checked; the upload opens the same file or nothing


def regular_inside(src: Path, p: Path, field: str = "SRC") -> tuple[Path, os.stat_result]:
    """``p`` as a regular file inside ``src`` (a symlink within ``src`` resolved) and its stat; a SpecError otherwise."""
    st = os.lstat(p)
    target = p
    if stat.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(p))
        root = Path(os.path.realpath(src))
        if root not in target.parents:
            raise SpecError(
                field,
                f"{shown(str(p))} is a symlink to {shown(str(target))}, outside {shown(str(src))}; upload never follows a link out of the directory",
                "copy the file into the directory, or upload from the directory it is in",
            )
        st = os.lstat(target)
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(field, f"{shown(str(p))} is not a regular file (a FIFO, device, socket or directory)", "remove it, or move it out of the directory")
    return target, st


def _open_same(item: UploadItem) -> int:
    """A descriptor of ``item``'s file, opened without following a link, blocking or replacing it; a SpecError if it changed."""
    try:
        fd = os.open(item.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise SpecError("SRC", f"{shown(str(item.path))} cannot be opened as the file that was checked: {e.strerror or e}", "run the upload again") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != item.identity:
        os.close(fd)
        raise SpecError("SRC", f"{shown(str(item.path))} changed since it was checked", "run the upload again once nothing writes into the directory")
    os.set_blocking(fd, True)
    return fd


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
    files = sorted(p for p in src.iterdir() if not p.name.startswith(".") and fnmatch.fnmatchcase(p.name, d.file_glob) and not _is_dir(p))
    if not files:
        raise SpecError(
            "SRC",
            f"no file in {shown(str(src))} matches {d.file_glob} (the dataset's files)",
            "point SRC at the files, or set the dataset's files: glob in the spec",
        )
    items = []
    for p in files:
        path, st = regular_inside(src, p)
        item = UploadItem(path, d.object_prefix() + p.name, st.st_size, (st.st_dev, st.st_ino))
        size = st.st_size
        with os.fdopen(_open_same(item), "rb") as f:
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
        items.append(item)
    if not d.bundled_tokenizer:
        tok = src / d.tokenizer
        if not os.path.lexists(tok) or (not tok.is_symlink() and tok.is_file() and tok.stat().st_size == 0):
            raise SpecError(
                checks.field_of(spec, d, "tokenizer"),
                f"{shown(str(tok))} is missing or empty, and the dataset reads its tokenizer from beside the data",
                "put the tokenizer file in SRC, or name one of MaxText's (assets/tokenizers/...)",
            )
        path, st = regular_inside(src, tok, checks.field_of(spec, d, "tokenizer"))
        items.append(UploadItem(path, d.object_prefix() + d.tokenizer, st.st_size, (st.st_dev, st.st_ino)))
    return UploadPlan(d.name, checks.uri(d), tuple(items))


def _is_dir(p: Path) -> bool:
    """A real directory (not followed through a link): the upload takes the directory's top level only."""
    return stat.S_ISDIR(os.lstat(p).st_mode)


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
        with os.fdopen(_open_same(item), "rb") as f:
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
