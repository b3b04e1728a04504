"""Remove finished runs, their Kueue Workloads and old checkpoints: the flow behind ``cleanup``, as functions returning data.

    scope(spec, team, older_than, checkpoints) -> Scope        pure; every input error, before any I/O
    prepare(cluster, scope, names, force, now) -> Cleanup   what would go (workloads.cluster.cleanup.choose)
    carry_out(cluster, cleanup, dry_run) -> Done               delete it (a dry run deletes nothing)

The caller asks for confirmation between ``prepare`` and ``carry_out``. A run's
checkpoints and metrics (``<run>/checkpoints/``, ``<run>/metrics/``) are listed only when
the scope covers them: in the teams' checkpoints buckets (``gcs`` and ``gcsfuse`` storage: the
same objects), through ``workloads.observe.owned_objects``, and on the spec's Lustre, each
team's directory through a helper pod in its namespace (``workloads.runs.volume_store``).
What goes is the ownership ledger's to say (``toolkit.ledger.run_output``); a deletion reads
the run's identity again first, and deletes each object only at the generation listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import ledger
from toolkit.errors import FieldError, ToolkitError
from toolkit.ledger import OutputDir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from infra.spec import EnvSpec
    from workloads.cluster.api import DeleteResult
    from workloads.cluster.cleanup import CheckpointDir, CleanupPlan
    from workloads.cluster.client import Cluster
    from workloads.observe.owned_objects import Listed
    from workloads.runs.volume_store import Volume


@dataclass(frozen=True)
class Scope:
    """Where to look and how old is old: the checked input of a cleanup."""

    namespaces: tuple[str, ...]
    older_than: float  # seconds; 0: any finished run
    project: str  # the spec's: where the buckets are
    buckets: tuple[str, ...] = ()  # checkpoints buckets; () unless checkpoints are cleaned up too
    retention: float | None = None  # seconds a checkpoint directory is kept after its last write; None: checkpoints untouched
    lustre: tuple[Volume, ...] = ()  # each team's directory on the spec's Lustre; () unless checkpoints are cleaned up too


@dataclass(frozen=True)
class Cleanup:
    """What ``carry_out`` deletes (``plan``), with the client its checkpoints are deleted through."""

    plan: CleanupPlan
    storage: Any = None
    listed: dict[str, list[Listed]] = field(default_factory=dict)  # gs:// directory -> its objects under the parts, as listed
    volumes: dict[str, Volume] = field(default_factory=dict)  # lustre: directory -> the team's volume it is on


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
    lustre = _lustre(spec, team) if checkpoints else []
    return Scope(tuple(namespaces), age, spec.project, tuple(buckets), age if checkpoints else None, tuple(lustre))


def _lustre(spec: EnvSpec, team: str | None) -> list[Volume]:
    """Each team's directory on the spec's Lustre, once it has an address (no run could write there before)."""
    from workloads.planning.policy import LUSTRE_CLAIM
    from workloads.runs.volume_store import Volume

    lu = spec.lustre
    if lu is None or lu.ip is None:
        return []
    teams = [spec.team(team)] if team is not None else list(spec.teams)
    return [Volume(t.ns, LUSTRE_CLAIM, "/checkpoints", f"lustre:{lu.name}/", t.pod_user) for t in teams]


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
    listed: dict[str, list[Listed]] = {}
    for b in scope.buckets:
        for d, objects in bucket_dirs(storage, b):
            dirs.append(cl.CheckpointDir(d))
            listed[d.where] = objects
    volumes: dict[str, Volume] = {}
    for v in scope.lustre:
        for d in lustre_dirs(cluster, v):
            dirs.append(cl.CheckpointDir(d))
            volumes[d.where] = v
    plan = cl.choose(found, orphans, now=now, older_than=scope.older_than, names=names, force=force, checkpoints=dirs, retention=scope.retention)
    return Cleanup(plan, storage, listed, volumes)


def carry_out(cluster: Cluster, cleanup: Cleanup, *, dry_run: bool) -> Done:
    from workloads.cluster import cleanup as cl

    results = cl.execute(cluster, cleanup.plan, dry_run=dry_run)
    objects: dict[str, int] = {}
    for c in cleanup.plan.checkpoints:
        if dry_run:
            objects[c.uri] = c.objects
        elif c.uri in cleanup.volumes:
            objects[c.uri] = delete_lustre(cluster, cleanup.volumes[c.uri], c)
        else:
            objects[c.uri] = delete_checkpoints(cleanup.storage, c, cleanup.listed.get(c.uri, []))
    return Done(results, objects)


def bucket_dirs(client: Any, bucket: str) -> list[tuple[OutputDir, list[Listed]]]:
    """Every ``<run>/`` directory at the bucket's top with checkpoints or metrics: what the ledger judges it by, and its objects there.

    The owner is the run its identity names (``<run>/tgk-run.json``, written by ``submit`` when
    it made the directory); the record's time is when Cloud Storage created it (an older
    identity proves the directory the toolkit's only if it came before everything there).
    """
    from workloads.observe import owned_objects
    from workloads.runs.identity import IDENTITY

    parts = ledger.OUTPUT_PARTS
    by_run: dict[str, list[Listed]] = {}
    records: dict[str, Listed] = {}
    for o in owned_objects.listing(client, bucket, "", f"gs://{bucket}"):
        run, _, rest = o.name.partition("/")
        if rest == IDENTITY:
            records[run] = o
        elif any(rest.startswith(p) for p in parts):
            by_run.setdefault(run, []).append(o)
    out = []
    for run, objects in sorted(by_run.items()):
        where = f"gs://{bucket}/{run}/"
        owner, fmt, token = None, 0, ""
        rec = records.get(run)
        if rec is not None:
            got = owned_objects.read(client, bucket, rec.name, f"{where}{IDENTITY}")
            owner, fmt = _owner(got[0] if got else None, where)
            token = str(got[1]) if got else ""
        d = ledger.OutputDir(
            where=where,
            run=run,
            owner=owner,
            record_format=fmt,
            record_time=rec.created if rec is not None else None,
            first_write=min(o.created for o in objects),
            last_write=max(o.updated for o in objects),
            objects=len(objects),
            size=sum(o.size for o in objects),
            record_token=token,
        )
        out.append((d, objects))
    return out


def _owner(raw: bytes | None, where: str) -> tuple[str | None, int]:
    """(the run an identity names, its format); (None, 0) for none or one the toolkit did not write."""
    from workloads.runs.identity import Identity

    if raw is None:
        return None, 0
    try:
        ident = Identity.decode(raw, where)
    except ToolkitError:
        return None, 0  # not an identity the toolkit wrote: the directory is not provably its
    return ident.run, ident.format


def delete_checkpoints(client: Any, ckpt: CheckpointDir, objects: list[Listed]) -> int:
    """The directory's checkpoints and metrics, as listed, each at its listed generation, once its identity is read
    again and is still the one the ledger judged (0: it changed, nothing deleted)."""
    from workloads.observe import owned_objects
    from workloads.runs.identity import IDENTITY, split_gs

    if ckpt.permit is None:
        return 0
    bucket, base = split_gs(ckpt.uri)
    got = owned_objects.read(client, bucket, base + IDENTITY, f"{ckpt.uri}{IDENTITY}")
    if got is None or str(got[1]) != ckpt.dir.record_token or _owner(got[0], ckpt.uri)[0] != ckpt.run:
        return 0
    return owned_objects.delete_listed(client, ckpt.permit, bucket, base, objects)


def lustre_dirs(cluster: Cluster, v: Volume) -> list[OutputDir]:
    """Every run directory of the team on Lustre with checkpoints or metrics, surveyed by one helper pod."""
    import base64
    import hashlib

    from workloads.runs.identity import IDENTITY
    from workloads.runs.volume_store import VolumeError, run_ops

    (got,) = run_ops(cluster, v, [{"op": "survey", "path": f"{v.namespace}/", "record": IDENTITY, "parts": list(ledger.OUTPUT_PARTS)}])
    if "error" in got:
        raise VolumeError(f"cannot survey {v.location}{v.namespace}/: {got['error']}")
    out = []
    for e in got.get("dirs") or []:
        parts = {p: x for p, x in (e.get("parts") or {}).items() if x.get("files")}
        if not parts:
            continue
        run = str(e["name"])
        where = f"{v.location}{v.namespace}/{run}/"
        raw = base64.b64decode(e["record"]) if e.get("record") is not None else None
        owner, fmt = _owner(raw, where)
        out.append(
            ledger.OutputDir(
                where=where,
                run=run,
                owner=owner,
                record_format=fmt,
                record_time=e.get("record_time"),
                first_write=min(float(x["first"]) for x in parts.values()),
                last_write=max(float(x["last"]) for x in parts.values()),
                objects=sum(int(x["files"]) for x in parts.values()),
                size=sum(int(x["bytes"]) for x in parts.values()),
                record_token=hashlib.sha256(raw).hexdigest() if raw is not None else "",
            )
        )
    return out


def delete_lustre(cluster: Cluster, v: Volume, ckpt: CheckpointDir) -> int:
    """The directory's checkpoints and metrics on Lustre, removed by a helper pod while its identity is the one the ledger judged."""
    from workloads.runs.identity import IDENTITY
    from workloads.runs.volume_store import VolumeError, run_ops

    if ckpt.permit is None:
        return 0
    for part in ckpt.permit.parts:
        ledger.require(ckpt.permit, ledger.Kind.OUTPUT, ckpt.uri, part)
    rel = ckpt.uri.removeprefix(v.location)
    (got,) = run_ops(cluster, v, [{"op": "delete", "path": rel, "record": IDENTITY, "expect": ckpt.dir.record_token, "parts": list(ckpt.permit.parts)}])
    if "error" in got:
        raise VolumeError(f"cannot delete under {ckpt.uri}: {got['error']}")
    return int(got.get("deleted") or 0)
