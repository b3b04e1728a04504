"""No upgrade under a run: a maintenance exclusion set on a running cluster for a campaign's duration (``infra exclude-upgrades``).

GKE's ``clusters.setMaintenancePolicy`` replaces the whole maintenance policy, so the command
first reads the cluster (``clusters.get``) and sends back its recurring window, its other
exclusions and its ``resourceVersion`` (GKE refuses a write made over a policy changed since the
read) with the new exclusion added: nothing else of the policy changes. ``--dry-run`` prints the
two requests as they would be sent; the read's answer is not known then, so the POST shows the
spec's window and exclusions (what the stack applied) and a placeholder version.

The exclusion is checked as the spec's are (``infra.spec.rules.exclusion_problem``): in the
future and within GKE's limits, refused in one line naming the flag, before any call.

Terraform holds the policy too (``modules/cluster.py``): an exclusion set here and not listed in
the spec's ``cluster.maintenance_exclusions`` is removed by the next ``infra deploy``. The
command says so and prints the entry to add.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from infra import gcp_api
from infra.gke_features import MAX_EXCLUSION_DAYS
from infra.spec import MaintenanceExclusion
from infra.spec.rules import RFC3339, exclusion_problem
from toolkit.errors import SpecError
from toolkit.patterns import fullmatch

SCOPE = "NO_MINOR_OR_NODE_UPGRADES"
_DURATION = r"([0-9]{1,6})([hd])"
RESOURCE_VERSION_PLACEHOLDER = "<resourceVersion of the GET>"


def parse_duration(text: str) -> dt.timedelta:
    """``--for``: whole hours or days, like 72h or 7d."""
    m = fullmatch(_DURATION, text.strip())
    if not m or int(m.group(1)) == 0:
        raise SpecError("--for", f"{text!r} is not a duration", "write whole hours or days, like 72h or 7d")
    n = int(m.group(1))
    return dt.timedelta(hours=n) if m.group(2) == "h" else dt.timedelta(days=n)


def parse_start(text: str, now: dt.datetime) -> dt.datetime:
    """``--start``: ``now`` or an RFC 3339 UTC time."""
    if text == "now":
        return now.replace(microsecond=0)
    try:
        return dt.datetime.strptime(text, RFC3339).replace(tzinfo=dt.UTC)
    except ValueError:
        raise SpecError("--start", f"{text!r} is not a time", "write now, or an RFC 3339 UTC time like 2026-12-01T00:00:00Z") from None


def campaign_exclusion(name: str, start: dt.datetime, duration: dt.timedelta, now: dt.datetime) -> MaintenanceExclusion:
    """The exclusion ``--name/--start/--for`` describe, held to GKE's limits (one SpecError naming the flag)."""
    end = start + duration
    found = exclusion_problem(start, end, now, scope="no_minor_or_node_upgrades")
    if found is not None:
        problem, _ = found
        if end <= now:
            raise SpecError("--start", problem, "use --start now, or a time after which the campaign still runs")
        raise SpecError("--for", problem, f"use --for {MAX_EXCLUSION_DAYS}d or less, and set another exclusion when it ends")
    try:
        return MaintenanceExclusion(name=name, start_time=start.strftime(RFC3339), end_time=end.strftime(RFC3339))
    except ValueError:
        raise SpecError("--name", f"{name!r} is not a name GKE takes", "use lowercase letters, digits and '-', starting with a letter (at most 63)") from None


@dataclass(frozen=True)
class Target:
    """One cluster an exclusion goes to (a spec's, or each of a fleet's)."""

    project: str
    region: str
    cluster: str
    spec: Any  # the EnvSpec or FleetManager it comes from: its window and exclusions
    label: str | None = None  # a fleet member's (``== worker west (tpu-west)`` before its lines); None for a spec

    @property
    def path(self) -> str:
        return f"/v1/projects/{self.project}/locations/{self.region}/clusters/{self.cluster}"


def targets(spec_or_fleet: Any) -> list[Target]:
    """Every cluster of a spec (one) or a fleet (``infra.fleet.members``: each worker, then the manager)."""
    from infra.fleet import Fleet, members

    if isinstance(spec_or_fleet, Fleet):
        return [Target(m.model.project, m.model.region, m.cluster, m.model, m.label) for m in members(spec_or_fleet)]
    s = spec_or_fleet
    return [Target(s.project, s.region, s.cluster.name, s)]


def _header(t: Target) -> list[str]:
    return [f"== {t.label}"] if t.label else []


def read_request(t: Target) -> gcp_api.ApiRequest:
    return gcp_api.ApiRequest("container", t.path, f"cluster {t.cluster}'s maintenance policy and its resourceVersion")


def _time_window(e: MaintenanceExclusion) -> dict[str, Any]:
    return {"startTime": e.start_time, "endTime": e.end_time, "maintenanceExclusionOptions": {"scope": e.scope.upper()}}


def policy_from_spec(spec: Any) -> dict[str, Any]:
    """The maintenance policy the stack applied (``modules/cluster.py``), in the API's words: what --dry-run starts from."""
    w = spec.cluster.maintenance_window
    return {
        "window": {
            "recurringWindow": {"window": {"startTime": w.start_time, "endTime": w.end_time}, "recurrence": w.recurrence},
            "maintenanceExclusions": {e.name: _time_window(e) for e in spec.cluster.maintenance_exclusions},
        },
        "resourceVersion": RESOURCE_VERSION_PLACEHOLDER,
    }


def with_exclusion(policy: dict[str, Any], e: MaintenanceExclusion) -> dict[str, Any]:
    """``policy`` (as clusters.get returns it) with ``e`` added or replaced; every other field kept."""
    window = dict(policy.get("window") or {})
    exclusions = dict(window.get("maintenanceExclusions") or {})
    exclusions[e.name] = _time_window(e)
    window["maintenanceExclusions"] = exclusions
    return {**policy, "window": window}


def write_request(t: Target, policy: dict[str, Any]) -> gcp_api.ApiRequest:
    return gcp_api.ApiRequest(
        "container", f"{t.path}:setMaintenancePolicy", f"cluster {t.cluster}: no minor or node upgrades in the exclusion", body={"maintenancePolicy": policy}
    )


def dry_run(spec_or_fleet: Any, e: MaintenanceExclusion, endpoint: str | None = None) -> list[str]:
    """The requests a real run sends, per cluster (the POST from the spec's policy: the GET's answer is not known)."""
    out = []
    for t in targets(spec_or_fleet):
        out += _header(t)
        out.append(read_request(t).render(endpoint))
        out.append(write_request(t, with_exclusion(policy_from_spec(t.spec), e)).render(endpoint))
    return out


def apply(spec_or_fleet: Any, e: MaintenanceExclusion, client: gcp_api.Client) -> list[str]:
    """Read each cluster's policy, write it back with ``e``: the operation names GKE returns."""
    ops = []
    for t in targets(spec_or_fleet):
        cluster = client.get(read_request(t))
        if cluster is None:
            raise gcp_api.ApiError(f"GKE API: no cluster {t.cluster} in {t.project}/{t.region} — deploy it first (python -m infra deploy)", status=404)
        policy = cluster.get("maintenancePolicy") or {}
        answer = client.get(write_request(t, with_exclusion(policy, e))) or {}
        ops += [*_header(t), f"{t.cluster}: {answer.get('name', 'operation started')}"]
    return ops


def spec_entry(e: MaintenanceExclusion) -> list[str]:
    """The lines to add under ``cluster.maintenance_exclusions`` so that ``infra deploy`` keeps the exclusion."""
    return [f"  - name: {e.name}", f"    start_time: {e.start_time}", f"    end_time: {e.end_time}"]


def listed(spec_or_fleet: Any, e: MaintenanceExclusion) -> bool:
    return all(any(x == e for x in t.spec.cluster.maintenance_exclusions) for t in targets(spec_or_fleet))
