"""``python -m workloads local badhost|hang``: faults GKE's own tools do not make, played on the local cluster (``workloads.local.faults``).

Registered by ``workloads.cli.local`` under its ``local`` group; only typer and the shared options are imported here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, print_json
from workloads.cli import Output, SpecOpt
from workloads.planning.defaults import INT32_MAX


def fault_badhost(
    node: Annotated[str, typer.Argument(metavar="NODE", help="a TPU node of the local cluster")],
    exit_code: Annotated[int, typer.Option("--exit-code", min=1, max=255, help="what every workload container on it exits with (default 134, SIGABRT)")] = 134,
    clear: Annotated[bool, typer.Option("--clear", help="the node is healthy again")] = False,
    state_dir: Annotated[Optional[Path], typer.Option("--state-dir", help="the local cluster's state dir (default $TGK_CACHE/local-cluster/state)")] = None,
    output: Output = OutputFormat.text,
) -> None:
    """Every workload container on NODE fails, attempt after attempt (a VM with a broken TPU host)."""
    from workloads.local import faults

    res = faults.bad_host(_local(state_dir), node, exit_code=exit_code, clear=clear)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"bad host {res.target}: {res.detail}\n")


def fault_hang(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    slice_index: Annotated[int, typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index)")] = 0,
    worker: Annotated[int, typer.Option("--worker", min=0, max=INT32_MAX, help="worker within the slice")] = 0,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")] = None,
    spec: SpecOpt = None,
    state_dir: Annotated[Optional[Path], typer.Option("--state-dir", help="the local cluster's state dir (default $TGK_CACHE/local-cluster/state)")] = None,
    output: Output = OutputFormat.text,
) -> None:
    """One worker of RUN stops stepping while its pod stays Running (a collective that never completes)."""
    from infra.spec import load_spec
    from workloads.local import faults

    ns = namespace or load_spec(spec).team(team).ns
    res = faults.hang(_local(state_dir), ns, run, slice_index, worker)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"hang {res.target}: {res.detail}\n")


def _local(state_dir: Path | None):  # noqa: ANN202  the local cluster's API client
    from workloads.local.controlplane import LocalCluster
    from workloads.local.state import default_state_dir

    return LocalCluster(state_dir or default_state_dir(), progress=lambda m: None).client()


def register(local_app: typer.Typer) -> None:
    local_app.command("badhost")(fault_badhost)
    local_app.command("hang")(fault_hang)
