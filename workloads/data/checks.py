"""What can be known about a run's dataset before the run: the bucket, who may read it, the files, their format.

One pass over a Cloud Storage client (the project's, or the local cluster's server), used by
``submit`` (a dataset that cannot be read is refused before anything is applied) and by
``preflight`` (the same checks as rows, plus loading the tokenizer). Each refusal is a
``SpecError`` naming the spec field to fix: the dataset's bucket, path, files or format.

Reads, never writes: a bucket listing of the dataset's prefix (one level, as the run's glob
sees it), the bucket's IAM policy, and two ranged reads (head and tail) of a few files.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from infra import access
from infra.spec import DatasetSpec, EnvSpec
from toolkit.errors import SpecError, shown
from workloads.data import formats

# Files whose bytes are compared with the format: the first, the middle and the last (a
# conversion that stopped half way leaves good files first and bad ones last).
SAMPLE_FILES = 3
LIST_CAP = 100_000  # objects listed under a prefix before the check stops counting


class DatasetAccessUnknown(Exception):
    """The bucket's IAM policy could not be read (the caller may lack storage.buckets.getIamPolicy)."""


@dataclass(frozen=True)
class DatasetFacts:
    name: str
    uri: str  # gs://bucket/path/
    files: int
    bytes: int
    sampled: tuple[str, ...]
    reader: str  # the IAM member that was checked, or "" when the policy was not readable
    access_note: str = ""  # why the reader was not checked
    tokenizer: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.name,
            "uri": self.uri,
            "files": self.files,
            "bytes": self.bytes,
            "sampled": list(self.sampled),
            "reader": self.reader,
            "access_note": self.access_note,
            "tokenizer": self.tokenizer,
        }


def find_dataset(spec: EnvSpec, name: str) -> DatasetSpec:
    """The spec's dataset ``name`` (``--dataset``); an unknown one is refused with the names there are."""
    d = spec.dataset(name)
    if d is None:
        raise SpecError("--dataset", *spec.unknown_dataset(name))
    return d


def field_of(spec: EnvSpec, d: DatasetSpec, name: str) -> str:
    return f"datasets[{spec.datasets.index(d)}].{name}"


def uri(d: DatasetSpec) -> str:
    return f"gs://{d.bucket}/{d.object_prefix()}"


def check_dataset(client: Any, spec: EnvSpec, d: DatasetSpec, member: str, *, policy_required: bool = False) -> DatasetFacts:
    """The dataset's facts, or a SpecError naming the field behind the first thing that would fail the run.

    ``member`` is the IAM member the run's pods act as (``infra.access.run_member``). A bucket
    policy the caller may not read is reported in ``access_note`` (``policy_required``: refused).
    """
    from google.api_core import exceptions as gexc

    bucket = require_bucket(client, spec, d)
    reader, note = _check_reader(bucket, spec, d, member, policy_required, gexc)
    blobs, others = _files(client, d)
    where = uri(d) + d.file_glob
    if not blobs:
        seen = (
            f"; the prefix holds {shown(others[0])}" + (f" and {len(others) - 1} more" if len(others) > 1 else "") if others else ", and nothing else is there"
        )
        raise SpecError(
            field_of(spec, d, "path"),
            f"no files match {where}{seen}",
            f"upload them (python -m workloads data upload DIR --dataset {d.name}) or fix the dataset's path and files",
        )
    total = sum(int(b.size or 0) for b in blobs)
    if total == 0:
        raise SpecError(field_of(spec, d, "path"), f"the {len(blobs)} file(s) matching {where} are all empty", "upload the dataset's files again")
    sampled = _sample(blobs)
    for b in sampled:
        size = int(b.size or 0)
        head = b.download_as_bytes(start=0, end=min(size, formats.HEAD_BYTES) - 1) if size else b""
        tail = b.download_as_bytes(start=max(0, size - formats.TAIL_BYTES), end=size - 1) if size else b""
        bad = formats.problem(d.format, head, tail, size)
        if bad is not None:
            found = formats.detect(head, tail, size)
            fix = f"declare format: {found.value}" if found is not None else f"convert the files to {d.format.value} (or declare the format they are in)"
            raise SpecError(field_of(spec, d, "format"), f"gs://{d.bucket}/{b.name} {bad}, and the dataset says {d.format.value}", fix)
    tokenizer = _check_tokenizer(client, spec, d)
    return DatasetFacts(
        name=d.name,
        uri=uri(d),
        files=len(blobs),
        bytes=total,
        sampled=tuple(b.name for b in sampled),
        reader=reader,
        access_note=note,
        tokenizer=tokenizer,
    )


def require_bucket(client: Any, spec: EnvSpec, d: DatasetSpec) -> Any:
    """The dataset's bucket, or the SpecError that it is not there."""
    bucket = client.lookup_bucket(d.bucket)
    if bucket is None:
        raise SpecError(field_of(spec, d, "bucket"), f"bucket gs://{d.bucket} does not exist", "create it with python -m infra deploy")
    return bucket


def _check_reader(bucket: Any, spec: EnvSpec, d: DatasetSpec, member: str, required: bool, gexc: Any) -> tuple[str, str]:
    try:
        policy = bucket.get_iam_policy(requested_policy_version=3)
    except gexc.Forbidden:
        note = f"cannot read gs://{d.bucket}'s IAM policy (storage.buckets.getIamPolicy), so whether {member} may read it is not checked"
        if required:
            raise SpecError(field_of(spec, d, "bucket"), note, "ask for roles/storage.admin on the bucket, or check the grant by hand") from None
        return "", note
    roles = {role for role, members in _bindings(policy) if member in members}
    if not roles & access.READ_ROLES:
        held = f" (it holds {', '.join(sorted(roles))})" if roles else ""
        raise SpecError(
            field_of(spec, d, "bucket"),
            f"{member.removeprefix('serviceAccount:')} may not read gs://{d.bucket}{held}",
            "grant it roles/storage.objectViewer on the bucket (python -m infra deploy grants its own team's buckets), or use a dataset in the team's bucket",
        )
    return member, ""


def _bindings(policy: Any) -> list[tuple[str, set[str]]]:
    return [(b["role"], set(b.get("members") or ())) for b in getattr(policy, "bindings", None) or ()]


def _files(client: Any, d: DatasetSpec) -> tuple[list[Any], list[str]]:
    """The objects directly under the prefix that match the glob (what MaxText's glob of the mount finds), and the others."""
    prefix = d.object_prefix()
    matched: list[Any] = []
    others: list[str] = []
    for i, b in enumerate(client.list_blobs(d.bucket, prefix=prefix, delimiter="/")):
        if i >= LIST_CAP:
            break
        name = b.name[len(prefix) :]
        if name and not name.startswith(".") and fnmatch.fnmatchcase(name, d.file_glob):
            matched.append(b)
        elif name:
            others.append(b.name)
    matched.sort(key=lambda b: b.name)
    return matched, others


def _sample(blobs: list[Any]) -> list[Any]:
    idx = sorted({0, len(blobs) // 2, len(blobs) - 1})[:SAMPLE_FILES]
    return [blobs[i] for i in idx]


def _check_tokenizer(client: Any, spec: EnvSpec, d: DatasetSpec) -> str:
    """A tokenizer beside the data must be there (loading it is preflight's: workloads.data.tokenizer)."""
    if d.bundled_tokenizer:
        return d.tokenizer
    name = d.object_prefix() + d.tokenizer
    blob = client.bucket(d.bucket).get_blob(name)
    if blob is None or not blob.size:
        what = "is empty" if blob is not None else "does not exist"
        raise SpecError(
            field_of(spec, d, "tokenizer"),
            f"gs://{d.bucket}/{name} {what}",
            "upload the tokenizer beside the data (data upload takes it) or name one of MaxText's (assets/tokenizers/...)",
        )
    return f"gs://{d.bucket}/{name}"


def preflight_rows(run: Any, *, tokenizer_check: Any = None) -> list[tuple[str, str, str, str]]:
    """(name, result, detail, fix) rows for preflight: ``run()`` gives DatasetFacts or raises the SpecError of the first problem.

    ``tokenizer_check()`` (optional) loads the tokenizer and returns its facts or raises.
    """
    try:
        facts = run()
    except SpecError as e:
        return [("dataset", "fail", f"{e.field}: {e.problem}", e.fix)]
    rows = [
        ("dataset files", "pass", f"{facts.files} file(s), {facts.bytes} bytes at {facts.uri}; {len(facts.sampled)} sampled match the format", ""),
        (
            ("dataset access", "pass", f"{facts.reader.removeprefix('serviceAccount:')} may read it", "")
            if facts.reader
            else ("dataset access", "warn", facts.access_note, "check the grant by hand")
        ),
    ]
    if tokenizer_check is None:
        rows.append(("tokenizer", "pass", f"{facts.tokenizer} is there (not loaded)", ""))
        return rows
    try:
        tok = tokenizer_check()
    except SpecError as e:
        rows.append(("tokenizer", "fail", f"{e.field}: {e.problem}", e.fix))
    else:
        rows.append(("tokenizer", "pass", f"{facts.tokenizer} loads with MaxText's loader ({tok.vocab_size} ids)", ""))
    return rows
