"""Run reports: a Markdown record (jinja2), a PNG plot and a JSON summary in one directory.

Rendering is pure (``render_markdown``); writing files and plotting are the edges.
matplotlib is imported inside ``plot`` with the Agg backend, so neither import time nor a
missing display matters.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from infra.pricing import RunCost, usd
from toolkit.errors import SpecError
from workloads.observe.goodput import Goodput
from workloads.observe.metrics import Hardware, ProfilerWindow, RunLog, Spread, Summary

if TYPE_CHECKING:
    from infra.spec import EnvSpec

TEMPLATES = Path(__file__).resolve().parent / "templates"
MARKDOWN_NAME = "report.md"
PLOT_NAME = "metrics.png"
JSON_NAME = "summary.json"
REPORT_NAMES = (MARKDOWN_NAME, PLOT_NAME, JSON_NAME)  # the files a report writes

# Config keys worth a row in the facts table, in this order, when the log carries them.
CONFIG_FACTS = (
    "model_name",
    "per_device_batch_size",
    "max_target_length",
    "steps",
    "num_slices",
    "ici_fsdp_parallelism",
    "dcn_data_parallelism",
    "remat_policy",
    "dataset_type",
    "profiler",
)


@dataclass(frozen=True)
class RunFacts:
    run: str
    source: str  # a log file path or namespace/run on a cluster
    config_facts: tuple[tuple[str, str], ...] = ()
    generated_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))

    @classmethod
    def from_log(cls, run: str, source: str, log: RunLog) -> RunFacts:
        facts = tuple((k, _config_value(log.config[k])) for k in CONFIG_FACTS if _config_value(log.config.get(k, "")))
        return cls(run=run, source=source, config_facts=facts)


def _config_value(raw: str) -> str:
    # MaxText logs enum settings as "DatasetType.SYNTHETIC"; the config file says "synthetic".
    v = raw.strip().strip("'\"")
    m = re.fullmatch(r"[A-Z][A-Za-z]+\.([A-Z0-9_]+)", v)
    return m.group(1).lower() if m else v


@dataclass(frozen=True)
class ReportFiles:
    directory: Path
    markdown: Path
    plot: Path
    summary_json: Path

    @property
    def files(self) -> list[Path]:
        return [self.markdown, self.plot, self.summary_json]


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:,.{digits}f}"


def _median(sp: Spread | None, digits: int = 3) -> str:
    return "–" if sp is None else _fmt(sp.median, digits)


def _range(sp: Spread | None, digits: int = 3) -> str:
    return "–" if sp is None else f"{_fmt(sp.low, digits)}–{_fmt(sp.high, digits)}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.2f}%"


def steady_range(steps: tuple[int, ...]) -> str:
    """Steps as runs of consecutive numbers (2–4, 8–11): what `metrics` and the report print."""
    if not steps:
        return "none (too few steps after compilation and profiling)"
    # Runs of consecutive steps read better than a long list: 2–4, 8–11.
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def render_markdown(
    facts: RunFacts,
    log: RunLog,
    summary: Summary,
    *,
    profiler: ProfilerWindow | None = None,
    first_steady_step: int = 2,
    plot_name: str = PLOT_NAME,
    goodput: Goodput | None = None,
    cost: RunCost | None = None,
) -> str:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    hw: Hardware | None = summary.hardware
    per = hw.devices_per_chip if hw else None
    return env.get_template("report.md.j2").render(
        facts=facts,
        hw=hw,
        s=summary,
        steps=log.steps,
        evals=log.evals,
        profiler=profiler,
        first_steady_step=first_steady_step,
        steady_range=steady_range(summary.steady_steps),
        plot_name=plot_name,
        fmt=_fmt,
        med=_median,
        rng=_range,
        pct=_pct,
        per_chip=lambda v: v * per if (v is not None and per) else None,
        goodput=goodput,
        cost=cost,
        usd=usd,
    )


def plot(log: RunLog, summary: Summary, path: Path | BinaryIO) -> Path | BinaryIO:
    """Loss and throughput per step; excluded steps drawn hollow so outliers explain themselves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = summary.hardware.devices_per_chip if summary.hardware else 1
    unit = "chip" if summary.hardware else "device"
    steps = [s for s in log.steps]
    fig, (ax_loss, ax_tp) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, constrained_layout=True)
    loss_pts = [(s.step, s.loss) for s in steps if s.loss is not None]
    if loss_pts:
        ax_loss.plot(*zip(*loss_pts, strict=True), marker="o", ms=3, color="tab:blue")
    ax_loss.set_ylabel("loss")
    ax_loss.grid(alpha=0.3)

    steady = set(summary.steady_steps)
    tp_in = [(s.step, s.tokens_per_device * per) for s in steps if s.tokens_per_device is not None and s.step in steady]
    tp_out = [(s.step, s.tokens_per_device * per) for s in steps if s.tokens_per_device is not None and s.step not in steady]
    if tp_in:
        ax_tp.plot(*zip(*tp_in, strict=True), "o-", ms=3, color="tab:green", label="steady state")
    if tp_out:
        ax_tp.plot(*zip(*tp_out, strict=True), "o", ms=4, mfc="none", color="tab:gray", label="compile / profiler / rampup")
    if summary.tokens_per_device is not None:
        ax_tp.axhline(summary.tokens_per_device * per, ls="--", lw=1, color="tab:green", alpha=0.6, label="steady state: total tokens / total time")
    ax_tp.set_ylabel(f"tokens/s per {unit}")
    ax_tp.set_xlabel("step")
    ax_tp.grid(alpha=0.3)
    if tp_in or tp_out:
        ax_tp.legend(loc="best", fontsize=8)
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def write_report(
    out_dir: Path,
    facts: RunFacts,
    log: RunLog,
    summary: Summary,
    *,
    profiler: ProfilerWindow | None = None,
    first_steady_step: int = 2,
    goodput: Goodput | None = None,
    cost: RunCost | None = None,
) -> ReportFiles:
    """Write report.md, metrics.png and summary.json into ``out_dir``.

    Each replaces only a file an earlier report wrote there (``toolkit.owned``): a file of the
    user's under one of those names, or one they edited, is one line (exit 2), nothing written.
    """
    import io

    from toolkit import owned

    png = io.BytesIO()
    plot(log, summary, png)
    files = {
        MARKDOWN_NAME: render_markdown(facts, log, summary, profiler=profiler, first_steady_step=first_steady_step, goodput=goodput, cost=cost).encode(),
        PLOT_NAME: png.getvalue(),
        JSON_NAME: (json.dumps(summary_document(facts, log, summary, goodput, cost), indent=2) + "\n").encode(),
    }
    out_dir = owned.check_root(Path(out_dir), "--out")
    owned.write_files(out_dir, files, "--out")
    return ReportFiles(out_dir, out_dir / MARKDOWN_NAME, out_dir / PLOT_NAME, out_dir / JSON_NAME)


def summary_document(facts: RunFacts, log: RunLog, summary: Summary, goodput: Goodput | None = None, cost: RunCost | None = None) -> dict[str, Any]:
    """What ``metrics -o json`` prints and ``summary.json`` holds."""
    doc = {
        "run": facts.run,
        "source": facts.source,
        "config": dict(facts.config_facts),
        "summary": summary.to_dict(),
        "steps": [_step_dict(s) for s in log.steps],
        "evals": [asdict(e) | {"extra": dict(e.extra)} for e in log.evals],
        "notes": log.notes(),  # impossible lines skipped, NaN/inf values left out
    }
    if goodput is not None:
        doc["goodput"] = goodput.to_dict()
    if cost is not None:
        doc["cost"] = cost.to_dict()
    return doc


def measured_seconds(log: RunLog, goodput: Goodput | None) -> tuple[float, str] | None:
    """How long the run held its slices, as far as its log shows, and how that was measured.

    The span of the log's timed lines (every attempt, and the restarts between them) when it
    has them; else the sum of the step times, which leaves out start-up and compilation.
    Either way a lower bound: nodes are billed from before the first log line.
    """
    if goodput is not None and goodput.attempts:
        return goodput.total - goodput.queueing, "log span, first to last timed line"
    secs = [s.seconds for s in log.steps if s.seconds is not None]
    return (sum(secs), "sum of step times") if secs else None


def _step_dict(s: Any) -> Mapping[str, Any]:
    d = asdict(s)
    d["extra"] = dict(s.extra)
    return d


def report_prefix(run: str, now: dt.datetime | None = None) -> str:
    """Where ``report --upload`` puts a report: ``reports/<run>/<UTC time>/``, a new prefix every time.

    Reports are create-only (``workloads.observe.storage.upload``): a second report, or a report of
    another run under a reused name, lands beside the earlier ones and never replaces them.
    """
    return f"reports/{run}/{(now or dt.datetime.now(dt.UTC)).strftime('%Y%m%dT%H%M%SZ')}"


def upload_target(spec: EnvSpec) -> tuple[str, str]:
    """(the bucket ``report --upload`` writes into, its project): the spec's bucket with purpose artifacts."""
    from infra.spec import BucketPurpose

    b = spec.bucket_for(BucketPurpose.ARTIFACTS)
    if b is None:
        raise SpecError("buckets", "no bucket with purpose: artifacts to upload reports to", "add one to the spec, or drop --upload")
    return b.name, spec.project
