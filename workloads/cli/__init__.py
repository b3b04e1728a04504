"""``python -m workloads``: plan, render, submit and follow MaxText runs on Kueue.

Commands live in small modules and register themselves on ``app``; heavy
imports (kubernetes client, matplotlib, google-cloud-storage) happen inside the
commands, never at import time, so ``--help`` stays fast.

What the command modules share is here: the options every command spells the same way,
``--spec`` read once (``SpecFile``), and the edge a command stands on (``connect``: the
cluster; ``cluster_hook``, ``storage_client``, ``logging_client``: the clients its run hook
gives, the local cluster's own servers on its context).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, cast

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, check_out_dir, make_app, run  # noqa: F401  re-exported for the command modules
from workloads.planning.defaults import INT32_MAX

if TYPE_CHECKING:
    from infra.fleet import Fleet
    from infra.spec import EnvSpec
    from toolkit.errors import ToolkitError
    from workloads.cluster.client import Cluster

app = make_app("workloads", "Plan, render, submit and follow MaxText runs on GKE TPUs through Kueue.")

# Options every command shares; import these instead of redefining them.
DryRun = Annotated[bool, typer.Option("--dry-run", help="print exactly what would be applied; change nothing")]
KubeconfigOpt = Annotated[Optional[Path], typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="kubeconfig context (default: current)")]
NamespaceOpt = Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")]
TeamOpt = Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")]
PoolOpt = Annotated[
    Optional[str], typer.Option("--pool", help="TPU pool of the spec the run used (shape and slice count; a run on the cluster: read from the run)")
]
SlicesOpt = Annotated[Optional[int], typer.Option("--slices", min=1, max=INT32_MAX, help="number of slices (default: the pool's)")]


class SpecFile:
    """``--spec`` as a command reads it: an environment spec or a fleet file, read once, when first needed.

    Read by infra's one loader (``infra.fleet.load_spec_or_fleet``), at most once per command;
    what it read is passed down as objects, never read again. ``env()``: the environment (a
    fleet file stands for its manager's, ``Fleet.manager_env``); ``fleet()``: the fleet when the
    file is one, else None. Nothing is read until one of them is asked for, and a file the
    loader refuses is an error only where the command needs it: ``env()`` raises the refusal,
    ``fleet()`` only when the file is a fleet's (so ``status --namespace`` and ``metrics`` of a
    log file never fail on a spec they do not use).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @cached_property
    def _found(self) -> EnvSpec | Fleet | ToolkitError:
        from infra.fleet import load_spec_or_fleet
        from toolkit.errors import SpecError

        try:
            return load_spec_or_fleet(self.path)
        except SpecError as e:
            return e  # raised where the command needs the file

    @cached_property
    def _manager_env(self) -> EnvSpec:
        return cast("Fleet", self._found).manager_env()

    def fleet(self) -> Fleet | None:
        from infra.fleet import Fleet

        found = self._found
        if isinstance(found, Exception):
            if self._names_a_fleet():
                raise found
            return None
        return found if isinstance(found, Fleet) else None

    def env(self) -> EnvSpec:
        from infra.fleet import Fleet

        found = self._found
        if isinstance(found, Exception):
            raise found
        return self._manager_env if isinstance(found, Fleet) else found

    def _names_a_fleet(self) -> bool:
        """Whether the file the loader refused holds a fleet document (read again: this is the refusal's path only)."""
        from infra.fleet import is_fleet_document
        from infra.spec import read_document, spec_path
        from toolkit.errors import SpecError

        try:
            return is_fleet_document(read_document(spec_path(self.path), "--spec", ""))
        except SpecError:
            return False


def connect(kubeconfig: Path | None, context: str | None) -> Cluster:
    """The toolkit's client on the cluster the kubeconfig and context name (``Cluster.connect``)."""
    from workloads.cluster.client import Cluster

    return Cluster.connect(kubeconfig, context)


def cluster_hook(kubeconfig: Path | None, context: str | None) -> tuple[Any, Any]:
    """(cluster, its run hook) of the kubeconfig's context; (None, None) when there is no kubeconfig at all
    (the project's Cloud Storage then). A kubeconfig or context named and not usable is an error."""
    from workloads.cluster.errors import ClusterError
    from workloads.runs import hooks

    try:
        cluster = connect(kubeconfig, context)
    except ClusterError:
        if kubeconfig is not None or context is not None:
            raise
        return None, None
    return cluster, hooks.for_context(cluster.context)


def storage_client(cluster: Any, project: str | None) -> Any:
    """Cloud Storage for the buckets of ``cluster``'s runs: its run hook's server (the local cluster's), else Google's."""
    from workloads.runs import hooks

    return hooks.storage_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


def logging_client(cluster: Any, project: str) -> Any:
    """Cloud Logging for the runs of ``cluster``: its run hook's server (the local cluster's), else Google's."""
    from workloads.runs import hooks

    return hooks.logging_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


# The module that registers each top-level command. `main` imports only the one the
# command line names: Typer turns every command it knows into a click command,
# evaluating each parameter's type, before it dispatches (~8% of a `submit --dry-run`).
# A name not listed here (a typo, `--help`) loads them all, so help and "did you
# mean" see every command. tests/test_cli_registry.py holds this table to the modules.
MODULES = ("runs", "observe", "overview", "delete", "preflight", "local", "maxtext", "convert", "cleanup", "data", "journal", "maintain", "faults")
COMMAND_MODULE = {
    "recipes": "runs", "import-recipe": "runs", "render": "runs", "submit": "runs", "queues": "runs",
    "status": "observe", "logs": "observe", "metrics": "observe", "report": "observe", "list": "overview", "delete": "delete", "preflight": "preflight",
    "local": "local",
    "run-local": "maxtext",
    "convert": "convert",
    "cleanup": "cleanup",
    "data": "data",
    "journal": "journal",
    "maintain": "maintain",
    "badhost": "faults",
}  # fmt: skip


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules (each adds its commands to ``app``): the one ``argv``'s command needs, else all.

    runs: recipes, import-recipe, render, submit, queues; observe: status, logs, metrics,
    report; overview: list (every run at a glance); delete; preflight (+ --compile); local: the local simulated cluster; maxtext:
    run-local (real MaxText on CPU); convert: Hugging Face weights to a MaxText checkpoint; cleanup: finished runs, old checkpoints; data: dataset upload and checks; journal: a training journal per model. A missing
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
