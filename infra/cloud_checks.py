"""Checks against the project before a cloud call: the zone has the machine type, the quota covers the pools,
the reservations exist, fit and are healthy. Pure: the spec and a ``get`` function in, findings out.

``requests(spec)`` lists every GET the checks make (``--dry-run`` prints them);
``run(spec, get)`` reads the answers through ``get`` (``infra.gcp_api.Client.get`` for real,
a dict lookup in unit tests) and returns one ``Finding`` per thing checked. A finding that
refuses carries the spec field and the fix; ``refusal(findings)`` is the first of them, which
the CLI raises (one line, exit 2, nothing applied).

What is read (documented response fields only):

* machine types: Compute ``machineTypes.get`` in the pool's zone. A TPU VM machine type
  (ct5lp-hightpu-4t, ct6e-standard-4t, tpu7x-standard-4t...) names its generation, so a 404
  means the zone offers neither the machine type nor the generation (v6e in europe-west1-b).
* quota: for the TPU quota each capacity option spends (``infra.tpu_quotas.QUOTAS``, which
  says where each id comes from), Cloud Quotas ``quotaInfos.get`` gives the limit
  (``dimensionsInfos[].details.value`` for the spec's region; a dimensionless entry is the
  default) and the quota's ``metric``; the usage comes from Compute Engine ``regions.get``
  (v4, v5e) or Cloud Monitoring's allocation usage (the others). The chips the pools can
  hold at once must fit in the limit less what is in use; where the pools' node pools
  already exist (GKE ``nodePools.list``) their chips may be in that usage, so only the node
  pools still to create must fit in what is free. A quota with no known id, an id the API
  does not know (404), or a usage that cannot be read is one warning line, never silence.
* reservations: Compute ``reservations.get`` in the option's zone (and owner project): it must
  exist, be in the pool's zone, hold the pool's machine type (``specificReservation``) or TPU
  hosts (``aggregateReservation``, TPU reservations), be ``status: READY``, and have room for
  a slice's VMs (free = count - inUseCount, or hostCount - inUseHostCount).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from infra import tpu_quotas as tq
from infra.gcp_api import ApiRequest
from infra.spec import EnvSpec, Reservation, TpuPoolSpec, ironwood
from toolkit.errors import FieldError

Get = Callable[[ApiRequest], "dict[str, Any] | None"]
Pages = Callable[[ApiRequest], "list[dict[str, Any]]"]

HEALTHY_RESERVATION = "READY"


@dataclass(frozen=True)
class Finding:
    check: str  # machine-type | quota | reservation
    subject: str  # what was checked, e.g. "ct6e-standard-4t in us-east5-b"
    ok: bool
    detail: str
    field: str = ""  # the spec field a refusal names
    fix: str = ""
    refuses: bool = False  # not ok, and deploying would fail on it

    def line(self) -> str:
        mark = "ok" if self.ok else ("REFUSED" if self.refuses else "warning")
        return f"{mark:<8} {self.check:<12} {self.subject}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("check", "subject", "ok", "refuses", "detail", "field", "fix")}


def refusal(findings: list[Finding]) -> FieldError | None:
    first = next((f for f in findings if f.refuses), None)
    return None if first is None else FieldError(first.field, f"{first.subject}: {first.detail}", first.fix)


# ----------------------------------------------------------------- requests


def _shape_field(i: int, pool: TpuPoolSpec) -> str:
    return f"tpu_pools[{i}].type" if pool.type else f"tpu_pools[{i}].generation"


def machine_type_request(project: str, zone: str, machine_type: str) -> ApiRequest:
    return ApiRequest("compute", f"/compute/v1/projects/{project}/zones/{zone}/machineTypes/{machine_type}", f"does {zone} offer {machine_type}")


def reservation_request(project: str, cap: Reservation) -> ApiRequest:
    owner = cap.project or project
    return ApiRequest(
        "compute", f"/compute/v1/projects/{owner}/zones/{cap.zone}/reservations/{cap.name}", f"reservation {cap.name}: zone, shape, status, free count"
    )


@dataclass(frozen=True)
class _User:
    """A pool option that spends a quota: its pool (and index), the chips it can hold at once, its node pools."""

    index: int
    pool: TpuPoolSpec
    chips: int
    node_pools: tuple[str, ...]


def _quota_plan(spec: EnvSpec) -> tuple[dict[tq.Quota, list[_User]], list[Finding]]:
    """Per quota, the pool options that spend it; and a line for every option that spends none the toolkit can check.

    Every option's node pools may hold VMs at once (Kueue admits on each flavor up to its
    slices), so all of them count; a compute class holds its slices once, from whichever
    priority GKE could get.
    """
    needs: dict[tq.Quota, list[_User]] = {}
    notes: list[Finding] = []
    for i, pool in enumerate(spec.tpu_pools):
        gen = pool.shape.generation.name
        chips = pool.slices * pool.shape.chips
        spent: list[tuple[tq.Quota, tuple[str, ...]]] = []
        for option in pool.capacity_options():
            mode = str(option.capacity.mode)
            quota = tq.QUOTAS.get(gen, {}).get(mode)
            if quota == "reservation":
                notes.append(
                    Finding(
                        "quota",
                        f"{pool.name} {mode} {getattr(option.capacity, 'name', '')}".rstrip(),
                        True,
                        "the node pools take the reservation's VMs: its free count is checked (reservation)",
                    )
                )
            elif not isinstance(quota, tq.Quota):
                notes.append(
                    Finding(
                        "quota",
                        f"{gen} {mode} chips in {spec.region}",
                        False,
                        f"no Cloud Quotas id is known for {gen} {mode}: {pool.name}'s {chips} chips not checked — compare them with IAM & Admin > Quotas by hand",
                    )
                )
            else:
                spent.append((quota, tuple(pool.option_node_pool_names(option))))
        if pool.compute_class is not None:
            spent = list({q: n for q, n in spent}.items())
        for quota, node_pools in spent:
            needs.setdefault(quota, []).append(_User(i, pool, chips, node_pools))
    return needs, notes


def _machine_types(spec: EnvSpec) -> dict[tuple[str, str], tuple[int, TpuPoolSpec]]:
    out: dict[tuple[str, str], tuple[int, TpuPoolSpec]] = {}
    for i, pool in enumerate(spec.tpu_pools):
        out.setdefault((spec.pool_zone(pool), pool.shape.machine_type), (i, pool))
    return out


def _reservations(spec: EnvSpec) -> list[tuple[TpuPoolSpec, str, Reservation]]:
    """Every reservation a pool lists (the alternates deploy falls back to included), with its spec path."""
    out = []
    for i, pool in enumerate(spec.tpu_pools):
        for k, cap in enumerate(pool.capacities):
            if isinstance(cap, Reservation):
                out.append((pool, f"tpu_pools[{i}].capacity" + (f"[{k}]" if pool.has_fallback else ""), cap))
    return out


def _quota_requests(spec: EnvSpec, now: datetime) -> list[ApiRequest]:
    needs, _ = _quota_plan(spec)
    if not needs:
        return []
    out = [tq.quota_info_request(spec.project, q.quota_id) for q in needs]
    if any(q.compute_metric for q in needs):
        out.append(tq.region_request(spec.project, spec.region))
    if any(not q.compute_metric for q in needs):
        out.append(tq.usage_request(spec.project, spec.region, now))
    out.append(node_pools_request(spec))
    return out


def node_pools_request(spec: EnvSpec) -> ApiRequest:
    from infra.pools import node_pools_request as request

    return request(spec)


def requests(spec: EnvSpec, now: datetime | None = None) -> list[ApiRequest]:
    """Every GET ``run`` makes, in the order it makes them (``now``: the end of the usage window)."""
    out = [machine_type_request(spec.project, zone, mt) for zone, mt in _machine_types(spec)]
    out += _quota_requests(spec, now or tq.now())
    out += [reservation_request(spec.project, cap) for _, _, cap in _reservations(spec)]
    out += [r for r in (provision_only_request(spec),) if r is not None]
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------- checks


def run(spec: EnvSpec, get: Get, pages: Pages | None = None, now: datetime | None = None) -> list[Finding]:
    """Every check; ``pages`` reads a paged listing (one page through ``get`` when not given)."""
    return check_machine_types(spec, get) + check_quotas(spec, get, pages, now) + check_reservations(spec, get) + check_provision_only_policy(spec, get)


def provision_only_request(spec: EnvSpec) -> ApiRequest | None:
    """The PROVISION_ONLY workload policy of dynamically sliced pools (None without one): made outside Terraform."""
    if not any(p.dynamic_slicing for p in spec.tpu_pools):
        return None
    name = ironwood.provision_only_policy(spec.cluster.name)
    return ApiRequest(
        "compute", f"/compute/v1/projects/{spec.project}/regions/{spec.region}/resourcePolicies/{name}", f"workload policy {name} (PROVISION_ONLY)"
    )


def check_provision_only_policy(spec: EnvSpec, get: Get) -> list[Finding]:
    """The PROVISION_ONLY workload policy exists (the pinned provider cannot make it: infra.spec.ironwood)."""
    req = provision_only_request(spec)
    if req is None:
        return []
    name = ironwood.provision_only_policy(spec.cluster.name)
    i = next(i for i, p in enumerate(spec.tpu_pools) if p.dynamic_slicing)
    doc = get(req)
    if doc is None:
        return [
            Finding(
                "policy",
                f"workload policy {name}",
                False,
                f"does not exist in {spec.region}, and the dynamically sliced node pools are placed by it",
                field=f"tpu_pools[{i}].dynamic_slicing",
                fix=f"create it: {ironwood.provision_only_command(spec.project, spec.region, spec.cluster.name)}",
                refuses=True,
            )
        ]
    mode = str(((doc.get("workloadPolicy") or {}).get("acceleratorTopologyMode")) or "")
    if mode != "PROVISION_ONLY":
        return [
            Finding(
                "policy",
                f"workload policy {name}",
                False,
                f"has accelerator topology mode {mode or '(none)'}, not PROVISION_ONLY",
                field=f"tpu_pools[{i}].dynamic_slicing",
                fix=f"delete it and create it again: {ironwood.provision_only_command(spec.project, spec.region, spec.cluster.name)}",
                refuses=True,
            )
        ]
    return [Finding("policy", f"workload policy {name}", True, "PROVISION_ONLY")]


def check_machine_types(spec: EnvSpec, get: Get) -> list[Finding]:
    out = []
    for (zone, mt), (i, pool) in _machine_types(spec).items():
        gen = pool.shape.generation.name
        subject = f"{mt} ({gen}) in {zone}"
        if get(machine_type_request(spec.project, zone, mt)) is None and pool.machine_type is not None:
            # A chosen machine type (tpu7x-ultranet-4t): the zone may have the generation but not this VM.
            default = pool.shape.generation.multi_host_machine
            out.append(
                Finding(
                    "machine-type",
                    subject,
                    False,
                    f"{zone} does not offer {mt}",
                    field=f"tpu_pools[{i}].machine_type",
                    fix=f"remove machine_type (the default {default}) or use a zone that lists {mt} (gcloud compute machine-types list --filter=name={mt})",
                    refuses=True,
                )
            )
        elif get(machine_type_request(spec.project, zone, mt)) is None:
            out.append(
                Finding(
                    "machine-type",
                    subject,
                    False,
                    f"{zone} does not offer {mt}, so it has no TPU {gen}",
                    field=f"tpu_pools[{i}].zone" if pool.zone else "zones[0]",
                    fix=f"use a zone that lists it (gcloud compute machine-types list --filter=name={mt}), or another TPU generation in {_shape_field(i, pool)}",
                    refuses=True,
                )
            )
        else:
            out.append(Finding("machine-type", subject, True, "offered"))
    return out


def check_quotas(spec: EnvSpec, get: Get, pages: Pages | None = None, now: datetime | None = None) -> list[Finding]:
    needs, notes = _quota_plan(spec)
    if not needs:
        return notes
    list_pages = pages or (lambda req: [get(req) or {}])
    region_doc = get(tq.region_request(spec.project, spec.region)) if any(q.compute_metric for q in needs) else None
    usage_pages = list_pages(tq.usage_request(spec.project, spec.region, now or tq.now())) if any(not q.compute_metric for q in needs) else []
    listed = get(node_pools_request(spec)) or {}
    existing = {str(np.get("name")) for np in listed.get("nodePools") or [] if isinstance(np, dict)}
    out = []
    for quota, users in needs.items():
        out.append(_check_quota(spec, quota, users, get, region_doc, usage_pages, existing))
    return out + notes


def _check_quota(spec: EnvSpec, quota: tq.Quota, users: list[_User], get: Get, region_doc, usage_pages, existing: set[str]) -> Finding:
    need = sum(u.chips for u in users)
    subject = f"{quota.label} in {spec.region}"
    unverified = "" if quota.verified else " (this quota id is from field reports, not a Google page: check it in IAM & Admin > Quotas)"
    names = ", ".join(f"{u.pool.name} ({u.chips} chips)" for u in users)
    info = get(tq.quota_info_request(spec.project, quota.quota_id))
    if info is None:
        return Finding("quota", subject, False, f"Cloud Quotas does not know this quota id; {need} chips not checked{unverified}")
    lim = tq.limit(info, spec.region, quota.family)
    if lim is None:
        return Finding("quota", subject, False, f"no value for {spec.region} in the answer; {need} chips not checked{unverified}")
    pools = sorted({u.index for u in users})
    field = f"tpu_pools[{pools[0]}].slices" if len(pools) == 1 else "tpu_pools"
    if lim < need:
        return Finding(
            "quota",
            subject,
            False,
            f"the limit is {lim} chips but the pools can hold {need} at once ({names}){unverified}",
            field=field,
            fix=f"request {need} chips of {quota.quota_id} in {spec.region} (IAM & Admin > Quotas), or lower the slices",
            refuses=True,
        )
    usage = _usage(quota, info, region_doc, usage_pages)
    if usage.chips is None:
        return Finding(
            "quota",
            subject,
            False,
            f"limit {lim} chips covers the {need} the pools can hold, but the usage cannot be read ({usage.reason}): the chips free now are not checked{unverified}",
        )
    free = max(0, lim - usage.chips)
    made = [u for u in users if u.node_pools and all(n in existing for n in u.node_pools)]
    new = need - sum(u.chips for u in made)
    state = f"limit {lim} chips, {usage.chips} in use, {free} free"
    if new > free:
        to_make = ", ".join(f"{u.pool.name} ({u.chips} chips)" for u in users if u not in made)
        return Finding(
            "quota",
            subject,
            False,
            f"{state}, but the node pools to create can hold {new} at once ({to_make}){unverified}",
            field=field,
            fix=f"free {new - free} chips of {quota.quota_id} in {spec.region} (stop what holds them), request {lim + new - free} in IAM & Admin > Quotas, or lower the slices",
            refuses=True,
        )
    held = f"; {need - new} of them in node pools that exist already (counted in the usage)" if made else ""
    return Finding("quota", subject, True, f"{state}: covers the {need} chips the pools can hold{held}{unverified}")


def _usage(quota: tq.Quota, info: dict[str, Any], region_doc: dict[str, Any] | None, usage_pages: list[dict[str, Any]]) -> tq.Usage:
    if quota.compute_metric:
        found = tq.compute_usage(region_doc or {}, quota.compute_metric)
        return tq.Usage(None, f"regions.get lists no {quota.compute_metric}") if found is None else tq.Usage(found[1])
    metric = info.get("metric")
    if not isinstance(metric, str) or not metric:
        return tq.Usage(None, "Cloud Quotas gives no metric for it")
    return tq.monitoring_usage(usage_pages, metric, quota.family)


def _count(value: Any) -> int:
    """Compute returns int64 fields as JSON strings ("16"); a missing one is 0."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _free_vms(res: dict[str, Any], pool: TpuPoolSpec) -> tuple[int | None, str | None]:
    """(free VMs, a shape mismatch) of a reservation, from specificReservation or aggregateReservation."""
    mt = pool.shape.machine_type
    specific = res.get("specificReservation")
    if isinstance(specific, dict):
        has = str(((specific.get("instanceProperties") or {}).get("machineType")) or "").rsplit("/", 1)[-1]
        if has and has != mt:
            return None, f"holds {has} VMs, not the pool's {mt}"
        return _count(specific.get("count")) - _count(specific.get("inUseCount")), None
    agg = res.get("aggregateReservation")
    if isinstance(agg, dict):
        if "hostCount" in agg:  # TPU hosts: one VM each
            return _count(agg.get("hostCount")) - _count(agg.get("inUseHostCount")), None
        chips = sum(_count((r.get("accelerator") or {}).get("acceleratorCount")) for r in agg.get("reservedResources") or [])
        used = sum(_count((r.get("accelerator") or {}).get("acceleratorCount")) for r in agg.get("inUseResources") or [])
        return (chips - used) // pool.shape.chips_per_vm, None
    return None, "reports neither specificReservation nor aggregateReservation"


def check_reservations(spec: EnvSpec, get: Get) -> list[Finding]:
    out = []
    for pool, field, cap in _reservations(spec):
        zone = spec.pool_zone(pool)
        subject = f"reservation {cap.name}" + (f" (project {cap.project})" if cap.project else "")
        res = get(reservation_request(spec.project, cap))
        if res is None:
            fix = f"check the name and zone (gcloud compute reservations list --filter=name={cap.name}), or remove this option"
            out.append(Finding("reservation", subject, False, f"does not exist in {cap.zone}", field=f"{field}.name", fix=fix, refuses=True))
            continue
        in_zone = str(res.get("zone") or "").rsplit("/", 1)[-1]
        if in_zone and in_zone != zone:
            fix = f"set the pool's zone to {in_zone} or use a reservation in {zone}"
            out.append(Finding("reservation", subject, False, f"is in {in_zone} but the pool runs in {zone}", field=f"{field}.zone", fix=fix, refuses=True))
            continue
        free, mismatch = _free_vms(res, pool)
        if mismatch or free is None:
            fix = f"use a reservation of {pool.shape.machine_type} VMs"
            out.append(Finding("reservation", subject, False, mismatch or "has no shape", field=f"{field}.name", fix=fix, refuses=True))
            continue
        status = str(res.get("status") or "UNKNOWN")
        need = pool.slices * pool.shape.nodes
        detail = f"status {status}, {free} VMs free, the pool's {pool.slices} slice(s) need {need}"
        if status != HEALTHY_RESERVATION:
            # A reservation under maintenance (status DEGRADED) may refuse VMs even with hosts free.
            out.append(Finding("reservation", subject, False, f"{detail}; not READY, so GKE may not get VMs from it"))
        elif free < need:
            out.append(Finding("reservation", subject, False, f"{detail}; the node pool creation would fail (RESOURCE_EXHAUSTED)"))
        else:
            out.append(Finding("reservation", subject, True, detail))
    return out
