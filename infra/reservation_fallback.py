"""Reservation fallback at pool creation: try a pool's reservations in order, keep the first that works.

GKE creates a TPU node pool from a specific reservation whole, or fails with
RESOURCE_EXHAUSTED when the reservation has no room (or is DEGRADED by maintenance). A
pool whose capacity list names several reservations therefore declares node pools for
one of them at a time (``infra.spec.CapacityOption.alternates``); ``infra deploy`` applies
with the first, and on RESOURCE_EXHAUSTED for that pool's node pools moves that pool to its
next reservation and applies again, one line per attempt.

Two parts, so the order can be tested without a cloud:

* ``chains`` / ``first_choice`` / ``advance``: pure planning (which reservation each pool
  tries, in which order);
* ``execute``: the loop, over an injected ``attempt`` (synthesize with a choice, plan,
  apply) that returns an ``Outcome``. ``infra.service.apply`` passes the terraform one; tests pass a
  fake that fails the first N.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from infra.spec import EnvSpec
from toolkit.errors import ToolkitError

# What GKE and Compute Engine say when a reservation (or the zone) has no room for the VMs.
EXHAUSTED = re.compile(r"RESOURCE_EXHAUSTED|ZONE_RESOURCE_POOL_EXHAUSTED|No available resources|does not have enough resources", re.IGNORECASE)


@dataclass(frozen=True)
class Chain:
    """A pool's reservations, in the order deploy tries them."""

    pool: str
    field: str  # the spec path of the capacity list
    reservations: tuple[str, ...]
    node_pools: tuple[str, ...]  # the node pools those reservations feed (one per slice)


def chains(spec: EnvSpec) -> list[Chain]:
    """Every pool with more than one reservation to try, in spec order."""
    out = []
    for i, pool in enumerate(spec.tpu_pools):
        for option in pool.capacity_options():
            if option.alternates:
                out.append(Chain(pool.name, f"tpu_pools[{i}].capacity", tuple(c.name for c in option.choices), tuple(pool.option_node_pool_names(option))))
    return out


Choice = dict[str, str]  # pool name -> reservation name


def first_choice(spec: EnvSpec) -> Choice:
    return {c.pool: c.reservations[0] for c in chains(spec)}


def advance(spec: EnvSpec, choice: Choice, pool: str) -> Choice | None:
    """``choice`` with ``pool`` moved to its next reservation; None when it has tried them all."""
    chain = next(c for c in chains(spec) if c.pool == pool)
    k = chain.reservations.index(choice[pool]) + 1
    return None if k >= len(chain.reservations) else {**choice, pool: chain.reservations[k]}


def exhausted_pool(spec: EnvSpec, output: str) -> str | None:
    """The fallback pool whose node pool creation ran out of capacity, from terraform's output (None: another failure)."""
    if not EXHAUSTED.search(output):
        return None
    for chain in chains(spec):
        if any(_names_node_pool(output, n) for n in chain.node_pools):
            return chain.pool
    return None


def _names_node_pool(output: str, node_pool: str) -> bool:
    """Terraform names the resource by its address (``google_container_node_pool.tpu-<name>_pool_<hash>``: infra.stack's
    construct id), GKE by its path (``nodePools/<name>``) or quoted; ``<name>-1`` must not match ``<name>-10``."""
    n = re.escape(node_pool)
    return bool(re.search(rf"google_container_node_pool\.tpu-{n}_|nodePools/{n}(?![\w-])|[\"']{n}[\"']", output))


def order_lines(spec: EnvSpec) -> list[str]:
    """What ``deploy --dry-run`` prints: the order each pool's reservations are tried in."""
    lines = []
    for c in chains(spec):
        steps = " > ".join(f"{k}. {r}" for k, r in enumerate(c.reservations, 1))
        lines.append(f"# reservation fallback for {c.pool} ({', '.join(c.node_pools)}): {steps}; the next is tried on RESOURCE_EXHAUSTED")
    return lines


@dataclass(frozen=True)
class Outcome:
    ok: bool
    output: str = ""  # what terraform said (stderr), for the exhausted-pool match and the last line


class FallbackExhausted(ToolkitError):
    """Every reservation of a pool was tried and none had room: the cloud's answer, not the input's fault."""

    exit_code = 1


class ApplyFailed(ToolkitError):
    exit_code = 1


def execute(spec: EnvSpec, attempt: Callable[[Choice], Outcome], echo: Callable[[str], None]) -> Choice:
    """Apply with the first choice; on RESOURCE_EXHAUSTED of a fallback pool, move it to its next reservation and apply again.

    Returns the choice that applied. One line per attempt through ``echo``.
    """
    choice = first_choice(spec)
    n = 0
    while True:
        n += 1
        label = ", ".join(f"{p}: reservation {r}" for p, r in choice.items()) or "as declared"
        outcome = attempt(choice)
        if outcome.ok:
            echo(f"attempt {n} ({label}): applied")
            return choice
        pool = exhausted_pool(spec, outcome.output)
        last = _last_line(outcome.output)
        if pool is None:
            echo(f"attempt {n} ({label}): failed: {last}")
            why = (
                "out of capacity, but not for node pools with another reservation to try"
                if EXHAUSTED.search(outcome.output)
                else "not a capacity refusal, so no other reservation is tried"
            )
            raise ApplyFailed(f"terraform apply failed ({last}); {why}")
        nxt = advance(spec, choice, pool)
        if nxt is None:
            echo(f"attempt {n} ({label}): {pool} RESOURCE_EXHAUSTED; no reservation left")
            chain = next(c for c in chains(spec) if c.pool == pool)
            raise FallbackExhausted(
                f"{chain.field}: every reservation of {pool} ({', '.join(chain.reservations)}) refused the node pools for lack of capacity — "
                "wait for capacity, add a reservation or an on-demand/spot/flex-start option to the list"
            )
        echo(f"attempt {n} ({label}): {pool} RESOURCE_EXHAUSTED; next: reservation {nxt[pool]}")
        choice = nxt


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if EXHAUSTED.search(ln) or ln.lower().startswith("error")), None)
    return (hit or (lines[-1] if lines else "no output"))[:300]
