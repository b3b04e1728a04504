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


# The module that registers each top-level command. `main` imports only the one the
# command line names: Typer turns every command it knows into a click command,
# evaluating each parameter's type, before it dispatches (~8% of a `submit --dry-run`).
# A name not listed here (a typo, `--help`) loads them all, so help and "did you
# mean" see every command. tests/test_cli_registry.py holds this table to the modules.
MODULES = ("runs", "observe", "local", "maxtext", "cleanup", "data")
COMMAND_MODULE = {
    "recipes": "runs", "import-recipe": "runs", "render": "runs", "submit": "runs", "queues": "runs",
    "status": "observe", "logs": "observe", "metrics": "observe", "report": "observe", "delete": "observe", "preflight": "observe",
    "local": "local",
    "run-local": "maxtext",
    "cleanup": "cleanup",
    "data": "data",
}  # fmt: skip


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules (each adds its commands to ``app``): the one ``argv``'s command needs, else all.

    runs: recipes, import-recipe, render, submit, queues; observe: status, logs, metrics,
    report, delete, preflight (+ --compile); local: the local simulated cluster; maxtext:
    run-local (real MaxText on CPU); cleanup: finished runs, old checkpoints; data: dataset upload and checks. A missing
    module is a broken install, so its ImportError propagates instead of silently dropping commands.
    """
    import importlib

    command = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for name in (COMMAND_MODULE[command],) if command in COMMAND_MODULE else MODULES:
        importlib.import_module(f"workloads.cli.{name}")


def main() -> None:
    import sys

    _register(sys.argv[1:])
    raise SystemExit(run(app))
