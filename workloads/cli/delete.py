"""``python -m workloads delete``: remove one run, whichever runtime made it.

Parse, confirm, call, print: the deletion is ``Cluster.delete_run`` (the run's JobSet, Job
and its headless Service, or RayJob, Foreground: its pods and Kueue Workload go with it;
already gone is fine). The confirmation is asked before connecting: a refusal needs no
cluster. On a fleet the run is deleted on the manager, and MultiKueue deletes the
worker's copy with it.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from toolkit.clikit import OutputFormat, confirm, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, NamespaceOpt, Output, SpecFile, SpecOpt, TeamOpt, app, connect


@app.command()
def delete(
    run: Annotated[str, typer.Argument(help="run (JobSet) name")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    dry_run: DryRun = False,
    namespace: NamespaceOpt = None,
    team: TeamOpt = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Delete a run (its JobSet, Job + headless Service, or RayJob; pods and Kueue Workload go with it). Already gone is fine."""
    from workloads.observe.analysis import run_namespace

    specs = SpecFile(spec)
    ns = run_namespace(specs.env, namespace, team)
    # Ask before connecting: a refusal needs no cluster.
    if not dry_run:
        confirm(f"delete run {ns}/{run} and its pods?", yes=yes)
    cluster = connect(kubeconfig, context)
    if specs.fleet() is not None:
        from workloads.runs.fleet import landed_on

        # Deleted on the manager: MultiKueue deletes the worker's copy with it.
        worker = landed_on(cluster, ns, run)
        if worker:
            sys.stderr.write(f"{ns}/{run} was dispatched to fleet worker {worker}: deleting it through the manager removes it there too\n")
    results = cluster.delete_run(ns, run, dry_run=dry_run)
    res = results[0]
    if output is OutputFormat.json:
        print_json(
            {
                "kind": res.kind,
                "namespace": ns,
                "name": run,
                "deleted": res.deleted,
                "dry_run": res.dry_run,
                "also": [{"kind": r.kind, "name": r.name, "deleted": r.deleted} for r in results[1:]],
            }
        )
        return
    if not res.deleted:
        typer.echo(f"no run {ns}/{run} (JobSet, Job or RayJob): already deleted")
        return
    for r in results:
        if r.deleted:
            typer.echo(f"would delete {r.kind} {ns}/{r.name} (server-side dry run passed)" if dry_run else f"deleted {r.kind} {ns}/{r.name}")
