"""``python -m workloads maintain RUN``: checkpoint and restart a run ahead of announced host maintenance.

Parse, call, print over ``workloads.runs.maintain``; with a fleet file as ``--spec``, on the worker
the run was dispatched to (``workloads.runs.fleet.follow``). One pass by default (for cron, Cloud
Scheduler or a hand before a window); ``--watch`` keeps passing every ``--interval`` seconds
until the run has finished (or ``--timeout``), and records what disrupts the run meanwhile
(upgrade, host maintenance, preemption) on its JobSet for ``status``.

The choice lives on this command, not in the spec or on ``submit``: GKE announces a window
days after a run starts (seven days ahead for SCHEDULED maintenance), so only a process that
runs beside the run can act on it, and the lead is the operator's trade (a save and a restart
now against a kill in the window) for the campaign at hand.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from toolkit.clikit import OutputFormat, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, NamespaceOpt, Output, SpecFile, SpecOpt, TeamOpt, app, connect
from workloads.planning.defaults import MAX_WAIT_S


@app.command()
def maintain(
    run: Annotated[str, typer.Argument(help="run (JobSet) name")],
    lead: Annotated[
        str, typer.Option("--lead", metavar="DURATION", help="move the run when an announced window on its nodes starts within this: 90s, 30m, 2h")
    ] = "30m",
    watch: Annotated[bool, typer.Option("--watch", help="keep going until the run finishes, and record what disrupts it for `status`")] = False,
    interval: Annotated[float, typer.Option("--interval", min=1, max=3600, metavar="SECONDS", help="seconds between passes with --watch")] = 15.0,
    timeout: Annotated[float, typer.Option("--timeout", min=0, max=MAX_WAIT_S, help="seconds --watch goes on at most")] = MAX_WAIT_S,
    dry_run: DryRun = False,
    namespace: NamespaceOpt = None,
    team: TeamOpt = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cordon the run's nodes with host maintenance announced within --lead and evict its slices there (they save on SIGTERM and restart elsewhere)."""
    from workloads.cluster.cleanup import parse_duration
    from workloads.observe.analysis import run_namespace
    from workloads.runs.maintain import maintain_once, watch_run

    lead_s = parse_duration(lead, "--lead")
    specs = SpecFile(spec)
    ns = run_namespace(specs.env, namespace, team)
    cluster = connect(kubeconfig, context)
    fleet = specs.fleet()
    if fleet is not None:  # the run's pods and nodes are on the worker it was dispatched to
        from workloads.runs.fleet import follow

        cluster, worker = follow(fleet, cluster, ns, run, kubeconfig)
        if worker is not None:
            sys.stderr.write(f"{ns}/{run} was dispatched to fleet worker {worker}\n")

    def show(res) -> None:  # noqa: ANN001  (a MaintainResult)
        if output is OutputFormat.json:
            print_json(res.to_dict())
            return
        sys.stdout.write(_text(res))
        sys.stdout.flush()

    if not watch:
        show(maintain_once(cluster, ns, run, lead_s=lead_s, dry_run=dry_run))
        return
    deadline = time.monotonic() + timeout

    def finished() -> bool:
        st = cluster.run_status(ns, run)
        return st.phase.value in ("Succeeded", "Failed", "NotFound") or time.monotonic() >= deadline

    watch_run(cluster, ns, run, lead_s=lead_s, interval_s=interval, until=finished, on_pass=show, dry_run=dry_run)


def _text(res) -> str:  # noqa: ANN001  (a MaintainResult)
    from workloads.cluster.maintenance import in_words

    now = time.time()
    lines = []
    would = "would " if res.dry_run else ""
    for m in res.plan.due:
        lines.append(f"{res.namespace}/{res.run}: maintenance due on {m.describe(now)}")
    for m in res.plan.later:
        lines.append(f"{res.namespace}/{res.run}: maintenance announced on {m.describe(now)}; moved {in_words(m.window_start - res.lead_s - now)}")
    if res.plan.moves:
        lines.append(
            f"  {would}cordon {', '.join(res.plan.cordon)}; {would}evict {len(res.plan.pods)} pods of slice(s) {', '.join(map(str, res.plan.slices))} "
            "(each saves its checkpoint on SIGTERM; JobSet restarts the run on other nodes)"
        )
    if res.blocked:
        lines.append(f"  {len(res.blocked)} evictions refused by a PodDisruptionBudget for now; tried again on the next pass")
    for name in res.uncordoned:
        lines.append(f"  {would}uncordon {name} (its maintenance is over)")
    for d in res.recorded:
        lines.append(f"  recorded: {d.describe()}")
    if not lines:
        lines.append(f"{res.namespace}/{res.run}: no host maintenance announced on its nodes")
    return "\n".join(lines) + "\n"
