"""What can be known about a run's dataset before the run: the bucket, who may read it, the files, their format.

One pass over a Cloud Storage client (the project's, or the local cluster's server), used by
``submit`` (a dataset that cannot be read is refused before anything is applied) and by
``preflight`` (the same checks as rows, plus loading the tokenizer). Each refusal is a
``SpecError`` naming the spec field to fix: the dataset's bucket, path, files or format.

Reads, never writes: a bucket listing of the dataset's prefix (one level, as the run's glob
sees it), the IAM policies that can grant the run's identity the read (the bucket's, its
project's and those above: ``read_access``, over ``workloads.data.iam`` and
``workloads.data.grants``), and two ranged reads (head and tail) of a few files.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from infra.spec import DatasetSpec, EnvSpec
from toolkit.errors import SpecError, shown
from workloads.data import formats, grants

# Files whose bytes are compared with the format: the first, the middle and the last (a
# conversion that stopped half way leaves good files first and bad ones last).
SAMPLE_FILES = 3
LIST_CAP = 100_000  # objects listed under a prefix before the check stops counting


@dataclass(frozen=True)
class DatasetFacts:
    name: str
    uri: str  # gs://bucket/path/
    files: int
    bytes: int
    sampled: tuple[str, ...]
    reader: str  # the IAM member proven to read it, or "" when that could not be proven
    access_note: str = ""  # why it could not be proven (a warning)
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


def check_dataset(client: Any, spec: EnvSpec, d: DatasetSpec, member: str, *, policy_required: bool = False, iam: Any = None) -> DatasetFacts:
    """The dataset's facts, or a SpecError naming the field behind the first thing that would fail the run.

    ``member`` is the IAM member the run's pods act as (``infra.access.run_member``). Its read
    grant is looked for wherever IAM can hold one (``read_access``): proven absent is refused;
    not provable (a group or domain member, a level or role the caller may not read) is said in
    ``access_note`` and passes (``policy_required``: refused too).
    """
    bucket = require_bucket(client, spec, d)
    reader, note = _check_reader(client, bucket, spec, d, member, policy_required, iam)
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


def read_access(client: Any, bucket: Any, spec: EnvSpec, d: DatasetSpec, member: str, *, iam: Any = None) -> grants.Verdict:
    """Whether ``member`` may read the dataset: the bucket's policy, then its project's and every level above
    (``workloads.data.iam``, the reader that goes with ``client`` unless ``iam`` is given), weighed by ``grants``."""
    from google.api_core import exceptions as gexc

    from workloads.data import iam as iam_reads

    reader = iam if iam is not None else iam_reads.reader_for(client)
    where = f"gs://{d.bucket}"
    try:
        policy = bucket.get_iam_policy(requested_policy_version=3)
        levels: list[grants.Level] = [iam_reads.policy_from(where, {"bindings": [_binding(b) for b in getattr(policy, "bindings", None) or ()]})]
    except (gexc.Forbidden, gexc.Unauthorized) as e:
        levels = [grants.Unreadable(where, f"its IAM policy: permission denied (storage.buckets.getIamPolicy; {' '.join(str(e).split())[:80]})")]
    first = grants.evaluate(member, levels, reader.permissions)
    if first.granted:  # the bucket's own policy proves it: nothing above can take it away (deny policies aside)
        return first
    project = str(getattr(bucket, "project_number", None) or spec.project)
    levels += reader.hierarchy(project)
    doubts = []
    if isinstance(reader, iam_reads.GoogleIam) and not bucket.iam_configuration.uniform_bucket_level_access_enabled:
        doubts.append(f"{where} has no uniform bucket-level access, so object ACLs may grant reads the policies do not show")
    return grants.evaluate(member, levels, reader.permissions, doubts=doubts)


def _binding(b: Any) -> dict[str, Any]:
    """A google.api_core.iam.Policy binding (members as a set) as an IAM policy document's."""
    return {"role": b.get("role"), "members": sorted(b.get("members") or ()), **({"condition": b["condition"]} if b.get("condition") else {})}


def _check_reader(client: Any, bucket: Any, spec: EnvSpec, d: DatasetSpec, member: str, required: bool, iam: Any) -> tuple[str, str]:
    verdict = read_access(client, bucket, spec, d, member, iam=iam)
    if verdict.absent:
        raise SpecError(
            field_of(spec, d, "bucket"),
            f"{member.removeprefix('serviceAccount:')} may not read gs://{d.bucket}: no {' or '.join(verdict.missing)} on {', '.join(verdict.checked)}",
            "grant it roles/storage.objectViewer on the bucket (python -m infra deploy grants its own team's buckets), or use a dataset in the team's bucket",
        )
    if verdict.granted:
        return member, ""
    if required:
        raise SpecError(field_of(spec, d, "bucket"), verdict.line(), "grant it roles/storage.objectViewer on the bucket, or check the grant by hand")
    return "", verdict.line()


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
