"""The work behind ``python -m infra`` on a fleet file: every member in a stated order, as functions that return data.

``--spec`` takes a fleet file wherever an ``infra`` command reads one. A command that
changes or reads a cluster's Terraform (``plan``, ``deploy``, ``outputs``, ``destroy``)
acts on every member, one stack each (``infra.fleet_stack``), in ``ORDER``:

- create (``plan``, ``deploy``): every worker in the fleet file's order, then the manager
  (its stack grants the fleet's buckets to the workers' service accounts, which the
  workers' stacks create);
- destroy: the manager first, then the workers in reverse;
- ``spec``, ``check`` and ``outputs`` read each member in the create order.

A command that acts on one cluster's TPU pools or prices (``pools ...``, ``prices show``)
refuses a fleet file, naming the worker specs it takes (``one_cluster``). Nothing here
prints; bad input raises before anything is written or run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra.fleet import Fleet, FleetManager, Member, members
from infra.spec import EnvSpec
from toolkit.errors import FieldError, SpecError

ORDER = {
    "create": "every worker in the fleet file's order, then the manager",
    "destroy": "the manager, then every worker in reverse order",
}


def in_order(fleet: Fleet, *, destroy: bool = False) -> list[Member]:
    """The members in the order the command acts on them (``ORDER``)."""
    found = members(fleet)
    return list(reversed(found)) if destroy else found


@contextmanager
def as_member(member: Member) -> Iterator[None]:
    """A refusal about one member's spec names the member: ``workers[1].spec tpu_pools[0].zone``."""
    try:
        yield
    except FieldError as e:
        where = "manager" if member.is_manager else f"{member.field}.spec"
        raise (SpecError if isinstance(e, SpecError) else FieldError)(f"{where} {e.field}".strip(), e.problem, e.fix) from None


def one_cluster(found: EnvSpec | Fleet, command: str) -> EnvSpec:
    """``found`` as the one environment ``infra <command>`` acts on; a fleet file is refused naming its workers' specs."""
    if isinstance(found, Fleet):
        specs = " or ".join(f"--spec {w.spec_path}" for w in found.workers)
        raise SpecError(
            "--spec",
            f"{found.path} is a fleet file, and `python -m infra {command}` acts on one cluster",
            f"run it on each worker's own spec: {specs}",
        )
    return found


def stacks(fleet: Fleet, out: Path, *, destroy: bool = False, reservations: dict[str, dict[str, str]] | None = None) -> list[tuple[Member, Path]]:
    """Every member's stack synthesized into ``out`` (one app, ``infra.synth_out``), paired with its member, in command order.

    ``reservations``: per worker cluster, pool -> the reservation its node pools consume (``infra deploy``'s first choice).
    """
    from infra.synth_out import synth_into

    paths = {p.parent.name: p for p in synth_into(fleet, out, fleet_reservations=reservations)}
    return [(m, paths[m.cluster]) for m in in_order(fleet, destroy=destroy)]


def refuse_protected(fleet: Fleet) -> None:
    """``destroy``: every member's cluster must allow it, checked for all before any is touched."""
    for m in members(fleet):
        if m.model.cluster.deletion_protection:
            # The manager's cluster settings are the first worker's (infra.fleet.derive_manager).
            where = fleet.workers[0] if m.is_manager else fleet.worker(m.name)
            whose = " (its cluster settings are the first worker's)" if m.is_manager else ""
            raise SpecError(
                f"{where.field}.spec cluster.deletion_protection",
                f"is true for {m.label}{whose}, so GKE refuses to delete it and the fleet would be half destroyed",
                f"set it to false in {where.spec_path} and deploy the fleet first (python -m infra deploy --spec {fleet.path}), then destroy",
            )


def describe_manager(fleet: Fleet) -> dict[str, Any]:
    """What ``infra spec`` shows of a fleet's manager: its cluster, the queues' pools (the workers'), its state and the fleet's buckets."""
    m: FleetManager = fleet.manager
    grants = fleet.bucket_bindings()
    return {
        "project": m.project,
        "region": m.region,
        "cluster": m.name,
        "min_master_version": m.min_master_version,
        "network": m.cidrs.model_dump(),
        "state": f"gs://{m.state_bucket}/{m.state_prefix}",
        "workers": [w.name for w in fleet.workers],
        "queue_pools": [p.name for p in m.pools],
        "teams": [{"name": t.name, "namespace": t.ns, "local_queue": t.queue, "priority": t.priority} for t in m.teams],
        "buckets": [
            {"name": b.name, "purpose": b.purpose.value, "location": where, "granted_to": sorted(member for _, member in grants[b.name])}
            for b, where in zip(m.buckets, m.bucket_locations, strict=True)
        ],
    }
