"""`run-local`: a recipe's rendered MaxText command, run for real on this machine's CPU.

Parse, call, print: the plan is the planner's (as for ``submit``), what can be refused is
refused by ``workloads.maxtext.run_local.check`` before MaxText starts, the checkpoint
directory is claimed for the run (``workloads.runs.identity``), the run is
``run_local.run_tiny`` (through a gcsfuse mount of the dataset with ``--dataset``:
``workloads.data.local_read``) in its own venv (``workloads.maxtext.env``), and its output
goes through the same analysis and report code as a cluster run
(``workloads.observe.analysis``). (``preflight --compile`` is in ``workloads.cli.preflight``.)

Importing this module registers the command on ``workloads.cli.app``.

Exit codes: 0 the run finished and its metrics parsed; 2 bad input (recipe, flags,
spec); 1 the MaxText run failed (its last error line and where the log is); 4 the
MaxText venv could not be built.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from toolkit.errors import SpecError
from workloads.cli import ContextOpt, KubeconfigOpt, Output, SpecOpt, app
from workloads.planning.defaults import INT32_MAX, MAX_WAIT_S


@app.command("run-local")
def run_local(
    recipe: Annotated[str, typer.Argument(help="MaxText recipe whose rendered command to run")],
    out: Annotated[
        Path, typer.Option("--out", help="directory for maxtext.log, metrics.jsonl, command.txt and the report (report.md, metrics.png, summary.json)")
    ],
    tiny: Annotated[bool, typer.Option("--tiny", help="shrink the model to the ~20 s CPU model (required: a real-size model does not train on a CPU)")] = False,
    steps: Annotated[int, typer.Option("--steps", min=3, max=INT32_MAX, help="training steps (steps 0-1 compile; the steady state starts at 2)")] = 10,
    pool: Annotated[Optional[str], typer.Option("--pool", help="TPU pool of the spec whose plan (mesh, env) to run")] = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="MaxText key=value, as for submit (repeatable)")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, max=MAX_WAIT_S, help="give up after this many seconds")] = 900,
    name: Annotated[
        Optional[str],
        typer.Option(
            "--name", help="run name (MaxText's run_name); reuse it, with the same checkpoint directory, to resume (default: <recipe>-<MMDD-HHMM>-loc)"
        ),
    ] = None,
    checkpoint_dir: Annotated[
        Optional[Path], typer.Option("--checkpoint-dir", help="where checkpoints go, as the bucket would hold them (default: <out>/checkpoints)")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="continue from the checkpoints of another submission of --name (e.g. more --steps); the model's shape must be the same",
        ),
    ] = False,
    dataset: Annotated[
        Optional[str],
        typer.Option(
            "--dataset",
            help="train on this dataset of the spec, read from its bucket through a gcsfuse mount as a run reads it "
            "(the local cluster's bucket server on its context, or $STORAGE_EMULATOR_HOST; else Cloud Storage)",
        ),
    ] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="with --dataset: the team whose identity must be able to read it")] = None,
    load_parameters: Annotated[
        Optional[Path],
        typer.Option(
            "--load-parameters",
            metavar="DIR",
            help="start from the parameters of this checkpoint on this machine (its items directory, e.g. what `convert --local --tiny` wrote); "
            "checked first to be the tiny model's",
        ),
    ] = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Run a recipe's rendered MaxText command on CPU with a tiny model; print its metrics and write a report.

    Checkpoints are saved as the plan says (on for training recipes); the same run again
    (same --name and options) resumes from the last saved step, and so does another with
    --resume (e.g. more --steps); another run under the name is refused."""
    from infra.spec import load_spec
    from workloads.cli.observe import print_summary
    from workloads.maxtext import env as maxtext_env
    from workloads.maxtext import run_local as rl
    from workloads.observe import analysis
    from workloads.observe import report as rp
    from workloads.planning.planner import Overrides, plan_run

    if not tiny:
        raise SpecError("--tiny", "run-local only runs the tiny model on CPU", "add --tiny")
    env = load_spec(spec)
    # One slice: a CPU has no slice index to build a DCN mesh from (see workloads/maxtext/run_local.py).
    # Named like a submitted run, with "loc" where the random suffix goes.
    overrides = Overrides(slices=1, pool=pool, steps=steps, sets=tuple(sets or ()), name=name, dataset=dataset, team=team)
    plan = plan_run(recipe, env, overrides, now=datetime.now(UTC), rand="loc")
    # Before minutes of MaxText: a file of yours in --out is refused now.
    checked = rl.check(plan, out, checkpoint_dir=checkpoint_dir, resume=resume, sets=overrides.sets, reserved=rp.REPORT_NAMES)
    parameters = None if load_parameters is None else load_parameters.expanduser().absolute()  # MaxText starts in a scratch directory
    if parameters is not None and dataset is None:
        rl.check_parameters(plan, parameters)  # now, before the venv is located (with --dataset: once the tokenizer's vocabulary is known)
    venv = maxtext_env.locate(log=lambda msg: sys.stderr.write(msg + "\n"))
    claimed = None
    if checked.run_dir is not None:
        from workloads.runs import identity

        # The run's directory is this run's before MaxText may restore from it (workloads.runs.identity).
        claimed = identity.claim(identity.DirStore(checked.run_dir), plan, resume=resume)
    if output is OutputFormat.text:
        if claimed is not None:
            sys.stderr.write(claimed.line() + "\n")
        sys.stderr.write(f"running {plan.program.recipe} (tiny model, {steps} steps, {plan.target.shape.devices} CPU devices) with MaxText...\n")
    if dataset is None:
        done = rl.run_tiny(plan, venv, out, timeout=timeout, checkpoint_dir=checkpoint_dir, checkpoint_period=checked.period, load_parameters=parameters)
    else:
        done = _run_on_dataset(env, plan, venv, out, timeout, checkpoint_dir, checked.period, kubeconfig, context, output, parameters)
    # The cluster path's parsers: the absl log and the metrics file (whose numbers win).
    a = analysis.analyse_files(plan.name, done.log_path, done.metrics_path, first_steady_step=done.first_step + 2)  # the first two steps of any start compile
    files = analysis.write_report(done.out_dir, a, cost=None, first_steady_step=done.first_step + 2)
    if output is OutputFormat.json:
        doc = rp.summary_document(rp.RunFacts.from_log(a.run, a.source, a.log), a.log, a.summary)
        doc["local_run"] = {
            "seconds": round(done.seconds, 1),
            "peak_rss_bytes": done.peak_rss_bytes,
            "report": str(files.markdown),
            "argv": list(done.argv),
            "run_name": plan.name,
            "checkpoint_dir": str(done.checkpoint_dir) if done.checkpoint_dir else None,
            "restored_step": done.restored_step,
            "restore_seconds": done.restore_seconds,
        }
        print_json(doc)
        return
    print_summary(plan.name, str(done.log_path), a.summary, None)
    if done.checkpoint_dir is not None:
        resumed = "started at step 0" if done.restored_step is None else f"resumed from step {done.restored_step} (restore {done.restore_seconds} s)"
        sys.stdout.write(f"{resumed}; checkpoints in {rl.run_checkpoints(done.checkpoint_dir, plan.name)} (reuse --name {plan.name} to resume)\n")
    sys.stdout.write(
        f"ran in {done.seconds:.1f} s (peak RSS {done.peak_rss_bytes / 2**30:.2f} GiB); wrote {files.markdown}, {files.plot.name}, {files.summary_json.name}\n"
    )


def _run_on_dataset(env, plan, venv, out, timeout, checkpoint_dir, period, kubeconfig, context, output, parameters):  # noqa: ANN001, ANN202  the command's own values
    """The tiny run reading the plan's dataset through a gcsfuse mount of its bucket (workloads.data.local_read)."""
    import os
    import tempfile

    from workloads.cli import cluster_hook
    from workloads.data.local_read import reading
    from workloads.maxtext import run_local as rl
    from workloads.observe.storage import EMULATOR_ENV
    from workloads.runs import hooks

    d = plan.program.dataset
    cluster, hook = cluster_hook(kubeconfig, context)  # one connection for the client and the mount's server
    client = hooks.storage_client(hook, cluster, env.project)
    endpoint = os.environ.get(EMULATOR_ENV) or hooks.storage_endpoint(hook, cluster)
    with tempfile.TemporaryDirectory(prefix="tgk-data-") as tmp:
        with reading(env, plan, client, endpoint, Path(tmp) / "data", venv) as data:
            if output is OutputFormat.text:
                sys.stderr.write(f"reading dataset {d.name} (gs://{d.bucket}/{d.path}/) through gcsfuse at {Path(tmp) / 'data' / d.name}\n")
            return rl.run_tiny(plan, venv, out, timeout=timeout, checkpoint_dir=checkpoint_dir, checkpoint_period=period, data=data, load_parameters=parameters)
