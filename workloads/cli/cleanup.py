"""``python -m workloads cleanup``: remove finished runs, their Kueue Workloads, and old checkpoints.

Parse, call, print: the flow is ``workloads.runs.cleanup`` (scope -> prepare -> carry out),
with the confirmation asked here between the last two. Everything is decided before
anything is deleted (``workloads.cluster.cleanup.choose``, by the ownership ledger
``toolkit.ledger``): a named run that is still queued or running, without ``--force``, or
that the toolkit did not submit, is one line and exit 2 with nothing removed.
"""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, confirm, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app


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
            help="also delete <run>/checkpoints/ and <run>/metrics/ (the team's checkpoints bucket, and the spec's Lustre) when a run of the toolkit's "
            "made them, last wrote them more than --older-than ago, and is gone",
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
    from workloads.runs import cleanup as service

    # All input is checked before the cluster or the bucket is touched.
    scope = service.scope(spec, team=team, older_than=older_than, checkpoints=checkpoints)

    from workloads.cluster.client import Cluster

    cluster = Cluster.connect(kubeconfig, context)
    todo = service.prepare(cluster, scope, names=runs or (), force=force, now=time.time())
    plan = todo.plan
    if not plan.empty() and not dry_run:
        n = len(plan.runs) + len(plan.orphans) + len(plan.checkpoints)
        confirm(f"delete {n} run(s), orphaned Workload(s) and checkpoint directories listed by --dry-run?", yes=yes)
    done = service.carry_out(cluster, todo, dry_run=dry_run)
    results, deleted_objects = done.results, done.checkpoint_objects
    if output is OutputFormat.json:
        print_json(
            {
                "dry_run": dry_run,
                "deleted": [{"kind": r.kind, "namespace": r.namespace, "name": r.name, "deleted": r.deleted} for r in results],
                "runs": [{"kind": r.kind, "namespace": r.namespace, "name": r.name, "state": r.state} for r in plan.runs],
                "orphaned_workloads": [{"namespace": o.namespace, "name": o.name} for o in plan.orphans],
                "checkpoints": [{"uri": c.uri, "parts": list(c.parts), "objects": deleted_objects[c.uri], "bytes": c.size} for c in plan.checkpoints],
                "kept": [{"what": w, "why": y} for w, y in plan.kept],
            }
        )
        return
    verb = "would delete" if dry_run else "deleted"
    for r in results:
        if r.deleted:
            typer.echo(f"{verb} {r.kind} {r.namespace}/{r.name}")
    for c in plan.checkpoints:
        typer.echo(f"{verb} {deleted_objects[c.uri]} objects ({c.size / 2**20:.1f} MiB) under {c.uri} ({', '.join(c.parts)})")
    for what, why in plan.kept:
        typer.echo(f"kept {what}: {why}")
    if plan.empty():
        typer.echo(f"nothing to clean up in {', '.join(scope.namespaces)}")
