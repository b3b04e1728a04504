"""``convert``: a Hugging Face checkpoint to MaxText's format, for runs to start from (``submit --load-parameters``).

Parse, call, print: the conversion is planned by ``workloads.planning.conversion`` (refused
there, before anything is applied, for a model MaxText does not convert, a source that is
not a bucket path, a team without a checkpoints bucket, a CPU pool too small), run as a Job
on the CPU pool by ``workloads.runs.convert`` (the source checked and the destination
recorded first: ``workloads.runs.base_checkpoints``), or with ``--local`` on this machine by
``workloads.maxtext.convert_local`` (real MaxText, the Job's command).

Importing this module registers the command on ``workloads.cli.app``.

Exit codes: 0 applied (or converted, with --local); 2 bad input; 3 the cluster or the
bucket refused; 1 the conversion failed (--wait, --local); 4 the MaxText venv could not be built.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from toolkit.errors import FieldError
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, TeamOpt, app, connect
from workloads.planning.defaults import MAX_WAIT_S


def default_name(model_name: str) -> str:
    """The converted checkpoint's name when ``--name`` gives none: its model's, as a DNS label (llama3.1-8b -> llama3-1-8b)."""
    return "".join(c if c.isalnum() else "-" for c in model_name.lower()).strip("-")[:40]


@app.command()
def convert(
    recipe: Annotated[str, typer.Argument(help="the recipe whose model the checkpoint is (its model_name: a family MaxText converts)", show_default=False)],
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="the Hugging Face files (model.safetensors or its index and shards): gs://BUCKET/PATH, read by the Job through "
            "a read-only GCS FUSE mount; with --local, a directory here",
            show_default=False,
        ),
    ],
    name: Annotated[
        Optional[str], typer.Option("--name", help="the converted checkpoint's name: it lands in <team checkpoints bucket>/_base/NAME/ (default: the model's)")
    ] = None,
    team: TeamOpt = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="MaxText key=value for the conversion, e.g. scan_layers=false (repeatable)")] = None,
    image: Annotated[Optional[str], typer.Option("--image", help="container image with a tag or digest (default: the recipe's MaxText image)")] = None,
    local: Annotated[bool, typer.Option("--local", help="convert on this machine with the pinned MaxText venv instead (--from a directory, --out)")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="with --local: where the checkpoint (<out>/<name>/0/items) and convert.log go")] = None,
    tiny: Annotated[bool, typer.Option("--tiny", help="with --local: the tiny model run-local --tiny trains (Hugging Face files of its shapes)")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="wait until the conversion Job completed or failed")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=1, max=MAX_WAIT_S, help="seconds to wait (--wait, --local)")] = 3600,
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Convert a Hugging Face checkpoint to MaxText's format with MaxText's own converter, as a Job on the CPU pool."""
    from infra.fleet import load_env
    from workloads.planning.conversion import conversions, plan_conversion
    from workloads.planning.recipes import load_recipe

    if (out is not None or tiny) and not local:
        raise FieldError("--out" if out is not None else "--tiny", "only means something with --local", "add --local, or drop it")
    if local and out is None:
        raise FieldError("--out", "--local needs a directory for the checkpoint and its log", "add --out DIR")
    env = load_env(spec)
    sets = list(sets or ())
    if tiny and not any(x.startswith("override_model_config=") for x in sets):
        sets.insert(0, "override_model_config=true")  # the tiny model changes the preset's dimensions (a --set of one, vocab_size, too)
    r = load_recipe(recipe)
    model = r.maxtext.model_name if r.maxtext else ""
    given = name or default_name(model if model in conversions() else recipe)
    c = plan_conversion(recipe, env, source=None if local else source, name=given, team=team, sets=tuple(sets or ()), image=image)
    if local:
        _local(c, Path(source), out, tiny=tiny, sets=tuple(sets or ()), timeout=timeout, output=output)
        return
    from workloads.runs import convert as service

    if dry_run:
        objects = service.render(c)
        if output is OutputFormat.json:
            print_json({"conversion": c.summary(), "objects": objects})
        else:
            from workloads.render import yamlio

            typer.echo(yamlio.dump_all(objects), nl=False)
            typer.echo(f"would check {c.source} holds model.safetensors (or its index) and record {c.directory}tgk-base.json before applying", err=True)
        return
    cluster = connect(kubeconfig, context)
    done = service.apply(cluster, c, project=env.project)
    final = service.wait(cluster, c, timeout=timeout) if wait else None
    if output is OutputFormat.json:
        print_json(
            {
                "conversion": c.summary(),
                "record": done.claimed.record.document(),
                "applied": list(done.applied),
                "job": (final or done.job).__dict__ if (final or done.job) else None,
                "load_with": f"--load-parameters {c.checkpoint}",
            }
        )
    else:
        what = (
            f"applied Job {c.namespace}/{c.job_name}"
            if done.applied
            else f"Job {c.namespace}/{c.job_name} is already there ({done.job.phase}: {done.job.message})"
        )
        typer.echo(
            f"converting {c.model_name} (recipe {c.recipe}) from {c.source} with MaxText's converter on CPU pool {c.cpu_pool}: {what}, {c.memory_gib} GiB requested",
            err=True,
        )
        typer.echo(f"  {done.claimed.line()}", err=True)
        if done.note:
            typer.echo(f"  {done.note}", err=True)
        if final is not None:
            typer.echo(f"  the Job {final.phase}: {final.message}", err=True)
        typer.echo(f"load it with: python -m workloads submit {c.recipe} --load-parameters {c.checkpoint}")
    if final is not None and final.phase != "succeeded":
        raise typer.Exit(1)


def _local(c, source: Path, out: Path, *, tiny: bool, sets: tuple[str, ...], timeout: float, output: OutputFormat) -> None:  # noqa: ANN001  the command's own values
    from workloads.maxtext import convert_local
    from workloads.maxtext import env as maxtext_env
    from workloads.planning.maxtext_sets import parse_sets
    from workloads.runs import base_checkpoints
    from workloads.runs.identity import DirStore

    convert_local.check_source(source)
    claimed = base_checkpoints.claim(
        DirStore(out / c.name), base_checkpoints.record_of(c, checkpoint=str((out / c.name / "0" / "items").resolve()), source=str(source.resolve()))
    )
    venv = maxtext_env.locate(log=lambda msg: sys.stderr.write(msg + "\n"))
    if output is OutputFormat.text:
        sys.stderr.write(f"converting {c.model_name}{' (tiny)' if tiny else ''} from {source} with MaxText's converter on this CPU...\n")
    done = convert_local.convert(c, venv, source, out, tiny=tiny, kept=parse_sets(sets), timeout=timeout)
    if output is OutputFormat.json:
        print_json(
            {
                "conversion": {**c.summary(), "checkpoint": str(done.checkpoint), "source": str(source)},
                "record": claimed.record.document(),
                "seconds": round(done.seconds, 1),
                "peak_rss_bytes": done.peak_rss_bytes,
                "argv": list(done.argv),
                "log": str(done.log_path),
            }
        )
        return
    sys.stderr.write(f"  {claimed.line()}\n")
    sys.stdout.write(
        f"converted in {done.seconds:.1f} s (peak RSS {done.peak_rss_bytes / 2**30:.2f} GiB): {done.checkpoint}\n"
        f"load it with: python -m workloads run-local {c.recipe} --tiny --load-parameters {done.checkpoint}"
        + (" --set scan_layers=false" if not c.scan_layers else "")
        + "\n"
    )
