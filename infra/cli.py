"""``python -m infra``: synth, plan, deploy, destroy, outputs.

The CLI parses and prints; ``infra.service`` below it does the work and returns data. Each
command reads its spec once, here at the edge, through ``infra.fleet.load_spec_or_fleet``,
and passes the object down: it is loaded and validated before anything is written or run,
so bad input leaves nothing behind. ``--spec`` takes a fleet file too: ``spec``, ``check``,
``synth``, ``plan``, ``deploy``, ``destroy`` and ``outputs`` then act on every member in the
order ``infra.fleet_service`` states (workers then manager to create, the reverse to
destroy), each announced by a ``== <member>`` line; the commands on one cluster's TPU pools
or prices refuse it, naming the worker specs. CDK Terrain is imported only by the commands
that synthesize (``--help`` must stay fast).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, confirm, make_app, print_json, run

app = make_app("infra", "Provision the GKE + TPU environment described by an environment spec.")

OutOpt = Annotated[Path, typer.Option("--out", help="directory for the synthesized stack")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print what would run; change nothing")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]

DEFAULT_OUT = Path("cdktn.out")


def _load(spec: Path | None):
    """``--spec``: an environment spec or a fleet file (``infra.fleet.Fleet``)."""
    from infra.fleet import load_spec_or_fleet

    return load_spec_or_fleet(spec, want="either")


def _one(spec: Path | None, command: str):
    """``--spec`` of a command on one cluster's TPU pools or prices: a fleet file is refused, naming its workers' specs."""
    from infra.fleet_service import one_cluster

    return one_cluster(_load(spec), command)


def _is_fleet(obj) -> bool:
    from infra.fleet import Fleet

    return isinstance(obj, Fleet)


def _header(member, path: Path | None = None, *, err: bool = False) -> None:
    """The line before a member's part of a fleet command's output."""
    typer.echo(f"== {member.label}" + (f": {path.parent}" if path is not None else ""), err=err)


def _err(line: str) -> None:
    typer.echo(line, err=True)


def _execute(tf, steps, dry_run: bool) -> None:
    """``--dry-run`` prints the steps; a real run runs them (``infra.service.run``), each announced on stderr."""
    from infra import service

    if dry_run:
        for step in steps:
            typer.echo(step.render())
    else:
        service.run(tf, steps, _err)


@app.command()
def synth(
    spec: SpecOpt = None,
    out: OutOpt = DEFAULT_OUT,
    summary: Annotated[bool, typer.Option("--summary", help="print what would be created")] = False,
    output: Output = OutputFormat.text,
    fleet: Annotated[
        Optional[Path],
        typer.Option("--fleet", help="a fleet file: one stack per cluster (every worker, then the MultiKueue manager), printed in deploy order"),
    ] = None,
) -> None:
    """Synthesize the Terraform JSON for the environment."""
    from infra.fleet import load_spec_or_fleet
    from infra.summary import render_text, summarize
    from infra.synth_out import synth_into

    found = load_spec_or_fleet(fleet, want="fleet") if fleet is not None else _load(spec)
    if _is_fleet(found):
        paths = synth_into(found, out)
        if output is OutputFormat.json:
            print_json({"stacks": [str(p) for p in paths], "then": f"python -m workloads queues apply --fleet {found.path}"})
        else:
            for p in paths:
                typer.echo(str(p))
        return
    spec_obj = found
    (path,) = synth_into(spec_obj, out)
    if not summary and output is OutputFormat.text:
        typer.echo(str(path))
        return
    doc = json.loads(path.read_text())
    data = summarize(spec_obj, doc, str(path))
    if output is OutputFormat.json:
        print_json(data)
    else:
        render_text(data)


@app.command()
def plan(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, dry_run: DryRun = False) -> None:
    """Synthesize, terraform init (GCS backend from the spec) and terraform plan.

    A fleet file: every member, the workers first, then the manager.
    """
    from infra import fleet_service, service

    spec_obj = _load(spec)
    if _is_fleet(spec_obj):
        for member, path in fleet_service.stacks(spec_obj, out):
            _header(member, path, err=not dry_run)
            tf = service.terraform(path, dry_run)
            _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)
        return
    (path,) = service.synth_into(spec_obj, out)
    tf = service.terraform(path, dry_run)
    _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)


EndpointOpt = Annotated[str, typer.Option("--endpoint", hidden=True, help="Google API base URL for every API (tests point it at loopback)")]
NoChecks = Annotated[bool, typer.Option("--no-checks", help="do not read the project's machine types, quota and reservations first")]


def _cloud_checks(spec_obj, endpoint: str, dry_run: bool, *, echo=None) -> None:
    """The checks before a cloud call: --dry-run prints the GETs; a real run reads them and raises the first refusal."""
    from infra import service

    if dry_run:
        for line in service.check_requests(spec_obj, endpoint):
            typer.echo(line)
        return
    for f in service.check(spec_obj, endpoint):
        (echo or typer.echo)(f.line())


@app.command()
def check(spec: SpecOpt = None, endpoint: EndpointOpt = "", dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """Before a deploy: the zones offer the TPU machine types, the TPU quota covers the pools, the reservations fit and are READY.

    A fleet file: each worker's (the manager has no TPU pool).
    """
    from infra import service

    spec_obj = _load(spec)
    if _is_fleet(spec_obj):
        _check_fleet(spec_obj, endpoint, dry_run, output)
        return
    if dry_run:
        _cloud_checks(spec_obj, endpoint, dry_run=True)
        return
    if output is OutputFormat.json:
        print_json({"findings": [f.to_dict() for f in service.check(spec_obj, endpoint)]})
        return
    _cloud_checks(spec_obj, endpoint, dry_run=False)


def _check_fleet(fleet, endpoint: str, dry_run: bool, output: OutputFormat) -> None:
    """Each worker's checks, in the fleet's order; the manager has no TPU pool to check. The first refusal stops it."""
    from infra import fleet_service, service

    found = {}
    for member in fleet_service.in_order(fleet):
        if member.is_manager:
            if output is OutputFormat.text:
                _header(member)
                typer.echo("  no TPU pool: nothing to check")
            continue
        with fleet_service.as_member(member):
            if output is OutputFormat.json and not dry_run:
                found[member.name] = [f.to_dict() for f in service.check(member.model, endpoint)]
                continue
            _header(member)
            _cloud_checks(member.model, endpoint, dry_run)
    if output is OutputFormat.json and not dry_run:
        print_json({"fleet": fleet.name, "findings": found})


@app.command()
def deploy(
    spec: SpecOpt = None,
    out: OutOpt = DEFAULT_OUT,
    yes: Yes = False,
    dry_run: DryRun = False,
    no_checks: NoChecks = False,
    endpoint: EndpointOpt = "",
) -> None:
    """Check the project, synthesize, plan, and apply that exact plan; a pool listing several reservations tries them in order.

    A fleet file: every member checked and planned first, then applied workers first, the manager last.
    """
    from infra import reservation_fallback as fallback
    from infra import service

    spec_obj = _load(spec)
    if _is_fleet(spec_obj):
        _deploy_fleet(spec_obj, out, yes, dry_run, no_checks, endpoint)
        return
    if not no_checks:
        _cloud_checks(spec_obj, endpoint, dry_run, echo=_err)
    choice = fallback.first_choice(spec_obj)
    (path,) = service.synth_into(spec_obj, out, reservations=choice)
    tf = service.terraform(path, dry_run)
    _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)
    if dry_run:
        for line in fallback.order_lines(spec_obj):
            typer.echo(line)
        _execute(tf, [tf.apply("tfplan")], dry_run)
        return
    confirm(f"Apply this plan to project {spec_obj.project}?", yes=yes)
    service.apply(spec_obj, out, tf, path, choice, _err)


def _deploy_fleet(fleet, out: Path, yes: bool, dry_run: bool, no_checks: bool, endpoint: str) -> None:
    """Every worker checked, every member synthesized and planned, one confirmation, then each applied in order.

    A member whose apply fails stops the deploy there: the ones before it are deployed, the
    ones after it untouched (the error's line, and the ``== applied`` lines before it, say which).
    """
    from infra import fleet_service, service
    from infra import reservation_fallback as fallback

    workers = [m for m in fleet_service.in_order(fleet) if not m.is_manager]
    if not no_checks:
        for m in workers:
            _header(m, err=not dry_run)
            with fleet_service.as_member(m):
                _cloud_checks(m.model, endpoint, dry_run, echo=_err)
    choices = {m.cluster: fallback.first_choice(m.model) for m in workers}
    planned = []
    for member, path in fleet_service.stacks(fleet, out, reservations=choices):
        _header(member, path, err=not dry_run)
        tf = service.terraform(path, dry_run)
        _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)
        if dry_run:
            for line in [] if member.is_manager else fallback.order_lines(member.model):
                typer.echo(line)
            _execute(tf, [tf.apply("tfplan")], dry_run)
        planned.append((member, path, tf))
    if dry_run:
        return
    names = ", ".join(m.label for m, _, _ in planned)
    confirm(f"Apply these plans to the fleet {fleet.name}, in this order: {names}?", yes=yes)
    for member, path, tf in planned:
        _header(member, path, err=True)
        service.apply(member.model, out, tf, path, choices.get(member.cluster, {}), _err)
        _err(f"== applied {member.label}")


@app.command()
def destroy(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, yes: Yes = False, dry_run: DryRun = False) -> None:
    """Destroy everything the stack created (asks first unless --yes).

    A fleet file: every member, the manager first, then the workers in reverse.
    """
    from infra import service

    spec_obj = _load(spec)
    if _is_fleet(spec_obj):
        _destroy_fleet(spec_obj, out, yes, dry_run)
        return
    if spec_obj.cluster.deletion_protection and not dry_run:
        from toolkit.errors import SpecError

        raise SpecError(
            "cluster.deletion_protection",
            "is true, so GKE refuses to delete the cluster",
            "set it to false and run `python -m infra deploy` first, then destroy",
        )
    (path,) = service.synth_into(spec_obj, out)
    tf = service.terraform(path, dry_run)
    if not dry_run:
        confirm(f"Destroy cluster {spec_obj.cluster.name} and everything else in project {spec_obj.project}?", yes=yes)
    _execute(tf, [tf.init(), tf.plan(out="tfplan-destroy", destroy=True), tf.apply("tfplan-destroy")], dry_run)


def _destroy_fleet(fleet, out: Path, yes: bool, dry_run: bool) -> None:
    """Every member's deletion protection checked first, one confirmation, then each destroyed: the manager, then the workers in reverse."""
    from infra import fleet_service, service

    if not dry_run:
        fleet_service.refuse_protected(fleet)
    ordered = fleet_service.stacks(fleet, out, destroy=True)
    if not dry_run:
        confirm(f"Destroy the fleet {fleet.name}, in this order: {', '.join(m.label for m, _ in ordered)}?", yes=yes)
    for member, path in ordered:
        _header(member, path, err=not dry_run)
        tf = service.terraform(path, dry_run)
        _execute(tf, [tf.init(), tf.plan(out="tfplan-destroy", destroy=True), tf.apply("tfplan-destroy")], dry_run)
        if not dry_run:
            _err(f"== destroyed {member.label}")


@app.command()
def outputs(spec: SpecOpt = None, out: OutOpt = DEFAULT_OUT, output: Output = OutputFormat.text) -> None:
    """Show the stack's outputs from the Terraform state.

    A fleet file: each member's, the workers then the manager.
    """
    from infra import fleet_service, service

    spec_obj = _load(spec)
    if _is_fleet(spec_obj):
        found = {m.name: (m, service.outputs_at(path)) for m, path in fleet_service.stacks(spec_obj, out)}
        if output is OutputFormat.json:
            print_json({name: {k: v.get("value") for k, v in data.items()} for name, (_, data) in found.items()})
            return
        for m, data in found.values():
            _header(m)
            _print_outputs(m.cluster, data)
        return
    data = service.outputs(spec_obj, out)
    values = {k: v.get("value") for k, v in data.items()}
    if output is OutputFormat.json:
        print_json(values)
        return
    _print_outputs(spec_obj.cluster.name, data)


def _print_outputs(cluster: str, data: dict) -> None:
    if not data:
        _err(f"no outputs in the state of {cluster}: nothing deployed yet (python -m infra deploy)")
        return
    for k, v in data.items():
        # As `terraform output` does: a sensitive value is named, not shown (-o json shows it).
        typer.echo(f"{k} = {'(sensitive)' if v.get('sensitive') else json.dumps(v.get('value'))}")


@app.command()
def spec(spec: SpecOpt = None, output: Output = OutputFormat.text) -> None:
    """Validate a spec and show what it resolves to, and what its TPU pools cost (no CDK involved).

    A fleet file: each member, the workers then the manager.
    """
    from infra import fleet_service, service

    found = _load(spec)
    if _is_fleet(found):
        parts = []
        for m in fleet_service.in_order(found):
            data = fleet_service.describe_manager(found) if m.is_manager else service.describe(m.model)
            parts.append((m, {"member": m.name, "role": "manager" if m.is_manager else "worker", "spec": str(m.source), **data}))
        if output is OutputFormat.json:
            print_json({"fleet": found.name, "order": fleet_service.ORDER, "members": [d for _, d in parts]})
            return
        typer.echo(f"fleet {found.name}: {len(found.workers)} workers and a MultiKueue manager; created {fleet_service.ORDER['create']}")
        for m, data in parts:
            _header(m)
            (_print_manager if m.is_manager else _print_spec)(data)
        return
    data = service.describe(found)
    if output is OutputFormat.json:
        print_json(data)
        return
    _print_spec(data)


def _print_manager(data: dict) -> None:
    typer.echo(f"{data['cluster']}: {data['project']} / {data['region']}, GKE >= {data['min_master_version'] or 'channel default'}, state {data['state']}")
    typer.echo(f"  MultiKueue manager of {', '.join(data['workers'])}: its queues hold {', '.join(data['queue_pools'])} (no TPU node of its own)")
    for t in data["teams"]:
        typer.echo(f"  team {t['name']}: namespace {t['namespace']}, LocalQueue {t['local_queue']}, priority {t['priority']}")
    for b in data["buckets"]:
        typer.echo(f"  bucket {b['name']} ({b['purpose']}, {b['location']}): written by {len(b['granted_to'])} service accounts of the workers")
    if not data["buckets"]:
        typer.echo("  no fleet bucket: runs through the manager cannot checkpoint (add buckets: to the fleet file)")


def _print_spec(data: dict) -> None:
    from infra.pricing import cost_lines

    typer.echo(f"{data['cluster']}: {data['project']} / {data['region']}, GKE >= {data['min_master_version'] or 'channel default'}")
    for p in data["tpu_pools"]:
        how = f", compute class {p['compute_class']} (GKE creates the slices)" if p["compute_class"] else ""
        mtc = p["multi_tier_checkpointing"]
        how += f", multi-tier checkpointing ({mtc['ramdisk_gib']} GiB RAM disk per VM, backed up to {mtc['bucket']})" if mtc else ""
        typer.echo(f"  {p['name']}: {p['slices']} x {p['shape']}, {' > '.join(p['capacity_options'])}, {p['zone']}{how}")
    for t in data["teams"]:
        typer.echo(f"  team {t['name']}: namespace {t['namespace']}, LocalQueue {t['local_queue']}, priority {t['priority']}")
    for d in data["datasets"]:
        typer.echo(f"  dataset {d['name']}: {d['source']} ({d['format']}), read by team {d['team']}")
    if lu := data["lustre"]:
        where = f"mount address {lu['ip']}" if lu["ip"] else "mount address unknown until deployed (set lustre.ip)"
        typer.echo(f"  lustre {lu['name']}: {lu['capacity_gib']} GiB at {lu['throughput']} MB/s/TiB in {lu['zone']}, file system {lu['filesystem']}, {where}")
    r = data["recovery"]
    typer.echo(f"recovery: runs restart {r['restart']} ({r['restart_why']})")
    if w := r["wait_for_pods_ready"]:
        for key, name in (("timeout", "timeout"), ("recovery_timeout", "recoveryTimeout")):
            e = w[key]
            src = "set in the spec; needs" if e["set_in_spec"] else "derived:"
            typer.echo(f"  Kueue waitForPodsReady {name} {e['seconds']} s ({e['seconds'] / 60:.0f} min): {e['guards']}; {src} {e['derived_from']}")
    else:
        typer.echo("  Kueue waitForPodsReady off (kueue.wait_for_pods_ready.enabled: false): a run whose pods never get Ready holds its quota")
    typer.echo("cost (USD):")
    for line in cost_lines(data["cost"]):
        typer.echo(line)


pools_app = make_app("pools", "Between campaigns: scale autoscaling TPU pools to zero, or delete the TPU pools.")
app.add_typer(pools_app, name="pools")
PoolsOpt = Annotated[Optional[list[str]], typer.Option("--pool", help="tpu_pools entry (repeatable; default: every TPU pool)")]


@pools_app.command("scale-to-zero")
def pools_scale_to_zero(spec: SpecOpt = None, pool: PoolsOpt = None, yes: Yes = False, dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """Resize every node pool of the autoscaling TPU pools to 0 (gcloud); the autoscaler brings slices back for admitted runs."""
    from infra import pools as pl
    from infra import service

    spec_obj = _one(spec, "pools scale-to-zero")
    chosen = pl.select(spec_obj, pool or [], declared=True)
    cmds = service.scale_to_zero(spec_obj, chosen, gcloud=service.gcloud(dry_run), explicit=bool(pool))
    if dry_run:
        if output is OutputFormat.json:
            print_json({"commands": [list(c) for c in cmds]})
        else:
            for c in cmds:
                typer.echo(" ".join(c))
        return
    confirm(f"Scale {len(cmds)} TPU node pool(s) of {spec_obj.cluster.name} to zero nodes?", yes=yes)
    service.run_commands(cmds, _err)


@pools_app.command("status")
def pools_status(spec: SpecOpt = None, pool: PoolsOpt = None, endpoint: EndpointOpt = "", dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """GKE's status of every TPU node pool (PROVISIONING, ERROR...) with the way to recover; exit 1 when one is not RUNNING."""
    from infra import pools as pl
    from infra import service

    spec_obj = _one(spec, "pools status")
    chosen = pl.select(spec_obj, pool or [], declared=True)
    if dry_run:
        typer.echo(service.pool_status_request(spec_obj, endpoint))
        return
    rows = service.pool_status(spec_obj, chosen, endpoint)
    if output is OutputFormat.json:
        print_json({"node_pools": [{**r.__dict__, "healthy": r.healthy} for r in rows]})
    else:
        for r in rows:
            typer.echo(r.line())
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@pools_app.command("delete-tpu")
def pools_delete_tpu(spec: SpecOpt = None, pool: PoolsOpt = None, out: OutOpt = DEFAULT_OUT, yes: Yes = False, dry_run: DryRun = False) -> None:
    """Destroy the TPU node pools through Terraform (targeted destroy plan); `deploy` recreates them."""
    from infra import pools as pl
    from infra import service

    spec_obj = _one(spec, "pools delete-tpu")
    chosen = pl.select(spec_obj, pool or [], declared=True)
    tf, steps, addresses = service.delete_tpu(spec_obj, chosen, out, dry_run)
    _execute(tf, steps, dry_run)
    if not dry_run:
        confirm(f"Delete {len(addresses)} TPU node pool(s) of {spec_obj.cluster.name}?", yes=yes)
    _execute(tf, [tf.apply("tfplan-delete-tpu")], dry_run)


prices_app = make_app("prices", "The TPU price table (USD per chip-hour, with its sources and dates).")
app.add_typer(prices_app, name="prices")


@prices_app.command("show")
def prices_show(
    region: Annotated[str, typer.Option("--region", help="region to list (default: the spec's)")] = "",
    spec: SpecOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """The rates for a region: the spec's prices: section over the shipped table, each with its date."""
    from infra import service
    from infra.price_table import MODES

    spec_obj = _one(spec, "prices show")
    region = region or spec_obj.region
    rows = service.price_rows(spec_obj, region)
    if output is OutputFormat.json:
        print_json({"region": region, "currency": "USD", "unit": "chip-hour", "rates": rows})
        return
    typer.echo(f"TPU prices in {region}, USD per chip-hour (not live; each with the day it was taken):")
    for r in rows:
        cells = [f"{m} " + ("–" if r[m] is None else f"{r[m]['usd_per_chip_hour']:g} ({r[m]['price_as_of']}, {r[m]['price_source']})") for m in MODES]
        typer.echo(f"  {r['generation']:<6} " + "; ".join(cells))


@prices_app.command("refresh")
def prices_refresh(
    from_file: Annotated[Optional[Path], typer.Option("--from-file", help="a saved services/<id>/skus JSON response (one page, or a list of pages)")] = None,
    as_of: Annotated[str, typer.Option("--as-of", help="YYYY-MM-DD the response was fetched (required with --from-file)")] = "",
    table: Annotated[Optional[Path], typer.Option("--table", help="price table to update (default: infra/prices.yaml)")] = None,
    endpoint: Annotated[str, typer.Option("--endpoint", hidden=True, help="Cloud Billing API base URL (tests point it at loopback)")] = "",
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
) -> None:
    """Update the table from the Cloud Billing Catalog API (Compute Engine TPU SKUs); other rows keep their own dates.

    Live: needs $TGK_BILLING_API_KEY (an API key) or `gcloud auth print-access-token`.
    """
    import datetime as dt

    from infra import price_refresh as pr
    from infra.price_table import TABLE_PATH, load_table

    path = (table or TABLE_PATH).resolve()
    pr.check_options(from_file=from_file, as_of=as_of)
    current = load_table(path)
    url = pr.skus_url(endpoint or pr.ENDPOINT)
    key = os.environ.get("TGK_BILLING_API_KEY") or None
    if from_file is None and dry_run:
        for line in pr.plan_lines(url, path, api_key=key):
            typer.echo(line)
        return
    if from_file is not None:
        pages = pr.read_saved(from_file)
        source_url, stamp, where = f"{url} (saved response {from_file.name})", as_of, "--from-file"
    else:
        pages = pr.fetch_pages(url, api_key=key, token=None if key else pr.gcloud_token)
        source_url, stamp, where = url, as_of or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), url
    done = pr.refresh(current, path, pages, as_of=stamp, source_url=source_url, where=where, write=not dry_run)
    result = done.to_dict()
    if output is OutputFormat.json:
        print_json(result)
        return
    found = done.found
    verb = "would update" if dry_run else "updated"
    typer.echo(
        f"{verb} {path}: {len(found.prices)} TPU figures from {found.tpu_skus} TPU SKUs (of {found.skus}), as of {stamp}: "
        f"{len(done.changes)} changed or new, {done.unchanged} unchanged"
    )
    for c in done.changes:
        typer.echo(f"  {c.line()}")
    for why, n in sorted(found.skipped.items()):
        typer.echo(f"  skipped {n} SKU(s): {why}")
    for c in result["conflicting"]:
        typer.echo(f"  left out (two SKUs disagree): {c}")


def main() -> None:
    raise SystemExit(run(app))
