"""``python -m workloads badhost RUN``: a run's bad host named, and moved off (``--cordon``) or reported (``--report-faulty``).

The service is ``workloads.runs.badhost`` (the verdict is ``workloads.observe.faults``'s); the
rehearsal's faults are ``local badhost``/``local hang`` (``workloads.cli.local``). Only typer and the shared options are imported here.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from toolkit.clikit import OutputFormat, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, NamespaceOpt, Output, SpecFile, SpecOpt, TeamOpt, app, connect, logging_client


@app.command()
def badhost(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    cordon: Annotated[bool, typer.Option("--cordon", help="cordon the bad host and taint it NoSchedule, so the next attempt is placed elsewhere")] = False,
    report_faulty: Annotated[
        bool,
        typer.Option("--report-faulty", help="also report its host to Compute Engine as faulty (TPU All Capacity mode: reserved VMs only; repair takes days)"),
    ] = False,
    attempts: Annotated[int, typer.Option("--attempts", min=1, max=100, help="failed attempts in a row the VM must have failed first in")] = 2,
    dry_run: DryRun = False,
    namespace: NamespaceOpt = None,
    team: TeamOpt = None,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Name the VM that failed first in each of a run's last failed attempts; with --cordon move the run off it."""
    from workloads.observe.analysis import run_namespace
    from workloads.runs import badhost as service

    specs = SpecFile(spec)
    ns = run_namespace(specs.env, namespace, team)
    cluster = connect(kubeconfig, context)
    examined = service.examine(cluster, ns, run, repeats=attempts, history=service.cloud_logging_history(cluster, specs.env, ns, logging_client))
    actions = service.act(cluster, examined, cordon=cordon, report=report_faulty, dry_run=dry_run, project=lambda: specs.env().project)
    if output is OutputFormat.json:
        print_json({**examined.to_dict(), "actions": [a.__dict__ for a in actions], "dry_run": dry_run})
        return
    for note in examined.notes:
        sys.stderr.write(f"warning: {note}\n")
    v = examined.verdict
    failed = [a for a in v.attempts if a.failed or a.hung]
    sys.stdout.write(f"{ns}/{run}: {len(failed)} failed attempt{'s' if len(failed) != 1 else ''} on record\n")
    for a in failed:
        first = a.first()
        parts = ", ".join(f"{f.node} exit {f.exit_code}" for f in a.failures if f.kind != "stopped")
        sys.stdout.write(f"  attempt {a.attempt}: {'first ' + first.node if first else 'no single first failure'} ({parts}){' hung' if a.hung else ''}\n")
    if v.node is None:
        sys.stdout.write(f"no bad host: {v.why}\n")
        return
    sys.stdout.write(f"bad host: {v.node} — {v.why}\n")
    if v.bystanders:
        sys.stdout.write(f"  not named (failed after it, never first): {', '.join(v.bystanders)}\n")
    for act in actions:
        verb = "would send" if not act.done else "sent"
        sys.stdout.write(f"  {act.what} {act.target}: {verb} {act.request}\n")
    if not (cordon or report_faulty):
        sys.stdout.write(f"  move the run off it: python -m workloads badhost {run} --cordon\n")
