"""``data upload``: a local directory's dataset files into the dataset's prefix, checked first, written once.

The plan is pure (which files, under which object names, and why a file is refused); the
upload is the one side effect. Before a byte moves, every file is checked against the
dataset's declared format (``workloads.data.formats``) and the prefix is judged by the
ownership ledger (``toolkit.ledger.prefix_upload``): **a dataset prefix is written once**.
Runs read it by its path, so adding a file later would change, under them, what every run of
it reads; a new version of the data goes to a new path.

- an empty prefix: the upload records itself first, beside the prefix
  (``<path>.tgk-dataset.json``: the dataset, each file and its size, unfinished), then
  uploads, then marks the record complete;
- a prefix whose record says the very same upload did not finish (interrupted): the same
  files again finish it — the objects already there, of the same size, are kept;
- anything else (a complete upload, another upload's files, objects nobody recorded):
  refused, one line naming the dataset's path and the fix, nothing uploaded.

Every object, the record included, is created with ``ifGenerationMatch=0``
(``workloads.observe.owned_objects``), so Cloud Storage itself refuses to replace one that
appeared since the listing; the record is completed only at the generation written.

Only regular files inside the directory are read (``regular_inside``): a symlink that leaves it
(``data/x.array_record -> ~/.ssh/id_rsa``) is refused, never followed, and so is a FIFO, a device
or a socket named like a data file (a FIFO would hang the read, a device never end it). The
upload opens each file again without following a symlink and checks it is the file the plan
checked (device and inode), so one swapped in between is refused too.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.spec import DatasetSpec, EnvSpec
from toolkit import ledger
from toolkit.errors import SpecError, shown
from toolkit.jsontext import load_json
from workloads.data import checks, formats
from workloads.observe import owned_objects
from workloads.observe.storage import StorageError

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


RECORD_MAX = 4 * 1024 * 1024  # a record lists one upload's files: far under this
RECORD_SUFFIX = ".tgk-dataset.json"  # beside the prefix, never under it: no glob of the dataset's files can match it


def record_name(d: DatasetSpec) -> str:
    return d.path.rstrip("/") + RECORD_SUFFIX


def _record(d: DatasetSpec, plan: UploadPlan, *, complete: bool) -> bytes:
    doc = {
        "written_by": "tpu-gke-toolkit",
        "about": "a data upload of the toolkit made the prefix beside this file; it is written once (a new version goes to a new path)",
        "dataset": d.name,
        "prefix": d.object_prefix(),
        "files": {i.name: i.size for i in plan.items},
        "complete": complete,
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _read_record(raw: bytes | None) -> ledger.PrefixRecord | None:
    """The record an upload of the toolkit's wrote; None for none; an unreadable one is not the toolkit's (a ledger Kept)."""
    if raw is None:
        return None
    try:
        doc = load_json(raw, max_bytes=RECORD_MAX)
        if not isinstance(doc, dict) or doc.get("written_by") != "tpu-gke-toolkit" or not isinstance(doc.get("files"), dict):
            raise ValueError
        return ledger.PrefixRecord(str(doc["dataset"]), {str(k): int(v) for k, v in doc["files"].items()}, doc.get("complete") is True)
    except (ValueError, KeyError, TypeError):
        return ledger.PrefixRecord("(unreadable record)", {}, True)


@dataclass(frozen=True)
class Decision:
    """What an upload may do in the prefix: which objects to create, and the record it writes or finishes."""

    create: tuple[str, ...]
    new_record: bool
    record_generation: int = 0  # an unfinished upload's record, as read


def decide(client: Any, spec: EnvSpec, d: DatasetSpec, plan: UploadPlan) -> Decision:
    """The ledger's word on the prefix (``toolkit.ledger.prefix_upload``); a SpecError naming the dataset's path when it refuses."""
    checks.require_bucket(client, spec, d)
    where = f"gs://{d.bucket}/{d.object_prefix()}"
    got = owned_objects.read(client, d.bucket, record_name(d), f"gs://{d.bucket}/{record_name(d)}")
    record = _read_record(got[0] if got else None)
    existing = {o.name: o.size for o in owned_objects.listing(client, d.bucket, d.object_prefix(), where)}
    verdict = ledger.prefix_upload(where, {i.name: i.size for i in plan.items}, existing, record)
    if isinstance(verdict, ledger.Kept):
        raise SpecError(
            checks.field_of(spec, d, "path"),
            f"{where} {verdict.why}",
            "upload the data to a new path (a new version of the dataset) and point the spec's path at it",
        )
    return Decision(verdict.create, verdict.new_record, got[1] if got else 0)


def upload(client: Any, d: DatasetSpec, plan: UploadPlan, decision: Decision | None = None, on_bytes: Callable[[int], None] = lambda n: None) -> UploadResult:
    """Record the upload, create every object it may (create-only), then mark it complete; ``on_bytes`` as data is sent."""
    if decision is None:
        decision = Decision(tuple(i.name for i in plan.items), True)
    rec = record_name(d)
    rec_where = f"gs://{d.bucket}/{rec}"
    generation = decision.record_generation
    if decision.new_record:
        if not owned_objects.create(client, d.bucket, rec, _record(d, plan, complete=False), content_type="application/json", what=rec_where):
            raise StorageError(f"cannot upload to {plan.uri}: another upload recorded itself there just now — check the dataset and pick a new path")
        got = owned_objects.read(client, d.bucket, rec, rec_where)
        generation = got[1] if got else 0
    start = time.monotonic()
    wanted = set(decision.create)
    for item in plan.items:
        if item.name not in wanted:
            on_bytes(item.size)  # uploaded by the interrupted run this one finishes
            continue
        with os.fdopen(_open_same(item), "rb") as f:
            reader = _Counting(f, on_bytes)
            owned_objects.upload_new(
                client,
                d.bucket,
                item.name,
                lambda blob, reader=reader, size=item.size: blob.upload_from_file(
                    reader, size=size, content_type="application/octet-stream", if_generation_match=0
                ),
                f"upload {item.path.name} to gs://{d.bucket}/{item.name}",
                chunk_size=CHUNK,
            )
    seconds = time.monotonic() - start
    if not owned_objects.replace(
        client, d.bucket, rec, _record(d, plan, complete=True), generation=generation, content_type="application/json", what=rec_where
    ):
        raise StorageError(f"uploaded to {plan.uri}, but its record {rec_where} changed meanwhile — check who else writes there")
    return UploadResult(plan, seconds)


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
