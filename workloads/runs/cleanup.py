"""Remove finished runs, their Kueue Workloads and old checkpoints: the flow behind ``cleanup``, as functions returning data.

    scope(spec, team, older_than, checkpoints) -> Scope        pure; every input error, before any I/O
    prepare(cluster, scope, names, force, now) -> Cleanup   what would go (workloads.cluster.cleanup.choose)
    carry_out(cluster, cleanup, dry_run) -> Done               delete it (a dry run deletes nothing)

The caller asks for confirmation between ``prepare`` and ``carry_out``. Checkpoints are
listed and deleted through ``workloads.observe.storage.make_client`` (the emulator in
tests), only when the scope covers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import FieldError, ToolkitError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from infra.spec import EnvSpec
    from workloads.cluster.api import DeleteResult
    from workloads.cluster.cleanup import CheckpointDir, CleanupPlan
    from workloads.cluster.client import Cluster


@dataclass(frozen=True)
class Scope:
    """Where to look and how old is old: the checked input of a cleanup."""

    namespaces: tuple[str, ...]
    older_than: float  # seconds; 0: any finished run
    project: str  # the spec's: where the buckets are
    buckets: tuple[str, ...] = ()  # checkpoints buckets; () unless checkpoints are cleaned up too
    retention: float | None = None  # seconds a checkpoint directory is kept after its last write; None: checkpoints untouched


@dataclass(frozen=True)
class Cleanup:
    """What ``carry_out`` deletes (``plan``), with the client its checkpoints are deleted through."""

    plan: CleanupPlan
    storage: Any = None


@dataclass(frozen=True)
class Done:
    results: list[DeleteResult]  # each run and orphaned Workload: deleted (or would be), or already gone
    checkpoint_objects: dict[str, int]  # checkpoint directory URI -> objects deleted (a dry run: objects there)


def scope(spec: EnvSpec | Path | None, *, team: str | None = None, older_than: str | None = None, checkpoints: bool = False) -> Scope:
    """The namespaces (a team's, else every team's and xpk's), the age and, with ``checkpoints``, the buckets.

    ``spec``: the spec, or its path (None: the default spec), read after the flags are checked.
    """
    from infra.fleet import load_env
    from infra.spec import EnvSpec
    from workloads.cluster.cleanup import parse_duration

    age = parse_duration(older_than) if older_than is not None else 0.0
    if checkpoints and older_than is None:
        raise FieldError("--checkpoints", "needs a retention", "add --older-than D, e.g. --older-than 14d: checkpoints last written longer ago go")
    if not isinstance(spec, EnvSpec):
        spec = load_env(spec)  # a fleet file: its manager's teams, where cleanup through the manager looks
    namespaces = _namespaces(spec, team)
    buckets = _buckets(spec, team) if checkpoints else []
    return Scope(tuple(namespaces), age, spec.project, tuple(buckets), age if checkpoints else None)


def _namespaces(spec: EnvSpec, team: str | None) -> list[str]:
    if team is not None:
        return [spec.team(team).ns]
    out = [t.ns for t in spec.teams]
    if spec.xpk.enabled and spec.xpk.namespace not in out:
        out.append(spec.xpk.namespace)  # xpk's runs live there
    return out


def _buckets(spec: EnvSpec, team: str | None) -> list[str]:
    from infra.spec import BucketPurpose

    teams = [spec.team(team)] if team is not None else list(spec.teams)
    out: list[str] = []
    for t in teams:
        b = spec.bucket_for(BucketPurpose.CHECKPOINTS, t)
        if b is None:
            raise FieldError(
                "--checkpoints",
                f"team {t.name} has no bucket with purpose: checkpoints in the spec",
                "add one, or leave out --checkpoints" + ("" if team else " (or pick a team with --team)"),
            )
        if b.name not in out:
            out.append(b.name)
    return out


def prepare(cluster: Cluster, scope: Scope, *, names: Sequence[str] = (), force: bool = False, now: float, storage: Any = None) -> Cleanup:
    """What goes: finished runs (``names`` only, when given; running ones too with ``force``), orphaned Workloads, old checkpoints.

    ``storage``: the Cloud Storage client; None makes one for the scope's project when it has buckets.
    """
    from workloads.cluster import cleanup as cl

    found, orphans = cl.collect(cluster, scope.namespaces)
    if scope.buckets and storage is None:
        from workloads.runs import hooks

        storage = hooks.storage_client(hooks.for_context(getattr(cluster, "context", None)), cluster, scope.project)
    dirs: list[CheckpointDir] = []
    for b in scope.buckets:
        dirs.extend(checkpoint_dirs(storage, b))
    plan = cl.choose(found, orphans, now=now, older_than=scope.older_than, names=names, force=force, checkpoints=dirs, retention=scope.retention)
    return Cleanup(plan, storage)


def carry_out(cluster: Cluster, cleanup: Cleanup, *, dry_run: bool) -> Done:
    from workloads.cluster import cleanup as cl

    results = cl.execute(cluster, cleanup.plan, dry_run=dry_run)
    objects = {c.uri: (c.objects if dry_run else delete_checkpoints(cleanup.storage, c)) for c in cleanup.plan.checkpoints}
    return Done(results, objects)


def checkpoint_dirs(client: Any, bucket: str) -> list[CheckpointDir]:
    """Every ``<run>/checkpoints/`` directory in the bucket, with its object count, size, newest write and owner.

    The owner is the run its identity names (``<run>/tgk-run.json``, written by ``submit``):
    the record that a run of the toolkit's wrote the directory; only such directories are
    ever deleted (``workloads.cluster.cleanup.choose``).
    """
    from workloads.cluster.cleanup import CheckpointDir
    from workloads.observe.storage import storage_call
    from workloads.runs.identity import IDENTITY, Identity

    acc: dict[str, list[float]] = {}
    identities: set[str] = set()
    for blob in storage_call(f"list gs://{bucket}", bucket, lambda: list(client.list_blobs(bucket))):
        parts = blob.name.split("/")
        if len(parts) == 2 and parts[1] == IDENTITY:
            identities.add(parts[0])
        if len(parts) < 3 or parts[1] != "checkpoints":
            continue
        updated = blob.updated.replace(tzinfo=blob.updated.tzinfo or UTC).timestamp() if blob.updated else 0.0
        a = acc.setdefault(parts[0], [0, 0, 0.0])
        a[0] += 1
        a[1] += int(blob.size or 0)
        a[2] = max(a[2], updated)
    out = []
    for run, a in sorted(acc.items()):
        owner = None
        if run in identities:
            where = f"gs://{bucket}/{run}/"
            raw = storage_call(f"read {where}{IDENTITY}", bucket, lambda r=run: client.bucket(bucket).blob(f"{r}/{IDENTITY}").download_as_bytes())
            try:
                owner = Identity.decode(raw, where).run
            except ToolkitError:
                owner = None  # not an identity the toolkit wrote: the directory is not provably its
        out.append(CheckpointDir(bucket, run, int(a[0]), int(a[1]), a[2], owner))
    return out


def delete_checkpoints(client: Any, ckpt: CheckpointDir) -> int:
    """Delete the directory's objects, once its identity is read again and still names its run (0: it no longer does)."""
    from workloads.runs.identity import IDENTITY, Identity

    blob = client.bucket(ckpt.bucket).get_blob(f"{ckpt.run}/{IDENTITY}")
    try:
        if blob is None or Identity.decode(blob.download_as_bytes(), f"gs://{ckpt.bucket}/{ckpt.run}/").run != ckpt.run:
            return 0
    except ToolkitError:
        return 0
    blobs = list(client.list_blobs(ckpt.bucket, prefix=ckpt.prefix))
    b = client.bucket(ckpt.bucket)
    for blob in blobs:
        b.delete_blob(blob.name)
    return len(blobs)
