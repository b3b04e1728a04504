"""Provision an environment: the work behind ``python -m infra``, as functions that return data.

    describe(spec) -> {...}              what ``infra spec`` shows: shapes, node pools, ranges, teams, cost
    synth_into(spec | fleet, out)        the stacks written into --out (infra.synth_out)
    check_requests(spec, endpoint)       the GETs the capacity checks make (--dry-run)
    check(spec, endpoint) -> findings    machine types, TPU quota, reservations; raises the first refusal
    terraform(path, dry_run)             the Terraform runner of a synthesized stack
    run(tf, steps, progress)             each step run, announced first
    apply(spec, out, tf, choice, ...)    apply the plan, trying a pool's reservations in order (infra.reservation_fallback)
    outputs(spec, out) -> {...}          the stack's outputs from the Terraform state (outputs_at: of a synthesized stack)
    scale_to_zero / pool_status / delete_tpu   the pools between campaigns (infra.pools)
    price_rows(spec, region) -> [...]    the rates of a region (the spec's prices over the shipped table)

A fleet file's members, each in its stated order, are ``infra.fleet_service``'s; each member's
work is still one of these. Nothing here prints: the CLI (``infra.cli``) reads the spec once, calls these and formats
what they return; a line of progress goes to the ``progress`` callable it passes. Bad input
raises a ``ToolkitError`` naming the flag or the field, before anything is written or run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.synth_out import synth_into
from toolkit.names import CapacityMode

if TYPE_CHECKING:
    from infra.cloud_checks import Finding
    from infra.pools import PoolStatus
    from infra.spec import EnvSpec, TpuPoolSpec
    from infra.terraform import Step, Terraform

Progress = Callable[[str], None]


# ------------------------------------------------------------------ the spec


def describe(spec: EnvSpec) -> dict[str, Any]:
    """What the spec resolves to, and what its TPU pools cost (``infra spec``; no CDK involved)."""
    from infra.pricing import costs_document

    return {
        "project": spec.project,
        "region": spec.region,
        "cluster": spec.cluster.name,
        "min_master_version": spec.min_master_version,
        "tensorboard_region": spec.tensorboard_region if spec.tensorboard.enabled else None,
        "network": spec.cidrs.model_dump(),
        "tpu_pools": [
            {
                "name": p.name,
                "shape": p.shape.describe(),
                "slices": p.slices,
                "node_pools": p.node_pool_names(),
                "zone": spec.pool_zone(p),
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
                else {"ramdisk_gib": p.multi_tier_checkpointing.ramdisk_gib, "bucket": spec.mtc_bucket(p.multi_tier_checkpointing)},
            }
            for p in spec.tpu_pools
        ],
        "teams": [{"name": t.name, "namespace": t.ns, "local_queue": t.queue, "priority": t.priority} for t in spec.teams],
        "datasets": [
            {"name": d.name, "source": f"gs://{d.bucket}/{d.object_prefix()}", "format": d.format.value, "team": spec.dataset_team(d).name}
            for d in spec.datasets
        ],
        "lustre": None if spec.lustre is None else {**spec.lustre.model_dump(exclude={"zone"}), "zone": spec.lustre_zone},
        "recovery": recovery_document(spec),
        "cost": costs_document(spec),
    }


def recovery_document(spec: EnvSpec) -> dict[str, Any]:
    """How runs restart, and Kueue's waitForPodsReady: each value, whether the spec set it, and why (``infra.recovery``)."""
    w = spec.kueue.wait_for_pods_ready
    timeout, recovery_timeout = spec.wait_for_pods_ready
    (_, why_start), (_, why_back) = spec.wait_for_pods_ready_needs()
    path = spec.restart_path
    if spec.recovery.restart != "auto":
        path_why = f"recovery.restart: {spec.recovery.restart}"
    elif path == "in-place":
        path_why = f"auto: JobSet {spec.versions.jobset} and GKE >= {spec.min_master_version} have in-place restarts"
    else:
        path_why = (
            f"auto: in-place needs JobSet >= v0.11.0 (spec: {spec.versions.jobset}) and GKE >= 1.35 (spec: {spec.min_master_version or 'channel default'}); "
            "set recovery.restart: in-place to raise the floor"
        )

    def entry(seconds: int, given: int | None, why: str, what: str) -> dict[str, Any]:
        return {"seconds": seconds, "set_in_spec": given is not None, "guards": what, "derived_from": why}

    return {
        "restart": path,
        "restart_why": path_why,
        "wait_for_pods_ready": None
        if not w.enabled
        else {
            "timeout": entry(timeout, w.timeout_seconds, why_start, "admission -> every pod of a run Ready, else Kueue evicts and requeues it"),
            "recovery_timeout": entry(
                recovery_timeout, w.recovery_timeout_seconds, why_back, "a running run's pod lost -> every pod Ready again, else Kueue evicts and requeues it"
            ),
            "figures": "infra/recovery.py (each with its source; a checkpoint restore happens after the pods are Ready and is not covered)",
        },
    }


# ------------------------------------------------------------------ the project's capacity


def check_requests(spec: EnvSpec, endpoint: str = "") -> list[str]:
    """The GETs ``check`` makes, as ``--dry-run`` prints them."""
    from infra import cloud_checks
    from infra.gcp_api import endpoint_override

    base = endpoint_override(endpoint)
    return [req.render(base) for req in cloud_checks.requests(spec)]


def check(spec: EnvSpec, endpoint: str = "") -> list[Finding]:
    """Before a cloud call: the zones offer the TPU machine types, the quota covers the pools, the reservations fit.

    Raises the first refusal (a ``FieldError`` naming the pool's field); returns every finding otherwise.
    """
    from infra import cloud_checks
    from infra.gcp_api import Client, endpoint_override

    client = Client(endpoint=endpoint_override(endpoint))
    findings = cloud_checks.run(spec, client.get, client.pages)
    err = cloud_checks.refusal(findings)
    if err is not None:
        raise err
    return findings


# ------------------------------------------------------------------ terraform


def terraform(path: Path, dry_run: bool) -> Terraform:
    """The runner of the stack at ``path`` (``--dry-run`` needs no terraform installed: nothing runs)."""
    from infra.terraform import Terraform, find_terraform

    binary = "terraform" if dry_run else find_terraform()
    return Terraform(workdir=path.parent, binary=binary)


def run(tf: Terraform, steps: Iterable[Step], progress: Progress) -> None:
    """Run each step, announcing it first (``$ terraform ...``)."""
    for step in steps:
        progress(f"$ {step.render()}")
        tf.run(step)


def apply(spec: EnvSpec, out: Path, tf: Terraform, path: Path, choice: dict[str, str], progress: Progress) -> None:
    """Apply the plan ``tfplan``; with reservations to choose (``choice``), try each pool's in order (``infra.reservation_fallback``).

    A later attempt re-synthesizes with the pools that ran out moved to their next
    reservation, plans again and applies; each attempt's output is kept under the stack's
    ``logs/`` and one line per attempt goes to ``progress``.
    """
    from infra import reservation_fallback as fallback

    if not choice:
        run(tf, [tf.apply("tfplan")], progress)
        return

    def attempt(c: dict[str, str]) -> fallback.Outcome:
        nonlocal path
        if c != choice:  # a later attempt: the pools that ran out move to their next reservation
            path = synth_into(spec, out, reservations=c)[0]
            replan = tf.plan(out="tfplan")
            progress(f"$ {replan.render()}")
            tf.run(replan)
        step = tf.apply("tfplan")
        progress(f"$ {step.render()}")
        done = tf.run_logged(step, path.parent / "logs", f"apply-{'-'.join(sorted(c.values()))}")
        return fallback.Outcome(done.ok, done.stderr_text() + done.stdout_text())

    fallback.execute(spec, attempt, progress)


OUTPUTS_MAX_BYTES = 16 * 1024 * 1024  # terraform output -json of one stack: a few KiB


def outputs(spec: EnvSpec, out: Path) -> dict[str, Any]:
    """The stack's outputs as ``terraform output -json`` gives them (``{name: {value, sensitive, ...}}``)."""
    return outputs_at(synth_into(spec, out)[0])


def outputs_at(path: Path) -> dict[str, Any]:
    """The outputs of the synthesized stack at ``path`` (a fleet member's: ``infra.fleet_service.stacks``)."""
    tf = terraform(path, dry_run=False)
    tf.run(tf.init(), capture=True)
    from toolkit.errors import ExternalToolError
    from toolkit.jsontext import JsonTextError, load_json

    try:
        return load_json(tf.run(tf.output_json(), capture=True) or "{}", max_bytes=OUTPUTS_MAX_BYTES)
    except JsonTextError as e:
        raise ExternalToolError(f"`terraform output -json` printed an answer that {e.problem} — run it yourself in {path.parent} to see why") from None


# ------------------------------------------------------------------ pools between campaigns


def scale_to_zero(spec: EnvSpec, pools: list[TpuPoolSpec], *, gcloud: str, explicit: bool) -> list[tuple[str, ...]]:
    """The gcloud commands that resize every node pool of the autoscaling ``pools`` to 0 (``infra.pools``)."""
    from infra import pools as pl

    return pl.scale_to_zero(spec, pools, gcloud=gcloud, explicit=explicit)


def run_commands(commands: Iterable[tuple[str, ...]], progress: Progress) -> None:
    """Run each command (argument lists, never a shell), announcing it first."""
    from toolkit import tools

    for c in commands:
        progress(f"$ {' '.join(c)}")
        tools.run(c, capture=False, check=True)


def gcloud(dry_run: bool) -> str:
    """The gcloud to run (``--dry-run`` prints ``gcloud``, and needs none installed)."""
    import shutil

    if dry_run:
        return "gcloud"
    found = shutil.which("gcloud")
    if not found:
        from toolkit.errors import ExternalToolError

        raise ExternalToolError("gcloud is not on PATH — install the Google Cloud CLI, or print the calls with --dry-run")
    return found


def pool_status_request(spec: EnvSpec, endpoint: str = "") -> str:
    """The GET ``pool_status`` makes, as ``--dry-run`` prints it."""
    from infra import pools as pl
    from infra.gcp_api import endpoint_override

    return pl.node_pools_request(spec).render(endpoint_override(endpoint))


def pool_status(spec: EnvSpec, pools: list[TpuPoolSpec], endpoint: str = "") -> list[PoolStatus]:
    """GKE's status of every node pool of ``pools``, each with the way to recover when it is not RUNNING."""
    from infra import pools as pl
    from infra.gcp_api import Client, endpoint_override
    from toolkit.errors import FieldError

    answer = Client(endpoint=endpoint_override(endpoint)).get(pl.node_pools_request(spec))
    if answer is None:
        raise FieldError("cluster.name", f"no cluster {spec.cluster.name!r} in {spec.project}/{spec.region}", "deploy it first: python -m infra deploy")
    return pl.status(spec, answer, pools)


def delete_tpu(spec: EnvSpec, pools: list[TpuPoolSpec], out: Path, dry_run: bool) -> tuple[Terraform, list[Step], list[str]]:
    """The Terraform runner, the steps up to the targeted destroy plan (init, plan), and the node pools it targets.

    Refused before anything is written when ``pools`` declare no node pool: a destroy plan
    without ``-target`` would be the whole environment's.
    """
    from infra import pools as pl
    from infra.terraform import Step

    if not pools:
        from toolkit.errors import FieldError

        raise FieldError("--pool", "no TPU pool of the spec has node pools the stack declares (all are compute class pools)", "nothing to delete")
    path = synth_into(spec, out)[0]
    addresses = pl.targets(json.loads(path.read_text()), spec, pools)
    if not addresses:
        raise RuntimeError("no node pool addresses for the selected pools: refusing a destroy plan without -target")
    tf = terraform(path, dry_run)
    plan_step = tf.plan(out="tfplan-delete-tpu", destroy=True)
    plan_step = Step((*plan_step.args, *(f"-target={a}" for a in addresses)))
    return tf, [tf.init(), plan_step], addresses


# ------------------------------------------------------------------ prices


def price_rows(spec: EnvSpec, region: str) -> list[dict[str, Any]]:
    """Per generation, each mode's rate in ``region`` (the spec's prices: section over the shipped table), with its date and source."""
    from infra.price_table import MODES
    from infra.pricing import prices_for
    from toolkit.errors import FieldError

    prices = prices_for(spec)
    gens = {r.generation for r in prices.table.rows} | {o.generation for o in (spec.prices.chip_hour if spec.prices else [])}
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
    return rows
