"""``python -m workloads``: plan, render, submit and follow MaxText runs on Kueue.

Commands live in small modules and register themselves on ``app``; heavy
imports (kubernetes client, matplotlib, google-cloud-storage) happen inside the
commands, never at import time, so ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, check_out_dir, make_app, run  # noqa: F401  re-exported for the command modules

app = make_app("workloads", "Plan, render, submit and follow MaxText runs on GKE TPUs through Kueue.")

# Options every command shares; import these instead of redefining them.
DryRun = Annotated[bool, typer.Option("--dry-run", help="print exactly what would be applied; change nothing")]
KubeconfigOpt = Annotated[Optional[Path], typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="kubeconfig context (default: current)")]


def _register() -> None:
    # Each module adds its commands to `app` at import.
    import importlib

    # runs: recipes, render, submit, queues; observe: status, logs, metrics, report,
    # delete, preflight (+ --compile); local: the local simulated cluster;
    # maxtext: run-local (real MaxText on CPU); cleanup: finished runs, old checkpoints. A missing module is a broken
    # install, so its ImportError propagates instead of silently dropping commands.
    for name in ("runs", "observe", "local", "maxtext", "cleanup"):
        importlib.import_module(f"workloads.cli.{name}")


def main() -> None:
    _register()
    raise SystemExit(run(app))
