"""Run a recipe's rendered MaxText command on this machine's CPU, shrunk to a tiny model.

The command is the RunPlan's — the module, config file, every argument and env var the
JobSet would run — with the local substitutions of ``workloads.maxtext.env`` and these
tiny-run overrides (replacing the plan's value in place, or appended):

- a tiny model (``TINY_MODEL``: emb 64, 4 heads, 2 layers, vocab 256, seq 64, per-device
  batch 2, dot-product attention): it trains in ~20 s on 2 cores, at ~1 GB peak RSS;
- ``override_model_config=true`` for preset models (MaxText refuses to change a preset's
  dimensions otherwise);
- ``dataset_type=synthetic``: no data; ``metrics_file=<out>/metrics.jsonl`` on.
- checkpointing as the plan has it (on for training recipes: async saves, the plan's
  retention and autocheckpoint), into a local directory instead of the bucket
  (``base_output_directory=<checkpoint dir>``), every ``max(1, steps // 3)`` steps
  unless ``--set checkpoint_period=N`` asked otherwise: the plan's period is sized for
  TPU step times and would span the whole tiny run. The same run name and directory
  resume from the latest saved step, exactly as a restarted JobSet does (MaxText logs
  "restoring from this run's directory step N"; ``LocalRun.restored_step``).
- ``skip_jax_distributed_system=true``: with checkpointing on, MaxText calls
  ``jax.distributed.initialize()``, which needs a TPU's (or a cluster's) coordinator;
  one CPU process has none. JAX's preemption sync point then answers "not preempted".

The ICI mesh stays the plan's: XLA is told to expose as many CPU devices as one slice
has (``--xla_force_host_platform_device_count``), so ``ici_*_parallelism`` runs
unchanged. Always one slice: CPU devices carry no slice index, so a DCN mesh cannot be
built on CPU (the AOT preflight is what exercises multislice).

Output goes through the same parser, summary and report code as a cluster run
(``workloads.observe.metrics``, ``workloads.observe.report``).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit.digits import is_decimal
from toolkit.errors import ExternalToolError, SpecError, ToolkitError
from toolkit.tools import last_line
from workloads.maxtext import env as maxtext_env
from workloads.planning.model import RunPlan

TINY_MODEL: dict[str, str] = {
    "base_emb_dim": "64",
    "base_num_query_heads": "4",
    "base_num_kv_heads": "4",
    "base_mlp_dim": "128",
    "base_num_decoder_layers": "2",
    "head_dim": "16",
    "vocab_size": "256",
    "max_target_length": "64",
    "per_device_batch_size": "2",
    "attention": "dot_product",
}
TINY_RUN: dict[str, str] = {"dataset_type": "synthetic", "skip_jax_distributed_system": "true"}
LOG_NAME = "maxtext.log"
METRICS_NAME = "metrics.jsonl"
COMMAND_NAME = "command.txt"
CHECKPOINTS_NAME = "checkpoints"  # default checkpoint directory, under --out

# MaxText 0.2.5 (maxtext/common/checkpointing.py) when it resumes, and Orbax when the load is done.
RESTORE_LINE = re.compile(r"restoring from this run's directory step (\d+)", re.ASCII)
RESTORE_START = "checkpoint manager exists so trying to load this run's existing checkpoint"
RESTORE_DONE = re.compile(r"Finished load in [0-9.]+ seconds")
_ABSL_TIME = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ", re.ASCII)


class LocalRunError(ExternalToolError):
    """The local MaxText run failed; the message has its last error line and where the log is."""


@dataclass(frozen=True)
class LocalRun:
    plan: RunPlan
    argv: tuple[str, ...]
    env: dict[str, str]
    out_dir: Path
    log_path: Path
    metrics_path: Path
    seconds: float
    peak_rss_bytes: int
    checkpoint_dir: Path | None = None  # base_output_directory; MaxText saves in <it>/<run name>/checkpoints/
    restored_step: int | None = None  # the step MaxText resumed from (None: it started at step 0)
    restore_seconds: float | None = None  # MaxText's "trying to load" line to Orbax's "Finished load"

    @property
    def first_step(self) -> int:
        return 0 if self.restored_step is None else self.restored_step + 1


def tiny_period(steps: int) -> int:
    """Checkpoint period of a tiny run: a few saves within it, so a kill mid-run loses little."""
    return max(1, steps // 3)


def checkpoint_overrides(plan: RunPlan, checkpoint_dir: Path | None, period: int | None = None) -> dict[str, str]:
    """The plan's checkpointing, into ``checkpoint_dir``, every ``period`` steps (default ``tiny_period``)."""
    c = plan.policy.checkpoint
    if c is None or checkpoint_dir is None:
        return {"enable_checkpointing": "false"}
    args = c.maxtext_args()
    args["checkpoint_period"] = str(period or tiny_period(plan.program.steps))
    return {"base_output_directory": str(checkpoint_dir), **args}


@dataclass(frozen=True)
class LocalData:
    """A dataset the tiny run reads: its flags (pointing under a local mount) and the tokenizer's id count."""

    args: dict[str, str]
    vocab_size: int


def tiny_overrides(
    plan: RunPlan, metrics_path: Path, checkpoint_dir: Path | None = None, period: int | None = None, data: LocalData | None = None
) -> dict[str, str]:
    extra = dict(TINY_MODEL)
    model_name = next((a.split("=", 1)[1] for a in plan.program.args if a.startswith("model_name=")), "default")
    if model_name != "default":
        extra["override_model_config"] = "true"
    extra.update(TINY_RUN)
    if data is not None:
        # Real tokens: the tiny model's embedding must hold every id the tokenizer makes.
        extra.update(data.args)
        extra["vocab_size"] = str(data.vocab_size)
    extra.update(checkpoint_overrides(plan, checkpoint_dir, period))
    extra["metrics_file"] = str(metrics_path)
    return extra


@dataclass(frozen=True)
class Checked:
    """What ``check`` made of a run-local request before MaxText starts."""

    period: int | None  # the checkpoint period --set asked for; None: tiny_period
    run_dir: Path | None  # <checkpoint dir>/<run name>: the run's own directory, claimed before MaxText restores from it; None: no checkpoints


def check(plan: RunPlan, out: Path, *, checkpoint_dir: Path | None, resume: bool, sets: tuple[str, ...] = (), reserved: tuple[str, ...] = ()) -> Checked:
    """Everything about a tiny run of ``plan`` that can be refused before minutes of MaxText, in the order it is said:
    a plan that runs no MaxText, an ``out`` (or ``checkpoint_dir``) that is not a directory to write into, a file of the
    user's under one of its outputs' names (``OUTPUTS`` and the ``reserved`` report files), ``resume`` with no checkpoints."""
    from toolkit.clikit import check_out_dir

    if not plan.program.is_maxtext:
        raise SpecError("RECIPE", f"recipe {plan.program.recipe} runs a plain command, not MaxText", "pick a MaxText recipe (python -m workloads recipes)")
    check_out_dir(out, "--out")
    check_outputs(out, (*OUTPUTS, *reserved))
    if checkpoint_dir is not None:
        check_out_dir(checkpoint_dir, "--checkpoint-dir")
    c = plan.policy.checkpoint
    # A --set checkpoint_period is kept; otherwise the tiny run saves a few times (tiny_period).
    period = c.period_steps if c and any(s.startswith("checkpoint_period=") for s in sets) else None
    if resume and c is None:
        raise SpecError("--resume", f"run {plan.name} saves no checkpoints, so there is nothing to resume", "drop --resume")
    run_dir = run_checkpoints(Path(checkpoint_dir or Path(out) / CHECKPOINTS_NAME).resolve(), plan.name).parent if c is not None else None
    return Checked(period, run_dir)


def run_checkpoints(checkpoint_dir: Path, run_name: str) -> Path:
    """Where MaxText keeps a run's steps (one directory per committed step)."""
    return Path(checkpoint_dir) / run_name / "checkpoints"


def saved_steps(checkpoint_dir: Path, run_name: str) -> list[int]:
    """Committed steps (Orbax writes a temporary directory and renames it when the save is done)."""
    root = run_checkpoints(checkpoint_dir, run_name)
    return sorted(int(p.name) for p in root.iterdir() if is_decimal(p.name)) if root.is_dir() else []


def _absl_seconds(line: str) -> float | None:
    m = _ABSL_TIME.match(line)
    return int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3]) if m else None


def restore_facts(log: str) -> tuple[int | None, float | None]:
    """(restored step, seconds restoring) from a MaxText log; (None, None) for a fresh start."""
    step = start = None
    for line in log.splitlines():
        if RESTORE_START in line:
            start = _absl_seconds(line)
        m = RESTORE_LINE.search(line)
        if m:
            step = int(m[1])
        elif step is not None and RESTORE_DONE.search(line):
            end = _absl_seconds(line)
            if start is None or end is None:
                return step, None
            return step, round((end - start) % 86400, 3)
    return step, None


def command(
    plan: RunPlan,
    venv: Path,
    workdir: Path,
    out_dir: Path,
    checkpoint_dir: Path | None = None,
    period: int | None = None,
    *,
    metrics_path: Path | None = None,
    data: LocalData | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the tiny local run of ``plan``; checkpoints go to ``checkpoint_dir`` (None: off), metrics to
    ``metrics_path`` (default ``<out_dir>/metrics.jsonl``)."""
    program, target = plan.program, plan.target
    if not program.is_maxtext:
        raise ToolkitError(f"recipe {program.recipe} runs a plain command, not MaxText — run-local --tiny needs a MaxText recipe")
    if target.slices != 1:
        raise ToolkitError(f"run-local: {target.slices} slices asked for; a CPU run has one slice — drop --slices (preflight --compile checks multislice)")
    assert program.command[:2] == ("python3", "-m"), program.command  # the planner renders MaxText as a module run
    args = maxtext_env.local_args(program.args, workdir, tiny_overrides(plan, metrics_path or out_dir / METRICS_NAME, checkpoint_dir, period, data))
    env = maxtext_env.local_env(program.env, {"XLA_FLAGS": f"--xla_force_host_platform_device_count={target.shape.devices}", **(extra_env or {})})
    # The plan's interpreter is the image's python3; here it is the MaxText venv's.
    return [str(maxtext_env.python(venv)), *program.command[1:], *args], env


OUTPUTS = (COMMAND_NAME, LOG_NAME, "maxtext.stdout", METRICS_NAME)  # what a run writes into --out


def check_outputs(out_dir: Path, names: tuple[str, ...] = OUTPUTS) -> None:
    """Refuse, before the run, an --out where a file of these names is not the toolkit's (``toolkit.owned``)."""
    from toolkit import owned

    owned.check_update(owned.check_root(Path(out_dir), "--out"), dict.fromkeys(names, b""), "--out")


def _write_outputs(out_dir: Path, files: dict[str, bytes]) -> None:
    from toolkit import owned

    with owned.locked(out_dir, "--out"):
        owned.update_files(out_dir, "", files, "--out")


def run_tiny(
    plan: RunPlan,
    venv: Path,
    out_dir: Path,
    *,
    timeout: float = 900,
    keep_workdir: bool = False,
    checkpoint_dir: Path | None = None,
    checkpoint_period: int | None = None,
    data: LocalData | None = None,
) -> LocalRun:
    """Run it; with checkpointing on (the plan's), ``checkpoint_dir`` defaults to ``<out>/checkpoints``.

    MaxText writes into a scratch directory; its log, metrics file and the command land in
    ``out_dir`` afterwards, replacing only files an earlier run wrote there (``toolkit.owned``):
    a file of the user's under one of those names is refused before MaxText starts.
    """
    out_dir = Path(out_dir).resolve()
    check_outputs(out_dir)
    if plan.policy.checkpoint is not None:
        checkpoint_dir = Path(checkpoint_dir or out_dir / CHECKPOINTS_NAME).resolve()
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    else:
        checkpoint_dir = None
    workdir = Path(tempfile.mkdtemp(prefix="tgk-run-local-"))
    try:
        # MaxText appends to the metrics file (truncating only at step 0): a fresh file per run
        # holds the run's own steps, as its log does.
        scratch_metrics = workdir / METRICS_NAME
        # A pip-installed MaxText looks for its bundled tokenizers under a repository checkout; point it at the package's.
        assets = {"MAXTEXT_ASSETS_ROOT": str(maxtext_env.assets_root(venv))} if data is not None else None
        argv, env = command(plan, venv, workdir, out_dir, checkpoint_dir, checkpoint_period, metrics_path=scratch_metrics, data=data, extra_env=assets)
        cmd = "".join(f"{k}={v}\n" for k, v in sorted(env.items()) if k not in maxtext_env.INHERITED_ENV) + " ".join(argv) + "\n"
        done = maxtext_env.run(argv, env, workdir, "train", timeout=timeout)
        log_path = out_dir / LOG_NAME
        metrics_path = out_dir / METRICS_NAME
        # MaxText's per-step lines go to stderr (absl); stdout holds the rest.
        outputs = {COMMAND_NAME: cmd.encode(), LOG_NAME: done.stderr_path.read_bytes(), "maxtext.stdout": done.stdout_path.read_bytes()}
        if scratch_metrics.exists():
            outputs[METRICS_NAME] = scratch_metrics.read_bytes()
        _write_outputs(out_dir, outputs)
        if done.timed_out:
            raise LocalRunError(f"local MaxText run timed out after {timeout:g} s — log: {log_path}")
        if done.returncode != 0:
            raise LocalRunError(f"local MaxText run exited {done.returncode}: {last_error(done.stderr_text())} — log: {log_path}")
        if METRICS_NAME not in outputs:
            raise LocalRunError(f"MaxText finished but wrote no metrics file {metrics_path} — log: {log_path}")
        restored, restore_s = restore_facts(log_path.read_text(errors="replace"))
        return LocalRun(
            plan,
            tuple(argv),
            env,
            out_dir,
            log_path,
            metrics_path,
            done.seconds,
            done.peak_rss_bytes,
            checkpoint_dir=checkpoint_dir,
            restored_step=restored,
            restore_seconds=restore_s,
        )
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def last_error(stderr: str) -> str:
    """The line of a MaxText/Python failure worth showing: its config error or final
    exception, else the last line (``toolkit.tools.last_line``, as for any tool)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "MAXTEXT CONFIG ERROR" in ln:
            return ln[ln.index("MAXTEXT CONFIG ERROR") :]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Oom")) and " " not in head:
            return ln[:500]
    return last_line(stderr) or "no output"
