"""A training journal per model: every finished run's record, appended, never rewritten, shown as Markdown tables.

The journal is the per-model record Ironwood training teams keep in a README that grows by one
record a run and never loses one: the model's facts and versions (MaxText, JAX, libtpu, the launcher), a
table of runs (date, configuration, precision, step time, TFLOP/s per device and per chip,
tokens/s per chip, final loss, notes) and each run's per-step table with its steady state and
loss drop. ``workloads journal add`` keeps that journal in the spec's artifacts bucket as one
JSON object per model, ``journals/<model>.json`` (``render`` turns it into the Markdown, which
``--markdown FILE`` also writes locally), from the figures ``metrics`` computes
(``workloads.observe.metrics.summarize``: steady state from step 2, profiler steps left out).

Never overwritten: a record is appended to the journal as it was read, and written back with
Cloud Storage's generation precondition (``ifGenerationMatch``: the generation read, 0 for a
journal that did not exist), so a journal changed by someone else between the read and the
write is refused (412), not replaced: ``JournalConflict``, one line, exit 2, nothing written.
A run already in the journal is refused too (``add`` is not an edit). The object is read
through a size cap and parsed strictly (``Journal.from_json``): a journal that is not one is
refused, never "repaired" by a write.

Pure but for ``read`` and ``write``, which take a google-cloud-storage client (the CLI's comes
from the cluster's run hook: the local cluster's own Cloud Storage server, else Google's) and go
through ``workloads.observe.storage.storage_call`` for every other failure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from toolkit.errors import FieldError
from toolkit.jsontext import load_json

if TYPE_CHECKING:
    from workloads.observe.analysis import Analysis

FORMAT = 1  # the JSON document's version: a journal in a format this toolkit does not know is refused, not rewritten
PREFIX = "journals"
MAX_BYTES = 8 * 1024 * 1024  # a journal of thousands of runs is a few MiB; more is not one
MAX_RECORDS = 10_000
MAX_STEPS_PER_RECORD = 100_000
_MODEL = re.compile(r"^[a-z0-9][-a-z0-9._]{0,62}$")
# The MaxText keys a record's configuration line shows, in this order (when the run set them).
CONFIG_KEYS = (
    "per_device_batch_size",
    "max_target_length",
    "ici_fsdp_parallelism",
    "ici_fsdp_transpose_parallelism",
    "ici_tensor_parallelism",
    "ici_expert_parallelism",
    "ici_data_parallelism",
    "dcn_data_parallelism",
    "dcn_pipeline_parallelism",
    "remat_policy",
    "quantization",
    "attention",
)


VERSION_KEYS = ("maxtext", "jax", "jaxlib", "libtpu", "launcher")  # how a record's versions are shown, in this order


class JournalConflict(FieldError):
    """The journal changed between its read and its write (another writer): refused, nothing replaced."""


@dataclass(frozen=True)
class StepRow:
    step: int
    seconds: float | None
    tflops_per_device: float | None
    tflops_per_chip: float | None
    tokens_per_chip: float | None
    loss: float | None


@dataclass(frozen=True)
class Record:
    """One finished run, as the journal keeps it."""

    run: str
    date: str  # YYYY-MM-DD, the day it was journaled
    hardware: str  # e.g. tpu7x-128 x 2 (tpu7x 4x4x4)
    config: str  # the MaxText keys of CONFIG_KEYS the run set, key=value
    precision: str  # bf16 or fp8
    steady_steps: str  # e.g. 2-99
    step_seconds: float | None
    tflops_per_device: float | None
    tflops_per_chip: float | None
    tokens_per_chip: float | None
    mfu: float | None
    loss_first: float | None
    loss_final: float | None
    versions: Mapping[str, str] = field(default_factory=dict)  # maxtext, jax, jaxlib, libtpu, launcher
    notes: str = ""
    steps: tuple[StepRow, ...] = ()

    @property
    def loss_drop_pct(self) -> float | None:
        if self.loss_first in (None, 0) or self.loss_final is None:
            return None
        return 100.0 * (self.loss_first - self.loss_final) / self.loss_first


@dataclass(frozen=True)
class Journal:
    model: str
    records: tuple[Record, ...] = ()

    def with_record(self, record: Record) -> Journal:
        """This journal with ``record`` appended; a run it already holds is refused (a record is never replaced)."""
        if any(r.run == record.run for r in self.records):
            raise FieldError(
                "RUN",
                f"run {record.run} is already in the {self.model} journal, and a record is never replaced",
                "journal another run (a rerun gets a new name), or read the journal with `workloads journal show`",
            )
        if len(self.records) >= MAX_RECORDS:
            raise FieldError(
                "--model", f"the {self.model} journal holds {MAX_RECORDS} records, the most one journal keeps", "start another journal with --model"
            )
        return replace(self, records=(*self.records, record))

    def to_json(self) -> str:
        d = {"format": FORMAT, "model": self.model, "records": [_record_dict(r) for r in self.records]}
        return json.dumps(d, indent=1, sort_keys=True, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Journal:
        """A journal read back; anything that is not one this toolkit wrote is refused (``where`` names it)."""
        try:
            d = load_json(text, max_bytes=MAX_BYTES)
            if not isinstance(d, dict) or d.get("format") != FORMAT or not isinstance(d.get("records"), list):
                raise ValueError(f"not a journal of format {FORMAT}")
            model = d.get("model")
            if not isinstance(model, str) or not _MODEL.fullmatch(model):
                raise ValueError("no model name")
            if len(d["records"]) > MAX_RECORDS:
                raise ValueError(f"more than {MAX_RECORDS} records")
            records = tuple(_record_of(r) for r in d["records"])
        except (ValueError, TypeError, KeyError) as e:
            raise FieldError(
                "--model", f"{where} is not a journal this toolkit can append to ({str(e)[:120]})", "move it aside or journal under another --model"
            ) from None
        return cls(model, records)


def _record_dict(r: Record) -> dict[str, Any]:
    d = asdict(r)
    d["versions"] = dict(r.versions)
    return d


def _number(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{v!r} is not a finite number")
    return float(v)


def _text(v: Any, limit: int = 2000) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise ValueError("a text field is not a string of at most 2000 characters")
    return v


def _record_of(d: Any) -> Record:
    if not isinstance(d, dict):
        raise ValueError("a record is not an object")
    steps = d.get("steps") or []
    if not isinstance(steps, list) or len(steps) > MAX_STEPS_PER_RECORD:
        raise ValueError("a record's steps are not a list of at most 100000")
    versions = d.get("versions") or {}
    if not isinstance(versions, dict):
        raise ValueError("versions is not an object")
    return Record(
        run=_text(d["run"], 63),
        date=_text(d["date"], 10),
        hardware=_text(d["hardware"]),
        config=_text(d["config"]),
        precision=_text(d["precision"], 8),
        steady_steps=_text(d["steady_steps"], 40),
        step_seconds=_number(d.get("step_seconds")),
        tflops_per_device=_number(d.get("tflops_per_device")),
        tflops_per_chip=_number(d.get("tflops_per_chip")),
        tokens_per_chip=_number(d.get("tokens_per_chip")),
        mfu=_number(d.get("mfu")),
        loss_first=_number(d.get("loss_first")),
        loss_final=_number(d.get("loss_final")),
        versions={_text(k, 40): _text(v, 200) for k, v in versions.items()},
        notes=_text(d.get("notes") or ""),
        steps=tuple(
            StepRow(
                step=int(s["step"]),
                seconds=_number(s.get("seconds")),
                tflops_per_device=_number(s.get("tflops_per_device")),
                tflops_per_chip=_number(s.get("tflops_per_chip")),
                tokens_per_chip=_number(s.get("tokens_per_chip")),
                loss=_number(s.get("loss")),
            )
            for s in steps
        ),
    )


# ------------------------------------------------------------------ a record from an analysed run


def model_name(a: Analysis, model: str | None) -> str:
    """The journal a run belongs to: ``--model``, else MaxText's ``model_name`` (not ``default``: that names no model)."""
    name = model if model is not None else a.log.config.get("model_name")
    if name is None or name == "default":
        raise FieldError("--model", f"the run's log names no MaxText model (model_name {name or 'absent'})", "pass --model NAME (e.g. the recipe's name)")
    name = name.strip().lower()
    if not _MODEL.fullmatch(name):
        raise FieldError("--model", f"{name[:60]!r} is not a journal name", "use lowercase letters, digits, '-', '_' and '.', 63 at most")
    return name


def record(a: Analysis, *, date: str, versions: Mapping[str, str], notes: str = "") -> Record:
    """The journal record of an analysed run (``workloads.observe.analysis.analyse``): its steady state and every step."""
    from workloads.observe.metrics import is_fp8
    from workloads.observe.report import steady_range

    s, hw = a.summary, a.hardware
    if not s.steady_steps:
        raise FieldError("RUN", f"{a.run} has no steady-state step (it logged {s.steps_seen})", "journal a run that trained past its first steps")
    per = hw.devices_per_chip if hw else None
    config = " ".join(f"{k}={a.log.config[k]}" for k in CONFIG_KEYS if k in a.log.config)
    rows = tuple(
        StepRow(
            step=st.step,
            seconds=st.seconds,
            tflops_per_device=st.tflops_per_device,
            tflops_per_chip=st.tflops_per_device * per if per and st.tflops_per_device is not None else None,
            tokens_per_chip=st.tokens_per_device * per if per and st.tokens_per_device is not None else None,
            loss=st.loss,
        )
        for st in a.log.steps[:MAX_STEPS_PER_RECORD]
    )
    return Record(
        run=a.run,
        date=date,
        hardware=_hardware(a),
        config=config,
        precision="fp8" if is_fp8(a.log.config) else "bf16",
        steady_steps=steady_range(s.steady_steps),
        step_seconds=s.step_seconds_mean,
        tflops_per_device=s.tflops_per_device,
        tflops_per_chip=s.tflops_per_chip,
        tokens_per_chip=s.tokens_per_chip,
        mfu=s.mfu,
        loss_first=s.loss_first,
        loss_final=s.loss_last,
        versions=dict(versions),
        notes=notes,
        steps=rows,
    )


def _hardware(a: Analysis) -> str:
    hw = a.hardware
    if hw is None:
        return "unknown (pass --pool or --shape)"
    slices = f" x {hw.chips // _chips_of(hw.name)}" if hw.chips and _chips_of(hw.name) else ""
    return f"{hw.name}{slices}"


def _chips_of(accelerator_type: str) -> int | None:
    from infra import catalog
    from toolkit.errors import CatalogError

    try:
        return catalog.accelerator_type(accelerator_type).chips
    except CatalogError:
        return None


def versions_of(a: Analysis, *, image: str | None, launcher: str) -> dict[str, str]:
    """What the run ran: MaxText (its image), JAX and jaxlib (as the log says), libtpu (the log's line, when MaxText printed one), the launcher."""
    out = {"maxtext": image or "(image unknown)"}
    for key in ("jax_version", "jaxlib_version"):
        if key in a.log.system:
            out[key.removesuffix("_version")] = a.log.system[key]
    out["libtpu"] = a.log.config.get("libtpu_version", "(not in the log)")
    out["launcher"] = launcher
    return out


# ------------------------------------------------------------------ the tables


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _cell(text: str) -> str:
    """A Markdown table cell: no pipe or newline can break the table."""
    return " ".join(text.split()).replace("|", "\\|")


def render(j: Journal) -> str:
    """The journal as a README: model facts and versions, the runs table, each run's per-step table."""
    latest = j.records[-1].versions if j.records else {}
    lines = [f"# {j.model} training journal", "", "## Model", "", "| item | value |", "|---|---|", f"| model | {_cell(j.model)} |"]
    for key, label in (("maxtext", "MaxText"), ("jax", "JAX"), ("jaxlib", "jaxlib"), ("libtpu", "libtpu"), ("launcher", "launcher")):
        if key in latest:
            lines.append(f"| {label} (latest run) | {_cell(latest[key])} |")
    lines += [
        "",
        "## Runs",
        "",
        "| date | run | hardware | config | precision | step time (s) | TFLOP/s/device | TFLOP/s/chip | tokens/s/chip | MFU | loss (final) | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in j.records:
        mfu = "–" if r.mfu is None else f"{100 * r.mfu:.1f}%"
        lines.append(
            f"| {r.date} | {_cell(r.run)} | {_cell(r.hardware)} | {_cell(r.config) or '–'} | {r.precision} | {_f(r.step_seconds, 3)} | "
            f"{_f(r.tflops_per_device, 1)} | {_f(r.tflops_per_chip, 1)} | {_f(r.tokens_per_chip, 1)} | {mfu} | {_f(r.loss_final, 3)} | {_cell(r.notes)} |"
        )
    for r in j.records:
        lines += ["", f"### {r.run}: {_cell(r.hardware)} ({r.date})", ""]
        if r.versions:
            order = [k for k in VERSION_KEYS if k in r.versions] + sorted(k for k in r.versions if k not in VERSION_KEYS)
            lines += ["Versions: " + ", ".join(f"{k} {_cell(r.versions[k])}" for k in order), ""]
        lines += ["| step | seconds | TFLOP/s/device | TFLOP/s/chip | tokens/s/chip | loss |", "|---|---|---|---|---|---|"]
        for s in r.steps:
            lines.append(
                f"| {s.step} | {_f(s.seconds, 3)} | {_f(s.tflops_per_device, 1)} | {_f(s.tflops_per_chip, 1)} | {_f(s.tokens_per_chip, 1)} | {_f(s.loss, 3)} |"
            )
        drop = r.loss_drop_pct
        lines += [
            "",
            f"- **Steady state (steps {r.steady_steps})**: {_f(r.step_seconds, 3)} s/step, {_f(r.tflops_per_chip, 1)} TFLOP/s/chip, {_f(r.tokens_per_chip, 1)} tokens/s/chip",
            f"- **Loss**: {_f(r.loss_first, 3)} → {_f(r.loss_final, 3)}" + (f" ({drop:.1f}% lower)" if drop is not None else ""),
        ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ Cloud Storage


def object_name(model: str) -> str:
    return f"{PREFIX}/{model}.json"


def read(client: Any, bucket: str, model: str) -> tuple[Journal, int]:
    """The model's journal and its generation (an empty journal and 0 when there is none yet)."""
    from workloads.observe.storage import StorageError, storage_call

    name = object_name(model)
    where = f"gs://{bucket}/{name}"

    def get() -> tuple[bytes, int] | None:
        blob = client.bucket(bucket).get_blob(name)
        if blob is None:
            return None
        if blob.size is not None and blob.size > MAX_BYTES:
            raise StorageError(f"{where} is {blob.size} bytes, more than a journal holds ({MAX_BYTES}) — move it aside or journal under another --model")
        # The generation read is the one written against: download exactly it.
        generation = int(blob.generation)
        data = blob.download_as_bytes(if_generation_match=generation)
        return data[: MAX_BYTES + 1], generation

    got = storage_call(f"read the journal {where}", bucket, get)
    if got is None:
        return Journal(model), 0
    data, generation = got
    if len(data) > MAX_BYTES:
        raise StorageError(f"{where} is larger than a journal holds ({MAX_BYTES} bytes) — move it aside or journal under another --model")
    journal = Journal.from_json(data.decode("utf-8", errors="strict"), where)
    if journal.model != model:
        raise FieldError("--model", f"{where} holds the journal of {journal.model!r}", "move it aside or journal under another --model")
    return journal, generation


def write(client: Any, bucket: str, journal: Journal, generation: int) -> str:
    """Write ``journal`` over the version read (``generation``; 0: create it); refused with ``JournalConflict`` if another writer got there first."""
    from google.api_core import exceptions as gexc

    from workloads.observe.storage import storage_call

    name = object_name(journal.model)
    where = f"gs://{bucket}/{name}"

    def put() -> None:
        try:
            client.bucket(bucket).blob(name).upload_from_string(journal.to_json(), content_type="application/json", if_generation_match=generation)
        except gexc.PreconditionFailed:
            state = "was created" if generation == 0 else f"changed (the version read was generation {generation})"
            raise JournalConflict(
                "--model",
                f"the journal {where} {state} while this run's record was added, and a journal is never overwritten",
                "run the command again: it appends to the new version",
            ) from None

    storage_call(f"write the journal {where}", bucket, put)
    return where
