"""``python -m workloads cleanup``: remove finished runs, their Kueue Workloads, and old checkpoints.

Everything is decided before anything is deleted (``workloads.cluster.cleanup.choose``):
a named run that is still queued or running, without ``--force``, is one line and exit
2 with nothing removed. Cloud Storage is read and written here, at the edge, through
``workloads.observe.storage.make_client`` (the emulator in tests).
"""

from __future__ import annotations

import time
from datetime import UTC
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from toolkit.clikit import OutputFormat, confirm, print_json
from toolkit.errors import FieldError
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app

if TYPE_CHECKING:
    from infra.spec import EnvSpec
    from workloads.cluster.cleanup import CheckpointDir


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


def checkpoint_dirs(client: Any, bucket: str) -> list[CheckpointDir]:
    """Every ``<run>/checkpoints/`` directory in the bucket, with its object count, size and newest write."""
    from workloads.cluster.cleanup import CheckpointDir

    acc: dict[str, list[float]] = {}
    for blob in client.list_blobs(bucket):
        parts = blob.name.split("/")
        if len(parts) < 3 or parts[1] != "checkpoints":
            continue
        updated = blob.updated.replace(tzinfo=blob.updated.tzinfo or UTC).timestamp() if blob.updated else 0.0
        a = acc.setdefault(parts[0], [0, 0, 0.0])
        a[0] += 1
        a[1] += int(blob.size or 0)
        a[2] = max(a[2], updated)
    return [CheckpointDir(bucket, run, int(a[0]), int(a[1]), a[2]) for run, a in sorted(acc.items())]


def delete_checkpoints(client: Any, ckpt: CheckpointDir) -> int:
    blobs = list(client.list_blobs(ckpt.bucket, prefix=ckpt.prefix))
    b = client.bucket(ckpt.bucket)
    for blob in blobs:
        b.delete_blob(blob.name)
    return len(blobs)


@app.command()
def cleanup(
    runs: Annotated[Optional[list[str]], typer.Argument(help="only these runs (default: every finished run in the namespaces)", show_default=False)] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="only this team's namespace (default: every team's, and xpk's)")] = None,
    older_than: Annotated[
        Optional[str], typer.Option("--older-than", metavar="D", help="only runs finished at least D ago (30m, 12h, 7d); also the checkpoints' retention")
    ] = None,
    checkpoints: Annotated[
        bool,
        typer.Option(
            "--checkpoints",
            help="also delete <run>/checkpoints/ in the team's checkpoints bucket when last written more than --older-than ago and the run is gone",
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="also delete runs that are still queued or running")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Remove finished runs (JobSet, RayJob, or Job + Service) and their Kueue Workloads; optionally checkpoints past retention."""
    from infra.spec import load_spec
    from workloads.cluster import cleanup as cl

    # All input is checked before the cluster or the bucket is touched.
    age = cl.parse_duration(older_than) if older_than is not None else 0.0
    if checkpoints and older_than is None:
        raise FieldError("--checkpoints", "needs a retention", "add --older-than D, e.g. --older-than 14d: checkpoints last written longer ago go")
    spec_obj = load_spec(spec)
    namespaces = _namespaces(spec_obj, team)
    buckets = _buckets(spec_obj, team) if checkpoints else []

    from workloads.cluster.runs import Cluster

    cluster = Cluster.connect(kubeconfig, context)
    found, orphans = cl.collect(cluster, namespaces)
    client = None
    dirs: list[CheckpointDir] = []
    if buckets:
        from workloads.observe.storage import make_client

        client = make_client(spec_obj.project)
        for b in buckets:
            dirs.extend(checkpoint_dirs(client, b))
    now = time.time()
    plan = cl.choose(found, orphans, now=now, older_than=age, names=runs or (), force=force, checkpoints=dirs, retention=age if checkpoints else None)
    if not plan.empty() and not dry_run:
        n = len(plan.runs) + len(plan.orphans) + len(plan.checkpoints)
        confirm(f"delete {n} run(s), orphaned Workload(s) and checkpoint directories listed by --dry-run?", yes=yes)
    results = cl.execute(cluster, plan, dry_run=dry_run)
    deleted_objects = {c.uri: (c.objects if dry_run else delete_checkpoints(client, c)) for c in plan.checkpoints}
    if output is OutputFormat.json:
        print_json(
            {
                "dry_run": dry_run,
                "deleted": [{"kind": r.kind, "namespace": r.namespace, "name": r.name, "deleted": r.deleted} for r in results],
                "runs": [{"kind": r.kind, "namespace": r.namespace, "name": r.name, "state": r.state} for r in plan.runs],
                "orphaned_workloads": [{"namespace": o.namespace, "name": o.name} for o in plan.orphans],
                "checkpoints": [{"uri": c.uri, "objects": deleted_objects[c.uri], "bytes": c.size} for c in plan.checkpoints],
                "kept": [{"what": w, "why": y} for w, y in plan.kept],
            }
        )
        return
    verb = "would delete" if dry_run else "deleted"
    for r in results:
        if r.deleted:
            typer.echo(f"{verb} {r.kind} {r.namespace}/{r.name}")
    for c in plan.checkpoints:
        typer.echo(f"{verb} {deleted_objects[c.uri]} objects ({c.size / 2**20:.1f} MiB) under {c.uri}")
    for what, why in plan.kept:
        typer.echo(f"kept {what}: {why}")
    if plan.empty():
        typer.echo(f"nothing to clean up in {', '.join(namespaces)}")
