"""A run's log, analysed: read from a file or from worker 0 of the run, on what hardware, its steady state and goodput.

What ``metrics`` and ``report`` show, and what a notebook calls to get the same figures:
``analyse(target, ...)`` takes a log file (or metrics JSONL) or a run name (its log and the
run/Workload timeline from the cluster, for every runtime), resolves the hardware from ``shape``
or ``pool``, else, for a run, from the run object's TPU node selectors (slices: given, else what
the log's device count implies, else the pool's or the run's), and
summarises the steady state (``metrics.summarize``) and the goodput (``goodput.from_log``);
``write_report`` writes it with its measured cost.
Bad input is a ``SpecError`` naming the flag it comes from.

The spec and the cluster come in as objects, each behind a function that gives it when first
needed (``SpecSource``, ``ClusterSource``): a log file needs neither unless ``pool`` names a
pool, a run of a Job or RayJob needs no spec, and the caller reads each at most once (the
CLI's ``SpecFile``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import SpecError

if TYPE_CHECKING:
    from infra.catalog import SliceShape
    from infra.pricing import RunCost
    from infra.spec import EnvSpec
    from workloads.cluster.client import Cluster
    from workloads.observe.goodput import Goodput, Timeline
    from workloads.observe.history import History
    from workloads.observe.metrics import Hardware, ProfilerWindow, RunLog, Summary
    from workloads.observe.report import ReportFiles


# (cluster, project) -> a google.cloud.logging.Client or storage.Client: the CLI's come from the cluster's run hook.
ClientFor = Callable[[Any, str], Any]
SpecSource = Callable[[], "EnvSpec"]  # the environment spec, given when first asked for
ClusterSource = Callable[[], "Cluster"]  # the connected cluster, given when first asked for


@dataclass(frozen=True)
class Analysis:
    """A run's parsed log and its steady-state summary, as `metrics` and `report` show it."""

    run: str
    source: str  # the log file, or namespace/pod it was read from
    log: RunLog
    hardware: Hardware | None
    profiler: ProfilerWindow | None
    summary: Summary
    goodput: Goodput | None  # None: a log of one attempt with no run around it (``analyse_files``)


def analyse(
    target: str,
    *,
    spec: SpecSource,
    cluster: ClusterSource,
    metrics_file: Path | None = None,
    shape: str | None = None,
    pool: str | None = None,
    slices: int | None = None,
    profiler_first_step: int | None = None,
    profiler_steps: int | None = None,
    first_steady_step: int = 2,
    namespace: str | None = None,
    team: str | None = None,
    logging_client: ClientFor | None = None,
    storage_client: ClientFor | None = None,
) -> Analysis:
    """Resolve the hardware, load the log (file or cluster) and summarize its steady state."""
    from workloads.observe import goodput
    from workloads.observe import metrics as m

    choice = shape_choice(spec, shape, pool)
    got = load_run(
        target,
        spec=spec,
        cluster=cluster,
        metrics_file=metrics_file,
        namespace=namespace,
        team=team,
        logging_client=logging_client,
        storage_client=storage_client,
    )
    log = got.log
    hw = hardware(choice or got.shape, slices, log)
    prof = profiler_window(log, profiler_first_step, profiler_steps)
    summ = m.summarize(log.steps, hardware=hw, first_steady_step=first_steady_step, profiler=prof)
    if got.attempts is not None:
        good = goodput.from_attempt_logs(got.attempts, got.timeline, first_steady_step=first_steady_step)
    else:
        good = goodput.from_log(got.text or "", got.timeline, first_steady_step=first_steady_step)
    return Analysis(got.run, got.source, log, hw, prof, summ, good)


def analyse_files(run: str, log_path: Path, metrics_path: Path, *, first_steady_step: int) -> Analysis:
    """A local run's own log and metrics file (``run-local``): no hardware (a CPU), no goodput (one attempt, no cluster timeline)."""
    from workloads.observe import metrics as m

    log = m.load(log_path.read_text(errors="replace"), metrics_path.read_text())
    prof = log.profiler_window()
    summ = m.summarize(log.steps, hardware=None, first_steady_step=first_steady_step, profiler=prof)
    return Analysis(run, str(log_path), log, None, prof, summ, None)


def run_namespace(spec: SpecSource, namespace: str | None, team: str | None) -> str:
    """``namespace``, else the team's (the spec's first team without ``team``)."""
    if namespace:
        return namespace
    return spec().team(team).ns


def shape_choice(spec: SpecSource, shape: str | None, pool: str | None) -> tuple[SliceShape, int | None] | None:
    """The slice shape from --shape or --pool, with the pool's slice count (None for --shape)."""
    from infra import catalog
    from toolkit.errors import CatalogError

    if shape and pool:
        raise SpecError("--shape", "give --shape or --pool, not both", "drop one of them")
    if pool:
        env = spec()
        match = next((p for p in env.tpu_pools if p.name == pool), None)
        if match is None:
            raise SpecError("--pool", f"no TPU pool {pool!r} in the spec", f"use one of {', '.join(p.name for p in env.tpu_pools)}")
        return match.shape, match.slices
    if shape:
        try:
            head, _, tail = shape.rpartition("-")
            if head and "x" in tail:  # a catalog key such as v5e-4x4
                return catalog.shape(head, tail), None
            return catalog.resolve(shape), None
        except CatalogError as e:
            raise SpecError("--shape", str(e)) from None
    return None


def run_shape(run_object: Mapping[str, Any]) -> tuple[SliceShape, int | None] | None:
    """The slice shape a run asks GKE for, and its slice count, read from the run object itself.

    Every runtime's TPU pod template names its slice as GKE schedules it: the accelerator
    and topology node selectors, and the chips each pod requests (which tells a single-host
    2x4 from a multi-host one). The slice count is the run's TPU pods over the hosts per slice.
    None when the run asks for no TPU, or names one the catalog does not know (said on stderr).
    """
    import sys

    from infra import catalog
    from toolkit.digits import whole_number
    from toolkit.errors import CatalogError
    from toolkit.names import GKE_TPU_ACCELERATOR_LABEL, GKE_TPU_TOPOLOGY_LABEL, TPU_RESOURCE
    from workloads.cluster.status import expected_pods

    pod_spec = next(_tpu_pod_specs(run_object), None)
    if pod_spec is None:
        return None
    selector = pod_spec["nodeSelector"]
    label, topology = selector[GKE_TPU_ACCELERATOR_LABEL], selector.get(GKE_TPU_TOPOLOGY_LABEL)
    chips = next((str(c.get("resources", {}).get("limits", {}).get(TPU_RESOURCE, "")) for c in pod_spec.get("containers") or []), "")
    gen = next((g for g in catalog.GENERATIONS.values() if g.accelerator_label == label), None)
    try:
        if gen is None or not topology:
            raise CatalogError(f"accelerator {label!r}, topology {topology!r}")
        found = catalog.shape(gen.name, str(topology), whole_number(chips))
    except CatalogError as e:
        sys.stderr.write(f"warning: the run's TPU slice is not one the catalog knows ({e}); pass --shape for per-chip figures and MFU\n")
        return None
    pods = expected_pods(run_object)
    return found, (pods // found.nodes if pods and pods % found.nodes == 0 else None)


def _tpu_pod_specs(node: Any) -> Iterator[Mapping[str, Any]]:
    """Pod specs (with containers) under ``node`` whose node selector names a TPU accelerator, in document order."""
    from toolkit.names import GKE_TPU_ACCELERATOR_LABEL

    if isinstance(node, Mapping):
        if "containers" in node and GKE_TPU_ACCELERATOR_LABEL in (node.get("nodeSelector") or {}):
            yield node
        for v in node.values():
            yield from _tpu_pod_specs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _tpu_pod_specs(v)


def hardware(choice: tuple[SliceShape, int | None] | None, slices: int | None, log: RunLog) -> Hardware | None:
    """Per-chip context for the summary. Slices: --slices, else what the log's device count
    implies, else the pool's, else 1 — the log is what actually ran."""
    from workloads.observe.metrics import Hardware, is_fp8

    if choice is None:
        return None
    shape, pool_slices = choice
    n = log.num_devices
    from_log = n // shape.devices if n and n >= shape.devices and n % shape.devices == 0 else None
    return Hardware.from_shape(shape, slices or from_log or pool_slices or 1, fp8=is_fp8(log.config))


def looks_like_file(arg: str) -> bool:
    return "/" in arg or "." in Path(arg).name or Path(arg).exists()


def read_log(path: Path, what: str) -> str:
    """A log or metrics file: a regular file of at most ``inputfile.LOG``'s cap (never a FIFO or a device)."""
    return read_input(path, what)[0]


def read_input(path: Path, what: str) -> tuple[str, bool]:
    """(the text of a log or metrics file, whether it is a metrics file), of a regular file of at most ``inputfile.LOG``'s cap.

    A TensorBoard event file (MaxText's, copied out of a run) is read as the metrics file it
    stands for (``tb_events``); a ``.jsonl`` file is one as it is."""
    from toolkit.inputfile import LOG, NotReadable, read_bounded
    from workloads.observe import tb_events

    try:
        raw = read_bounded(path, LOG)
        if tb_events.is_event_file(raw):
            try:
                return tb_events.as_metrics_file(tb_events.steps([raw])), True
            except tb_events.BadEvents as e:
                raise SpecError(what, f"{path} is a TensorBoard event file that cannot be read: {e}", "pass the event file MaxText wrote") from None
        return raw.decode("utf-8", errors="replace"), path.suffix == ".jsonl"
    except NotReadable as e:
        raise SpecError(what, e.problem, e.fix) from None
    except FileNotFoundError:
        raise SpecError(what, f"{path} does not exist", "pass the path of a MaxText log (stderr) or metrics_file") from None
    except OSError as e:
        raise SpecError(what, f"cannot read {path}: {e.strerror}") from None


@dataclass(frozen=True)
class Loaded:
    """A run's log as read: from a file, or from the cluster and Cloud Logging."""

    run: str
    source: str  # the file, the pod, or Cloud Logging and the pods it holds
    log: RunLog
    text: str
    timeline: Timeline | None = None
    shape: tuple[SliceShape, int | None] | None = None  # the run object's own
    attempts: tuple[str, ...] | None = None  # each pod's lines, when the source tells the pods apart


def load_run(
    target: str,
    *,
    spec: SpecSource,
    cluster: ClusterSource,
    metrics_file: Path | None,
    namespace: str | None,
    team: str | None,
    logging_client: ClientFor | None = None,
    storage_client: ClientFor | None = None,
) -> Loaded:
    """A run's log from a local file or, for a run name, from where its attempts outlive their pods.

    For a run on the cluster: worker 0's lines of every attempt from Cloud Logging
    (``history``), else the current pod's log, which on GKE holds its own attempt only
    (said on stderr when the run has restarted); the shape and slice count come from the
    run object (``run_shape``). A run with no pod and no entries: exit 3 while the run is
    there (queued), exit 2 once it is gone too, naming where it looked.
    """
    from toolkit.errors import NotFound
    from workloads.observe import metrics as m

    metrics_text = read_log(metrics_file, "--metrics-file") if metrics_file else None
    if looks_like_file(target):
        path = Path(target)
        text, metrics_only = read_input(path, "LOGFILE")
        if metrics_only and metrics_text is None:
            log = m.load(None, text)  # a metrics file given as the only input
        else:
            log = m.load(text, metrics_text)
        run = log.config.get("run_name", "").strip("'\"") or path.name.split(".")[0]
        return Loaded(run, str(path), log, text)
    ns = run_namespace(spec, namespace, team)
    kube = cluster()
    # One lookup of the run serves the pod, the shape and the timeline. A refused read of it
    # is a refused command (exit 3), as it was when only the pod lookup made it.
    found = kube.find_run(ns, target)
    pod = kube.find_pod(ns, target, found=found)
    shape = run_shape(found[1]) if found else None
    tl = timeline(kube, ns, target, found) if found else None
    # The spec only when a history source needs it (the project, region, cluster).
    hist, missing, failure = _history(kube, spec, ns, target, found, logging_client)
    if hist is not None:
        texts = _per_pod(hist)
        source = f"{hist.where}: pod{'s' if len(hist.pods) > 1 else ''} {', '.join(hist.pods)}"
        return Loaded(target, source, m.load(hist.text, metrics_text), hist.text, tl, shape, texts)
    if failure is not None:
        if pod is None and found is None:
            # Nothing on the cluster to fall back to: the service's failure is the answer (exit 3), in one line.
            raise type(failure)(f"no history of run {target!r} in namespace {ns!r} (no run and no pod there): {failure}", status=failure.status)
        import sys

        sys.stderr.write(f"warning: earlier attempts unknown: {failure}\n")
    if pod is None:
        if found is None and missing is not None:
            raise SpecError(
                "LOGFILE_OR_RUN",
                f"no history of run {target!r}: no run and no pod in namespace {ns!r}, and {missing}",
                "check the run name, --team/--namespace and the spec's project, or pass a saved log as LOGFILE",
            )
        # The cluster side (exit 3), as `logs` says it: the run is not (or no longer) there.
        raise NotFound(f"no pod for the log of run {target!r} in namespace {ns!r} — the run may still be queued or gone; see 'status {target}'")
    if tl is not None and tl.restarts:
        import sys

        sys.stderr.write(
            f"warning: run {target!r} restarted {tl.restarts} time(s); pod {pod['metadata']['name']}'s log holds its own attempt only"
            f" (earlier attempts: {missing or 'not in Cloud Logging'})\n"
        )
    text = _capped_log(kube, ns, pod["metadata"]["name"])
    source = f"{ns}/{pod['metadata']['name']}"
    if metrics_text is None and found is not None:
        # MaxText's own metrics files in the run's bucket hold the steps of earlier attempts too.
        metrics_text, where = _bucket_metrics(kube, spec, found[1], storage_client)
        if metrics_text:
            source += f" and {where}"
    return Loaded(target, source, m.load(text, metrics_text), text, tl, shape)


def _bucket_metrics(cluster, env: SpecSource, run_object: Mapping[str, Any], storage_client: ClientFor | None) -> tuple[str | None, str]:
    """(the run's step figures outside its log as one metrics-file text, where) — MaxText's gcs_metrics files, else its
    TensorBoard event files (``bucket_metrics``); None when it writes none or they cannot be read (said on stderr)."""
    import sys

    from toolkit.errors import GoogleApiError
    from toolkit.inputfile import LOG
    from workloads.observe import bucket_metrics
    from workloads.observe.storage import StorageError, make_client

    place = bucket_metrics.metrics_place(list(_tpu_pod_specs(run_object)))
    if place is None:
        return None, ""
    if place.kind == bucket_metrics.LUSTRE:
        sys.stderr.write(
            f"warning: the run's TensorBoard event files are on Lustre ({place.directory}), which the toolkit cannot read from here: "
            "copy the newest ones out of a pod that mounts the claim and pass one as --metrics-file\n"
        )
        return None, ""
    try:
        client = (storage_client or (lambda _cluster, project: make_client(project)))(cluster, env().project)
        text, files = bucket_metrics.read_place(client, place, limit_bytes=LOG.limit)
    except (StorageError, GoogleApiError) as e:  # refused, or unreachable or misbehaving (the bounded transport's line)
        sys.stderr.write(f"warning: the run's {'metrics' if place.kind == bucket_metrics.METRICS else 'TensorBoard event'} files are unread: {e}\n")
        return None, ""
    what = "metrics file(s)" if place.kind == bucket_metrics.METRICS else "TensorBoard event file(s)"
    return (text or None), f"{files} {what} in {place.directory}"


def _history(cluster, env: SpecSource, ns: str, run: str, found, logging_client: ClientFor | None) -> tuple[History | None, str | None, Any]:
    """(the run's own entries from Cloud Logging, every attempt, else None and why none, and the failure when it could not be read), for every runtime.

    A run still there is read as its runtime (``history.worker_filter``); one that is gone as
    each runtime in turn, the first with entries.
    """

    from toolkit.errors import Forbidden
    from toolkit.inputfile import LOG
    from workloads.observe.history import RUNTIMES, HistoryUnavailable, LogScope, make_client, read

    kind, obj = found if found else (None, None)
    spec = env()
    meta = (obj or {}).get("metadata") or {}
    scopes = [
        LogScope(
            project=spec.project,
            location=spec.region,
            cluster=spec.cluster.name,
            namespace=ns,
            run=run,
            run_uid=meta.get("uid") if runtime != "ray" else None,
            since=meta.get("creationTimestamp"),
            runtime=runtime,
        )
        for runtime in ([kind.runtime] if kind is not None else RUNTIMES)
    ]
    try:
        client = (logging_client or (lambda _cluster, project: make_client(project)))(cluster, spec.project)
        for scope in scopes:
            hist = read(client, scope, limit_bytes=LOG.limit)
            if hist.lines:
                return hist, None, None
    except (HistoryUnavailable, Forbidden) as e:
        return None, f"Cloud Logging could not be read ({e})", e
    return None, f"no entries for it in {scopes[0].where}", None


def _per_pod(hist: History) -> tuple[str, ...] | None:
    """The history's text cut where the pod changes (each pod one attempt), or None when the entries name no pods."""
    return hist.per_pod() if hist.pods else None


def _capped_log(cluster, ns: str, pod: str) -> str:
    """The pod's whole log, at most ``inputfile.LOG``'s cap (the same as a log file's)."""
    from toolkit.inputfile import LOG, human_bytes

    lines, size = [], 0
    for line in cluster.logs(ns, pod):
        size += len(line) + 1
        if size > LOG.limit:
            raise SpecError(
                "LOGFILE_OR_RUN",
                f"the log of pod {ns}/{pod} is over {human_bytes(LOG.limit)}, the most a {LOG.what} may be",
                "save the part you need (kubectl logs --since) to a file and pass that",
            )
        lines.append(line)
    return "\n".join(lines)


def timeline(cluster, ns: str, run: str, found=None):
    """Run created -> Kueue admitted, for the goodput's queueing share (None where unknown), for every runtime.

    ``found``: the run's (kind, object) when the caller has it. Unknown without the run's
    CRD or Kueue; also when the identity may not read them (the log it did read is still
    analysed), which a warning line on stderr says. Restarts: the attempts before the current
    one, as each runtime counts them (``earlier_attempts``).
    """
    import sys
    from datetime import datetime

    from toolkit.errors import Forbidden, NotFound
    from workloads.observe.goodput import Timeline

    def epoch(ts: str | None) -> float | None:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() if ts else None

    try:
        if found is None:
            found = cluster.find_run(ns, run)
        js = found[1] if found else None
        wl = cluster.workload_for(ns, js) if js else None
    except NotFound:
        return None
    except Forbidden as e:
        sys.stderr.write(f"warning: the run's queueing time is unknown: {e}\n")
        return None
    if js is None:
        return None
    admitted = None
    status = (wl or {}).get("status") or {}
    # After an eviction the Admitted time is the re-admission's: created -> admitted would not be queueing.
    if not status.get("requeueState") and not (status.get("schedulingStats") or {}).get("evictions"):
        admitted = next(
            (epoch(c.get("lastTransitionTime")) for c in status.get("conditions") or [] if c.get("type") == "Admitted" and c.get("status") == "True"), None
        )
    st = js.get("status") or {}
    return Timeline(
        created=epoch((js.get("metadata") or {}).get("creationTimestamp")),
        admitted=admitted,
        restarts=earlier_attempts(found[0].kind if found else "JobSet", js, wl),
        restarts_counted=int(st.get("restartsCountTowardsMax") or 0),
    )


def earlier_attempts(kind: str, run_object: Mapping[str, Any], workload: Mapping[str, Any] | None) -> int:
    """How many attempts the run had before its current one, by what each runtime's controller counts.

    A JobSet counts its restarts; a Job's attempts are Kueue's evictions of its Workload (the
    Job suspended, its pods gone, new pods at re-admission); KubeRay counts a RayJob's failed
    attempts it retried (``status.failed``; the one running now is not failed yet).
    """
    st = run_object.get("status") or {}
    if kind == "JobSet":
        return _count(st.get("restarts"))
    if kind == "RayJob":
        return _count(st.get("failed"))
    evictions = ((((workload or {}).get("status") or {}).get("schedulingStats") or {}).get("evictions")) or []
    if not isinstance(evictions, list):
        return 0
    return sum(_count(e.get("count")) for e in evictions if isinstance(e, Mapping))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000 else 0


def profiler_window(log: RunLog, first: int | None, steps: int | None):
    from workloads.observe.metrics import ProfilerWindow

    if steps == 0:
        return None
    auto = log.profiler_window()
    if first is None and steps is None:
        return auto
    return ProfilerWindow(first if first is not None else (auto.first if auto else 1), steps if steps is not None else (auto.steps if auto else 5))


def measured_cost(a: Analysis, spec: SpecSource, pool: str | None) -> RunCost | None:
    """The run's cost from its measured time (infra.pricing), in every capacity mode; None without the hardware or a timed log."""
    from infra import catalog, pricing
    from workloads.observe.report import measured_seconds

    measured = measured_seconds(a.log, a.goodput)
    if a.hardware is None or not a.hardware.chips or measured is None:
        return None
    env = spec()
    match = next((p for p in env.tpu_pools if p.name == pool), None)
    seconds, how = measured
    return pricing.run_cost(
        pricing.prices_for(env),
        catalog.resolve(a.hardware.name).generation.name,
        env.region,
        a.hardware.chips,
        seconds,
        pool_modes=pricing.pool_modes(match) if match else (),
        basis=f"measured ({how})",
    )


def write_report(out: Path, a: Analysis, *, cost: RunCost | None, first_steady_step: int) -> ReportFiles:
    """The report of ``a`` (report.md, metrics.png, summary.json; ``workloads.observe.report``) in directory ``out``."""
    from workloads.observe import report as rp

    try:
        return rp.write_report(
            out,
            rp.RunFacts.from_log(a.run, a.source, a.log),
            a.log,
            a.summary,
            profiler=a.profiler,
            first_steady_step=first_steady_step,
            goodput=a.goodput,
            cost=cost,
        )
    except OSError as e:
        raise SpecError("--out", f"cannot write the report into {out}: {e.strerror or e}", "pass a directory you can write to") from None
