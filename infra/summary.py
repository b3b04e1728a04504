"""What a synthesized stack would create, read back from its Terraform JSON.

Pure functions over the parsed ``cdk.tf.json``: the summary is taken from the
synthesized output rather than from the spec, so it shows what terraform will
actually be asked to create.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from infra.pricing import costs_document, usd
from infra.spec import EnvSpec
from toolkit.digits import is_decimal
from toolkit.names import TGK_TOPOLOGY_LABEL, CapacityMode


@dataclass(frozen=True)
class PoolRow:
    name: str
    machine_type: str
    nodes: int
    topology: str
    placement: str
    capacity: str
    zone: str
    chips: int


def _capacity(cfg: dict[str, Any]) -> str:
    if cfg.get("flex_start"):
        return CapacityMode.FLEX_START.value
    if cfg.get("spot"):
        return CapacityMode.SPOT.value
    aff = cfg.get("reservation_affinity") or {}
    if aff.get("consume_reservation_type") == "SPECIFIC_RESERVATION":
        return f"{CapacityMode.RESERVATION} " + ",".join(aff.get("values") or [])
    return CapacityMode.ON_DEMAND.value


def _nodes(pool: dict[str, Any]) -> int:
    if "node_count" in pool:
        return int(pool["node_count"])
    auto = pool.get("autoscaling") or {}
    return int(auto.get("total_max_node_count") or auto.get("max_node_count") or pool.get("initial_node_count") or 0)


def _chips_per_vm(machine_type: str) -> int:
    # TPU machine types end in -<chips>t (ct5lp-hightpu-4t, tpu7x-standard-4t).
    tail = machine_type.rsplit("-", 1)[-1]
    return int(tail[:-1]) if tail.endswith("t") and is_decimal(tail[:-1]) else 0


def node_pools(doc: dict[str, Any]) -> list[PoolRow]:
    rows = []
    for res in (doc.get("resource", {}).get("google_container_node_pool") or {}).values():
        cfg = res.get("node_config") or {}
        placement = res.get("placement_policy") or {}
        machine = cfg.get("machine_type", "?")
        nodes = _nodes(res)
        locations = res.get("node_locations") or []
        rows.append(
            PoolRow(
                name=res.get("name", "?"),
                machine_type=machine,
                nodes=nodes,
                # tpu7x pools carry their topology in the workload policy, not the pool: read the node label.
                topology=placement.get("tpu_topology") or (cfg.get("labels") or {}).get(TGK_TOPOLOGY_LABEL, "") or "-",
                placement=placement.get("type") or ("policy " + placement["policy_name"] if placement.get("policy_name") else "-"),
                capacity=_capacity(cfg),
                zone=",".join(locations) if isinstance(locations, list) else str(locations),
                chips=nodes * _chips_per_vm(machine),
            )
        )
    return rows


def resource_counts(doc: dict[str, Any]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for rtype, items in (doc.get("resource") or {}).items():
        counts[rtype] += len(items)
    return dict(sorted(counts.items()))


def summarize(spec: EnvSpec, doc: dict[str, Any], stack_path: str) -> dict[str, Any]:
    pools = node_pools(doc)
    return {
        "stack": stack_path,
        "project": spec.project,
        "region": spec.region,
        "cluster": spec.cluster.name,
        "min_master_version": spec.min_master_version,
        "network": spec.cidrs.model_dump(),
        "resources": resource_counts(doc),
        "node_pools": [asdict(p) for p in pools],
        "tpu_chips": sum(p.chips for p in pools),
        "tpu_pools": [
            {
                "name": p.name,
                "type": p.shape.accelerator_type,
                "topology": p.shape.topology,
                "slices": p.slices,
                "nodes_per_slice": p.shape.nodes,
                "chips": p.total_chips,
                "capacity": p.capacity.mode,
            }
            for p in spec.tpu_pools
        ],
        "teams": [{"name": t.name, "namespace": t.ns, "local_queue": t.queue, "quota_share": t.quota_share} for t in spec.teams],
        "cost": costs_document(spec),
    }


# Wide enough for any table here: off a terminal, rich would otherwise assume 80 columns.
_UNBOUNDED = 10_000


def uncut_console(file: Any = None) -> Any:
    """A rich Console that never cuts a cell short.

    On a terminal, tables fit its width and cells wrap (``fold``) instead of ending in "…".
    Piped or redirected, there is no width to fit: every table prints at its full width.
    """
    from rich.console import Console

    # No colour: what the CLIs print passes through toolkit.terminal, which shows escape sequences.
    c = Console(file=file, color_system=None)
    return c if c.is_terminal else Console(file=file, width=_UNBOUNDED, color_system=None)


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Any:
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return t


def render_text(summary: dict[str, Any], file: Any = None) -> None:
    """Print the summary as rich tables (imported lazily: this is the slow path)."""
    console = uncut_console(file)
    console.print(
        f"[bold]{summary['cluster']}[/] in {summary['project']} / {summary['region']} "
        f"(GKE >= {summary['min_master_version'] or 'channel default'})  →  {summary['stack']}"
    )
    net = summary["network"]
    console.print(f"network: nodes {net['nodes']}, pods {net['pods']}, services {net['services']}")

    pools = _table("Node pools", "node pool", "machine type", "nodes", "TPU chips", "topology", "placement", "capacity", "zone", right=("nodes", "TPU chips"))
    for p in summary["node_pools"]:
        pools.add_row(p["name"], p["machine_type"], str(p["nodes"]), str(p["chips"] or "-"), p["topology"], p["placement"], p["capacity"], p["zone"])
    console.print(pools)

    slices = _table("TPU slices", "pool", "type", "topology", "slices", "nodes/slice", "chips", "capacity")
    for p in summary["tpu_pools"]:
        slices.add_row(p["name"], p["type"], p["topology"], str(p["slices"]), str(p["nodes_per_slice"]), str(p["chips"]), p["capacity"])
    console.print(slices)

    cost = summary.get("cost")
    if cost:
        _cost_table(console, cost)

    res = _table(f"Resources ({sum(summary['resources'].values())})", "type", "count", right=("count",))
    for rtype, n in summary["resources"].items():
        res.add_row(rtype, str(n))
    console.print(res)


def _cost_table(console: Any, cost: dict[str, Any]) -> None:
    """What each pool option costs running and idle, with the prices' date under the table."""
    t = _table(
        "TPU cost (USD)",
        "pool",
        "capacity",
        "chips",
        "$/chip-h",
        "$/h running",
        "idle $/h",
        "idle $/day",
        right=("chips", "$/chip-h", "$/h running", "idle $/h", "idle $/day"),
    )
    for p in cost["pools"]:
        rate = "no price" if p["usd_per_chip_hour"] is None else f"{p['usd_per_chip_hour']:g}"
        idle_h = usd(p["idle_usd_per_hour"]) + ("" if p["fixed_size"] else " (scales from 0)")
        t.add_row(p["pool"], p["capacity"], str(p["chips"]), rate, usd(p["usd_per_hour"]), idle_h, usd(p["idle_usd_per_day"]))
    unknown = f" + unknown for {', '.join(cost['idle_unknown_for'])}" if cost["idle_unknown_for"] else ""
    t.add_row("idle total", "", "", "", "", usd(cost["idle_usd_per_hour"]), usd(cost["idle_usd_per_day"]) + unknown)
    console.print(t)
    console.print(cost["prices"])
