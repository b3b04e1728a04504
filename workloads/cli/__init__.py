"""``python -m workloads``: plan, render, submit and follow MaxText runs on Kueue.

Commands live in small modules and register themselves on ``app``; heavy
imports (kubernetes client, matplotlib, google-cloud-storage) happen inside the
commands, never at import time, so ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, run  # noqa: F401  re-exported for the command modules

app = typer.Typer(
    name="workloads",
    help="Plan, render, submit and follow MaxText runs on GKE TPUs through Kueue.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: rich's help renderer costs ~150 ms per --help (startup budget 0.3 s).
    rich_markup_mode=None,
)

# Options every command shares; import these instead of redefining them.
DryRun = Annotated[bool, typer.Option("--dry-run", help="print exactly what would be applied; change nothing")]
KubeconfigOpt = Annotated[Optional[Path], typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="kubeconfig context (default: current)")]


def _register() -> None:
    # Each module adds its commands to `app` at import.
    import importlib

    # runs: recipes, render, submit, queues; observe: status, logs, metrics, report,
    # delete, preflight (+ --compile); local: the local simulated cluster;
    # maxtext: run-local (real MaxText on CPU). A missing module is a broken
    # install, so its ImportError propagates instead of silently dropping commands.
    for name in ("runs", "observe", "local", "maxtext"):
        importlib.import_module(f"workloads.cli.{name}")


def main() -> None:
    _register()
    raise SystemExit(run(app))
