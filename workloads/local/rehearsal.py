"""Rehearsal runs: on the local cluster a run's pods run for a simulated time and print MaxText's log.

Pure: a RunPlan in, pod-template decorations and log lines out. On real GKE nothing here
is used: the run service calls ``decorate`` (through ``runhooks``) only when the cluster's
kubeconfig context is the local cluster's (``workloads.local.CONTEXT``), so the rendered
manifests stay what GKE gets.

How long a rehearsal runs (``rehearsal_seconds``): ``submit --rehearse-seconds N`` sets it;
otherwise it is the plan's estimated run time (``plan.program.estimated_run_seconds``:
steps x the planner's step time) x ``time_factor()`` (default ``DEFAULT_TIME_FACTOR``,
``$TGK_REHEARSAL_TIME_FACTOR`` overrides it), capped at ``MAX_SECONDS``; a plain command
(no step estimate) runs ``COMMAND_SECONDS``. Every step takes the same wall time, the
rehearsal time over the steps.

What ``decorate`` adds to the pod template: the ``REHEARSAL_LABEL`` (kwok's plain
complete stage leaves these pods alone) and the ``Rehearsal`` facts as JSON in the
annotation of the same name. The rehearsal daemon (``rehearsald``) reads them back: it
starts the clock when every worker of the run is Running (a JAX program starts when all
its processes have joined), writes each worker's log step by step on that clock, and
writes the finish time on the pods, at which kwok makes them Succeeded.

The log (``MaxTextLog``) has what MaxText 0.2.5 prints and ``workloads.observe.metrics``
parses: absl-prefixed lines, the ``Config param`` lines, ``Num_devices``, the checkpoint
manager's restore (or no-restore) line, one ``completed step:`` line per step with the
plan's step time (the first step of an attempt carries the compilation), TFLOP/s and
tokens/s per device consistent with it (the planner's peak x assumed MFU), and
checkpoint saves every ``checkpoint_period`` steps, at a preemption (autocheckpoint) and
at the end. With ``gcs_metrics=true``, worker 0 also writes MaxText's metrics files to the
run's bucket (``metrics_record``, ``metrics_file_name``). The timestamps are the
rehearsal's clock; the step times are the plan's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shlex
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra import recovery
from toolkit.errors import FieldError
from workloads.local.addons import PATHWAYS_ANNOTATION, RAY_JOB_SECONDS_ANNOTATION, REHEARSAL_ANNOTATION, REHEARSAL_LABEL
from workloads.planning.defaults import MAX_REHEARSAL_S
from workloads.render.exitguard import SIGTERM_EXIT_CODE

if TYPE_CHECKING:
    from workloads.planning.model import RunPlan

TIME_FACTOR_ENV = "TGK_REHEARSAL_TIME_FACTOR"
# maxtext-6b on the default spec: 100 steps x 6.5 s = 650 s of TPU time -> ~20 s here.
DEFAULT_TIME_FACTOR = 0.03
MAX_SECONDS = 600.0  # however long the plan, a rehearsal stays a rehearsal
COMMAND_SECONDS = 5.0  # a plain command: nothing to estimate its time from
DEFAULT_SEQ = 2048  # MaxText's max_target_length when neither the recipe nor --set gives it
COMPILE_FACTOR = 3.0  # the first step of an attempt includes XLA compilation
WARMUP_FACTOR = 1.2  # ... and the second is still a little slow
JITTER = 0.015  # steady steps vary by up to +-1.5 % around the plan's step time


def time_factor() -> float:
    """The rehearsal time factor: ``$TGK_REHEARSAL_TIME_FACTOR`` if set (a positive number), else the default."""
    raw = os.environ.get(TIME_FACTOR_ENV, "").strip()
    if not raw:
        return DEFAULT_TIME_FACTOR
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise FieldError(TIME_FACTOR_ENV, f"{raw[:40]!r} is not a positive number", f"unset it or set e.g. {TIME_FACTOR_ENV}={DEFAULT_TIME_FACTOR}")
    return value  # however large, rehearsal_seconds caps the result at MAX_SECONDS


def rehearsal_seconds(plan: RunPlan, seconds: float | None = None, factor: float | None = None) -> float:
    """How long the run takes on the local cluster (see the module docstring)."""
    if seconds is not None:
        if not math.isfinite(seconds) or seconds < 0:
            raise FieldError("--rehearse-seconds", f"{seconds:g} is not a duration", "pass 0 or more seconds")
        if seconds > MAX_REHEARSAL_S:
            raise FieldError("--rehearse-seconds", f"{seconds:g} is above {MAX_REHEARSAL_S:g} (a day)", f"pass at most {MAX_REHEARSAL_S:g}")
        return float(seconds)
    estimated = plan.program.estimated_run_seconds
    if estimated is None:
        return COMMAND_SECONDS
    return min(MAX_SECONDS, estimated * (time_factor() if factor is None else factor))


@dataclass(frozen=True)
class Rehearsal:
    """What the rehearsal daemon needs to play a run: the plan's facts, as one annotation."""

    run: str
    kind: str  # "maxtext" or "command"
    workers: int  # pods of the whole run (every slice)
    steps: int
    wall_seconds: float  # the whole run on the local cluster
    step_seconds: float | None = None  # the plan's step time (what the log reports)
    checkpoint_period: int | None = None  # steps between saves; None: no checkpoints
    async_checkpoint: bool = True
    autocheckpoint: bool = False  # also save at a preemption (SIGTERM)
    tflops_per_device: float | None = None  # steady state, at the plan's step time
    tokens_per_step: int | None = None  # global batch x sequence length (MaxText's total_weights)
    devices: int = 0
    params: int | None = None
    config: tuple[tuple[str, str], ...] = ()  # MaxText's `key=value` args, logged as Config param lines
    command: str = ""  # a plain command, shown in its log
    # gs://<bucket>/<run>/checkpoints/ or /checkpoints/<ns>/<run>/checkpoints/ (Lustre): where saves go and a
    # (re)start restores from, as MaxText does
    checkpoint_dir: str = ""
    save_seconds: float = 0.0  # an async save's time to be complete in the bucket (infra.recovery.SAVE, scaled)
    # Multi-tier checkpointing (None: off): RAM-disk saves every ``mtc_local_period`` steps on every
    # slice's VMs, backups to the bucket every ``mtc_backup_period`` steps; a restart restores from a
    # surviving slice's RAM disk in ``restore_peer_seconds``, else from the bucket in ``restore_bucket_seconds``.
    mtc_local_period: int | None = None
    mtc_backup_period: int | None = None
    restore_peer_seconds: float = 0.0
    restore_bucket_seconds: float = 0.0
    output_dir: str = ""  # gs://<bucket>/<run>/: the run's own directory in a bucket (directly, or under a GCS FUSE mount); "" on Lustre

    @property
    def wall_step_seconds(self) -> float:
        return self.wall_seconds / max(1, self.steps)

    def to_annotation(self) -> str:
        d = asdict(self)
        d["config"] = [list(kv) for kv in self.config]
        return json.dumps({k: v for k, v in d.items() if v not in (None, "", [], ())}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_annotation(cls, text: str) -> Rehearsal:
        d = json.loads(text)
        d["config"] = tuple((str(k), str(v)) for k, v in d.get("config") or ())
        return cls(**d)

    @classmethod
    def of(cls, plan: RunPlan, wall_seconds: float) -> Rehearsal:
        p, t, c = plan.program, plan.target, plan.policy.checkpoint
        common = dict(run=plan.name, workers=t.nodes, wall_seconds=round(wall_seconds, 3), devices=t.devices)
        if not p.is_maxtext or p.estimated_step_seconds is None:
            return cls(kind="command", steps=1, command=shlex.join(p.command + p.args), **common)
        config = tuple(tuple(a.split("=", 1)) for a in p.args if "=" in a)
        seq = int(dict(config).get("max_target_length", DEFAULT_SEQ))
        sizing = p.sizing
        factor = wall_seconds / max(1e-9, p.steps * p.estimated_step_seconds)  # the rehearsal's time factor for this run
        period_wall = (c.period_steps if c else p.steps) * p.estimated_step_seconds * factor
        m = plan.policy.multi_tier
        mtc = {}
        if m is not None:
            mtc = dict(
                mtc_local_period=m.local_period_steps,
                mtc_backup_period=max(1, math.floor(m.backup_minutes * 60 / p.estimated_step_seconds)),
                restore_peer_seconds=round(recovery.RESTORE["peer-ramdisk"].seconds * factor, 3),
                restore_bucket_seconds=round(recovery.RESTORE["bucket"].seconds * factor, 3),
            )
        return cls(
            kind="maxtext",
            steps=p.steps,
            step_seconds=p.estimated_step_seconds,
            checkpoint_period=c.period_steps if c else None,
            async_checkpoint=c.async_save if c else True,
            autocheckpoint=c.autocheckpoint if c else False,
            tflops_per_device=t.shape.peak_tflops_per_device * (p.estimated_mfu or 0.0),
            tokens_per_step=sizing.global_batch_size * seq if sizing else None,
            params=sizing.params if sizing else None,
            config=config,  # type: ignore[arg-type]
            checkpoint_dir=_checkpoint_dir(plan) if c else "",
            # Never longer than half the time between saves: a save completes before the next begins.
            save_seconds=round(min(recovery.SAVE.seconds * factor, period_wall / 2), 3) if c else 0.0,
            **mtc,
            output_dir=p.output_dir or "",
            **common,
        )


def _checkpoint_dir(plan: RunPlan) -> str:
    """Where MaxText saves: the run's bucket directory, or the in-pod path on the team's Lustre claim (the daemon resolves its mount)."""
    st = plan.policy.checkpoint_storage
    if st is not None and st.kind == "lustre":
        return f"{st.base_output}/{plan.name}/checkpoints/"
    return f"{plan.program.output_dir}checkpoints/" if plan.program.output_dir else ""


def decorate(objects: list[dict[str, Any]], plan: RunPlan, *, seconds: float | None = None) -> list[dict[str, Any]]:
    """The run's objects with its pods made rehearsal pods (label + annotation); the input is left as it is."""
    wall = rehearsal_seconds(plan, seconds)
    facts = Rehearsal.of(plan, wall)
    out = copy.deepcopy(objects)
    for template in (t for obj in out for t in _worker_templates(obj)):
        meta = template.setdefault("metadata", {})
        meta.setdefault("labels", {})[REHEARSAL_LABEL] = "true"
        meta.setdefault("annotations", {})[REHEARSAL_ANNOTATION] = facts.to_annotation()
        if plan.runtime == "pathways":  # its head and workers are played together (workloads/local/pathways_rehearsal.py)
            meta["annotations"][PATHWAYS_ANNOTATION] = str(plan.policy.elastic.slices if plan.policy.elastic else 0)
    for obj in out:
        # KubeRay keeps a RayJob's pods up while its Ray job runs: the stand-in job's
        # length is the rehearsal time (workloads/local/kuberay.py reads it).
        if obj.get("kind") == "RayJob":
            obj["metadata"].setdefault("annotations", {})[RAY_JOB_SECONDS_ANNOTATION] = f"{wall:g}"
    return out


def _worker_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a run's TPU workers, whichever runtime rendered it."""
    if obj.get("kind") == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]]
    if obj.get("kind") == "Job":
        return [obj["spec"]["template"]]
    return []


def summary(plan: RunPlan, seconds: float | None = None) -> str:
    """One line for ``submit``: how long the rehearsal runs and where that comes from."""
    wall = rehearsal_seconds(plan, seconds)
    p = plan.program
    if seconds is not None:
        why = "--rehearse-seconds"
    elif p.estimated_run_seconds is None:
        why = "a plain command: no step-time estimate"
    else:
        why = f"{p.steps} steps x {p.estimated_step_seconds:.2f} s planned x time factor {time_factor():g}" + (
            f", capped at {MAX_SECONDS:g} s" if wall >= MAX_SECONDS else ""
        )
    from workloads.planning.model import RUNTIME_RAY

    if plan.runtime == RUNTIME_RAY:
        return f"rehearsal on the local cluster: the stand-in Ray job runs {wall:.1f} s ({why}) while the RayCluster's pods run"
    return f"rehearsal on the local cluster: every worker Running for {wall:.1f} s ({why}); MaxText-format logs via `logs`"


# ------------------------------------------------------------------ the clock


def finish_time(r: Rehearsal, t0: float, first_step: int) -> float:
    """When an attempt that started (every worker Running) at ``t0`` from ``first_step`` ends."""
    return t0 + max(0, r.steps - first_step) * r.wall_step_seconds


def steps_done_by(r: Rehearsal, t0: float, first_step: int, now: float) -> int:
    """The steps an attempt has completed by ``now``: ``first_step`` .. result-1."""
    if now < t0:
        return first_step
    done = first_step + int((now - t0) / r.wall_step_seconds + 1e-9) if r.wall_step_seconds > 0 else r.steps
    return min(r.steps, done)


def step_end(r: Rehearsal, t0: float, first_step: int, step: int) -> float:
    return t0 + (step - first_step + 1) * r.wall_step_seconds


# ------------------------------------------------------------------ the log


def _unit(*key: object) -> float:
    """A stable number in [0, 1) for ``key``: the same run and step always look the same."""
    digest = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def step_seconds(r: Rehearsal, step: int, first_step: int) -> float:
    base = r.step_seconds or 0.0
    if step == first_step:
        return base * COMPILE_FACTOR
    if step == first_step + 1:
        return base * WARMUP_FACTOR
    return base * (1 + JITTER * (2 * _unit(r.run, "t", step) - 1))


def loss(r: Rehearsal, step: int) -> float:
    """A training curve: fast early drop, flattening out, a little noise; the same for a step whatever the attempt."""
    scale = max(1.0, r.steps / 4)
    return 2.1 + 8.7 * math.exp(-step / scale) + 0.02 * (2 * _unit(r.run, "l", step) - 1)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%m%d %H:%M:%S.%f")


def _cri_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


@dataclass(frozen=True)
class MaxTextLog:
    """One worker's log, line by line, in the CRI file format kwok serves (``<time> stderr F <line>``)."""

    r: Rehearsal
    pod: str
    worker: int  # JAX process index over the whole run

    @property
    def _tid(self) -> int:
        return 139_000_000_000_000 + int(_unit(self.pod, "tid") * 1e12)

    def line(self, t: float, source: str, msg: str, level: str = "I") -> str:
        """An absl line (as MaxText's max_logging prints it), framed as one CRI log record (one line: no newline inside)."""
        msg = msg.replace("\r", "").replace("\n", "\\n")
        return f"{_cri_time(t)} stderr F {level}{_stamp(t)} {self._tid} {source}] {msg}\n"

    def start(self, t: float) -> list[str]:
        """What a worker prints from its start until every process has joined."""
        r = self.r
        if r.kind != "maxtext":
            return [self.line(t, "rehearsal.py:1", f"process {self.worker}/{r.workers}: rehearsal of: {r.command}")]
        out = [self.line(t, "max_utils.py:298", "Attempting to initialize the jax distributed system for TPU backend...")]
        out += [self.line(t, "pyconfig.py:591", f"Config param {k}: {v}") for k, v in sorted(r.config)]
        out += [
            self.line(t, "max_utils.py:835", "System Information: Jax Version: rehearsal"),
            self.line(t, "max_utils.py:837", "System Information: Jax Backend: tpu"),
        ]
        return out

    def joined(self, t: float, restored: int | None) -> list[str]:
        """Every process has joined: the mesh, the checkpoint manager, the restore (or not)."""
        r = self.r
        if r.kind != "maxtext":
            return []
        out = [self.line(t, "maxtext_utils.py:2098", f"Num_devices: {r.devices}, shape ({r.devices},)")]
        if r.checkpoint_period is None:
            out.append(self.line(t, "checkpointing.py:540", "Checkpointing disabled, not creating checkpoint manager."))
        else:
            out.append(self.line(t, "checkpointing.py:590", "Checkpoint manager created!"))
            out.append(self.line(t, "checkpointing.py:701", "checkpoint manager exists so trying to load this run's existing checkpoint"))
            if restored is None:
                out.append(self.line(t, "checkpointing.py:803", "No existing checkpoints found, not restoring checkpoint."))
            else:
                out.append(self.line(t, "checkpointing.py:705", f"restoring from this run's directory step {restored}"))
        if r.params:
            out.append(self.line(t, "metric_logger.py:425", f"number parameters: {r.params / 1e9:.3f} billion"))
        return out

    def figures(self, step: int, first_step: int) -> tuple[float, float, float, int, float]:
        """(seconds, TFLOP/s/device, tokens/s/device, total weights, loss) of ``step``: what its log line and its metrics record say."""
        r = self.r
        secs = step_seconds(r, step, first_step)
        tflops = (r.tflops_per_device or 0.0) * (r.step_seconds or 0.0) / secs if secs else 0.0
        weights = r.tokens_per_step or 0
        tokens = weights / max(1, r.devices) / secs if secs else 0.0
        return secs, tflops, tokens, weights, loss(r, step)

    def metrics_record(self, step: int, first_step: int) -> dict[str, Any]:
        """The step's record in MaxText's gcs_metrics files (``metric_logger``: scalars by name, the step as a float, the run name)."""
        secs, tflops, tokens, weights, lo = self.figures(step, first_step)
        return {
            "learning/loss": lo,
            "learning/total_weights": float(weights),
            "perf/step_time_seconds": secs,
            "perf/per_device_tflops_per_sec": tflops,
            "perf/per_device_tokens_per_sec": tokens,
            "step": float(step),
            "run_name": self.r.run,
        }

    def step(self, t: float, step: int, first_step: int) -> list[str]:
        """The ``completed step`` line of ``step`` (and a checkpoint save when one is due)."""
        r = self.r
        if r.kind != "maxtext":
            return [self.line(t, "rehearsal.py:2", f"process {self.worker}/{r.workers}: done")]
        secs, tflops, tokens, weights, lo = self.figures(step, first_step)
        out = [
            self.line(
                t,
                "metric_logger.py:265",
                f"completed step: {step}, seconds: {secs:.3f}, TFLOP/s/device: {tflops:.3f}, Tokens/s/device: {tokens:.3f}, "
                f"total_weights: {weights}, loss: {lo:.3f}, lm_loss: {lo:.3f}, perplexity: {math.exp(min(lo, 50)):.3f}",
            )
        ]
        if r.mtc_local_period and step % r.mtc_local_period == 0:
            out.append(self.line(t, "rehearsal.py:3", f"multi-tier checkpointing: step {step} saved to the RAM disk (replicated to a peer slice)"))
        if bucket_period(r) and step % bucket_period(r) == 0:
            out += self.save(t, step)
        return out

    def restored_from(self, t: float, step: int, source: str, seconds: float) -> list[str]:
        """A multi-tier run's restore: from a peer's RAM disk or from the bucket, and how long it took (the rehearsal's own line)."""
        where = "a surviving peer slice's RAM disk" if source == "peer-ramdisk" else "the Cloud Storage backup"
        return [self.line(t, "rehearsal.py:4", f"multi-tier checkpointing: restored step {step} from {where} in {seconds:.2f} s")]

    def save(self, t: float, step: int) -> list[str]:
        """MaxText's checkpoint save of ``step`` (print_save_message and the wait before it)."""
        done = f"Started an asynchronous checkpoint save for step {step}" if self.r.async_checkpoint else f"Saved a checkpoint at step {step}."
        return [
            self.line(t, "checkpointing.py:1310", f"Waiting for step {step} to finish before checkpoint..."),
            self.line(
                t,
                "checkpointing.py:1314",
                f"Waited 0.0{int(_unit(self.pod, step) * 900) + 100} seconds for step {step} to finish before starting checkpointing.",
            ),
            self.line(t, "checkpointing.py:596" if self.r.async_checkpoint else "checkpointing.py:598", done),
        ]

    def final_save_step(self) -> int | None:
        """The step MaxText force-saves after the last one (None: checkpoints off, or the period already saved it)."""
        r = self.r
        last = r.steps - 1
        period = bucket_period(r)
        if r.kind != "maxtext" or not period or last < 0 or last % period == 0:
            return None
        return last

    def preempted(self, t: float, last_done: int | None) -> list[str]:
        """SIGTERM: with autocheckpoint, MaxText saves the step it reached, then exits."""
        r = self.r
        if r.kind != "maxtext" or not r.checkpoint_period or not r.autocheckpoint or last_done is None:
            return []
        return self.save(t, last_done)


def gcs_metrics_dir(r: Rehearsal) -> str | None:
    """Where MaxText's gcs_metrics files go (``<base_output_directory>/<run_name>/metrics/``), None when the run writes none."""
    config = dict(r.config)
    if r.kind != "maxtext" or config.get("gcs_metrics", "").lower() != "true":
        return None
    base, name = config.get("base_output_directory", ""), config.get("run_name", r.run)
    return f"{base.rstrip('/')}/{name}/metrics/" if base.startswith("gs://") else None


def tensorboard_dir(r: Rehearsal) -> str | None:
    """Where process 0's TensorBoard event files go (``<output>/<run_name>/tensorboard/<run_name>/``, in the run's bucket whether
    MaxText writes there directly or through a GCS FUSE mount), None when it writes none or they are on Lustre."""
    if r.kind != "maxtext" or dict(r.config).get("enable_tensorboard", "true").lower() == "false" or not r.output_dir.startswith("gs://"):
        return None
    return f"{r.output_dir}tensorboard/{r.run}/"  # max_utils.initialize_summary_writer adds the run name


def log_period(r: Rehearsal) -> int:
    raw = dict(r.config).get("log_period", "100")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else 100


def metrics_file_name(r: Rehearsal, step: int) -> str | None:
    """MaxText's gcs_metrics file that the save after ``step`` writes (None: no upload after this step).

    Uploaded when ``(step + 1) % log_period == 0`` or at the last step, named for the period's
    first step to ``step``, holding the steps this process completed since its last upload:
    a restarted attempt's first file holds fewer steps, under the same name as a file an
    earlier attempt may have written (and replaces it), as MaxText's does.
    """
    period = log_period(r)
    if (step + 1) % period and step != r.steps - 1:
        return None
    start = (step // period) * period
    return f"metrics_step_{start:06}_to_step_{step:06}.txt"


def bucket_period(r: Rehearsal) -> int | None:
    """Steps between saves to the bucket: the checkpoint period, or multi-tier checkpointing's backup interval."""
    if r.kind != "maxtext" or not r.checkpoint_period:
        return None
    return r.mtc_backup_period or r.checkpoint_period


def saved_steps(r: Rehearsal, first_step: int, done: int) -> list[int]:
    """Steps an attempt saved to the bucket while completing ``first_step`` .. ``done``-1."""
    period = bucket_period(r)
    if not period:
        return []
    return [s for s in range(first_step, done) if s % period == 0]


def local_steps(r: Rehearsal, first_step: int, done: int) -> list[int]:
    """Steps a multi-tier run saved to its RAM disks while completing ``first_step`` .. ``done``-1."""
    if r.kind != "maxtext" or not r.mtc_local_period:
        return []
    return [s for s in range(first_step, done) if s % r.mtc_local_period == 0]


def pod_log_file(state_dir: Path, namespace: str, pod: str) -> Path:
    return state_dir / "pod-logs" / namespace / f"{pod}.log"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _phase(pod: dict[str, Any]) -> str:
    """pending | running | stopping (SIGTERM: deleted, disrupted, or stopped by it) | crashed | succeeded."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or [])
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed":
        codes = {((c.get("state") or {}).get("terminated") or {}).get("exitCode") for c in status.get("containerStatuses") or []}
        return "stopping" if disrupted or SIGTERM_EXIT_CODE in codes else "crashed"
    if phase == "Running":
        return "stopping" if disrupted or pod["metadata"].get("deletionTimestamp") else "running"
    return "pending"
