"""``python -m workloads preflight``: check the live cluster before submitting, or compile the run ahead of time.

Parse, call, print. The live checks are ``workloads.observe.preflight``: the pool ``submit``
would pick and the team (``target``: bad input refused before any cluster is reached),
what the cluster holds (``gather``) and the verdict per row (``evaluate``); with
``--dataset``, the dataset's rows from ``workloads.data.checks`` against the cluster's
buckets, its tokenizer loaded by MaxText's loader (``workloads.data.tokenizer``). With
``--compile``: the plan ``submit`` would make, compiled by MaxText's AOT compiler for the
pool's TPU topology (``workloads.maxtext.aot``).

Exit codes: 0 ready (fits, with --compile); 1 not ready (does not fit); 2 bad input;
3 the cluster could not be reached or refused a request; 4 the compile failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from toolkit.errors import SpecError
from workloads.cli import ContextOpt, KubeconfigOpt, Output, PoolOpt, SlicesOpt, SpecFile, SpecOpt, TeamOpt, app, connect, storage_client
from workloads.planning.defaults import MAX_WAIT_S


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
    multi_tier_checkpointing: Annotated[
        bool, typer.Option("--multi-tier-checkpointing", help="the run uses multi-tier checkpointing: check that GKE's add-on is on")
    ] = False,
    restart: Annotated[
        Optional[str],
        typer.Option("--restart", help="in-place or recreate, as for submit; in-place (or the spec's default) checks the cluster's JobSet takes it"),
    ] = None,
    dataset: Annotated[
        Optional[str],
        typer.Option(
            "--dataset",
            help="also check this dataset of the spec in the cluster's buckets: files, format, the team's read access, "
            "and its tokenizer loaded with MaxText's loader against the recipe's vocab_size",
        ),
    ] = None,
) -> None:
    """Check the live cluster before submitting: flavor, queues and quota, TPU nodes, zone, what the run asks of it (and a dataset).

    With --compile: compile the run ahead of time for its TPU topology instead (no cluster needed).
    """
    specs = SpecFile(spec)
    if compile_:
        _compile(recipe, specs, pool=pool, slices=slices, team=team, sets=sets or [], output=output, keep_logs=keep_logs, timeout=timeout)
        return
    if sets or keep_logs:
        raise SpecError("--set" if sets else "--keep-logs", "only applies with --compile", "add --compile or drop it")
    from workloads.observe import preflight as pf

    env = specs.env()
    tpu_pool, tm = pf.target(env, recipe, pool=pool, slices=slices, team=team)
    asked = pf.asked_capabilities(env, recipe, multi_tier_checkpointing=multi_tier_checkpointing, restart=restart)
    cluster = connect(kubeconfig, context)
    rep = pf.evaluate(env, tpu_pool, tm, pf.gather(cluster, tm, capabilities=asked), slices=slices)
    if dataset is not None:
        from infra import access
        from workloads.data import checks, tokenizer

        d = checks.find_dataset(env, dataset)
        client = storage_client(cluster, env.project)
        vocab = tokenizer.recipe_vocab(recipe) if recipe else None
        rep = rep.with_rows(
            checks.preflight_rows(
                lambda: checks.check_dataset(client, env, d, access.run_member(env, tm, False)),
                tokenizer_check=lambda: tokenizer.check(client, env, d, vocab_size=vocab),
            )
        )
    if output is OutputFormat.json:
        print_json(rep.to_dict())
    else:
        typer.echo(f"preflight: pool {rep.pool} {rep.shape} x {rep.slices} slice(s), namespace {rep.namespace}")
        for c in rep.checks:
            typer.echo(f"  [{c.result.value.upper():4}] {c.name:<24} {c.detail}")
            if c.fix and c.result is not pf.Result.PASS:
                typer.echo(f"         fix: {c.fix}")
        typer.echo("ready" if rep.ok else "not ready")
    if not rep.ok:
        raise typer.Exit(1)


def _compile(
    recipe: str | None,
    specs: SpecFile,
    *,
    pool: str | None,
    slices: int | None,
    team: str | None,
    sets: list[str],
    output: OutputFormat,
    keep_logs: Path | None,
    timeout: float,
) -> None:
    """`preflight --compile`: the RunPlan's MaxText step through MaxText's AOT compiler."""
    from workloads.maxtext import aot
    from workloads.maxtext import env as maxtext_env
    from workloads.planning.planner import Overrides, plan_run

    if not recipe:
        raise SpecError("RECIPE", "preflight --compile needs a recipe", "e.g. python -m workloads preflight maxtext-6b --compile")
    # The same plan `render`/`submit` would make: its args and env are what is compiled.
    plan = plan_run(recipe, specs.env(), Overrides(slices=slices, pool=pool, sets=tuple(sets), team=team))
    aot.check(plan, keep_logs=keep_logs)
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
            typer.echo(line)
    if result.exit_code:
        raise typer.Exit(result.exit_code)
