"""Which Compute Engine quota a TPU node pool spends, and where its current usage is read. Pure: data and parsers.

GKE's TPU nodes are Compute Engine VMs, so they spend Compute Engine quota (not the Cloud
TPU API's): per region, counted in chips. ``QUOTAS`` maps each generation and capacity
mode the toolkit offers to the quota it spends (``None``: no id the toolkit knows, said so
in a line, never guessed), each with where the id comes from:

- **v4, v5e**: the Compute Engine API lists these quotas in ``regions.get`` (``quotas[]``
  with ``metric``, ``limit`` and ``usage``; the metric names ``TPU_PODSLICE_V4``,
  ``PREEMPTIBLE_TPU_PODSLICE_V4``, ``TPU_LITE_PODSLICE_V5`` and
  ``PREEMPTIBLE_TPU_LITE_PODSLICE_V5`` are in the v1 API's ``Quota.metric`` enum,
  https://cloud.google.com/compute/docs/reference/rest/v1/regions). Their Cloud Quotas ids
  follow Compute Engine's documented naming (metric ``CPUS`` is quota id
  ``CPUS-per-project-region``, https://cloud.google.com/docs/quotas/implement-common-use-cases).
  Usage is read from ``regions.get``.
- **v5p, v6e, tpu7x**: not in ``regions.get``; their ids (``TPU-V5P-…``, the family quota
  ``TPUS-PER-TPU-FAMILY-per-project-region`` with ``tpu_family=CT6E`` for on-demand v6e,
  ``PREEMPTIBLE-TPU-V6E-…``) are not in a Google page read for this table but in several
  public field reports of ``gcloud quotas info describe``; they are marked unverified and
  the check says so when it uses them. Usage is read from Cloud Monitoring's
  ``serviceruntime.googleapis.com/quota/allocation/usage`` (monitored resource
  ``consumer_quota``, label ``quota_metric`` = the quota's ``metric`` from Cloud Quotas),
  the way Cloud Quotas documents tracking usage
  (https://cloud.google.com/docs/quotas/implement-common-use-cases,
  https://cloud.google.com/monitoring/alerts/using-quota-metrics).

Spot and flex-start spend the preemptible quota (flex-start: "ensure you have sufficient
preemptible quota", https://cloud.google.com/tpu/docs/request-using-flex-start). A
reservation's VMs are the reservation's: the check compares its free count instead
(``infra.cloud_checks.check_reservations``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from infra.gcp_api import ApiRequest

FAMILY = "TPUS-PER-TPU-FAMILY-per-project-region"
ALLOCATION_USAGE = "serviceruntime.googleapis.com/quota/allocation/usage"
# An allocation quota's usage is written when it changes and repeated at least daily
# (https://cloud.google.com/monitoring/api/metrics_gcp, serviceruntime): a day and an hour
# back always holds the latest value of a quota in use.
USAGE_WINDOW = timedelta(hours=25)


@dataclass(frozen=True)
class Quota:
    """A Compute Engine quota in chips: its Cloud Quotas id, its dimension, and where its usage is read."""

    quota_id: str
    family: str | None = None  # the tpu_family dimension of the family quota
    compute_metric: str | None = None  # regions.get's quotas[].metric, where Compute Engine lists it
    verified: bool = True  # False: the id is from field reports, not a Google page

    @property
    def label(self) -> str:
        return self.quota_id + (f" (tpu_family={self.family})" if self.family else "")


def _pair(metric: str) -> tuple[Quota, Quota]:
    """On-demand and preemptible quotas of a metric regions.get lists (id by Compute Engine's naming)."""
    return Quota(f"{metric.replace('_', '-')}-per-project-region", compute_metric=metric), Quota(
        f"PREEMPTIBLE-{metric.replace('_', '-')}-per-project-region", compute_metric=f"PREEMPTIBLE_{metric}"
    )


_V4 = _pair("TPU_PODSLICE_V4")
_V5E = _pair("TPU_LITE_PODSLICE_V5")
MODES = ("on-demand", "spot", "flex-start", "reservation")

# generation -> capacity mode -> the quota it spends (None: no known id; "reservation": the reservation's own count).
QUOTAS: dict[str, dict[str, Quota | str | None]] = {
    "v4": {"on-demand": _V4[0], "spot": _V4[1], "flex-start": _V4[1], "reservation": "reservation"},
    "v5e": {"on-demand": _V5E[0], "spot": _V5E[1], "flex-start": _V5E[1], "reservation": "reservation"},
    "v5p": {
        "on-demand": Quota("TPU-V5P-per-project-region", verified=False),
        "spot": Quota("PREEMPTIBLE-TPU-V5P-per-project-region", verified=False),
        "flex-start": Quota("PREEMPTIBLE-TPU-V5P-per-project-region", verified=False),
        "reservation": "reservation",
    },
    "v6e": {
        "on-demand": Quota(FAMILY, family="CT6E", verified=False),
        "spot": Quota("PREEMPTIBLE-TPU-V6E-per-project-region", verified=False),
        "flex-start": Quota("PREEMPTIBLE-TPU-V6E-per-project-region", verified=False),
        "reservation": "reservation",
    },
    "tpu7x": {
        "on-demand": Quota(FAMILY, family="TPU7X", verified=False),
        "spot": None,
        "flex-start": None,
        "reservation": "reservation",
    },
}


# ----------------------------------------------------------------- requests


def quota_info_request(project: str, quota_id: str) -> ApiRequest:
    return ApiRequest(
        "cloudquotas",
        f"/v1/projects/{project}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        f"the project's {quota_id} limit and metric",
    )


def region_request(project: str, region: str) -> ApiRequest:
    return ApiRequest("compute", f"/compute/v1/projects/{project}/regions/{region}", f"{region}'s quotas: limit and usage of the v4 and v5e TPU metrics")


def usage_request(project: str, region: str, now: datetime) -> ApiRequest:
    """Cloud Monitoring's allocation usage of every Compute Engine quota in ``region`` over USAGE_WINDOW (paged)."""
    end = now.astimezone(UTC).replace(second=0, microsecond=0)
    flt = (
        f'metric.type="{ALLOCATION_USAGE}" AND resource.type="consumer_quota" '
        f'AND resource.labels.service="compute.googleapis.com" AND resource.labels.location="{region}"'
    )
    return ApiRequest(
        "monitoring",
        f"/v3/projects/{project}/timeSeries",
        f"current usage of the Compute Engine quotas in {region}",
        query=(
            ("filter", flt),
            ("interval.startTime", (end - USAGE_WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("interval.endTime", end.strftime("%Y-%m-%dT%H:%M:%SZ")),
        ),
    )


# ------------------------------------------------------------------ answers


def _int(value: Any) -> int | None:
    """An int64 as Google writes it (a JSON string or number); None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(f) if f == f and abs(f) < 2**63 and f == int(f) else None


def limit(info: dict[str, Any], region: str, family: str | None) -> int | None:
    """The quota's value for ``region`` (and ``family``): the entry whose dimensions match, else the dimensionless default."""
    default = None
    for entry in info.get("dimensionsInfos") or []:
        if not isinstance(entry, dict):
            continue
        dims = entry.get("dimensions") or {}
        value = _int((entry.get("details") or {}).get("value"))
        if value is None or not isinstance(dims, dict):
            continue
        if family is not None and dims.get("tpu_family") not in (None, family):
            continue
        if dims.get("region") == region:
            return value
        if "region" not in dims:
            default = value
    return default


def compute_usage(region_doc: dict[str, Any], metric: str) -> tuple[int, int] | None:
    """(limit, usage) of ``metric`` in a regions.get answer; None when the region does not list it."""
    for q in region_doc.get("quotas") or []:
        if isinstance(q, dict) and q.get("metric") == metric:
            lim, used = _int(q.get("limit")), _int(q.get("usage") or 0)
            if lim is not None and used is not None:
                return lim, used
    return None


@dataclass(frozen=True)
class Usage:
    chips: int | None  # None: cannot be told (the reason says why)
    reason: str = ""


def monitoring_usage(pages: list[dict[str, Any]], quota_metric: str, family: str | None) -> Usage:
    """The latest allocation usage of ``quota_metric`` (and ``family``) in timeSeries.list pages.

    Points come newest first. No series in the window means no usage was written for a day:
    none is held. A family quota whose series do not say which family they count cannot be
    told apart from the other families' use.
    """
    series = [
        s
        for page in pages
        for s in page.get("timeSeries") or []
        if isinstance(s, dict) and ((s.get("metric") or {}).get("labels") or {}).get("quota_metric") == quota_metric
    ]
    if family is not None and series:
        mine = [s for s in series if ((s.get("metric") or {}).get("labels") or {}).get("tpu_family") == family]
        if not mine:
            return Usage(None, f"Cloud Monitoring's {quota_metric} series do not say which tpu_family they count")
        series = mine
    if not series:
        return Usage(0, "")
    total = 0
    for s in series:
        points = s.get("points") or []
        value = (points[0].get("value") or {}) if points and isinstance(points[0], dict) else {}
        chips = _int(value.get("int64Value", value.get("doubleValue")))
        if chips is None or chips < 0:
            return Usage(None, f"Cloud Monitoring's latest {quota_metric} point is not a count")
        total += chips
    return Usage(total, "")


def now() -> datetime:
    return datetime.now(UTC)
