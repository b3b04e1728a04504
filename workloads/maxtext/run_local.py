"""Run a recipe's rendered MaxText command on this machine's CPU, shrunk to a tiny model.

The command is the RunPlan's — the module, config file, every argument and env var the
JobSet would run — with the local substitutions of ``workloads.maxtext.env`` and these
tiny-run overrides (replacing the plan's value in place, or appended):

- a tiny model (``TINY_MODEL``: emb 64, 4 heads, 2 layers, vocab 256, seq 64, per-device
  batch 2, dot-product attention): it trains in ~20 s on 2 cores, at ~1 GB peak RSS;
- ``override_model_config=true`` for preset models (MaxText refuses to change a preset's
  dimensions otherwise);
- ``dataset_type=synthetic``: no data (with ``--dataset``, its Grain flags, and the tokenizer's
  id count rounded up to ``VOCAB_MULTIPLE`` as the vocabulary: ``tiny_vocab``);
  ``metrics_file=<out>/metrics.jsonl`` on.
- ``--load-parameters DIR``: ``load_parameters_path`` is a checkpoint directory on this
  machine (a run's is a bucket path), checked first to hold the *tiny* model's parameters in
  the plan's layout (``check_parameters``): what ``convert --local --tiny`` writes.
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
from workloads.planning import checkpoint_shapes as shapes
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


VOCAB_MULTIPLE = 128  # a dataset run's tiny vocabulary is rounded up to this (see ``tiny_vocab``)


def tiny_vocab(token_ids: int) -> int:
    """The tiny model's vocabulary for a tokenizer of ``token_ids`` ids: every id, rounded up to ``VOCAB_MULTIPLE``.

    The plan's mesh splits the embedding's vocabulary axis over its tensor axis (MaxText's
    logical rules), which must divide it; 128 is a multiple of every degree a slice has, as
    the published vocabularies are (Llama 3's 128256, Gemma's 256000).
    """
    return -(-token_ids // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


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
        extra["vocab_size"] = str(tiny_vocab(data.vocab_size))
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
    parameters: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the tiny local run of ``plan``; checkpoints go to ``checkpoint_dir`` (None: off), metrics to
    ``metrics_path`` (default ``<out_dir>/metrics.jsonl``)."""
    program, target = plan.program, plan.target
    if not program.is_maxtext:
        raise ToolkitError(f"recipe {program.recipe} runs a plain command, not MaxText — run-local --tiny needs a MaxText recipe")
    if target.slices != 1:
        raise ToolkitError(f"run-local: {target.slices} slices asked for; a CPU run has one slice — drop --slices (preflight --compile checks multislice)")
    assert program.command[:2] == ("python3", "-m"), program.command  # the planner renders MaxText as a module run
    extra = tiny_overrides(plan, metrics_path or out_dir / METRICS_NAME, checkpoint_dir, period, data)
    if parameters is not None:
        extra["load_parameters_path"] = str(parameters)
    args = maxtext_env.local_args(program.args, workdir, extra)
    env = maxtext_env.local_env(program.env, {"XLA_FLAGS": f"--xla_force_host_platform_device_count={target.shape.devices}", **(extra_env or {})})
    # The plan's interpreter is the image's python3; here it is the MaxText venv's.
    return [str(maxtext_env.python(venv)), *program.command[1:], *args], env


OUTPUTS = (COMMAND_NAME, LOG_NAME, "maxtext.stdout", METRICS_NAME)  # what a run writes into --out


def check_outputs(out_dir: Path, names: tuple[str, ...] = OUTPUTS) -> None:
    """Refuse, before the run, an --out where a file of these names is not the toolkit's (``toolkit.owned``)."""
    from toolkit import owned

    owned.check_update(owned.check_root(Path(out_dir), "--out"), dict.fromkeys(names, b""), "--out")


def local_parameters(plan: RunPlan, path: Path, data: LocalData | None = None) -> shapes.LoadParameters:
    """``--load-parameters DIR`` as the tiny run loads it: the tiny model's parameters (its vocabulary the dataset's, with one),
    in the layout the plan's ``scan_layers`` gives."""
    from workloads.planning.recipes import load_recipe

    args = dict(a.split("=", 1) for a in plan.program.args if "=" in a)
    model = load_recipe(plan.program.recipe).maxtext
    assert model is not None  # a MaxText plan (``check``)
    dims = {k: int(TINY_MODEL[k]) for k in shapes.DIMS}
    if data is not None:
        dims["vocab_size"] = tiny_vocab(data.vocab_size)
    return shapes.LoadParameters(
        path=str(path),
        model_name=f"the tiny {args.get('model_name', 'default')}",
        dims=tuple(dims.items()),
        scan_layers=args.get("scan_layers", "true").strip().lower() in ("true", "1"),
        tied_embedding=model.model.tied_embedding,
        dense=model.model.num_experts == 1,
        gated=model.model.mlp_matrices == 3,
    )


def dir_reader(path: str) -> shapes.Read:
    """Files under a checkpoint directory on this machine (``checkpoint_shapes.check`` reads its metadata through it)."""
    root = Path(path)

    def read(name: str) -> bytes | None:
        p = (root / name).resolve() if ".." in name else root / name
        try:
            return p.read_bytes() if p.is_file() else None
        except OSError as e:
            raise SpecError("--load-parameters", f"cannot read {p}: {e.strerror or e}", "pass a checkpoint directory you can read") from None

    return read


def check_parameters(plan: RunPlan, path: Path | None, data: LocalData | None = None) -> shapes.Checked | None:
    """The checkpoint a tiny run starts from (``--load-parameters``): a directory here holding the tiny model's parameters."""
    if path is None:
        return None
    if plan.program.load_parameters is not None:
        raise SpecError("--load-parameters", f"run {plan.name} already starts from {plan.program.load_parameters.path}", "give it once")
    return shapes.check(local_parameters(plan, path, data), dir_reader(str(path)))


def _write_outputs(out_dir: Path, files: dict[str, bytes]) -> None:
    from toolkit import owned

    owned.write_files(out_dir, files, "--out")


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
    load_parameters: Path | None = None,
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
    check_parameters(plan, load_parameters, data)  # before minutes of MaxText: the checkpoint to start from is the tiny model's
    workdir = Path(tempfile.mkdtemp(prefix="tgk-run-local-"))
    try:
        # MaxText appends to the metrics file (truncating only at step 0): a fresh file per run
        # holds the run's own steps, as its log does.
        scratch_metrics = workdir / METRICS_NAME
        # A pip-installed MaxText looks for its bundled tokenizers under a repository checkout; point it at the package's.
        assets = {"MAXTEXT_ASSETS_ROOT": str(maxtext_env.assets_root(venv))} if data is not None else None
        argv, env = command(
            plan,
            venv,
            workdir,
            out_dir,
            checkpoint_dir,
            checkpoint_period,
            metrics_path=scratch_metrics,
            data=data,
            extra_env=assets,
            parameters=load_parameters,
        )
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
    exception, else the last line (``toolkit.tools.last_line``, as for any tool). An error
    Python reports as ignored (a destructor's, after the real failure: "Exception ignored in")
    is not the failure."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "MAXTEXT CONFIG ERROR" in ln:
            return ln[ln.index("MAXTEXT CONFIG ERROR") :]
    ignored = own_traceback = False  # inside an ignored exception's report; its traceback is yet to start
    found = []
    for ln in lines:
        if ln.startswith("Exception ignored in"):
            ignored = own_traceback = True
        elif ln.startswith("Traceback (most recent call last)"):
            ignored, own_traceback = ignored and own_traceback, False
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Oom")) and " " not in head and not ignored:
            found.append(ln[:500])
    return found[-1] if found else last_line(stderr) or "no output"
