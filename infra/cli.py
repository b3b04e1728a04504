"""``python -m infra``: synth, plan, deploy, destroy, outputs.

The spec is loaded and validated before anything is written or run, so bad
input leaves nothing behind. CDK Terrain is imported only by the commands that
synthesize (``--help`` must stay fast).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, check_out_dir, confirm, make_app, print_json, run

app = make_app("infra", "Provision the GKE + TPU environment described by an environment spec.")

OutOpt = Annotated[Path, typer.Option("--out", help="directory for the synthesized stack")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print what would run; change nothing")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]

DEFAULT_OUT = Path("cdktn.out")


def _load(spec: Path | None):
    from infra.spec import load_spec

    return load_spec(spec)


def _synth_into(spec_obj, out: Path) -> Path:
    """Synthesize into a scratch dir, then move into place: a failed synth writes nothing."""
    from toolkit.errors import FieldError

    check_out_dir(out)  # before CDK loads: a bad --out costs nothing
    from infra.stack import synth

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".synth-", dir=out.parent))
    except OSError as e:
        raise FieldError("--out", f"cannot create {out}: {e.strerror or e}", "pass a directory you can write to") from None
    try:
        produced = synth(spec_obj, scratch)
        rel = produced.relative_to(scratch)
        final = out / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.parent.exists():
            shutil.rmtree(final.parent)
        shutil.move(str(produced.parent), str(final.parent))
        manifest = scratch / "manifest.json"
        if manifest.exists():
            shutil.move(str(manifest), str(out / "manifest.json"))
        return final
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@app.command()
def synth(
    spec: SpecOpt = None,
    out: OutOpt = DEFAULT_OUT,
    summary: Annotated[bool, typer.Option("--summary", help="print what would be created")] = False,
    output: Output = OutputFormat.text,
) -> None:
    """Synthesize the Terraform JSON for the environment."""
    from infra.summary import render_text, summarize

    spec_obj = _load(spec)
    path = _synth_into(spec_obj, out)
    if not summary and output is OutputFormat.text:
        typer.echo(str(path))
        return
    doc = json.loads(path.read_text())
    data = summarize(spec_obj, doc, str(path))
    if output is OutputFormat.json:
        print_json(data)
    else:
        render_text(data)


def _terraform(path: Path, dry_run: bool):
    from infra.terraform import Terraform, find_terraform

    binary = "terraform" if dry_run else find_terraform()
    return Terraform(workdir=path.parent, binary=binary)


def _execute(tf, steps, dry_run: bool) -> None:
    for step in steps:
        if dry_run:
            typer.echo(step.render())
        else:
            typer.echo(f"$ {step.render()}", err=True)
            tf.run(step)


@app.command()
def plan(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, dry_run: DryRun = False) -> None:
    """Synthesize, terraform init (GCS backend from the spec) and terraform plan."""
    spec_obj = _load(spec)
    path = _synth_into(spec_obj, out)
    tf = _terraform(path, dry_run)
    _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)


@app.command()
def deploy(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, yes: Yes = False, dry_run: DryRun = False) -> None:
    """Synthesize, plan, and apply that exact plan."""
    spec_obj = _load(spec)
    path = _synth_into(spec_obj, out)
    tf = _terraform(path, dry_run)
    _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)
    if not dry_run:
        confirm(f"Apply this plan to project {spec_obj.project}?", yes=yes)
    _execute(tf, [tf.apply("tfplan")], dry_run)


@app.command()
def destroy(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, yes: Yes = False, dry_run: DryRun = False) -> None:
    """Destroy everything the stack created (asks first unless --yes)."""
    spec_obj = _load(spec)
    if spec_obj.cluster.deletion_protection and not dry_run:
        from toolkit.errors import SpecError

        raise SpecError(
            "cluster.deletion_protection",
            "is true, so GKE refuses to delete the cluster",
            "set it to false and run `python -m infra deploy` first, then destroy",
        )
    path = _synth_into(spec_obj, out)
    tf = _terraform(path, dry_run)
    if not dry_run:
        confirm(f"Destroy cluster {spec_obj.cluster.name} and everything else in project {spec_obj.project}?", yes=yes)
    _execute(tf, [tf.init(), tf.plan(out="tfplan-destroy", destroy=True), tf.apply("tfplan-destroy")], dry_run)


@app.command()
def outputs(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, output: Output = OutputFormat.text) -> None:
    """Show the stack's outputs from the Terraform state."""
    spec_obj = _load(spec)
    path = _synth_into(spec_obj, out)
    tf = _terraform(path, dry_run=False)
    tf.run(tf.init(), capture=True)
    data = json.loads(tf.run(tf.output_json(), capture=True) or "{}")
    values = {k: v.get("value") for k, v in data.items()}
    if output is OutputFormat.json:
        print_json(values)
        return
    if not values:
        typer.echo(f"no outputs in the state of {spec_obj.cluster.name}: nothing deployed yet (python -m infra deploy)", err=True)
        return
    for k, v in data.items():
        # As `terraform output` does: a sensitive value is named, not shown (-o json shows it).
        typer.echo(f"{k} = {'(sensitive)' if v.get('sensitive') else json.dumps(v.get('value'))}")


@app.command()
def spec(spec: SpecOpt = None, output: Output = OutputFormat.text) -> None:
    """Validate a spec and show what it resolves to (no CDK involved)."""
    spec_obj = _load(spec)
    data = {
        "project": spec_obj.project,
        "region": spec_obj.region,
        "cluster": spec_obj.cluster.name,
        "min_master_version": spec_obj.min_master_version,
        "network": spec_obj.cidrs.model_dump(),
        "tpu_pools": [
            {
                "name": p.name,
                "shape": p.shape.describe(),
                "slices": p.slices,
                "node_pools": p.node_pool_names(),
                "zone": spec_obj.pool_zone(p),
                "capacity": p.capacity.mode,
            }
            for p in spec_obj.tpu_pools
        ],
        "teams": [{"name": t.name, "namespace": t.ns, "local_queue": t.queue, "priority": t.priority} for t in spec_obj.teams],
    }
    if output is OutputFormat.json:
        print_json(data)
        return
    typer.echo(f"{data['cluster']}: {data['project']} / {data['region']}, GKE >= {data['min_master_version'] or 'channel default'}")
    for p in data["tpu_pools"]:
        typer.echo(f"  {p['name']}: {p['slices']} x {p['shape']}, {p['capacity']}, {p['zone']}")
    for t in data["teams"]:
        typer.echo(f"  team {t['name']}: namespace {t['namespace']}, LocalQueue {t['local_queue']}, priority {t['priority']}")


def main() -> None:
    raise SystemExit(run(app))
