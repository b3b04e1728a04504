"""Run a recipe's rendered MaxText command on this machine's CPU, shrunk to a tiny model.

The command is the RunPlan's — the module, config file, every argument and env var the
JobSet would run — with the local substitutions of ``workloads.maxtext.env`` and these
tiny-run overrides (replacing the plan's value in place, or appended):

- the tiny model from docs/facts/maxtext.md (emb 64, 4 heads, 2 layers, vocab 256,
  seq 64, per-device batch 2, dot-product attention): trains in ~20 s on 2 cores;
- ``override_model_config=true`` for preset models (MaxText refuses to change a preset's
  dimensions otherwise);
- ``dataset_type=synthetic``, ``enable_checkpointing=false``: no data, no checkpoint
  writes; ``metrics_file=<out>/metrics.jsonl`` on.

The ICI mesh stays the plan's: XLA is told to expose as many CPU devices as one slice
has (``--xla_force_host_platform_device_count``), so ``ici_*_parallelism`` runs
unchanged. Always one slice: CPU devices carry no slice index, so a DCN mesh cannot be
built on CPU (the AOT preflight is what exercises multislice).

Output goes through the same parser, summary and report code as a cluster run
(``workloads.observe.metrics``, ``workloads.observe.report``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ExternalToolError, ToolkitError
from workloads.maxtext import env as maxtext_env
from workloads.planning.planner import RunPlan

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
TINY_RUN: dict[str, str] = {"dataset_type": "synthetic", "enable_checkpointing": "false"}
LOG_NAME = "maxtext.log"
METRICS_NAME = "metrics.jsonl"
COMMAND_NAME = "command.txt"


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


def tiny_overrides(plan: RunPlan, metrics_path: Path) -> dict[str, str]:
    extra = dict(TINY_MODEL)
    model_name = next((a.split("=", 1)[1] for a in plan.args if a.startswith("model_name=")), "default")
    if model_name != "default":
        extra["override_model_config"] = "true"
    extra.update(TINY_RUN)
    extra["metrics_file"] = str(metrics_path)
    return extra


def command(plan: RunPlan, venv: Path, workdir: Path, out_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the tiny local run of ``plan``."""
    if plan.kind != "maxtext":
        raise ToolkitError(f"recipe {plan.recipe} runs a plain command, not MaxText — run-local --tiny needs a MaxText recipe")
    if plan.slices != 1:
        raise ToolkitError(f"run-local: {plan.slices} slices asked for; a CPU run has one slice — drop --slices (preflight --compile checks multislice)")
    assert plan.command[:2] == ("python3", "-m"), plan.command  # the planner renders MaxText as a module run
    args = maxtext_env.local_args(plan.args, workdir, tiny_overrides(plan, out_dir / METRICS_NAME))
    env = maxtext_env.local_env(plan.env, {"XLA_FLAGS": f"--xla_force_host_platform_device_count={plan.devices_per_slice}"})
    # The plan's interpreter is the image's python3; here it is the MaxText venv's.
    return [str(maxtext_env.python(venv)), *plan.command[1:], *args], env


def run_tiny(plan: RunPlan, venv: Path, out_dir: Path, *, timeout: float = 900, keep_workdir: bool = False) -> LocalRun:
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="tgk-run-local-"))
    try:
        argv, env = command(plan, venv, workdir, out_dir)
        (out_dir / COMMAND_NAME).write_text(
            "".join(f"{k}={v}\n" for k, v in sorted(env.items()) if k not in maxtext_env.INHERITED_ENV) + " ".join(argv) + "\n"
        )
        done = maxtext_env.run(argv, env, workdir, "train", timeout=timeout)
        log_path = out_dir / LOG_NAME
        # MaxText's per-step lines go to stderr (absl); stdout holds the rest.
        shutil.copyfile(done.stderr_path, log_path)
        (out_dir / "maxtext.stdout").write_bytes(done.stdout_path.read_bytes())
        if done.timed_out:
            raise LocalRunError(f"local MaxText run timed out after {timeout:g} s — log: {log_path}")
        if done.returncode != 0:
            raise LocalRunError(f"local MaxText run exited {done.returncode}: {last_error(done.stderr())} — log: {log_path}")
        metrics_path = out_dir / METRICS_NAME
        if not metrics_path.exists():
            raise LocalRunError(f"MaxText finished but wrote no metrics file {metrics_path} — log: {log_path}")
        return LocalRun(plan, tuple(argv), env, out_dir, log_path, metrics_path, done.seconds, done.peak_rss_bytes)
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def last_error(stderr: str) -> str:
    """The line of a MaxText/Python failure worth showing: its config error or final exception."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for l in reversed(lines):
        if "MAXTEXT CONFIG ERROR" in l:
            return l[l.index("MAXTEXT CONFIG ERROR") :]
    for l in reversed(lines):
        head = l.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Oom")) and " " not in head:
            return l[:500]
    return lines[-1][:500] if lines else "no output"
