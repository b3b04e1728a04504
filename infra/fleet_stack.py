"""A fleet's Terraform: one stack per cluster (``infra.fleet.members``) in one CDK Terrain app."""

from __future__ import annotations

from pathlib import Path

from infra.fleet import Fleet, FleetManager, members


def synth_fleet(fleet: Fleet, outdir: Path) -> list[Path]:
    """Every member's stack into ``outdir/stacks/<cluster>/cdk.tf.json``, in deploy order."""
    # infra.stack first: it sets the jsii runtime's environment (the cached Node, the lazy provider) before cdktn starts it.
    from infra.stack import App, build_manager_stack, build_stack

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    app = App(outdir=str(outdir), stack_traces=False)
    ids = [(build_manager_stack(app, m.model) if isinstance(m.model, FleetManager) else build_stack(app, m.model)).stack.node.id for m in members(fleet)]
    app.synth()
    return [outdir / "stacks" / i / "cdk.tf.json" for i in ids]
