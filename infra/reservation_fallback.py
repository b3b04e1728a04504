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

Terraform's output is read error by error (``errors``): each ``Error:`` block names the
resource it is about (``with <address>,``), so a RESOURCE_EXHAUSTED is charged to the node
pool in its own block, never to a pool another block (or a warning) happens to name. A
pool moves to its next reservation only for its own capacity error; any other error, or a
capacity error of a node pool with no reservation left to try, stops the loop with one line
naming the pool (or resource) and the error.
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


@dataclass(frozen=True)
class TfError:
    """One ``Error:`` block of terraform's output: its summary, the resource it names (``with <address>,``), its text."""

    summary: str
    address: str  # "" when the block names no resource
    text: str

    @property
    def capacity(self) -> bool:
        return bool(EXHAUSTED.search(self.text))


# Terraform frames each diagnostic in box-drawing characters ("╷", "│ ", "╵") when it prints them.
_FRAME = re.compile(r"^[\s│╷╵]*", re.ASCII)
_WITH = re.compile(r"^with ([A-Za-z0-9_.\-\[\]\"]+),\s*$", re.ASCII)


def errors(output: str) -> list[TfError]:
    """Terraform's ``Error:`` blocks, each with the resource address its ``with`` line names."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for raw in output.splitlines():
        line = _FRAME.sub("", raw).rstrip()
        if line.startswith("Error: "):
            current = [line]
            blocks.append(current)
        elif line.startswith("Warning: "):
            current = None  # a warning's lines belong to no error
        elif current is not None:
            current.append(line)
    out = []
    for block in blocks:
        address = next((m.group(1) for ln in block if (m := _WITH.fullmatch(ln.strip()))), "")
        out.append(TfError(block[0].removeprefix("Error: ").strip(), address, "\n".join(block)))
    return out


def node_pool_of(spec: EnvSpec, err: TfError) -> str | None:
    """The TPU node pool an error block is about: by the resource address it names, else by GKE's path in its text."""
    for chain in chains(spec):
        for n in chain.node_pools:
            if err.address and _names_node_pool(err.address, n):
                return n
            if not err.address and re.search(rf"nodePools/{re.escape(n)}(?![\w-])", err.text, re.ASCII):
                return n
    return None


def pool_of_node_pool(spec: EnvSpec, node_pool: str) -> str | None:
    return next((c.pool for c in chains(spec) if node_pool in c.node_pools), None)


def exhausted_pool(spec: EnvSpec, output: str) -> str | None:
    """The first fallback pool whose own error block is a capacity refusal (None: none is)."""
    for err in errors(output):
        n = node_pool_of(spec, err) if err.capacity else None
        if n is not None:
            return pool_of_node_pool(spec, n)
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


def _what(spec: EnvSpec, err: TfError) -> str:
    """What an error block is about, for a message: the spec's pool and its node pool, else the resource address."""
    n = node_pool_of(spec, err)
    if n is not None:
        return f"{pool_of_node_pool(spec, n)} (node pool {n})"
    return err.address or "no resource named"


def execute(spec: EnvSpec, attempt: Callable[[Choice], Outcome], echo: Callable[[str], None]) -> Choice:
    """Apply with the first choice; on a fallback pool's own RESOURCE_EXHAUSTED, move it to its next reservation and apply again.

    Each error block of terraform's output is charged to the node pool it names. Any error
    that is not a capacity refusal stops (ApplyFailed naming its pool and the error), as does
    a capacity refusal of a node pool with no other reservation (or none named). Returns the
    choice that applied. One line per attempt through ``echo``.
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
        found = errors(outcome.output)
        other = next((e for e in found if not e.capacity), None)
        if not found or other is not None:
            summary = other.summary[:300] if other is not None else _last_line(outcome.output)
            about = f"{_what(spec, other)}: " if other is not None else ""
            echo(f"attempt {n} ({label}): failed: {about}{summary}")
            raise ApplyFailed(f"terraform apply failed: {about}{summary} — not a capacity refusal, so no other reservation is tried; fix it and deploy again")
        exhausted: list[str] = []
        for err in found:
            node_pool = node_pool_of(spec, err)
            if node_pool is None:
                echo(f"attempt {n} ({label}): failed: {_what(spec, err)}: {err.summary[:300]}")
                raise ApplyFailed(
                    f"terraform apply failed: {_what(spec, err)}: {err.summary[:300]} — out of capacity, but not for node pools with another "
                    "reservation to try: wait for capacity, or give that pool a capacity list"
                )
            exhausted.append(str(pool_of_node_pool(spec, node_pool)))
        nxt = dict(choice)
        for pool in dict.fromkeys(exhausted):
            moved = advance(spec, nxt, pool)
            if moved is None:
                echo(f"attempt {n} ({label}): {pool} RESOURCE_EXHAUSTED; no reservation left")
                chain = next(c for c in chains(spec) if c.pool == pool)
                raise FallbackExhausted(
                    f"{chain.field}: every reservation of {pool} ({', '.join(chain.reservations)}) refused the node pools for lack of capacity — "
                    "wait for capacity, add a reservation or an on-demand/spot/flex-start option to the list"
                )
            nxt = moved
        moves = "; ".join(f"{p} RESOURCE_EXHAUSTED; next: reservation {nxt[p]}" for p in dict.fromkeys(exhausted))
        echo(f"attempt {n} ({label}): {moves}")
        choice = nxt


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if EXHAUSTED.search(ln) or ln.lower().startswith("error")), None)
    return (hit or (lines[-1] if lines else "no output"))[:300]
