"""``python -m workloads data``: put a dataset where its spec says, and check it before a run reads it.

The buckets are those of the cluster the kubeconfig points at: the local cluster's own
Cloud Storage server on its context (``tgk-local``), Cloud Storage otherwise (and with no
kubeconfig at all).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app, cluster_hook, storage_client
from workloads.planning.defaults import INT32_MAX

data_app = typer.Typer(no_args_is_help=True, help="Datasets: upload one into its bucket, check one before a run reads it.")
app.add_typer(data_app, name="data")

DatasetOpt = Annotated[str, typer.Option("--dataset", help="the dataset's name in the spec's datasets")]
TeamOpt = Annotated[Optional[str], typer.Option("--team", help="the team whose runs read it (default: the spec's first)")]


def _dataset(spec: Path | None, name: str) -> tuple[Any, Any]:
    """(the spec, its dataset ``name``): an unknown one is refused (``--dataset``) with the names there are."""
    from infra.spec import load_spec
    from workloads.data.checks import find_dataset

    env = load_spec(spec)
    return env, find_dataset(env, name)


def _buckets(spec: Any, kubeconfig: Path | None, context: str | None) -> Any:
    """The buckets of the cluster the kubeconfig names (its hook's server), else Cloud Storage's."""
    return storage_client(cluster_hook(kubeconfig, context)[0], spec.project)


@data_app.command("upload")
def upload(
    src: Annotated[
        Path, typer.Argument(help="directory holding the dataset's files (its top level; the tokenizer too when the dataset keeps one beside the data)")
    ],
    dataset: DatasetOpt,
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Upload a dataset's files to gs://<bucket>/<path>/ with progress; files are checked against the declared format first, and a dataset's path is written once (a new version goes to a new path)."""
    from workloads.data import upload as up

    env, d = _dataset(spec, dataset)
    plan = up.plan_upload(env, d, src)
    if dry_run:
        if output is OutputFormat.json:
            print_json({**plan.to_dict(), "dry_run": True})
        else:
            for i in plan.items:
                print(f"would upload {i.path} -> gs://{d.bucket}/{i.name} ({i.size} bytes)")
            print(f"{len(plan.items)} file(s), {plan.bytes} bytes to {plan.uri}")
        return
    client = _buckets(env, kubeconfig, context)
    decision = up.decide(client, env, d, plan)  # a dataset prefix is written once (toolkit.ledger)
    done = _with_progress(client, d, plan, decision)
    if output is OutputFormat.json:
        print_json(done.to_dict())
    else:
        print(f"uploaded {len(plan.items)} file(s), {plan.bytes} bytes to {plan.uri} in {done.seconds:.1f}s ({done.mib_per_s:.1f} MiB/s)")


def _with_progress(client: Any, d: Any, plan: Any, decision: Any) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from workloads.data import upload as up

    # Progress on stderr, so stdout stays the result (text or JSON) a script reads.
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    ) as bar:
        task = bar.add_task(f"upload to {plan.uri}", total=plan.bytes)
        return up.upload(client, d, plan, decision, on_bytes=lambda n: bar.advance(task, n))


@data_app.command("check")
def check(
    dataset: DatasetOpt,
    team: TeamOpt = None,
    host_network: Annotated[
        bool, typer.Option("--host-network", help="check the TPU nodes' service account (hostNetwork runs act as it) instead of the team's")
    ] = False,
    load_tokenizer: Annotated[
        bool,
        typer.Option(
            "--load-tokenizer/--no-load-tokenizer", help="load the tokenizer with MaxText's own loader (needs the MaxText venv; scripts/setup-maxtext.sh)"
        ),
    ] = True,
    vocab_size: Annotated[
        Optional[int], typer.Option("--vocab-size", min=1, max=INT32_MAX, help="the model's vocab_size: refuse a tokenizer with more ids than it")
    ] = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Check a dataset before a run reads it: bucket, the run identity's read access, files and their format, the tokenizer."""
    from infra import access
    from workloads.data import checks, tokenizer

    env, d = _dataset(spec, dataset)
    member = access.run_member(env, env.team(team), host_network)
    client = _buckets(env, kubeconfig, context)
    facts = checks.check_dataset(client, env, d, member)
    tok = tokenizer.check(client, env, d, vocab_size=vocab_size) if load_tokenizer else None
    if output is OutputFormat.json:
        print_json({**facts.to_dict(), "tokenizer_load": tok.to_dict() if tok else None})
        return
    print(f"dataset {d.name}: {facts.files} file(s), {facts.bytes} bytes at {facts.uri} ({d.format.value}; sampled {len(facts.sampled)})")
    print(f"  read access: {facts.reader.removeprefix('serviceAccount:')} may read it" if facts.reader else f"  read access: warning: {facts.access_note}")
    if tok is not None:
        print(f"  tokenizer: {facts.tokenizer} loads with MaxText's loader ({tok.vocab_size} ids)")
    else:
        print(f"  tokenizer: {facts.tokenizer} (not loaded: --no-load-tokenizer)")
