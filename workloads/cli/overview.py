"""Every run and every queue at a glance: ``list`` (and the printing of ``queues status``, registered with ``queues``).

Parse, call, print: the reading is ``workloads.runs.overview`` (one list call per kind,
however many runs; a fleet's members each named), which returns rows; this module turns
``--spec`` (an environment spec, or a fleet file: then every member is listed) and the
flags into its arguments and the rows into a table or JSON. Text that comes from the
cluster (names, Kueue's messages) is printed through ``cell``: no control character of a
hostile object reaches the terminal.

Importing this module registers ``list`` on ``workloads.cli.app``.

Exit codes: 0 listed; 2 bad input (a flag, the spec); 3 the cluster (or a fleet member)
could not be reached or refused the read — the members that answered are still printed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from toolkit.errors import ClusterError, FieldError
from workloads.cli import ContextOpt, KubeconfigOpt, NamespaceOpt, Output, SpecFile, SpecOpt, TeamOpt, app, connect, logging_client, storage_client

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster
    from workloads.cluster.queue_status import QueueStatus
    from workloads.cluster.run_list import RunRow
    from workloads.runs.overview import Analyse, Listing, Queues, Scope

MESSAGE_WIDTH = 90  # a row's note is cut here in the table; -o json has all of it


def cell(text: object) -> str:
    """Cluster text as one table cell: control characters (escape sequences, newlines) shown as '?'."""
    return "".join(c if c.isprintable() else "?" for c in str(text))


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda cols: "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()  # noqa: E731
    return [fmt(header), *(fmt(r) for r in rows)]


def _scope(specs: SpecFile, team: str | None, namespace: str | None) -> Scope:
    """Where to look (``--team``, ``--namespace``, else everywhere) and whose each namespace and queue is (the spec's teams)."""
    from workloads.runs import overview

    if team is not None and namespace is not None:
        raise FieldError("--namespace", "given with --team, which names its namespace", "drop one of them")
    return overview.scope(specs.env(), team=team, namespace=namespace)


def _fail_unreachable(unreachable: tuple[str, ...]) -> None:
    if unreachable:
        raise ClusterError(f"not every fleet member answered: {'; '.join(unreachable)} — the rows above are from the others")


@app.command("list")
def list_runs(
    team: TeamOpt = None,
    namespace: NamespaceOpt = None,
    state: Annotated[
        Optional[list[str]], typer.Option("--state", help="only runs in this state: queued, starting, running, succeeded, failed, suspended (repeatable)")
    ] = None,
    runtime: Annotated[Optional[list[str]], typer.Option("--runtime", help="only runs of this runtime: jobset, job, ray (repeatable)")] = None,
    member: Annotated[Optional[list[str]], typer.Option("--cluster", help="through a fleet: only the runs on this member (repeatable)")] = None,
    wide: Annotated[
        bool,
        typer.Option("--wide", help="also each started run's last step and goodput so far, from its log (one log read per run: slower on hundreds)"),
    ] = False,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Every run you may see, across teams and runtimes: team, state, slices, age, restarts (with --wide: last step, goodput)."""
    from workloads.cluster import run_list as rl
    from workloads.cluster.runkinds import BY_RUNTIME
    from workloads.runs import overview

    states = tuple(s.lower() for s in state or ())
    bad = next((s for s in states if s not in rl.STATES), None)
    if bad is not None:
        raise FieldError("--state", f"{bad!r} is not a run state", f"use {', '.join(rl.STATES)}")
    bad = next((r for r in runtime or () if r not in BY_RUNTIME), None)
    if bad is not None:
        raise FieldError("--runtime", f"{bad!r} is not a runtime", f"use {', '.join(BY_RUNTIME)}")
    specs = SpecFile(spec)
    fleet = specs.fleet()
    if member and fleet is None:
        raise FieldError("--cluster", "names a fleet member, and --spec is not a fleet file", "drop --cluster, or pass the fleet file as --spec")
    sc = _scope(specs, team, namespace)
    filters = rl.Filters(states, tuple(runtime or ()), (), tuple(member or ()))
    now = time.time()
    if fleet is not None:
        names = [fleet.manager_cluster, *(w.name for w in fleet.workers)]
        bad = next((m for m in member or () if m not in names), None)
        if bad is not None:
            raise FieldError("--cluster", f"{bad!r} is not a member of the fleet", f"use {', '.join(names)}")
        members = [m for m in overview.fleet_members(fleet, kubeconfig, connect) if not member or m.name in member]
        got = overview.list_fleet(members, sc, now=now, filters=filters, wide=wide, analyse_on=lambda kube: _analyse(specs, kube))
    else:
        kube = connect(kubeconfig, context)
        got = overview.list_runs(kube, sc, now=now, filters=filters, wide=wide, analyse=_analyse(specs, kube) if wide else None)
    _print_listing(got, output, fleet=fleet is not None, wide=wide)
    _fail_unreachable(got.unreachable)


def _analyse(specs: SpecFile, kube: Cluster) -> Analyse:
    """``--wide``'s reader: a run's log as ``metrics RUN`` reads and analyses it (its last step, its goodput so far)."""
    from workloads.observe import analysis

    def analyse(namespace: str, run: str) -> tuple[int | None, float | None]:
        a = analysis.analyse(run, spec=specs.env, cluster=lambda: kube, namespace=namespace, logging_client=logging_client, storage_client=storage_client)
        return (a.log.steps[-1].step if a.log.steps else None), (a.goodput.goodput if a.goodput is not None else None)

    return analyse


def _print_listing(got: Listing, output: OutputFormat, *, fleet: bool, wide: bool) -> None:
    if output is OutputFormat.json:
        print_json(got.to_dict())
    else:
        for line in run_table(got.rows, fleet=fleet, wide=wide):
            sys.stdout.write(line + "\n")
        if not wide and got.rows:
            sys.stderr.write("last step and goodput: pass --wide (reads each started run's log)\n")
    for n in got.notes:
        sys.stderr.write(f"note: {cell(n)}\n")


def run_table(rows: list[RunRow] | tuple[RunRow, ...], *, fleet: bool, wide: bool) -> list[str]:
    if not rows:
        return ["no runs"]
    header = [*(["CLUSTER"] if fleet else []), "TEAM", "NAMESPACE", "RUN", "RUNTIME", "STATE", "SLICES", "AGE", "RESTARTS"]
    header += ["STEP", "GOODPUT"] if wide else []
    header += ["NOTE"]
    body = []
    for r in rows:
        note = "" if r.state in ("Running", "Succeeded") else (r.waiting or r.message)
        finished = r.state in ("Succeeded", "Failed")
        cols = [*([cell(r.cluster or "-")] if fleet else []), cell(r.team or "-"), cell(r.namespace), cell(r.name), r.runtime, r.state]
        cols += [str(r.slices) if finished else f"{r.slices_running}/{r.slices}", age(r.age_seconds), str(r.restarts)]
        if wide:
            cols += ["-" if r.last_step is None else str(r.last_step), "-" if r.goodput is None else f"{r.goodput:.0%}"]
        cols.append(cell(note)[:MESSAGE_WIDTH])
        body.append(cols)
    return _table(header, body)


# ------------------------------------------------------------------ queues status (the command is in workloads.cli.runs)


def queues_status(team: str | None, namespace: str | None, output: OutputFormat, spec: Path | None, kubeconfig: Path | None, context: str | None) -> None:
    """``queues status``: per team and flavor the quota, what is in use and borrowed; who waits, why, in what place."""
    from workloads.runs import overview

    specs = SpecFile(spec)
    fleet = specs.fleet()
    sc = _scope(specs, team, namespace)
    if fleet is not None:
        got = overview.queues_fleet(overview.fleet_members(fleet, kubeconfig, connect), sc)
    else:
        got = overview.queue_status(connect(kubeconfig, context), sc)
    _print_queues(got, output, fleet=fleet is not None)
    _fail_unreachable(got.unreachable)


def _print_queues(got: Queues, output: OutputFormat, *, fleet: bool) -> None:
    if output is OutputFormat.json:
        print_json(got.to_dict())
    else:
        for line in queue_table(got.status, fleet=fleet):
            sys.stdout.write(line + "\n")
    for n in got.notes:
        sys.stderr.write(f"note: {cell(n)}\n")


def queue_table(status: QueueStatus, *, fleet: bool) -> list[str]:
    from workloads.cluster.queue_status import POSITION_ESTIMATED

    if not status.flavors:
        return ["no ClusterQueue covers TPU chips"]
    lead = ["CLUSTER"] if fleet else []
    header = [*lead, "TEAM", "QUEUE", "FLAVOR", "NOMINAL", "IN USE", "BORROWED", "ADMITTED", "PENDING"]
    body = [
        [*([cell(f.cluster or "-")] if fleet else []), cell(f.team or "-"), cell(f.cluster_queue), cell(f.flavor)]
        + ["-" if f.nominal is None else str(f.nominal), str(f.in_use), str(f.borrowed), str(f.admitted), str(f.pending)]
        for f in status.flavors
    ]
    lines = ["TPU chips per team and flavor:", *_table(header, body)]
    if status.pending:
        now = time.time()
        header = [*lead, "QUEUE", "POSITION", "RUN", "NAMESPACE", "PRIORITY", "WAITING", "REASON"]
        body = []
        for p in status.pending:
            pos = "-" if p.position is None else f"{'~' if p.position_source == POSITION_ESTIMATED else ''}#{p.position + 1}"
            why = " ".join(x for x in (p.reason, p.message) if x) or p.state
            body.append(
                [*([cell(p.cluster or "-")] if fleet else []), cell(p.cluster_queue), pos, cell(p.run), cell(p.namespace)]
                + ["-" if p.priority is None else str(p.priority), age(None if p.queued is None else max(0.0, now - p.queued)), cell(why)[:MESSAGE_WIDTH]]
            )
        lines += ["", "waiting runs (~: position estimated in Kueue's order, the cluster serves no visibility API):", *_table(header, body)]
    return lines
