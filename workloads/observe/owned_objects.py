"""Objects in a bucket, written and deleted only as the ownership ledger allows (``toolkit.ledger``).

Every write and delete of the toolkit's in Cloud Storage goes through here, on a
``storage.Client`` (each call through ``workloads.observe.storage.storage_call``, so its
failure is one line):

- ``create``: a new object, never an existing one (``ifGenerationMatch=0``: Cloud Storage
  itself refuses when one is there, also one that appeared a moment ago);
- ``replace``: an object the toolkit read, only while it is still the generation read;
- ``upload_new``: a file's bytes as a new object (report and dataset uploads);
- ``delete_listed``: objects under a directory, each only with a ``Permit`` covering it, and only at
  the generation listed (``generation=``: Cloud Storage deletes that generation, and answers
  404 when the object was rewritten since — such an object stays).

Reads and listings are here too, so a caller needs no other way to the bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from toolkit import ledger
from workloads.observe.storage import StorageError, storage_call


@dataclass(frozen=True)
class Listed:
    """One object as listed: what a delete is conditioned on."""

    name: str
    generation: int
    size: int
    created: float  # epoch seconds (the server's clock)
    updated: float


def _epoch(ts: Any) -> float:
    if ts is None:
        return 0.0
    from datetime import UTC

    return ts.replace(tzinfo=ts.tzinfo or UTC).timestamp()


def _exceptions() -> Any:
    from google.api_core import exceptions as gexc

    return gexc


MAX_RECORD = 1024 * 1024  # a record object: nothing more of it is read


def read(client: Any, bucket: str, name: str, what: str) -> tuple[bytes, int] | None:
    """(the first ``MAX_RECORD`` bytes, generation) of ``name``; None if there is none."""
    gexc = _exceptions()

    def get() -> tuple[bytes, int] | None:
        for _ in range(3):
            blob = client.bucket(bucket).get_blob(name)
            if blob is None:
                return None
            generation = int(blob.generation or 0)  # before the download, which may reset it from its headers
            try:
                data = blob.download_as_bytes(start=0, end=MAX_RECORD - 1, if_generation_match=generation)
            except (gexc.NotFound, gexc.PreconditionFailed):
                continue  # replaced or deleted between the two calls: look again
            return data, generation
        raise StorageError(f"cannot read {what}: it changed three times while being read — run the command again")

    return storage_call(f"read {what}", bucket, get)


def _put(client: Any, bucket: str, name: str, data: bytes, generation: int, content_type: str, what: str) -> bool:
    gexc = _exceptions()

    def put() -> bool:
        try:
            client.bucket(bucket).blob(name).upload_from_string(data, content_type=content_type, if_generation_match=generation)
        except gexc.PreconditionFailed:
            return False
        return True

    return storage_call(f"write {what}", bucket, put)


def create(client: Any, bucket: str, name: str, data: bytes, *, content_type: str, what: str) -> bool:
    """``name`` created with ``data``; False (nothing written) when an object is already there."""
    return _put(client, bucket, name, data, 0, content_type, what)


def replace(client: Any, bucket: str, name: str, data: bytes, *, generation: int, content_type: str, what: str) -> bool:
    """``name`` replaced, only while it is still ``generation`` (what the caller read); False otherwise."""
    if generation <= 0:
        raise ValueError("replace needs the generation that was read")
    return _put(client, bucket, name, data, generation, content_type, what)


def upload_new(client: Any, bucket: str, name: str, upload: Callable[[Any], None], what: str, *, chunk_size: int | None = None) -> None:
    """``upload(blob)`` (which passes ``if_generation_match=0``) for a new object; an object already there is one line, never replaced."""
    gexc = _exceptions()
    blob = client.bucket(bucket).blob(name, chunk_size=chunk_size)

    def put() -> None:
        try:
            upload(blob)
        except gexc.PreconditionFailed:
            raise StorageError(f"cannot {what}: gs://{bucket}/{name} already exists, and the toolkit never replaces an object it did not write") from None

    storage_call(what, bucket, put)


def listing(client: Any, bucket: str, prefix: str, what: str, *, limit: int | None = None) -> list[Listed]:
    """Every object under ``prefix`` (at most ``limit``), with the generation a delete would be conditioned on."""

    def ls() -> list[Listed]:
        out = []
        for b in client.list_blobs(bucket, prefix=prefix, max_results=limit):
            out.append(Listed(b.name, int(b.generation or 0), int(b.size or 0), _epoch(b.time_created), _epoch(b.updated)))
        return out

    return storage_call(f"list {what}", bucket, ls)


def delete_listed(client: Any, permit: ledger.Permit, bucket: str, base: str, objects: Iterable[Listed]) -> int:
    """Each object under ``gs://bucket/base`` the permit covers, at its listed generation; the count deleted.

    An object rewritten since it was listed (another generation) or already gone stays uncounted.
    """
    gexc = _exceptions()
    where = f"gs://{bucket}/{base}"
    b = client.bucket(bucket)
    n = 0
    for o in objects:
        if not o.name.startswith(base):
            raise ledger.NotPermitted(f"{o.name} is not under {where}")
        ledger.require(permit, permit.kind, where, o.name[len(base) :])

        def rm(o: Listed = o) -> bool:
            try:
                b.delete_blob(o.name, generation=o.generation)
            except gexc.NotFound:
                return False
            return True

        n += storage_call(f"delete gs://{bucket}/{o.name}", bucket, rm)
    return n
