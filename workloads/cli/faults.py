"""``python -m workloads badhost RUN`` and ``python -m workloads local fault badhost|hang``: a bad host named and moved off, and the rehearsal's faults.

The service is ``workloads.runs.badhost`` (the verdict is ``workloads.observe.faults``'s); the
local faults are ``workloads.local.faults``. Only typer and the shared options are imported here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, make_app, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, NamespaceOpt, Output, SpecFile, SpecOpt, TeamOpt, app, connect, logging_client
from workloads.planning.defaults import INT32_MAX


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


fault_app = make_app("fault", "Faults GKE's tools do not make, played on the local cluster: a bad host, a hang.")


@fault_app.command("badhost")
def fault_badhost(
    node: Annotated[str, typer.Argument(metavar="NODE", help="a TPU node of the local cluster")],
    exit_code: Annotated[int, typer.Option("--exit-code", min=1, max=255, help="what every workload container on it exits with (default 134, SIGABRT)")] = 134,
    clear: Annotated[bool, typer.Option("--clear", help="the node is healthy again")] = False,
    state_dir: Annotated[Optional[Path], typer.Option("--state-dir", help="the local cluster's state dir (default $TGK_CACHE/local-cluster/state)")] = None,
    output: Output = OutputFormat.text,
) -> None:
    """Every workload container on NODE fails, attempt after attempt (a VM with a broken TPU host)."""
    from workloads.cli.local import _cluster
    from workloads.local import faults

    res = faults.bad_host(_cluster(state_dir, quiet=True).client(), node, exit_code=exit_code, clear=clear)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"bad host {res.target}: {res.detail}\n")


@fault_app.command("hang")
def fault_hang(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    slice_index: Annotated[int, typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index)")] = 0,
    worker: Annotated[int, typer.Option("--worker", min=0, max=INT32_MAX, help="worker within the slice")] = 0,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")] = None,
    spec: SpecOpt = None,
    state_dir: Annotated[Optional[Path], typer.Option("--state-dir", help="the local cluster's state dir (default $TGK_CACHE/local-cluster/state)")] = None,
    output: Output = OutputFormat.text,
) -> None:
    """One worker of RUN stops stepping while its pod stays Running (a collective that never completes)."""
    from infra.spec import load_spec
    from workloads.cli.local import _cluster
    from workloads.local import faults

    ns = namespace or load_spec(spec).team(team).ns
    res = faults.hang(_cluster(state_dir, quiet=True).client(), ns, run, slice_index, worker)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"hang {res.target}: {res.detail}\n")


def register(local_app: typer.Typer) -> None:
    local_app.add_typer(fault_app, name="fault")
