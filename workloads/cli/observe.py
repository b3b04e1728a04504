"""Observe runs: status, logs, metrics, report, delete, preflight.

Importing this module registers the commands on ``workloads.cli.app``. Heavy modules
(kubernetes client, matplotlib, google-cloud-storage) are imported inside the commands.

Exit codes: 0 success; 2 bad input (spec, flags, files); 3 the cluster could not be
reached or refused a request (``ClusterError``); 1 anything else that failed (an upload,
a preflight with failing rows).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from toolkit.clikit import OutputFormat, confirm, dataclass_options, option_group, print_json
from toolkit.errors import SpecError
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app, check_out_dir
from workloads.planning.defaults import INT32_MAX, MAX_WAIT_S

if TYPE_CHECKING:
    from infra.spec import EnvSpec
    from workloads.cluster.client import Cluster
    from workloads.observe.analysis import Analysis

NamespaceOpt = Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")]
TeamOpt = Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")]
ShapeOpt = Annotated[
    Optional[str],
    typer.Option("--shape", help="TPU type the run used, e.g. v5litepod-16, tpu7x-256 (for per-chip figures and MFU; a run on the cluster: read from the run)"),
]
PoolOpt = Annotated[
    Optional[str], typer.Option("--pool", help="TPU pool of the spec the run used (shape and slice count; a run on the cluster: read from the run)")
]
SlicesOpt = Annotated[Optional[int], typer.Option("--slices", min=1, max=INT32_MAX, help="number of slices (default: the pool's)")]
MetricsFileOpt = Annotated[Optional[Path], typer.Option("--metrics-file", help="MaxText metrics_file JSONL; its numbers win over the log's")]
ProfFirstOpt = Annotated[
    Optional[int], typer.Option("--profiler-first-step", min=0, max=INT32_MAX, help="skip_first_n_steps_for_profiler (default: from the log's config)")
]
ProfStepsOpt = Annotated[
    Optional[int], typer.Option("--profiler-steps", min=0, max=INT32_MAX, help="profiler_steps (default: from the log's config; 0 = no profiler)")
]
FirstSteadyOpt = Annotated[int, typer.Option("--first-steady-step", min=0, max=INT32_MAX, help="steps before this include compilation")]


# ------------------------------------------------------------------- helpers


def _spec(path: Path | None) -> EnvSpec:
    from infra.fleet import load_env

    return load_env(path)


def _namespace(spec_path: Path | None, namespace: str | None, team: str | None) -> str:
    from workloads.observe.analysis import run_namespace

    return run_namespace(spec_path, namespace, team)


def _connect(kubeconfig: Path | None, context: str | None) -> Cluster:
    from workloads.cluster.client import Cluster

    return Cluster.connect(kubeconfig, context)


def _follow(spec: Path | None, kubeconfig: Path | None, context: str | None, ns: str, run: str) -> tuple[Cluster, str | None, Cluster]:
    """The cluster holding the run's pods, which fleet worker that is (None off a fleet), and the cluster connected to.

    With ``--spec`` naming a fleet file, ``--kubeconfig``/``--context`` reach its manager and
    the run is followed to the worker its Workload was dispatched to.
    """
    from infra.fleet import maybe_fleet

    cluster = _connect(kubeconfig, context)
    fleet = maybe_fleet(spec)
    if fleet is None:
        return cluster, None, cluster
    from workloads.runs.fleet import follow

    worker_cluster, worker = follow(fleet, cluster, ns, run, kubeconfig)
    if worker is not None:
        sys.stderr.write(f"{ns}/{run} was dispatched to fleet worker {worker}\n")
    return worker_cluster, worker, cluster


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

    def analyse(self, target: str) -> Analysis:
        """Resolve the hardware, load the log (file or cluster) and summarize its steady state."""
        from workloads.observe.analysis import analyse

        src = self._followed(target)
        return analyse(target, **dataclasses.asdict(src), logging_client=_logging_client, storage_client=_storage_client)

    def _followed(self, target: str) -> RunSource:
        """On a fleet (``--spec`` a fleet file), the run's worker in place of the manager: its logs are there."""
        from infra.fleet import maybe_fleet

        fleet = maybe_fleet(self.spec)
        if fleet is None or self.metrics_file is not None or Path(target).is_file():
            return self
        from workloads.runs.fleet import landed_on

        ns = _namespace(self.spec, self.namespace, self.team)
        name = landed_on(_connect(self.kubeconfig, self.context), ns, target)
        if name is None:
            return self
        w = fleet.worker(name)
        sys.stderr.write(f"{ns}/{target} was dispatched to fleet worker {name}\n")
        # The worker's own spec: its Cloud Logging entries carry its cluster's name and region.
        return dataclasses.replace(self, kubeconfig=w.kubeconfig or self.kubeconfig, context=w.context, spec=w.spec_path, namespace=ns)


def _logging_client(cluster: Any, project: str) -> Any:
    """Cloud Logging for the runs of ``cluster``: its run hook's server (the local cluster's), else Google's."""
    from workloads.runs import hooks

    return hooks.logging_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


def _storage_client(cluster: Any, project: str) -> Any:
    """Cloud Storage for the buckets of ``cluster``'s runs: its run hook's server (the local cluster's), else Google's."""
    from workloads.runs import hooks

    return hooks.storage_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


# Gives a command RunSource's fields as options, in place of its ``source: RunSource`` parameter.
_with_run_source = option_group("source", dataclass_options(RunSource), RunSource)


def _f(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


# ------------------------------------------------------------------- commands


_FINISHED = ("Succeeded", "Failed", "NotFound")


def _wait_finished(cluster, ns: str, run: str, timeout: float):
    """Poll the run until it finishes; one stderr line per change of phase, running pods or restarts."""
    from workloads.cluster.wait import WaitTimeout, wait_for

    def show(st) -> None:
        sys.stderr.write(f"  {st.progress()}\n")

    try:
        return wait_for(
            lambda: cluster.run_status(ns, run),
            timeout=timeout,
            what=f"{ns}/{run} to finish",
            interval=1.0,
            until=lambda st: st.phase.value in _FINISHED,
            on_change=show,
            key=lambda st: (st.phase.value, st.running, st.restarts),
        )
    except WaitTimeout as e:
        sys.stderr.write(f"error: {ns}/{run} still {e.last.phase.value} after {timeout:g}s\n")
        raise typer.Exit(1) from None


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
    from workloads.observe.analysis import last_checkpoint

    ns = _namespace(spec, namespace, team)
    cluster, fleet_worker, connected = _follow(spec, kubeconfig, context, ns, run)
    if wait:
        # On a fleet the manager's copy is the one that stays: the worker's goes once its status is mirrored back.
        st = _wait_finished(connected, ns, run, timeout)
        if cluster is not connected and cluster.find_run(ns, run) is not None:
            st = cluster.run_status(ns, run)
    else:
        st = cluster.run_status(ns, run)
    st = dataclasses.replace(st, last_checkpoint=last_checkpoint(cluster, ns, run))
    if output is OutputFormat.json:
        print_json({**st.to_dict(), **({"worker": fleet_worker} if fleet_worker else {})})
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
    from toolkit.errors import NotFound

    ns = _namespace(spec, namespace, team)
    cluster, _, _ = _follow(spec, kubeconfig, context, ns, run)
    pod = cluster.find_pod(ns, run, slice_index=slice_index, worker=worker, head=head)
    if pod is None:
        which = (
            "the head"
            if head
            else f"slice {slice_index or 0} worker {worker or 0}"
            if slice_index is not None or worker is not None
            else "the driver or worker 0"
        )
        raise NotFound(f"no pod for {which} of run {run!r} in namespace {ns!r} — the run may still be queued; see 'status {run}'")
    for line in cluster.logs(ns, pod["metadata"]["name"], container=container, follow=follow):
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

    a = source.analyse(target)
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
        f"restarts {g.restarts:,.1f} s, redone {g.redone:,.1f} s, other {g.other:,.1f} s"
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
    upload: Annotated[bool, typer.Option("--upload", help="also upload to the spec's artifacts bucket under reports/<run>/")] = False,
    source: RunSource = RunSource(),
) -> None:
    """Write a Markdown run report with per-step and steady-state tables and a plot."""
    from infra.spec import BucketPurpose
    from workloads.observe import report as rp
    from workloads.observe.analysis import measured_cost

    bucket = None
    if upload:
        env = _spec(source.spec)
        b = env.bucket_for(BucketPurpose.ARTIFACTS)
        if b is None:
            raise SpecError("buckets", "no bucket with purpose: artifacts to upload reports to", "add one to the spec, or drop --upload")
        bucket, project = b.name, env.project
    check_out_dir(out, "--out")
    a = source.analyse(target)
    _warn_skipped(a)
    cost = measured_cost(a, source.spec, source.pool)
    try:
        files = rp.write_report(
            out,
            rp.RunFacts.from_log(a.run, a.source, a.log),
            a.log,
            a.summary,
            profiler=a.profiler,
            first_steady_step=source.first_steady_step,
            goodput=a.goodput,
            cost=cost,
        )
    except OSError as e:
        raise SpecError("--out", f"cannot write the report into {out}: {e.strerror or e}", "pass a directory you can write to") from None
    _out(f"wrote {files.markdown}, {files.plot.name}, {files.summary_json.name}")
    for line in cost.lines() if cost else ["cost: needs the hardware (--pool or --shape) and a timed log"]:
        _out(line)
    if bucket:
        from workloads.observe.storage import upload as do_upload

        for u in do_upload(files.directory, bucket, f"reports/{a.run}", files=files.files, project=project):
            _out(f"uploaded {u.uri} ({u.content_type})")


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
    ns = _namespace(spec, namespace, team)
    # Ask before connecting: a refusal needs no cluster.
    if not dry_run:
        confirm(f"delete run {ns}/{run} and its pods?", yes=yes)
    cluster = _connect(kubeconfig, context)
    from infra.fleet import maybe_fleet

    if maybe_fleet(spec) is not None:
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
        _out(f"no run {ns}/{run} (JobSet, Job or RayJob): already deleted")
        return
    for r in results:
        if not r.deleted:
            continue
        _out(f"would delete {r.kind} {ns}/{r.name} (server-side dry run passed)" if dry_run else f"deleted {r.kind} {ns}/{r.name}")


@app.command()
def preflight(
    recipe: Annotated[Optional[str], typer.Argument(help="recipe to check for (picks the pool it prefers)")] = None,
    pool: PoolOpt = None,
    slices: SlicesOpt = None,
    team: TeamOpt = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    compile_: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="instead of the live checks: AOT-compile the recipe's MaxText step for the pool's TPU topology "
            "with real MaxText on this machine and report memory per device vs HBM (exit 0 fits, 1 does not fit, "
            "2 bad input, 4 compile failed)",
        ),
    ] = False,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="with --compile: MaxText key=value, as for submit (repeatable)")] = None,
    keep_logs: Annotated[Optional[Path], typer.Option("--keep-logs", help="with --compile: keep train_compile's stdout/stderr in this directory")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, max=MAX_WAIT_S, help="with --compile: give up after this many seconds")] = 1800,
    dataset: Annotated[
        Optional[str],
        typer.Option(
            "--dataset",
            help="also check this dataset of the spec in the cluster's buckets: files, format, the team's read access, "
            "and its tokenizer loaded with MaxText's loader against the recipe's vocab_size",
        ),
    ] = None,
) -> None:
    """Check the live cluster before submitting: flavor, queues and quota, TPU nodes, zone (and a dataset).

    With --compile: compile the run ahead of time for its TPU topology instead (no cluster needed).
    """
    if compile_:
        _preflight_compile(recipe, pool=pool, slices=slices, team=team, sets=sets or [], output=output, spec=spec, keep_logs=keep_logs, timeout=timeout)
        return
    if sets or keep_logs:
        raise SpecError("--set" if sets else "--keep-logs", "only applies with --compile", "add --compile or drop it")
    if dataset is not None and compile_:
        raise SpecError("--dataset", "is checked by the live preflight, not with --compile", "run preflight --dataset without --compile")
    from workloads.observe import preflight as pf
    from workloads.planning.recipes import load_recipe
    from workloads.planning.select import select_pool

    env = _spec(spec)
    # The pool submit would use for this recipe and slice count (any pool without a recipe).
    choice = select_pool(env, load_recipe(recipe) if recipe else None, pool=pool, slices=slices or 1)
    tm = env.team(team)
    cluster = _connect(kubeconfig, context)
    rep = pf.evaluate(env, choice.pool, tm, pf.gather(cluster, tm), slices=slices)
    if dataset is not None:
        rep = _with_dataset_rows(rep, env, tm, dataset, recipe, cluster)
    if output is OutputFormat.json:
        print_json(rep.to_dict())
    else:
        _out(f"preflight: pool {rep.pool} {rep.shape} x {rep.slices} slice(s), namespace {rep.namespace}")
        for c in rep.checks:
            _out(f"  [{c.result.value.upper():4}] {c.name:<24} {c.detail}")
            if c.fix and c.result is not pf.Result.PASS:
                _out(f"         fix: {c.fix}")
        _out("ready" if rep.ok else "not ready")
    if not rep.ok:
        raise typer.Exit(1)


def _with_dataset_rows(rep: Any, env: Any, team: Any, name: str, recipe: str | None, cluster: Any) -> Any:
    """The preflight report with the dataset's rows (workloads.data.checks), against the cluster's buckets."""
    import dataclasses

    from infra import access
    from workloads.cli.data import _dataset
    from workloads.data import checks, tokenizer
    from workloads.observe import preflight as pf

    d = _dataset(env, name)
    client = _storage_client(cluster, env.project)
    vocab = _recipe_vocab(recipe) if recipe else None
    rows = checks.preflight_rows(
        lambda: checks.check_dataset(client, env, d, access.run_member(env, team, False)),
        tokenizer_check=lambda: tokenizer.check(client, env, d, vocab_size=vocab),
    )
    extra = tuple(pf.Check(n, pf.Result(r), detail, fix) for n, r, detail, fix in rows)
    return dataclasses.replace(rep, checks=(*rep.checks, *extra))


def _recipe_vocab(recipe: str) -> int | None:
    """The recipe's model vocab_size (MaxText presets resolved by the recipe loader); None for a plain command."""
    from workloads.planning.recipes import load_recipe

    mt = load_recipe(recipe).maxtext
    return mt.model.vocab_size if mt is not None else None


def _preflight_compile(
    recipe: str | None,
    *,
    pool: str | None,
    slices: int | None,
    team: str | None,
    sets: list[str],
    output: OutputFormat,
    spec: Path | None,
    keep_logs: Path | None,
    timeout: float,
) -> None:
    """`preflight --compile`: the RunPlan's MaxText step through MaxText's AOT compiler."""
    from workloads.maxtext import aot
    from workloads.maxtext import env as maxtext_env
    from workloads.planning.planner import Overrides, plan_run

    if not recipe:
        raise SpecError("RECIPE", "preflight --compile needs a recipe", "e.g. python -m workloads preflight maxtext-6b --compile")
    env = _spec(spec)
    # The same plan `render`/`submit` would make: its args and env are what is compiled.
    plan = plan_run(recipe, env, Overrides(slices=slices, pool=pool, sets=tuple(sets), team=team))
    if not plan.program.is_maxtext:
        raise SpecError("RECIPE", f"recipe {recipe} runs a plain command, not MaxText; there is nothing to compile", "pick a MaxText recipe")
    if keep_logs is not None:
        from toolkit import owned

        check_out_dir(keep_logs, "--keep-logs")
        if keep_logs.is_dir():  # a file of the user's under a log's name: refused before minutes of compiling
            owned.check_update(keep_logs, dict.fromkeys(aot.KEPT_LOGS, b""), "--keep-logs")
    venv = maxtext_env.locate(log=lambda m: sys.stderr.write(m + "\n"))
    if output is OutputFormat.text:
        topology = maxtext_env.compile_topology(plan.target.shape)
        sys.stderr.write(f"compiling {plan.program.recipe} for {topology} x {plan.target.slices} with MaxText (about 1-5 min)...\n")
    # The fit is judged against plan.target.shape's HBM per device (the catalog's figure).
    result = aot.compile_plan(plan, venv, timeout=timeout, keep_log_dir=keep_logs)
    if output is OutputFormat.json:
        print_json(result.to_dict())
    else:
        for line in aot.render_text(result):
            _out(line)
    if result.exit_code:
        raise typer.Exit(result.exit_code)
