"""Follow runs: ``status``, ``logs``, ``metrics``, ``report``.

Parse, call, print: the work is ``workloads.observe`` (``status``: a run's status and the
wait until it finished; ``logs``: the pod whose log is streamed; ``analysis``: a log read,
analysed and written as a report), which returns data. This module reads ``--spec`` once
(``SpecFile``), connects, follows a run on a fleet to the worker it was dispatched to
(``workloads.runs.fleet``) and turns what comes back into text or JSON.

Importing this module registers the commands on ``workloads.cli.app``. Heavy modules
(kubernetes client, matplotlib, google-cloud-storage) are imported inside the commands.

Exit codes: 0 success; 2 bad input (spec, flags, files); 3 the cluster could not be
reached or refused a request (``ClusterError``); 1 anything else that failed (an upload,
a wait that timed out, a run that failed or is not there).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, dataclass_options, option_group, print_json
from workloads.cli import (
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    Output,
    PoolOpt,
    SlicesOpt,
    SpecFile,
    SpecOpt,
    TeamOpt,
    app,
    check_out_dir,
    connect,
    logging_client,
    storage_client,
)
from workloads.planning.defaults import INT32_MAX, MAX_WAIT_S

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster
    from workloads.observe.analysis import Analysis

ShapeOpt = Annotated[
    Optional[str],
    typer.Option("--shape", help="TPU type the run used, e.g. v5litepod-16, tpu7x-256 (for per-chip figures and MFU; a run on the cluster: read from the run)"),
]
MetricsFileOpt = Annotated[Optional[Path], typer.Option("--metrics-file", help="MaxText metrics_file JSONL; its numbers win over the log's")]
ProfFirstOpt = Annotated[
    Optional[int], typer.Option("--profiler-first-step", min=0, max=INT32_MAX, help="skip_first_n_steps_for_profiler (default: from the log's config)")
]
ProfStepsOpt = Annotated[
    Optional[int], typer.Option("--profiler-steps", min=0, max=INT32_MAX, help="profiler_steps (default: from the log's config; 0 = no profiler)")
]
FirstSteadyOpt = Annotated[int, typer.Option("--first-steady-step", min=0, max=INT32_MAX, help="steps before this include compilation")]


# ------------------------------------------------------------------- the edge: spec, cluster, fleet


def _namespace(specs: SpecFile, namespace: str | None, team: str | None) -> str:
    from workloads.observe.analysis import run_namespace

    return run_namespace(specs.env, namespace, team)


def _locate(
    spec: Path | None, namespace: str | None, team: str | None, kubeconfig: Path | None, context: str | None, run: str
) -> tuple[str, Cluster, str | None, Cluster]:
    """The run's namespace, the cluster holding its pods, which fleet worker that is (None off a fleet), and the cluster connected to.

    With ``--spec`` naming a fleet file, ``--kubeconfig``/``--context`` reach its manager and
    the run is followed to the worker its Workload was dispatched to.
    """
    specs = SpecFile(spec)
    ns = _namespace(specs, namespace, team)
    cluster = connect(kubeconfig, context)
    fleet = specs.fleet()
    if fleet is None:
        return ns, cluster, None, cluster
    from workloads.runs.fleet import follow

    worker_cluster, worker = follow(fleet, cluster, ns, run, kubeconfig)
    if worker is not None:
        sys.stderr.write(f"{ns}/{run} was dispatched to fleet worker {worker}\n")
    return ns, worker_cluster, worker, cluster


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


@dataclass(frozen=True)
class RunSource:
    """The options `metrics` and `report` share: where the run's log is and what it ran on.

    Declared once, here: ``_with_run_source`` gives a command these fields as its options.
    """

    metrics_file: MetricsFileOpt = None
    shape: ShapeOpt = None
    pool: PoolOpt = None
    slices: SlicesOpt = None
    profiler_first_step: ProfFirstOpt = None
    profiler_steps: ProfStepsOpt = None
    first_steady_step: FirstSteadyOpt = 2
    namespace: NamespaceOpt = None
    team: TeamOpt = None
    spec: SpecOpt = None
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None

    def analyse(self, target: str, specs: SpecFile) -> Analysis:
        """Resolve the hardware, load the log (file or cluster) and summarize its steady state (``workloads.observe.analysis``)."""
        from workloads.observe.analysis import analyse

        spec, cluster, namespace = self._followed(target, specs)
        return analyse(
            target,
            spec=spec,
            cluster=cluster,
            metrics_file=self.metrics_file,
            shape=self.shape,
            pool=self.pool,
            slices=self.slices,
            profiler_first_step=self.profiler_first_step,
            profiler_steps=self.profiler_steps,
            first_steady_step=self.first_steady_step,
            namespace=namespace,
            team=self.team,
            logging_client=logging_client,
            storage_client=storage_client,
        )

    def _followed(self, target: str, specs: SpecFile):  # noqa: ANN202  (spec, cluster, namespace) for analyse
        """The spec, the cluster (each got when first needed) and namespace to read the run from.

        On a fleet (``--spec`` a fleet file), the run's worker in place of the manager: its logs
        are there, and its own spec (its Cloud Logging entries carry its cluster's name and region).
        """
        spec, cluster = specs.env, cache(lambda: connect(self.kubeconfig, self.context))
        fleet = None if self.metrics_file is not None or Path(target).is_file() else specs.fleet()
        if fleet is None:
            return spec, cluster, self.namespace
        from workloads.runs.fleet import landed_on

        ns = _namespace(specs, self.namespace, self.team)
        name = landed_on(cluster(), ns, target)
        if name is None:
            return spec, cluster, self.namespace
        w = fleet.worker(name)
        sys.stderr.write(f"{ns}/{target} was dispatched to fleet worker {name}\n")
        return (lambda: w.spec), cache(lambda: connect(w.kubeconfig or self.kubeconfig, w.context)), ns


# Gives a command RunSource's fields as options, in place of its ``source: RunSource`` parameter.
_with_run_source = option_group("source", dataclass_options(RunSource), RunSource)


def _f(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


# ------------------------------------------------------------------- commands


@app.command()
def status(
    run: Annotated[str, typer.Argument(help="run (JobSet) name")],
    namespace: NamespaceOpt = None,
    team: TeamOpt = None,
    output: Output = OutputFormat.text,
    wait: Annotated[bool, typer.Option("--wait", help="wait until the run has succeeded or failed, showing each phase")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0, max=MAX_WAIT_S, help="seconds --wait waits before giving up (exit 1)")] = 3600,
    workers: Annotated[bool, typer.Option("--workers", help="list every worker, not only the abnormal ones")] = False,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Where a run is: queued in Kueue (and why), starting, running, finished; one line per slice."""
    from workloads.cluster.wait import WaitTimeout
    from workloads.observe import status as run_status

    ns, cluster, fleet_worker, connected = _locate(spec, namespace, team, kubeconfig, context, run)
    try:
        st = run_status.current(
            cluster, ns, run, manager=connected, wait_s=timeout if wait else None, on_change=lambda s: sys.stderr.write(f"  {s.progress()}\n")
        )
    except WaitTimeout as e:
        sys.stderr.write(f"error: {ns}/{run} still {e.last.phase.value} after {timeout:g}s\n")
        raise typer.Exit(1) from None
    faults: list[str] = []
    if st.restarts and st.phase.value != "NotFound":  # hangs and a bad host, from the failed attempts (workloads.runs.badhost)
        from workloads.runs.badhost import status_section

        faults = status_section(cluster, ns, run, SpecFile(spec).env, logging_client)
    if output is OutputFormat.json:
        print_json({**st.to_dict(), "faults": faults, **({"worker": fleet_worker} if fleet_worker else {})})
        return
    _out(f"{st.namespace}/{st.run}: {st.phase.value} — {st.message}")
    if fleet_worker:
        _out(f"  fleet worker  {fleet_worker}")
    if st.workload:
        w = st.workload
        fl = ", ".join(f"{k}={v}" for k, v in w.flavors.items())
        _out(f"  workload  {w.name}: {w.state.value} (queue {w.queue or '?'}{', flavor ' + fl if fl else ''})")
    if st.restarts or st.last_failure:
        budget = f" of maxRestarts {st.max_restarts}" if st.max_restarts is not None else ""
        _out(f"  restarts  {st.restarts} ({st.restarts_counted} counted{budget}, {st.restarts - st.restarts_counted} free: disruptions)")
    if st.last_failure:
        _out(f"  last failure  {st.last_failure}")
    if st.last_checkpoint is not None:
        _out(f"  last checkpoint  step {st.last_checkpoint}")
    _maintenance_lines(st)
    for line in faults:
        _out(f"  {line}")
    for c in st.conditions:
        if c.status.lower() == "true":
            _out(f"  condition {c.type}: {c.reason} {c.message}".rstrip())
    # One line per slice (a large multislice run has hundreds of workers); a worker gets a
    # line of its own when it is abnormal (failed, restarted, stuck with a reason) or with --workers.
    for s in st.slices:
        _out(f"  {s.summary()}")
        for p in s.pods if workers else s.abnormal:
            extra = f"  {p.detail}" if p.detail else ""
            _out(f"    worker {p.worker if p.worker is not None else '?'}  {p.phase:<9} {p.node or '-':<30} restarts={p.restarts}  {p.name}{extra}")
    if st.phase.value == "NotFound" or (wait and st.phase.value == "Failed"):
        raise typer.Exit(1)


def _maintenance_lines(st) -> None:  # noqa: ANN001  (a RunStatus)
    """Announced host maintenance on the run's nodes, and the disruptions `maintain --watch` recorded (the newest three)."""
    import time

    now = time.time()
    for m in st.maintenance:
        _out(f"  maintenance  {m.describe(now)}")
    for d in st.disruptions[-3:]:
        _out(f"  disruption  {d.describe()}")


@app.command()
def logs(
    run: Annotated[str, typer.Argument(help="run name (JobSet, Job or RayJob)")],
    slice_index: Annotated[
        Optional[int], typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index; a RayJob's worker-group replica); default 0")
    ] = None,
    worker: Annotated[
        Optional[int], typer.Option("--worker", min=0, max=INT32_MAX, help="worker within the slice (completion index; a RayJob's host index); default 0")
    ] = None,
    head: Annotated[bool, typer.Option("--head", help="a RayJob's Ray head pod")] = False,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", "-f", help="keep streaming until the container exits")] = False,
    container: Annotated[Optional[str], typer.Option("--container", "-c", help="container (default: the pod's only/first)")] = None,
    namespace: NamespaceOpt = None,
    team: TeamOpt = None,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Stream the log of one worker (default: worker 0 of slice 0, where MaxText prints metrics; for a RayJob, its driver: the submitter)."""
    from workloads.observe import logs as run_logs

    ns, cluster, _, _ = _locate(spec, namespace, team, kubeconfig, context, run)
    for line in run_logs.lines(cluster, ns, run, slice_index=slice_index, worker=worker, head=head, container=container, follow=follow):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@app.command()
@_with_run_source
def metrics(
    target: Annotated[str, typer.Argument(metavar="LOGFILE_OR_RUN", help="a MaxText log file (or metrics JSONL), or a run name to read from the cluster")],
    output: Output = OutputFormat.text,
    source: RunSource = RunSource(),
) -> None:
    """Steady-state step time, TFLOP/s and tokens/s per device and per chip, MFU and loss trend."""
    from workloads.observe.report import RunFacts, summary_document

    a = source.analyse(target, SpecFile(source.spec))
    _warn_skipped(a)
    if output is OutputFormat.json:
        print_json(summary_document(RunFacts.from_log(a.run, a.source, a.log), a.log, a.summary, a.goodput))
        return
    print_summary(a.run, a.source, a.summary, a.hardware)
    print_goodput(a.goodput)


def _warn_skipped(a: Analysis) -> None:
    """Say once (on stderr) what the log held that no real run prints, and what was left out for it."""
    for note in a.log.notes():
        sys.stderr.write(f"warning: {note}\n")


def print_goodput(g) -> None:
    """Where the run's wall time went (workloads.observe.goodput)."""
    if not g.attempts:
        return
    pct = "–" if g.goodput is None else f"{100 * g.goodput:.1f}%"
    ckpt = f", last checkpoint step {g.last_checkpoint}" if g.last_checkpoint is not None else ""
    _out(f"  goodput        {pct} of {g.total:,.1f} s ({g.attempts} attempt{'s' if g.attempts != 1 else ''}, {g.steps_redone} steps redone{ckpt})")
    _out(
        f"    productive {g.productive:,.1f} s, queueing {g.queueing:,.1f} s, start-up/compile {g.startup:,.1f} s, "
        f"restarts {g.restarts:,.1f} s, redone {g.redone:,.1f} s, "
        + (f"hang {g.hang:,.1f} s ({g.hangs} attempt{'s' if g.hangs != 1 else ''} ended as hung), " if g.hangs else "")
        + f"other {g.other:,.1f} s"
    )
    for n in g.notes:
        _out(f"    ({n})")


def print_summary(run: str, source: str, summ, hw) -> None:
    """The text summary `metrics` prints; `run-local` prints the same."""
    from workloads.observe.report import steady_range

    _out(
        f"{run} ({source}): {summ.steps_seen} steps, steady state over {len(summ.steady_steps)} ({'steps ' if summ.steady_steps else ''}{steady_range(summ.steady_steps)})"
    )
    sec = summ.step_seconds_spread
    _out(
        f"  step time      {_f(summ.step_seconds_mean, 4)} s mean, {_f(summ.step_seconds_median, 4)} s median"
        + (f", range {_f(sec.low, 4)}–{_f(sec.high, 4)} s" if sec else "")
    )
    # Headline = total work / total time; the per-step rates' median and range beside it.
    unit = "chip" if hw else "device"
    for label, digits, dev, chip, spread in (
        ("TFLOP/s", 3, summ.tflops_per_device, summ.tflops_per_chip, summ.tflops_per_chip_spread if hw else summ.tflops_per_device_spread),
        ("tokens/s", 1, summ.tokens_per_device, summ.tokens_per_chip, summ.tokens_per_chip_spread if hw else summ.tokens_per_device_spread),
    ):
        _out(f"  {label:<15}{_f(dev, digits)} per device" + (f", {_f(chip, digits)} per chip" if hw else "") + " (total / time)")
        if spread:
            _out(f"  {'':<15}per step: median {_f(spread.median, digits)}, range {_f(spread.low, digits)}–{_f(spread.high, digits)} per {unit}")
    if hw:
        _out(
            f"  MFU            {'–' if summ.mfu is None else f'{100 * summ.mfu:.2f}%'} of {hw.peak_tflops_per_device:g} TFLOP/s per device ({hw.name}, {hw.precision} peak)"
        )
    else:
        _out("  (per-chip figures and MFU need --shape or --pool)")
    drop = summ.loss_drop_pct
    _out(
        f"  loss           {_f(summ.loss_first)} -> {_f(summ.loss_last)}" + (f" ({drop:.1f}% lower)" if drop is not None else "") + f", min {_f(summ.loss_min)}"
    )


@app.command()
@_with_run_source
def report(
    target: Annotated[str, typer.Argument(metavar="RUN_OR_LOGFILE", help="a run name (logs read from the cluster) or a MaxText log file")],
    out: Annotated[Path, typer.Option("--out", help="directory to write report.md, metrics.png and summary.json into")],
    upload: Annotated[
        bool,
        typer.Option(
            "--upload", help="also upload to the spec's artifacts bucket under reports/<run>/<UTC time>/ (a new prefix each time: nothing is replaced)"
        ),
    ] = False,
    source: RunSource = RunSource(),
) -> None:
    """Write a Markdown run report with per-step and steady-state tables and a plot."""
    from workloads.observe import analysis
    from workloads.observe.report import report_prefix, upload_target

    specs = SpecFile(source.spec)
    bucket, project = upload_target(specs.env()) if upload else (None, None)
    check_out_dir(out, "--out")
    a = source.analyse(target, specs)
    _warn_skipped(a)
    cost = analysis.measured_cost(a, specs.env, source.pool)
    files = analysis.write_report(out, a, cost=cost, first_steady_step=source.first_steady_step)
    _out(f"wrote {files.markdown}, {files.plot.name}, {files.summary_json.name}")
    for line in cost.lines() if cost else ["cost: needs the hardware (--pool or --shape) and a timed log"]:
        _out(line)
    if bucket:
        from workloads.observe.storage import upload as do_upload

        for u in do_upload(files.directory, bucket, report_prefix(a.run), files=files.files, project=project):
            _out(f"uploaded {u.uri} ({u.content_type})")
