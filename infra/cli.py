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
from typing import Annotated, Optional

import typer

from toolkit.clikit import Output, OutputFormat, SpecOpt, check_out_dir, confirm, make_app, print_json, run
from toolkit.names import CapacityMode

app = make_app("infra", "Provision the GKE + TPU environment described by an environment spec.")

OutOpt = Annotated[Path, typer.Option("--out", help="directory for the synthesized stack")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print what would run; change nothing")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]

DEFAULT_OUT = Path("cdktn.out")


def _load(spec: Path | None):
    from infra.spec import load_spec

    return load_spec(spec)


def _synth_into(spec_obj, out: Path, *, reservations: dict[str, str] | None = None) -> Path:
    """Synthesize into a scratch dir, then write what it made into ``out``: a failed synth writes nothing.

    ``out/stacks/<cluster>/`` is also terraform's working directory (``.terraform/``, plans,
    maybe a local state) and may hold the user's own ``.tf`` files: only the files an
    earlier synth wrote there are replaced (``toolkit.owned``), the rest is left alone; a
    synthesized file the user edited, a symlink or a file in the way is refused.
    """
    from toolkit import owned

    check_out_dir(out)  # before CDK loads: a bad --out costs nothing
    from infra.stack import synth

    scratch = Path(tempfile.mkdtemp(prefix="tgk-synth-"))
    try:
        produced = synth(spec_obj, scratch, reservations=reservations)
        stack_dir = produced.parent.relative_to(scratch).as_posix()
        stack_files = {p.relative_to(produced.parent).as_posix(): p.read_bytes() for p in sorted(produced.parent.rglob("*")) if p.is_file()}
        top = {p.name: p.read_bytes() for p in scratch.iterdir() if p.is_file()}  # cdktn's manifest.json
        out = owned.check_root(out, "--out")

        def check() -> None:
            # Both surveyed before either is written: a refusal changes nothing.
            owned.check_update(out, stack_files, "--out", stack_dir)
            owned.check_update(out, top, "--out")

        check()  # before the lock too: a refusal leaves not even the lock file behind
        with owned.locked(out, "--out"):
            check()
            owned.update_files(out, stack_dir, stack_files, "--out", prune=True)
            owned.update_files(out, "", top, "--out")
        return out / stack_dir / produced.name
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _synth_fleet_into(fleet, out: Path) -> list[Path]:
    """``_synth_into`` for every stack of a fleet (``infra.fleet_stack``), all checked before any is written."""
    from toolkit import owned

    check_out_dir(out)
    from infra.fleet_stack import synth_fleet

    scratch = Path(tempfile.mkdtemp(prefix="tgk-synth-"))
    try:
        produced = synth_fleet(fleet, scratch)
        stacks = {
            p.parent.relative_to(scratch).as_posix(): {f.relative_to(p.parent).as_posix(): f.read_bytes() for f in sorted(p.parent.rglob("*")) if f.is_file()}
            for p in produced
        }
        top = {p.name: p.read_bytes() for p in scratch.iterdir() if p.is_file()}
        out = owned.check_root(out, "--out")

        def check() -> None:
            for stack_dir, files in stacks.items():
                owned.check_update(out, files, "--out", stack_dir)
            owned.check_update(out, top, "--out")

        check()
        with owned.locked(out, "--out"):
            check()
            for stack_dir, files in stacks.items():
                owned.update_files(out, stack_dir, files, "--out", prune=True)
            owned.update_files(out, "", top, "--out")
        return [out / p.parent.relative_to(scratch) / p.name for p in produced]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
    from infra.summary import render_text, summarize

    if fleet is not None:
        from infra.fleet import load_fleet

        paths = _synth_fleet_into(load_fleet(fleet), out)
        if output is OutputFormat.json:
            print_json({"stacks": [str(p) for p in paths], "then": f"python -m workloads queues apply --fleet {fleet}"})
        else:
            for p in paths:
                typer.echo(str(p))
        return
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


EndpointOpt = Annotated[str, typer.Option("--endpoint", hidden=True, help="Google API base URL for every API (tests point it at loopback)")]
NoChecks = Annotated[bool, typer.Option("--no-checks", help="do not read the project's machine types, quota and reservations first")]


def _cloud_checks(spec_obj, endpoint: str, dry_run: bool, *, echo=None) -> list:
    """The checks before a cloud call: --dry-run prints the GETs; a real run reads them and raises the first refusal."""
    from infra import cloud_checks
    from infra.gcp_api import Client, endpoint_override

    base = endpoint_override(endpoint)
    if dry_run:
        for req in cloud_checks.requests(spec_obj):
            typer.echo(req.render(base))
        return []
    findings = cloud_checks.run(spec_obj, Client(endpoint=base).get)
    err = cloud_checks.refusal(findings)
    if err is not None:
        raise err
    for f in findings:
        (echo or typer.echo)(f.line())
    return findings


@app.command()
def check(spec: SpecOpt = None, endpoint: EndpointOpt = "", dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """Before a deploy: the zones offer the TPU machine types, the TPU quota covers the pools, the reservations fit and are READY."""
    spec_obj = _load(spec)
    if dry_run:
        _cloud_checks(spec_obj, endpoint, dry_run=True)
        return
    if output is OutputFormat.json:
        from infra import cloud_checks
        from infra.gcp_api import Client, endpoint_override

        findings = cloud_checks.run(spec_obj, Client(endpoint=endpoint_override(endpoint)).get)
        err = cloud_checks.refusal(findings)
        if err is not None:
            raise err
        print_json({"findings": [f.to_dict() for f in findings]})
        return
    _cloud_checks(spec_obj, endpoint, dry_run=False)


@app.command()
def deploy(
    spec: SpecOpt = None,
    out: OutOpt = DEFAULT_OUT,
    yes: Yes = False,
    dry_run: DryRun = False,
    no_checks: NoChecks = False,
    endpoint: EndpointOpt = "",
) -> None:
    """Check the project, synthesize, plan, and apply that exact plan; a pool listing several reservations tries them in order."""
    from infra import fallback

    spec_obj = _load(spec)
    if not no_checks:
        _cloud_checks(spec_obj, endpoint, dry_run, echo=lambda line: typer.echo(line, err=True))
    choice = fallback.first_choice(spec_obj)
    path = _synth_into(spec_obj, out, reservations=choice)
    tf = _terraform(path, dry_run)
    _execute(tf, [tf.init(), tf.plan(out="tfplan")], dry_run)
    if dry_run:
        for line in fallback.order_lines(spec_obj):
            typer.echo(line)
        _execute(tf, [tf.apply("tfplan")], dry_run)
        return
    confirm(f"Apply this plan to project {spec_obj.project}?", yes=yes)
    if not choice:
        _execute(tf, [tf.apply("tfplan")], dry_run)
        return

    def attempt(c: dict[str, str]):
        nonlocal path
        if c != choice:  # a later attempt: the pools that ran out move to their next reservation
            path = _synth_into(spec_obj, out, reservations=c)
            replan = tf.plan(out="tfplan")
            typer.echo(f"$ {replan.render()}", err=True)
            tf.run(replan)
        step = tf.apply("tfplan")
        typer.echo(f"$ {step.render()}", err=True)
        done = tf.run_logged(step, path.parent / "logs", f"apply-{'-'.join(sorted(c.values()))}")
        return fallback.Outcome(done.ok, done.stderr_text() + done.stdout_text())

    fallback.execute(spec_obj, attempt, lambda line: typer.echo(line, err=True))


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
    """Validate a spec and show what it resolves to, and what its TPU pools cost (no CDK involved)."""
    from infra.pricing import cost_lines, costs_document

    spec_obj = _load(spec)
    data = {
        "project": spec_obj.project,
        "region": spec_obj.region,
        "cluster": spec_obj.cluster.name,
        "min_master_version": spec_obj.min_master_version,
        "tensorboard_region": spec_obj.tensorboard_region if spec_obj.tensorboard.enabled else None,
        "network": spec_obj.cidrs.model_dump(),
        "tpu_pools": [
            {
                "name": p.name,
                "shape": p.shape.describe(),
                "slices": p.slices,
                "node_pools": p.node_pool_names(),
                "zone": spec_obj.pool_zone(p),
                "capacity": p.capacity.mode,
                "compute_class": p.class_name,
                # in priority order: a fallback list's options, each with what tells it apart
                "capacity_options": [
                    c.mode + (f" {c.name}" if c.mode == CapacityMode.RESERVATION else "") + (" (queued)" if getattr(c, "queued", False) else "")
                    for c in p.capacities
                ],
                # GKE's multi-tier checkpointing: the RAM disk per VM and the backup bucket
                "multi_tier_checkpointing": None
                if p.multi_tier_checkpointing is None
                else {"ramdisk_gib": p.multi_tier_checkpointing.ramdisk_gib, "bucket": spec_obj.mtc_bucket(p.multi_tier_checkpointing)},
            }
            for p in spec_obj.tpu_pools
        ],
        "teams": [{"name": t.name, "namespace": t.ns, "local_queue": t.queue, "priority": t.priority} for t in spec_obj.teams],
        "datasets": [
            {"name": d.name, "source": f"gs://{d.bucket}/{d.object_prefix()}", "format": d.format.value, "team": spec_obj.dataset_team(d).name}
            for d in spec_obj.datasets
        ],
        "lustre": None if spec_obj.lustre is None else {**spec_obj.lustre.model_dump(exclude={"zone"}), "zone": spec_obj.lustre_zone},
        "cost": costs_document(spec_obj),
    }
    if output is OutputFormat.json:
        print_json(data)
        return
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
    typer.echo("cost (USD):")
    for line in cost_lines(data["cost"]):
        typer.echo(line)


pools_app = make_app("pools", "Between campaigns: scale autoscaling TPU pools to zero, or delete the TPU pools.")
app.add_typer(pools_app, name="pools")
PoolsOpt = Annotated[Optional[list[str]], typer.Option("--pool", help="tpu_pools entry (repeatable; default: every TPU pool)")]


def _gcloud(dry_run: bool) -> str:
    if dry_run:
        return "gcloud"
    found = shutil.which("gcloud")
    if not found:
        from toolkit.errors import ExternalToolError

        raise ExternalToolError("gcloud is not on PATH — install the Google Cloud CLI, or print the calls with --dry-run")
    return found


@pools_app.command("scale-to-zero")
def pools_scale_to_zero(spec: SpecOpt = None, pool: PoolsOpt = None, yes: Yes = False, dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """Resize every node pool of the autoscaling TPU pools to 0 (gcloud); the autoscaler brings slices back for admitted runs."""
    from infra import pools as pl
    from toolkit import tools

    spec_obj = _load(spec)
    chosen = pl.select(spec_obj, pool or [], declared=True)
    cmds = pl.scale_to_zero(spec_obj, chosen, gcloud=_gcloud(dry_run), explicit=bool(pool))
    if dry_run:
        if output is OutputFormat.json:
            print_json({"commands": [list(c) for c in cmds]})
        else:
            for c in cmds:
                typer.echo(" ".join(c))
        return
    confirm(f"Scale {len(cmds)} TPU node pool(s) of {spec_obj.cluster.name} to zero nodes?", yes=yes)
    for c in cmds:
        typer.echo(f"$ {' '.join(c)}", err=True)
        tools.run(c, capture=False, check=True)


@pools_app.command("status")
def pools_status(spec: SpecOpt = None, pool: PoolsOpt = None, endpoint: EndpointOpt = "", dry_run: DryRun = False, output: Output = OutputFormat.text) -> None:
    """GKE's status of every TPU node pool (PROVISIONING, ERROR...) with the way to recover; exit 1 when one is not RUNNING."""
    from infra import pools as pl
    from infra.gcp_api import Client, endpoint_override
    from toolkit.errors import FieldError

    spec_obj = _load(spec)
    chosen = pl.select(spec_obj, pool or [], declared=True)
    req = pl.node_pools_request(spec_obj)
    base = endpoint_override(endpoint)
    if dry_run:
        typer.echo(req.render(base))
        return
    answer = Client(endpoint=base).get(req)
    if answer is None:
        raise FieldError(
            "cluster.name", f"no cluster {spec_obj.cluster.name!r} in {spec_obj.project}/{spec_obj.region}", "deploy it first: python -m infra deploy"
        )
    rows = pl.status(spec_obj, answer, chosen)
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
    from infra.terraform import Step

    spec_obj = _load(spec)
    chosen = pl.select(spec_obj, pool or [], declared=True)
    if not chosen:  # before anything is written: a destroy plan without -target would be the whole environment's
        from toolkit.errors import FieldError

        raise FieldError("--pool", "no TPU pool of the spec has node pools the stack declares (all are compute class pools)", "nothing to delete")
    path = _synth_into(spec_obj, out)
    addresses = pl.targets(json.loads(path.read_text()), spec_obj, chosen)
    if not addresses:
        raise RuntimeError("no node pool addresses for the selected pools: refusing a destroy plan without -target")
    tf = _terraform(path, dry_run)
    plan_step = tf.plan(out="tfplan-delete-tpu", destroy=True)
    plan_step = Step((*plan_step.args, *(f"-target={a}" for a in addresses)))
    _execute(tf, [tf.init(), plan_step], dry_run)
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
    from infra.price_table import MODES
    from infra.pricing import prices_for
    from toolkit.errors import FieldError

    spec_obj = _load(spec)
    region = region or spec_obj.region
    prices = prices_for(spec_obj)
    gens = {r.generation for r in prices.table.rows} | {o.generation for o in (spec_obj.prices.chip_hour if spec_obj.prices else [])}
    rows = []
    for gen in sorted(gens):
        rates = {m: prices.rate(gen, region, m) for m in MODES}
        if any(rates.values()):
            rows.append({"generation": gen, **{m: None if r is None else r.to_dict() for m, r in rates.items()}})
    if not rows:
        raise FieldError(
            "--region",
            f"no TPU prices for {region!r} in infra/prices.yaml or the spec's prices: section",
            "add them under the spec's prices: (generation, region, USD per chip-hour), or pick a listed region",
        )
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
    import re

    from infra import price_refresh as pr
    from infra.price_table import DATE, TABLE_PATH, load_table
    from toolkit.errors import FieldError
    from toolkit.yamlfile import read_capped

    path = (table or TABLE_PATH).resolve()
    if as_of and not re.fullmatch(DATE, as_of):
        raise FieldError("--as-of", f"{as_of!r} is not a date", "write it as YYYY-MM-DD")
    if from_file is not None and not as_of:
        raise FieldError(
            "--as-of", "is required with --from-file (a saved response has no fetch date)", "give the day the file was fetched, e.g. --as-of 2026-11-20"
        )
    current = load_table(path)
    url = pr.skus_url(endpoint or pr.ENDPOINT)
    key = os.environ.get("TGK_BILLING_API_KEY") or None
    if from_file is None and dry_run:
        auth = "API key from $TGK_BILLING_API_KEY" if key else "bearer token from `gcloud auth print-access-token`"
        typer.echo(f"GET {url}?currencyCode=USD&pageSize=5000[&pageToken=…] ({auth}), every page")
        typer.echo(f"then update {path}: TPU SKUs' per-chip-hour prices (on-demand, spot, 1-year commitment as reservation)")
        return
    if from_file is not None:
        from toolkit.inputfile import PRICE_RESPONSE, NotReadable, read_bounded

        try:
            raw = pr.parse_json(read_bounded(from_file, PRICE_RESPONSE))  # a regular file of at most 64 MiB
        except NotReadable as e:
            raise FieldError("--from-file", e.problem, e.fix) from None
        except FileNotFoundError:
            raise FieldError("--from-file", f"{from_file} does not exist", "pass a saved services/<id>/skus JSON response") from None
        except (OSError, ValueError) as e:
            why = getattr(e, "strerror", None) or str(e).splitlines()[0]
            raise FieldError("--from-file", f"cannot read {from_file} as JSON: {why}", "pass a saved services/<id>/skus JSON response") from None
        pages = raw if isinstance(raw, list) else [raw]
        source_url, stamp, where = f"{url} (saved response {from_file.name})", as_of, "--from-file"
    else:
        pages = pr.fetch_pages(url, api_key=key, token=None if key else _gcloud_token)
        source_url, stamp, where = url, as_of or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), url
    try:
        found = pr.tpu_prices(pages)
    except pr.RefreshError as e:
        raise FieldError(where, str(e), f"use the response of services/{pr.COMPUTE_SERVICE}/skus (Compute Engine)") from None
    doc, changes, same = pr.merge(current, found, as_of=stamp, url=source_url)
    if not dry_run:
        from infra.price_table import parse_table
        from toolkit.errors import ToolkitError
        from toolkit.owned import write_atomic
        from toolkit.yamlfile import load_yaml

        text = pr.dump_table(doc, pr.header_of(read_capped(path).decode("utf-8", errors="replace")))
        # What is written is what was merged: the text read back as the loader reads it, before it replaces the table.
        if parse_table(load_yaml(text.encode()), str(path)) != parse_table(doc, str(path)):
            raise ToolkitError(f"internal: the refreshed table would read back differently; {path} left as it was — please report this")
        write_atomic(path, text)
        load_table.cache_clear()
    result = {
        "table": str(path),
        "written": not dry_run,
        "as_of": stamp,
        "skus": found.skus,
        "tpu_skus": found.tpu_skus,
        "figures": len(found.prices),
        "unchanged": same,
        "changed": [c.line() for c in changes],
        "skipped": found.skipped,
        "conflicting": sorted(found.conflicts.values()),
    }
    if output is OutputFormat.json:
        print_json(result)
        return
    verb = "would update" if dry_run else "updated"
    typer.echo(
        f"{verb} {path}: {len(found.prices)} TPU figures from {found.tpu_skus} TPU SKUs (of {found.skus}), as of {stamp}: "
        f"{len(changes)} changed or new, {same} unchanged"
    )
    for c in changes:
        typer.echo(f"  {c.line()}")
    for why, n in sorted(found.skipped.items()):
        typer.echo(f"  skipped {n} SKU(s): {why}")
    for c in result["conflicting"]:
        typer.echo(f"  left out (two SKUs disagree): {c}")


def _gcloud_token() -> str:
    import shutil

    from toolkit import tools
    from toolkit.errors import ExternalToolError

    if shutil.which("gcloud") is None:
        raise ExternalToolError("gcloud is not installed: set $TGK_BILLING_API_KEY to an API key, or refresh --from-file a saved response")
    # A token is a few KiB: a minute and 1 MiB of output bound a gcloud that hangs or floods.
    proc = tools.run(["gcloud", "auth", "print-access-token"], timeout=60, max_output=1024 * 1024)
    if not proc.ok:
        raise proc.failure("gcloud auth print-access-token")
    return proc.stdout.strip()


def main() -> None:
    raise SystemExit(run(app))
