"""MaxText training metrics: parse what a run printed, summarize its steady state.

Pure functions over text. Two sources, both from MaxText 0.2.5
(``maxtext/common/metric_logger.py``):

* the per-step log line (absl, on stderr, one step late)::

      completed step: 7, seconds: 0.064, TFLOP/s/device: 0.001, Tokens/s/device: 1996.1,
      total_weights: 128, loss: 5.412, lm_loss: 5.412, perplexity: 224.1[, moe_lb_loss: ...]

  with a ``[Rampup Batch Size Phase]`` variant that has no throughput fields, and a
  ``completed profiler activation/deactivation step: N`` variant (``hide_profiler_step_metric``)
  that has no timing at all;
* the ``metrics_file=`` JSONL, one object per step with full-precision ``learning/*`` and
  ``perf/*`` scalars — the more robust source when it exists.

Numbers are held to what a real step can say (``STEP_LIMITS``): a step number is an int32 (MaxText's
step counter), times, rates and token counts are finite, not negative and below a ceiling no
hardware reaches. A line or record outside those is impossible (a corrupted or forged log) and
is skipped; a loss or extra metric that is NaN or infinite (a diverged run prints ``loss: nan``)
is left out of the figures. Both are counted in ``RunLog.skipped``/``dropped`` and said once
(``RunLog.notes``), so no NaN or infinity ever reaches a summary, a report or JSON.

The summary's rules: steady state from step 2 on (steps 0-1 include XLA
compilation), profiler-window steps excluded, per-chip = per-device x JAX devices per chip,
MFU = TFLOP/s per device / peak per device (the fp8 peak when the logged config says the run
quantized to fp8 and the generation has one: ``Hardware.from_shape(..., fp8=is_fp8(config))``).

Throughput is total work over total time: the steady steps' tokens (or TFLOPs) summed,
divided by their seconds summed. It is never the mean of the per-step rates, where one
short step with a huge rate outweighs many ordinary ones. Each step's work is what MaxText
says it did (``perf/per_device_tokens``, ``perf/per_device_tflops`` in the metrics file) or,
from a log alone, its rate times its seconds. The per-step rates' median and range are kept
beside the figure to show how steady the steady state was.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from infra.catalog import SliceShape
from toolkit.digits import whole_number
from toolkit.errors import ToolkitError
from toolkit.jsontext import JsonTextError, load_json


class MetricsError(ToolkitError):
    """A log or metrics file that holds no usable MaxText metrics."""


# ------------------------------------------------------------------- records


@dataclass(frozen=True)
class StepMetrics:
    """One training step as MaxText reported it. Missing fields are None, not 0."""

    step: int
    seconds: float | None = None
    tflops_per_device: float | None = None
    tokens_per_device: float | None = None
    total_weights: float | None = None
    loss: float | None = None
    # Everything else the line or file carried (lm_loss, perplexity, moe_lb_loss, mtp_loss, ...).
    extra: Mapping[str, float] = field(default_factory=dict)
    rampup: bool = False
    # MaxText hid this step's numbers because the profiler started or stopped around it.
    profiler_boundary: bool = False


@dataclass(frozen=True)
class EvalMetrics:
    """An eval summary: ``Completed eval after train step N, loss=..., ...``."""

    after_step: int
    loss: float | None
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunLog:
    """What one worker's log says: step records, eval summaries and the logged config."""

    steps: tuple[StepMetrics, ...]
    evals: tuple[EvalMetrics, ...] = ()
    # `Config param <key>: <value>` lines (MaxText logs its resolved config at start).
    config: Mapping[str, str] = field(default_factory=dict)
    # `System Information: Jax Version: ...`, `Num_devices: N`: what the run ran on.
    system: Mapping[str, str] = field(default_factory=dict)
    # Impossible step lines or records, skipped: "line N: why" (the first few) and how many in all.
    skipped: tuple[str, ...] = ()
    skipped_count: int = 0
    # Losses and extra metrics that were NaN or infinite, left out of the figures.
    dropped: int = 0

    @property
    def num_devices(self) -> int | None:
        n = self.system.get("num_devices")
        return whole_number(n, 9) if n else None

    def notes(self) -> list[str]:
        """What was left out and why, one line each (empty when nothing was)."""
        out = []
        if self.skipped_count:
            more = f" and {self.skipped_count - len(self.skipped)} more" if self.skipped_count > len(self.skipped) else ""
            out.append(f"skipped {self.skipped_count} impossible step line(s): {'; '.join(self.skipped)}{more}")
        if self.dropped:
            out.append(f"left out {self.dropped} NaN or infinite loss/metric value(s) (a diverged run?)")
        return out

    def profiler_window(self) -> ProfilerWindow | None:
        return ProfilerWindow.from_config(self.config)


# ------------------------------------------------------------------- parsing

_STEP_MARK = "completed step: "
_HIDDEN_MARK = "completed profiler activation/deactivation step: "
_RAMPUP_MARK = "[Rampup Batch Size Phase]"
_EVAL_RE = re.compile(r"Completed eval after train step (\d+)", re.ASCII)
_CONFIG_RE = re.compile(r"Config param ([A-Za-z0-9_]+): (.*)")
_SYSTEM_RE = re.compile(r"System Information: (Jax Version|Jaxlib Version|Jax Backend): (.*)")
_DEVICES_RE = re.compile(r"\bNum_devices: (\d+)", re.ASCII)
# The log names these fields differently from the metrics file; map both onto StepMetrics.
_LOG_FIELDS = {
    "seconds": "seconds",
    "TFLOP/s/device": "tflops_per_device",
    "Tokens/s/device": "tokens_per_device",
    "total_weights": "total_weights",
    "loss": "loss",
}
_FILE_FIELDS = {
    "perf/step_time_seconds": "seconds",
    "perf/per_device_tflops_per_sec": "tflops_per_device",
    "perf/per_device_tokens_per_sec": "tokens_per_device",
    "learning/total_weights": "total_weights",
    "learning/loss": "loss",
}


def metric_number(text: str) -> float | None:
    text = text.strip().rstrip("%")
    if len(text) > 64:  # no metric is written with more digits; int-like text past 4,300 digits would not even parse
        return None
    try:
        return float(text)
    except ValueError:
        return None


MAX_STEP = 2**31 - 1  # MaxText's step counter is an int32
# The most a real step can report, per field (StepMetrics names); past it, or negative, or not finite: impossible.
STEP_LIMITS = {
    "seconds": 7 * 24 * 3600.0,  # a week for one step: no collective waits that long
    "tflops_per_device": 1e6,  # an exaFLOP/s per device: a million times today's fastest chip
    "tokens_per_device": 1e9,
    "total_weights": 1e15,  # tokens in one step's global batch
}
MIN_STEP_SECONDS = 1e-6  # a step time is 0 (not measured) or at least a microsecond; a smaller one divides to infinity
MAX_METRIC = 1e30  # any other metric (loss, perplexity, ...): finite and below this, else left out
_NUMERIC = re.compile(r"^[-+]?[0-9.][0-9.eE+-]*$")
_KEEP_SKIPPED = 3  # how many skipped lines are named in the note


class _Tally:
    """Lines skipped and values dropped while parsing one text."""

    def __init__(self) -> None:
        self.skipped: list[str] = []
        self.count = 0
        self.dropped = 0

    def skip(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.skipped) < _KEEP_SKIPPED:
            self.skipped.append(f"{where}: {why}")


def _step_number(value: Any) -> int | None:
    """A step number as MaxText writes one: a whole number in [0, MAX_STEP]."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = whole_number(value, 10)
    elif isinstance(value, float):
        value = int(value) if math.isfinite(value) and value.is_integer() and abs(value) <= 2 * MAX_STEP else None
    return value if isinstance(value, int) and 0 <= value <= MAX_STEP else None


def _impossible(vals: Mapping[str, float], names: Mapping[str, str]) -> str | None:
    """Why a record's timing or throughput cannot be real, else None."""
    for key, value in vals.items():
        limit = STEP_LIMITS.get(names.get(key, ""))
        if limit is not None and not (math.isfinite(value) and 0 <= value <= limit):
            return f"{key} {value:g} is not a possible value (0 to {limit:g})"
        if names.get(key) == "seconds" and 0 < value < MIN_STEP_SECONDS:
            return f"{key} {value:g} is shorter than any step (0, or at least {MIN_STEP_SECONDS:g})"
    return None


def _fields(rest: str, sep: str) -> dict[str, float]:
    """`a: 1, b: 2` (or `a=1, b=2`) into numbers; non-numeric parts are skipped."""
    out: dict[str, float] = {}
    for part in rest.split(", "):
        key, found, value = part.partition(sep)
        if not found:
            continue
        num = metric_number(value)
        if num is not None:
            out[key.strip()] = num
    return out


def _parse_step_line(line: str, tally: _Tally, where: str) -> StepMetrics | None:
    """The step a log line reports; None if it reports none, or an impossible one (skipped, in ``tally``)."""
    rampup = _RAMPUP_MARK in line
    at = line.find(_HIDDEN_MARK)
    if at >= 0:
        m = re.match(r"\d+", line[at + len(_HIDDEN_MARK) :], re.ASCII)
        if not m:
            return None
        rest = line[at + len(_HIDDEN_MARK) + m.end() :]
        return _step_from(m.group(), _fields(rest.lstrip(", "), ": "), _LOG_FIELDS, tally, where, rampup=rampup, hidden=True)
    at = line.find(_STEP_MARK)
    # "Completed eval step: N" shares the words; eval steps are not training steps.
    if at < 0 or line[max(0, at - 5) : at].endswith("eval "):
        return None
    m = re.match(r"[^,]*", line[at + len(_STEP_MARK) :])
    step = m.group().strip()
    if not _NUMERIC.fullmatch(step):
        return None  # the words without a step number: not a step line
    vals = _fields(line[at + len(_STEP_MARK) + m.end() :].lstrip(", "), ": ")
    return _step_from(step, vals, _LOG_FIELDS, tally, where, rampup=rampup, hidden=False)


def _step_from(step: Any, vals: dict[str, float], names: Mapping[str, str], tally: _Tally, where: str, *, rampup: bool, hidden: bool) -> StepMetrics | None:
    number = _step_number(step)
    if number is None:
        tally.skip(where, f"step {str(step)[:20]!r} is not a step number (0 to {MAX_STEP})")
        return None
    why = _impossible(vals, names)
    if why:
        tally.skip(where, why)
        return None
    known: dict[str, Any] = {}
    extra: dict[str, float] = {}
    for key, value in vals.items():
        if key not in names and not (math.isfinite(value) and abs(value) <= MAX_METRIC):
            tally.dropped += 1
        elif key not in names:
            extra[key] = value
        elif names[key] == "loss" and not (math.isfinite(value) and abs(value) <= MAX_METRIC):
            tally.dropped += 1
        else:
            known[names[key]] = value
    return StepMetrics(step=number, extra=extra, rampup=rampup, profiler_boundary=hidden, **known)


def parse_log(text: str) -> RunLog:
    """Parse a MaxText stdout/stderr log (absl prefixes and all) into step records.

    A step printed twice (a JobSet restart replaying steps) keeps its last occurrence,
    since that is the attempt the run continued from.
    """
    steps: dict[int, StepMetrics] = {}
    evals: list[EvalMetrics] = []
    config: dict[str, str] = {}
    system: dict[str, str] = {}
    tally = _Tally()
    for n, line in enumerate(text.splitlines(), start=1):
        if "completed" in line and ("step: " in line):
            rec = _parse_step_line(line, tally, f"line {n}")
            if rec is not None:
                steps.pop(rec.step, None)
                steps[rec.step] = rec
                continue
        m = _EVAL_RE.search(line)
        if m:
            vals = {k: v for k, v in _fields(line[m.end() :].lstrip(", "), "=").items() if math.isfinite(v) and abs(v) <= MAX_METRIC}
            after = _step_number(m.group(1))
            if after is not None:
                evals.append(EvalMetrics(after_step=after, loss=vals.pop("loss", None), extra=vals))
            continue
        if "Config param " in line:
            c = _CONFIG_RE.search(line)
            if c:
                config[c.group(1)] = c.group(2).strip()
            continue
        sysm = _SYSTEM_RE.search(line)
        if sysm:
            system[sysm.group(1).lower().replace(" ", "_")] = sysm.group(2).strip()
            continue
        dev = _DEVICES_RE.search(line)
        if dev:
            system["num_devices"] = dev.group(1)
    return RunLog(
        steps=tuple(sorted(steps.values(), key=lambda s: s.step)),
        evals=tuple(evals),
        config=config,
        system=system,
        skipped=tuple(tally.skipped),
        skipped_count=tally.count,
        dropped=tally.dropped,
    )


def _file_number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int) and abs(v) > 2**63:  # float() of a longer int is inf or an OverflowError
        return math.inf
    return float(v)


def parse_metrics_file(text: str, tally: _Tally | None = None) -> tuple[StepMetrics, ...]:
    """Parse MaxText's ``metrics_file`` JSONL (one object per step); impossible records are skipped (``tally``)."""
    tally = tally if tally is not None else _Tally()
    steps: dict[int, StepMetrics] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = load_json(line, max_bytes=len(line.encode()), finite=False)  # the file was read within its cap; each number is judged below
        except JsonTextError as e:
            if "digits" not in e.problem:
                raise MetricsError(f"metrics file line {n} is not JSON; pass the file MaxText wrote with metrics_file=") from None
            tally.skip(f"metrics file line {n}", "holds a number too long to read")
            continue
        if not isinstance(obj, dict) or "step" not in obj:
            raise MetricsError(f"metrics file line {n} has no 'step'; pass the file MaxText wrote with metrics_file=")
        vals = {k: x for k, v in obj.items() if k != "step" and (x := _file_number(v)) is not None}
        # Extras lose their "learning/" / "perf/" prefix so they line up with the log's names.
        renamed = {k if k in _FILE_FIELDS else k.split("/", 1)[-1]: v for k, v in vals.items()}
        rec = _step_from(obj["step"], renamed, _FILE_FIELDS, tally, f"metrics file line {n}", rampup=False, hidden=False)
        if rec is None:
            continue
        steps.pop(rec.step, None)
        steps[rec.step] = rec
    return tuple(sorted(steps.values(), key=lambda s: s.step))


def merge(log_steps: Iterable[StepMetrics], file_steps: Iterable[StepMetrics]) -> tuple[StepMetrics, ...]:
    """Prefer the metrics file's full-precision numbers; keep the log's flags and any step only it has."""
    by_step = {s.step: s for s in log_steps}
    for f in file_steps:
        logged = by_step.get(f.step)
        if logged is None:
            by_step[f.step] = f
            continue
        by_step[f.step] = StepMetrics(
            step=f.step,
            seconds=f.seconds if f.seconds is not None else logged.seconds,
            tflops_per_device=f.tflops_per_device if f.tflops_per_device is not None else logged.tflops_per_device,
            tokens_per_device=f.tokens_per_device if f.tokens_per_device is not None else logged.tokens_per_device,
            total_weights=f.total_weights if f.total_weights is not None else logged.total_weights,
            loss=f.loss if f.loss is not None else logged.loss,
            extra={**logged.extra, **f.extra},
            rampup=logged.rampup,
            profiler_boundary=logged.profiler_boundary,
        )
    return tuple(by_step[k] for k in sorted(by_step))


# ------------------------------------------------------------------- summary


@dataclass(frozen=True)
class ProfilerWindow:
    """MaxText's profiler: active from step ``first`` for ``steps`` steps."""

    first: int
    steps: int

    def affected(self) -> range:
        # The active steps, plus the step after the window: MaxText itself treats
        # first, first+1, first+steps and first+steps+1 as boundary steps with timing
        # artifacts (metric_logger._is_profiler_boundary_step).
        return range(self.first, self.first + self.steps + 2)

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> ProfilerWindow | None:
        # Logged as e.g. "ProfilerType.XPLANE"; off is "" or "...NONE".
        mode = config.get("profiler", "").strip("'\" ").lower().rsplit(".", 1)[-1]
        if mode in ("", "none"):
            return None
        first, steps = _step_number(config.get("skip_first_n_steps_for_profiler", "1")), _step_number(config.get("profiler_steps", "5"))
        return None if first is None or steps is None else cls(first, steps)


def is_fp8(config: Mapping[str, str]) -> bool:
    """The logged config says the matmuls ran in fp8 (quantization fp8, fp8_full, nanoo_fp8, ...)."""
    return "fp8" in config.get("quantization", "").strip("'\" ").lower()


@dataclass(frozen=True)
class Hardware:
    """What per-chip figures and MFU need to know about the slice the run used."""

    name: str
    devices_per_chip: int
    peak_tflops_per_device: float
    chips: int | None = None  # chips in the whole run (all slices), for the tokens cross-check
    precision: str = "bf16"  # which peak MFU is measured against

    @classmethod
    def from_shape(cls, shape: SliceShape, slices: int | None = None, *, fp8: bool = False) -> Hardware:
        """An fp8 run is measured against the fp8 peak where the catalog has one (tpu7x); elsewhere
        against bf16, and ``precision`` says which peak the MFU is of."""
        gen = shape.generation
        fp8_peak = gen.peak_fp8_tflops_per_chip if fp8 else None
        return cls(
            name=shape.accelerator_type,
            devices_per_chip=gen.devices_per_chip,
            peak_tflops_per_device=fp8_peak / gen.devices_per_chip if fp8_peak else shape.peak_tflops_per_device,
            chips=shape.chips * slices if slices else None,
            precision="fp8" if fp8_peak else "bf16",
        )


@dataclass(frozen=True)
class Spread:
    """How the steady steps' own figures vary: their median, lowest and highest."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, xs: list[float]) -> Spread | None:
        return cls(statistics.median(xs), min(xs), max(xs)) if xs else None

    def scaled(self, k: float) -> Spread:
        return Spread(self.median * k, self.low * k, self.high * k)


@dataclass(frozen=True)
class Summary:
    steps_seen: int
    first_step: int | None
    last_step: int | None
    steady_steps: tuple[int, ...]
    # step -> why it is not in the steady state (compile, profiler, rampup, no timing)
    excluded: Mapping[int, str]
    step_seconds_mean: float | None
    step_seconds_median: float | None
    # Total work / total time over the steady steps (not a mean of the per-step rates).
    tflops_per_device: float | None
    tokens_per_device: float | None
    loss_first: float | None
    loss_last: float | None
    loss_min: float | None
    # least-squares slope of loss against step over every step with a loss
    loss_slope_per_step: float | None
    hardware: Hardware | None = None
    tflops_per_chip: float | None = None
    tokens_per_chip: float | None = None
    mfu: float | None = None
    # tokens/s/chip recomputed as total_weights / step seconds / chips (summed over the steady
    # steps): should match tokens_per_chip
    tokens_per_chip_from_weights: float | None = None
    # The per-step figures behind the totals: median and range over the steady steps.
    step_seconds_spread: Spread | None = None
    tflops_per_device_spread: Spread | None = None
    tokens_per_device_spread: Spread | None = None
    tflops_per_chip_spread: Spread | None = None
    tokens_per_chip_spread: Spread | None = None

    @property
    def loss_drop_pct(self) -> float | None:
        if self.loss_first in (None, 0) or self.loss_last is None:
            return None
        return 100.0 * (self.loss_first - self.loss_last) / self.loss_first

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["excluded"] = {str(k): v for k, v in self.excluded.items()}
        d["loss_drop_pct"] = self.loss_drop_pct
        return d


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


# The metrics file's per-step work (per device); from a log alone it is rate x seconds.
_WORK_KEYS = {"tflops_per_device": "per_device_tflops", "tokens_per_device": "per_device_tokens"}


def throughput(steps: Iterable[StepMetrics], rate: str) -> tuple[float | None, Spread | None]:
    """(total work / total time, spread of the per-step rates) of ``rate`` over ``steps``.

    ``rate`` is ``"tflops_per_device"`` or ``"tokens_per_device"``. A step counts when it has
    both that rate and a positive, finite step time.
    """
    work = seconds = 0.0
    rates: list[float] = []
    for s in steps:
        r = getattr(s, rate)
        if r is None or not math.isfinite(r) or s.seconds is None or not math.isfinite(s.seconds) or s.seconds <= 0:
            continue
        done = s.extra.get(_WORK_KEYS[rate])
        work += done if done is not None and math.isfinite(done) else r * s.seconds
        seconds += s.seconds
        rates.append(r)
    return (work / seconds if seconds > 0 else None), Spread.of(rates)


def _slope(points: list[tuple[int, float]]) -> float | None:
    if len(points) < 2:
        return None
    xs = [float(p[0]) for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None


def _finite(summary: Summary) -> Summary:
    """The summary with any figure that is not a finite number as None: JSON and reports never see NaN or infinity."""
    changes: dict[str, Any] = {}
    for f in fields(summary):
        v = getattr(summary, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            changes[f.name] = None
        elif isinstance(v, Spread) and not all(math.isfinite(x) for x in (v.median, v.low, v.high)):
            changes[f.name] = None
    return replace(summary, **changes) if changes else summary


def summarize(
    steps: Iterable[StepMetrics],
    *,
    hardware: Hardware | None = None,
    first_steady_step: int = 2,
    profiler: ProfilerWindow | None = None,
) -> Summary:
    """Steady-state figures over the steps that are neither compilation nor profiling."""
    recs = sorted(steps, key=lambda s: s.step)
    prof = profiler.affected() if profiler else range(0)  # a range: membership is arithmetic, however long the window
    excluded: dict[int, str] = {}
    steady: list[StepMetrics] = []
    for s in recs:
        if s.step < first_steady_step:
            excluded[s.step] = "compilation"
        elif s.profiler_boundary or s.step in prof:
            excluded[s.step] = "profiler"
        elif s.rampup:
            excluded[s.step] = "rampup"
        elif s.seconds is None or not math.isfinite(s.seconds):
            excluded[s.step] = "no timing"
        else:
            steady.append(s)

    secs = [s.seconds for s in steady if s.seconds is not None]
    losses = [(s.step, s.loss) for s in recs if s.loss is not None and math.isfinite(s.loss)]

    tflops_dev, tflops_spread = throughput(steady, "tflops_per_device")
    tokens_dev, tokens_spread = throughput(steady, "tokens_per_device")
    summary = Summary(
        steps_seen=len(recs),
        first_step=recs[0].step if recs else None,
        last_step=recs[-1].step if recs else None,
        steady_steps=tuple(s.step for s in steady),
        excluded=excluded,
        step_seconds_mean=_mean(secs),
        step_seconds_median=statistics.median(secs) if secs else None,
        tflops_per_device=tflops_dev,
        tokens_per_device=tokens_dev,
        loss_first=losses[0][1] if losses else None,
        loss_last=losses[-1][1] if losses else None,
        loss_min=min(v for _, v in losses) if losses else None,
        loss_slope_per_step=_slope(losses),
        step_seconds_spread=Spread.of(secs),
        tflops_per_device_spread=tflops_spread,
        tokens_per_device_spread=tokens_spread,
    )
    if hardware is None:
        return _finite(summary)
    per = hardware.devices_per_chip
    weighed = [s for s in steady if s.total_weights is not None and s.seconds]
    weight_seconds = sum(s.seconds for s in weighed if s.seconds)
    return _finite(
        replace(
            summary,
            hardware=hardware,
            tflops_per_chip=tflops_dev * per if tflops_dev is not None else None,
            tokens_per_chip=tokens_dev * per if tokens_dev is not None else None,
            tflops_per_chip_spread=tflops_spread.scaled(per) if tflops_spread else None,
            tokens_per_chip_spread=tokens_spread.scaled(per) if tokens_spread else None,
            mfu=tflops_dev / hardware.peak_tflops_per_device if tflops_dev is not None and hardware.peak_tflops_per_device else None,
            tokens_per_chip_from_weights=(
                sum(s.total_weights for s in weighed if s.total_weights is not None) / weight_seconds / hardware.chips
                if hardware.chips and weight_seconds > 0
                else None
            ),
        )
    )


def load(log_text: str | None = None, metrics_text: str | None = None) -> RunLog:
    """A RunLog from a log, a metrics file, or both (the file's numbers win)."""
    run = parse_log(log_text) if log_text is not None else RunLog(steps=())
    if metrics_text is not None:
        tally = _Tally()
        file_steps = parse_metrics_file(metrics_text, tally)
        run = replace(
            run,
            steps=merge(run.steps, file_steps),
            skipped=(*run.skipped, *tally.skipped)[:_KEEP_SKIPPED],
            skipped_count=run.skipped_count + tally.count,
            dropped=run.dropped + tally.dropped,
        )
    if not run.steps:
        why = f" ({run.notes()[0]})" if run.skipped_count else ""
        raise MetricsError(f"no MaxText step metrics found ('completed step: ...' lines or metrics_file JSON){why}; is this a MaxText training log?")
    return run
