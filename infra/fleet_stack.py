"""A fleet's Terraform: one stack per cluster (``infra.fleet.members``) in one CDK Terrain app."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from infra.fleet import Fleet, FleetManager, members


def synth_fleet(fleet: Fleet, outdir: Path, *, reservations: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
    """Every member's stack into ``outdir/stacks/<cluster>/cdk.tf.json``, in deploy order.

    ``reservations``: per worker cluster name, pool -> the reservation its node pools consume (default: each pool's first).
    """
    # infra.stack first: it sets the jsii runtime's environment (the cached Node, the lazy provider) before cdktn starts it.
    from infra.stack import App, build_manager_stack, build_stack

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    app = App(outdir=str(outdir), stack_traces=False)
    chosen = reservations or {}
    ids = []
    for m in members(fleet):
        if isinstance(m.model, FleetManager):
            built = build_manager_stack(app, m.model)
        else:
            built = build_stack(app, m.model, reservations=chosen.get(m.cluster))
        ids.append(built.stack.node.id)
    app.synth()
    return [outdir / "stacks" / i / "cdk.tf.json" for i in ids]
