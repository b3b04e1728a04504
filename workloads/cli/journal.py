"""``python -m workloads journal``: a training journal per model (``workloads.observe.journal``).

``journal add RUN_OR_LOGFILE`` analyses a finished run as ``metrics`` does (the same options:
``--pool``/``--shape`` for per-chip figures, ``--metrics-file``, ...) and appends its record to the
model's journal in the spec's artifacts bucket, never overwriting one; ``--markdown FILE`` also
writes the journal as Markdown tables there. ``journal show MODEL`` prints (or writes) it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from toolkit.errors import FieldError
from workloads.cli import SpecFile, app, cluster_hook, storage_client
from workloads.cli.observe import RunSource, _warn_skipped, _with_run_source

journal_app = typer.Typer(no_args_is_help=True, help="A training journal per model: finished runs appended, never overwritten, shown as tables.")
app.add_typer(journal_app, name="journal")

MarkdownOpt = Annotated[Optional[Path], typer.Option("--markdown", help="also write the journal as Markdown tables to this file (replaced: it is a copy)")]


def _bucket(specs: SpecFile) -> tuple[str, str]:
    from workloads.observe.report import upload_target

    return upload_target(specs.env())


def _client(source_kubeconfig: Path | None, context: str | None, project: str) -> Any:
    """The run hook's Cloud Storage (the local cluster's own server), else Google's."""
    cluster, _ = cluster_hook(source_kubeconfig, context)
    return storage_client(cluster, project)


def _finished_run(source: RunSource, specs: SpecFile, target: str) -> str | None:
    """A run on the cluster must have finished; its image (MaxText's) for the record. None for a log file."""
    if Path(target).is_file() or source.metrics_file is not None:
        return None
    from workloads.cli import connect
    from workloads.cli.observe import _namespace

    ns = _namespace(specs, source.namespace, source.team)
    cluster = connect(source.kubeconfig, source.context)
    st = cluster.run_status(ns, target)
    if st.phase.value not in ("Succeeded", "Failed"):
        raise FieldError("RUN", f"{ns}/{target} is {st.phase.value}, not finished", "journal it once it has finished (`workloads status RUN --wait`)")
    found = cluster.find_run(ns, target)
    obj = found[1] if isinstance(found, tuple) else found
    images = [c.get("image") for c in _containers(obj or {}) if c.get("image")]
    return images[0] if images else None


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    for rj in (obj.get("spec") or {}).get("replicatedJobs") or []:
        return list((((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [])
    return list(((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [])


@journal_app.command("add")
@_with_run_source
def add(
    target: Annotated[str, typer.Argument(metavar="RUN_OR_LOGFILE", help="a finished run's name (read from the cluster), or its MaxText log file")],
    model: Annotated[Optional[str], typer.Option("--model", help="the journal (default: the log's MaxText model_name)")] = None,
    note: Annotated[str, typer.Option("--note", help="the record's notes column", max=2000)] = "",
    image: Annotated[Optional[str], typer.Option("--image", help="the MaxText image the run used (a run on the cluster: read from it)")] = None,
    markdown: MarkdownOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the record and the journal it would join; write nothing")] = False,
    source: RunSource = RunSource(),  # noqa: B008  (the option group; observe.py declares it, a frozen dataclass)
) -> None:
    """Append a finished run's record (versions, config, steady-state figures, final loss) to its model's journal."""
    from workloads.observe import journal

    if len(note) > 2000:
        raise FieldError("--note", f"{len(note)} characters", "keep a note to 2000")
    specs = SpecFile(source.spec)
    bucket, project = _bucket(specs)
    run_image = _finished_run(source, specs, target)
    a = source.analyse(target, specs)
    _warn_skipped(a)
    name = journal.model_name(a, model)
    versions = journal.versions_of(a, image=image or run_image, launcher=f"tpu-gke-toolkit {_toolkit_version()}")
    rec = journal.record(a, date=datetime.now(UTC).strftime("%Y-%m-%d"), versions=versions, notes=note)
    client = _client(source.kubeconfig, source.context, project)
    current, generation = journal.read(client, bucket, name)
    updated = current.with_record(rec)
    if dry_run:
        sys.stdout.write(
            f"would append {rec.run} to gs://{bucket}/{journal.object_name(name)} ({len(current.records)} record(s) now, generation {generation})\n"
        )
        sys.stdout.write(journal.render(updated))
        return
    where = journal.write(client, bucket, updated, generation)
    sys.stdout.write(f"appended {rec.run} to {where} ({len(updated.records)} record(s))\n")
    if markdown is not None:
        _write_markdown(markdown, journal.render(updated))


@journal_app.command("show")
def show(
    model: Annotated[str, typer.Argument(help="the journal's model name")],
    markdown: MarkdownOpt = None,
    spec: Annotated[Optional[Path], typer.Option("--spec", help="environment spec (default: $TGK_SPEC, else examples/default.yaml)")] = None,
    kubeconfig: Annotated[Optional[Path], typer.Option("--kubeconfig", help="kubeconfig (its context's Cloud Storage: the local cluster's own)")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="kubeconfig context")] = None,
) -> None:
    """Print a model's journal as Markdown tables (or write them to --markdown)."""
    from workloads.observe import journal

    specs = SpecFile(spec)
    bucket, project = _bucket(specs)
    got, generation = journal.read(_client(kubeconfig, context, project), bucket, model)
    if generation == 0:
        raise FieldError("MODEL", f"no journal gs://{bucket}/{journal.object_name(model)}", "journal a run first (`workloads journal add RUN --model MODEL`)")
    text = journal.render(got)
    if markdown is None:
        sys.stdout.write(text)
    else:
        _write_markdown(markdown, text)


def _write_markdown(path: Path, text: str) -> None:
    from toolkit.owned import write_atomic

    if path.exists() and not path.is_file():
        raise FieldError("--markdown", f"{path} is not a file", "name a file")
    write_atomic(path, text.encode())
    sys.stdout.write(f"wrote {path}\n")


def _toolkit_version() -> str:
    """The toolkit's version as its pyproject.toml says (the checkout is what runs: it is not pip-installed)."""
    import tomllib

    from toolkit.paths import REPO_ROOT

    try:
        return str(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "(unknown)"
