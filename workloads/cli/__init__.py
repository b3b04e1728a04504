"""``python -m workloads``: plan, render, submit and follow MaxText runs on Kueue.

Commands live in small modules and register themselves on ``app``; heavy
imports (kubernetes client, matplotlib, google-cloud-storage) happen inside the
commands, never at import time, so ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, make_app, run  # noqa: F401  re-exported for the command modules

app = make_app("workloads", "Plan, render, submit and follow MaxText runs on GKE TPUs through Kueue.")

# Options every command shares; import these instead of redefining them.
DryRun = Annotated[bool, typer.Option("--dry-run", help="print exactly what would be applied; change nothing")]
KubeconfigOpt = Annotated[Optional[Path], typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="kubeconfig context (default: current)")]


def check_out_dir(path: Path, flag: str = "--out") -> None:
    """Refuse an output directory that cannot be created or written to, before any work is done.

    Writes nothing: the nearest existing ancestor gets a probe directory that is removed at
    once (as root, permission bits say nothing; /proc, read-only mounts and files do).
    """
    import os
    import tempfile

    from toolkit.errors import FieldError

    fix = "pass a directory you can write to (it is created if missing)"
    try:
        p = Path(os.path.abspath(path))
        if p.exists() and not p.is_dir():
            raise FieldError(flag, f"{path} is a file, not a directory", fix)
        base = p
        while not base.exists():
            base = base.parent
        if not base.is_dir():
            raise FieldError(flag, f"cannot create {path}: {base} is a file, not a directory", fix)
        os.rmdir(tempfile.mkdtemp(prefix=".tgk-probe-", dir=base))
    except OSError as e:
        raise FieldError(flag, f"cannot write to {path}: {e.strerror or e}", fix) from None


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
