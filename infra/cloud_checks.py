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
* quota: Cloud Quotas ``quotaInfos.get`` for the TPU quota each capacity option spends, its
  ``dimensionsInfos[].details.value`` for the spec's region (a dimensionless entry is the
  default). Cloud Quotas reports limits, not usage, so the check is "can the pools ever fit":
  a limit below the chips the pools can hold at once refuses; a quota id the API does not know
  (404) is reported, not refused (the table below is compiled by hand).
* reservations: Compute ``reservations.get`` in the option's zone (and owner project): it must
  exist, be in the pool's zone, hold the pool's machine type (``specificReservation``) or TPU
  hosts (``aggregateReservation``, TPU reservations), be ``status: READY``, and have room for
  a slice's VMs (free = count - inUseCount, or hostCount - inUseHostCount).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.gcp_api import ApiRequest
from infra.spec import EnvSpec, FlexStart, OnDemand, Reservation, Spot, TpuPoolSpec
from toolkit.errors import FieldError

Get = Callable[[ApiRequest], "dict[str, Any] | None"]

# The Cloud Quotas quota id (and its tpu_family dimension, for the generic family quota) each
# kind of capacity spends, by generation. Spot and flex-start spend the preemptible quota; on-demand
# the generation's own, or the family quota where a generation has none of its own (v6e, v4, tpu7x).
# None: not known to the toolkit; the check says so instead of guessing.
FAMILY_QUOTA = "TPUS-PER-TPU-FAMILY-per-project-region"
QUOTA_IDS: dict[str, dict[str, tuple[str, str | None] | None]] = {
    "v4": {"on-demand": (FAMILY_QUOTA, "CT4P"), "preemptible": None},
    "v5e": {"on-demand": ("TPU-LITE-PODSLICE-V5-per-project-region", None), "preemptible": ("PREEMPTIBLE-TPU-LITE-PODSLICE-V5-per-project-region", None)},
    "v5p": {"on-demand": ("TPU-V5P-per-project-region", None), "preemptible": ("PREEMPTIBLE-TPU-V5P-per-project-region", None)},
    "v6e": {"on-demand": (FAMILY_QUOTA, "CT6E"), "preemptible": ("PREEMPTIBLE-TPU-V6E-per-project-region", None)},
    "tpu7x": {"on-demand": (FAMILY_QUOTA, "TPU7X"), "preemptible": None},
}
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


def quota_request(project: str, quota_id: str) -> ApiRequest:
    return ApiRequest(
        "cloudquotas",
        f"/v1/projects/{project}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        f"the project's {quota_id} limit",
    )


def reservation_request(project: str, cap: Reservation) -> ApiRequest:
    owner = cap.project or project
    return ApiRequest(
        "compute", f"/compute/v1/projects/{owner}/zones/{cap.zone}/reservations/{cap.name}", f"reservation {cap.name}: zone, shape, status, free count"
    )


def _quota_kind(cap: Any) -> str | None:
    if isinstance(cap, OnDemand):
        return "on-demand"
    if isinstance(cap, (Spot, FlexStart)):
        return "preemptible"
    return None  # a reservation is checked by its own request


def _quota_needs(spec: EnvSpec) -> dict[tuple[str, str | None], list[tuple[int, TpuPoolSpec, str, int]]]:
    """Per (quota id, family): the (pool index, pool, generation, chips) that spend it. Every option's node
    pools may hold VMs at once (Kueue admits on each flavor up to its slices), so all of them count."""
    needs: dict[tuple[str, str | None], list[tuple[int, TpuPoolSpec, str, int]]] = {}
    for i, pool in enumerate(spec.tpu_pools):
        gen = pool.shape.generation.name
        keys = []
        for option in pool.capacity_options():
            kind = _quota_kind(option.capacity)
            key = QUOTA_IDS.get(gen, {}).get(kind) if kind else None
            if key is not None:
                keys.append(key)
        if pool.compute_class is not None:
            keys = list(dict.fromkeys(keys))  # a class holds its slices once, from whichever priority GKE could get
        for key in keys:
            needs.setdefault(key, []).append((i, pool, gen, pool.slices * pool.shape.chips))
    return needs


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


def requests(spec: EnvSpec) -> list[ApiRequest]:
    """Every GET ``run`` makes, in the order it makes them."""
    out = [machine_type_request(spec.project, zone, mt) for zone, mt in _machine_types(spec)]
    out += [quota_request(spec.project, qid) for qid, _ in _quota_needs(spec)]
    out += [reservation_request(spec.project, cap) for _, _, cap in _reservations(spec)]
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------- checks


def run(spec: EnvSpec, get: Get) -> list[Finding]:
    return check_machine_types(spec, get) + check_quotas(spec, get) + check_reservations(spec, get)


def check_machine_types(spec: EnvSpec, get: Get) -> list[Finding]:
    out = []
    for (zone, mt), (i, pool) in _machine_types(spec).items():
        gen = pool.shape.generation.name
        subject = f"{mt} ({gen}) in {zone}"
        if get(machine_type_request(spec.project, zone, mt)) is None:
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


def _limit(info: dict[str, Any], region: str, family: str | None) -> int | None:
    """The quota's value for ``region`` (and ``family``): the entry whose dimensions match, else the dimensionless default."""
    default = None
    for entry in info.get("dimensionsInfos") or []:
        dims = entry.get("dimensions") or {}
        try:
            value = int((entry.get("details") or {}).get("value"))
        except (TypeError, ValueError):
            continue
        if family is not None and dims.get("tpu_family") not in (None, family):
            continue
        if dims.get("region") == region:
            return value
        if "region" not in dims:
            default = value
    return default


def check_quotas(spec: EnvSpec, get: Get) -> list[Finding]:
    out = []
    for (qid, family), users in _quota_needs(spec).items():
        need = sum(chips for *_, chips in users)
        what = qid + (f" (tpu_family={family})" if family else "")
        subject = f"{what} in {spec.region}"
        info = get(quota_request(spec.project, qid))
        if info is None:
            out.append(Finding("quota", subject, False, f"Cloud Quotas does not know this quota id; {need} chips not checked"))
            continue
        limit = _limit(info, spec.region, family)
        if limit is None:
            out.append(Finding("quota", subject, False, f"no value for {spec.region} in the answer; {need} chips not checked"))
        elif limit < need:
            pools = sorted({i for i, *_ in users})
            field = f"tpu_pools[{pools[0]}].slices" if len(pools) == 1 else "tpu_pools"
            names = ", ".join(f"{p.name} ({c} chips)" for _, p, _, c in users)
            out.append(
                Finding(
                    "quota",
                    subject,
                    False,
                    f"the limit is {limit} chips but the pools can hold {need} at once ({names})",
                    field=field,
                    fix=f"request {need} chips of {qid} in {spec.region} (IAM & Admin > Quotas), or lower the slices",
                    refuses=True,
                )
            )
        else:
            out.append(Finding("quota", subject, True, f"limit {limit} chips covers the {need} the pools can hold"))
    return out


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
