"""Converted base checkpoints: recorded beside them, never overwritten, never cleaned up.

``convert`` writes a Hugging Face model's MaxText checkpoint to ``<team checkpoints
bucket>/_base/<name>/`` (``workloads.planning.conversion``). Before the conversion Job is
applied, ``claim`` writes the record ``_base/<name>/tgk-base.json`` (``RECORD``), create-only,
through the same store as a run's identity (``workloads.runs.identity``: ``GcsStore`` over
``workloads.observe.storage``, or ``DirStore`` for ``convert --local``):

- nothing there: the record is written, then the Job applied;
- the same conversion recorded (same model, source and layout): the same request again —
  nothing new is written, and the Job is applied again only if it is gone;
- another conversion recorded, or objects there with no record: refused (``--name``), so a
  base checkpoint is never overwritten, and nothing the toolkit did not write is reused.

What owns these: the record says ``written_by: tpu-gke-toolkit`` and ``kind:
converted-base-checkpoint``; ``records`` lists every one of a bucket, for whatever keeps
the toolkit's account of what it wrote. ``cleanup --checkpoints`` deletes only a run's
``<run>/checkpoints/`` with the run's identity beside it (``workloads.runs.cleanup``), and
``_base`` is never a run's directory (run names have no ``_``), so cleanup never deletes one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toolkit.errors import FieldError, ToolkitError
from toolkit.jsontext import load_json
from workloads.planning.conversion import BASE_PREFIX, Conversion
from workloads.planning.images import MAXTEXT_VERSION
from workloads.runs.identity import WRITER, Store

RECORD = "tgk-base.json"
KIND = "converted-base-checkpoint"
FORMAT = 1


@dataclass(frozen=True)
class BaseRecord:
    name: str
    model_name: str
    recipe: str
    source: str
    hf_repo: str
    checkpoint: str
    scan_layers: bool
    created: str
    maxtext_version: str = MAXTEXT_VERSION

    def document(self) -> dict[str, Any]:
        return {
            "written_by": WRITER,
            "kind": KIND,
            "format": FORMAT,
            "about": "a Hugging Face model converted to MaxText's format by `convert`; runs load it with --load-parameters; "
            "never overwritten, never deleted by cleanup",
            "name": self.name,
            "model_name": self.model_name,
            "recipe": self.recipe,
            "source": self.source,
            "hugging_face_repository": self.hf_repo,
            "checkpoint": self.checkpoint,
            "scan_layers": self.scan_layers,
            "maxtext_version": self.maxtext_version,
            "created": self.created,
        }

    def encode(self) -> bytes:
        return (json.dumps(self.document(), indent=1) + "\n").encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> BaseRecord:
        try:
            d = load_json(raw, max_bytes=1024 * 1024)
            if not isinstance(d, dict) or d.get("written_by") != WRITER or d.get("kind") != KIND:
                raise ValueError("not a base checkpoint record the toolkit wrote")
            return cls(
                str(d["name"]),
                str(d["model_name"]),
                str(d["recipe"]),
                str(d["source"]),
                str(d["hugging_face_repository"]),
                str(d["checkpoint"]),
                bool(d["scan_layers"]),
                str(d["created"]),
                str(d.get("maxtext_version") or ""),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ToolkitError(f"{where}{RECORD} is not a record the toolkit wrote ({e}) — pick another --name") from None

    def same_conversion(self, other: BaseRecord) -> bool:
        return (self.model_name, self.source, self.scan_layers) == (other.model_name, other.source, other.scan_layers)


def record_of(c: Conversion, *, checkpoint: str | None = None, source: str | None = None, now: datetime | None = None) -> BaseRecord:
    """``checkpoint``/``source``: where they are for a local conversion (default: the conversion's bucket paths)."""
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return BaseRecord(c.name, c.model_name, c.recipe, source or c.source, c.hf_repo, checkpoint or c.checkpoint, c.scan_layers, when)


@dataclass(frozen=True)
class Claimed:
    state: str  # new | same
    record: BaseRecord  # what is recorded there now

    def line(self) -> str:
        if self.state == "new":
            return f"base checkpoint: {self.record.checkpoint} recorded as {self.record.model_name} from {self.record.source} (never overwritten or cleaned up)"
        return f"base checkpoint: {self.record.checkpoint} is this conversion's, recorded {self.record.created}"


def claim(store: Store, mine: BaseRecord) -> Claimed:
    """The directory is this conversion's: recorded now (create-only), or already by the very same conversion; else refused."""
    raw = store.read(RECORD)
    if raw is not None:
        found = BaseRecord.decode(raw, store.where)
        if found.same_conversion(mine):
            return Claimed("same", found)
        raise FieldError(
            "--name",
            f"{store.where} holds the converted checkpoint of {found.model_name} from {found.source} ({found.created}); a base checkpoint is never overwritten",
            "pick another --name",
        )
    if store.has_any(""):
        raise FieldError(
            "--name",
            f"{store.where} holds objects no conversion of the toolkit recorded",
            "pick another --name (the toolkit never reuses what it did not write)",
        )
    store.write(RECORD, mine.encode(), create=True)
    back = store.read(RECORD)
    if back is None or not BaseRecord.decode(back, store.where).same_conversion(mine):
        raise FieldError("--name", f"{store.where} was claimed by another conversion just now", "pick another --name")
    return Claimed("new", mine)


def records(client: Any, bucket: str) -> list[BaseRecord]:
    """Every converted base checkpoint recorded in ``bucket`` (``_base/<name>/tgk-base.json``)."""
    from workloads.observe.storage import storage_call

    out = []
    blobs = storage_call(f"list gs://{bucket}/{BASE_PREFIX}/", bucket, lambda: list(client.list_blobs(bucket, prefix=f"{BASE_PREFIX}/")))
    for blob in blobs:
        parts = blob.name.split("/")
        if len(parts) == 3 and parts[2] == RECORD:
            raw = storage_call(f"read gs://{bucket}/{blob.name}", bucket, blob.download_as_bytes)
            try:
                out.append(BaseRecord.decode(raw, f"gs://{bucket}/{parts[0]}/{parts[1]}/"))
            except ToolkitError:
                continue  # not the toolkit's record: not its to own
    return out
