"""Preflight: is the live cluster ready to run on a TPU pool of the spec?

A pre-submit checklist for a TPU run, as rows that pass or fail with a fix:
a ResourceFlavor for the shape, a ClusterQueue that covers it with enough quota, the
team's LocalQueue, enough TPU nodes with the accelerator + topology labels, and those
nodes in the pool's zone. ``evaluate`` is pure (objects in, rows out); ``gather`` is the
one function that reads the cluster. Which pool is checked is decided by ``target``, through
``workloads.planning.select.select_pool``, the same selection ``submit`` makes.

Flavors are matched by their node labels, not by name, so a flavor named by hand (or by
xpk, e.g. ``1xtpu7x-256``) counts as long as it selects the right nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from infra.catalog import SliceShape
from infra.spec import EnvSpec, FlexStart, TeamSpec, TpuPoolSpec
from toolkit.errors import SpecError
from toolkit.names import GKE_NODEPOOL_LABEL as NODEPOOL_LABEL
from toolkit.names import GKE_TPU_ACCELERATOR_LABEL as ACCELERATOR_LABEL
from toolkit.names import GKE_TPU_TOPOLOGY_LABEL as TOPOLOGY_LABEL
from toolkit.names import K8S_ZONE_LABEL as ZONE_LABEL
from toolkit.names import KUEUE_GROUP, TPU_RESOURCE

QUEUES_FIX = "apply the spec's Kueue objects: python -m workloads queues apply"


class Result(str, Enum):
    PASS = "pass"
    WARN = "warn"  # not blocking now, but the run may wait (e.g. nodes that autoscale from zero)
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    result: Result
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Snapshot:
    """What preflight reads from the cluster."""

    kueue_served: bool
    resource_flavors: tuple[Mapping[str, Any], ...] = ()
    cluster_queues: tuple[Mapping[str, Any], ...] = ()
    local_queues: tuple[Mapping[str, Any], ...] = ()  # in the team's namespace
    nodes: tuple[Mapping[str, Any], ...] = ()
    # What the run asks of the cluster beyond queues and nodes (``workloads.cluster.capabilities``):
    # capability -> None (the cluster has it) or what is missing; only the capabilities asked for.
    capabilities: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    pool: str
    shape: str
    slices: int
    namespace: str
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(c.result is not Result.FAIL for c in self.checks)

    def with_rows(self, rows: list[tuple[str, str, str, str]]) -> Report:
        """This report with more checks: (name, result, detail, fix) rows, e.g. a dataset's (``workloads.data.checks``)."""
        return replace(self, checks=(*self.checks, *(Check(n, Result(r), detail, fix) for n, r, detail, fix in rows)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        for c in d["checks"]:
            c["result"] = c["result"].value
        return d


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _quantity(v: Any) -> float:
    """Kubernetes quantities as numbers; TPU counts are plain integers, cpu may be '500m'."""
    s = str(v).strip()
    suffixes = {"m": 1e-3, "k": 1e3, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "M": 1e6, "G": 1e9, "T": 1e12}
    for suf in sorted(suffixes, key=len, reverse=True):
        if s.endswith(suf):
            try:
                return float(s[: -len(suf)]) * suffixes[suf]
            except ValueError:
                return 0.0
    try:
        return float(s)
    except ValueError:
        return 0.0


def flavor_matches(flavor: Mapping[str, Any], shape: SliceShape) -> bool:
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return labels.get(ACCELERATOR_LABEL) == shape.accelerator_label and labels.get(TOPOLOGY_LABEL) == shape.topology


def _tpu_quota(cq: Mapping[str, Any], flavors: set[str]) -> tuple[float, list[str], bool]:
    """(TPU nominal quota over the matching flavors, covered resources of that group, flavor listed)."""
    quota = 0.0
    covered: list[str] = []
    listed = False
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            if fl.get("name") not in flavors:
                continue
            listed = True
            covered = list(rg.get("coveredResources") or [])
            for res in fl.get("resources") or []:
                if res.get("name") == TPU_RESOURCE:
                    quota += _quantity(res.get("nominalQuota", 0))
    return quota, covered, listed


def _cohort(cq: Mapping[str, Any]) -> str | None:
    spec = cq.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort")  # v1beta2 / v1beta1


def _cohort_quota(cq: Mapping[str, Any], all_cqs: tuple[Mapping[str, Any], ...], flavors: set[str]) -> float:
    cohort = _cohort(cq)
    if not cohort:
        return _tpu_quota(cq, flavors)[0]
    return sum(_tpu_quota(c, flavors)[0] for c in all_cqs if _cohort(c) == cohort)


def _ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status")).lower() == "true"
    return False


@dataclass(frozen=True)
class _Ask:
    """What is being checked: a pool's shape, how many slices, for which team."""

    spec: EnvSpec
    pool: TpuPoolSpec
    team: TeamSpec
    slices: int

    @property
    def shape(self) -> SliceShape:
        return self.pool.shape

    @property
    def chips(self) -> int:
        return self.slices * self.shape.chips

    @property
    def scales_from_zero(self) -> bool:
        return self.pool.autoscaling or isinstance(self.pool.capacity, FlexStart)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def evaluate(spec: EnvSpec, pool: TpuPoolSpec, team: TeamSpec, snap: Snapshot, *, slices: int | None = None) -> Report:
    ask = _Ask(spec, pool, team, slices or pool.slices)
    checks: list[Check] = []
    if not snap.kueue_served:
        checks.append(
            Check(
                "kueue",
                Result.FAIL,
                "the cluster does not serve kueue.x-k8s.io",
                f"install Kueue {spec.versions.kueue} and its CRDs (see python -m workloads local for a local cluster)",
            )
        )
    matching = {_name(f) for f in snap.resource_flavors if flavor_matches(f, ask.shape)}
    checks.append(_flavor_check(ask, matching))
    checks.extend(_queue_checks(ask, snap, matching))
    tpu_nodes = [
        n for n in snap.nodes if _labels(n).get(ACCELERATOR_LABEL) == ask.shape.accelerator_label and _labels(n).get(TOPOLOGY_LABEL) == ask.shape.topology
    ]
    checks.extend(_node_checks(ask, tpu_nodes))
    checks.append(_zone_check(ask, tpu_nodes))
    checks.extend(_capability_checks(snap))
    shape = ask.shape
    return Report(pool=pool.name, shape=f"{shape.accelerator_type} ({shape.key})", slices=ask.slices, namespace=team.ns, checks=tuple(checks))


# The capabilities a run may ask for: (row name, what it is for, the fix when the cluster lacks it).
CAPABILITIES = {
    "multi-tier-checkpointing": (
        "GKE's multi-tier checkpointing add-on serves checkpointing.gke.io",
        "declare tpu_pools[].multi_tier_checkpointing in the spec and run python -m infra deploy (the stack turns HighScaleCheckpointing on)",
    ),
    "in-place-restart": (
        "the cluster's JobSet takes a JobSet that restarts in place (server-side dry run)",
        "install JobSet v0.11.0 or later with its InPlaceRestart gate (the provision pipeline does, from recovery.restart), or run with --restart recreate",
    ),
}


def _capability_checks(snap: Snapshot) -> list[Check]:
    out = []
    for name, problem in snap.capabilities.items():
        ok, fix = CAPABILITIES[name]
        out.append(Check(name, Result.PASS, ok) if problem is None else Check(name, Result.FAIL, problem, fix))
    return out


def _flavor_check(ask: _Ask, matching: set[str]) -> Check:
    shape = ask.shape
    if matching:
        return Check(
            "resource-flavor",
            Result.PASS,
            f"{', '.join(sorted(matching))} selects {ACCELERATOR_LABEL}={shape.accelerator_label}, {TOPOLOGY_LABEL}={shape.topology}",
        )
    return Check("resource-flavor", Result.FAIL, f"no ResourceFlavor with nodeLabels {shape.accelerator_label}/{shape.topology}", QUEUES_FIX)


def _queue_checks(ask: _Ask, snap: Snapshot, matching: set[str]) -> list[Check]:
    """The team's LocalQueue, the ClusterQueue it points at, and its quota for the shape."""
    team = ask.team
    lq = next((q for q in snap.local_queues if _name(q) == team.queue), None)
    cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
    checks: list[Check] = []
    if lq is None:
        checks.append(Check("local-queue", Result.FAIL, f"no LocalQueue {team.queue!r} in namespace {team.ns!r}", QUEUES_FIX))
    else:
        checks.append(Check("local-queue", Result.PASS, f"{team.ns}/{team.queue} -> ClusterQueue {cq_name}"))
    cqs = {_name(c): c for c in snap.cluster_queues}
    candidates = [cqs[cq_name]] if cq_name in cqs else ([] if lq is not None else list(cqs.values()))
    if lq is not None and cq_name not in cqs:
        checks.append(Check("cluster-queue", Result.FAIL, f"LocalQueue {team.queue} points at ClusterQueue {cq_name!r}, which does not exist", QUEUES_FIX))
    elif not candidates:
        checks.append(Check("cluster-queue", Result.FAIL, "no ClusterQueue exists", QUEUES_FIX))
    else:
        best = max(candidates, key=lambda c: _tpu_quota(c, matching)[0])
        checks.extend(_quota_checks(ask, best, snap, matching))
    return checks


def _quota_checks(ask: _Ask, cq: Mapping[str, Any], snap: Snapshot, matching: set[str]) -> list[Check]:
    return _quota_rows(ask, cq, snap, matching) + _whole_slice_rows(ask, cq, matching)


def _whole_slice_rows(ask: _Ask, cq: Mapping[str, Any], matching: set[str]) -> list[Check]:
    """A quota that is not whole slices strands chips no slice can use: a ClusterQueue applied by hand, or by a toolkit
    from before the spec's quotas were rendered in whole slices (infra/quotas.py)."""
    quota, _, listed = _tpu_quota(cq, matching)
    chips = ask.shape.chips
    if not listed or quota % chips == 0:
        return []
    return [
        Check(
            "cluster-queue-slices",
            Result.WARN,
            f"ClusterQueue {_name(cq)} holds {quota:g} {TPU_RESOURCE} for {ask.shape.key}, not whole slices of {chips}: "
            f"{quota % chips:g} of them can never run a slice",
            "re-run python -m workloads queues apply: the spec's quotas are whole slices (infra/quotas.py)",
        )
    ]


def _quota_rows(ask: _Ask, cq: Mapping[str, Any], snap: Snapshot, matching: set[str]) -> list[Check]:
    quota, covered, listed = _tpu_quota(cq, matching)
    name, key, need = _name(cq), ask.shape.key, ask.chips
    if not listed:
        return [Check("cluster-queue", Result.FAIL, f"ClusterQueue {name} does not list a flavor for {key}", QUEUES_FIX)]
    if quota < need and _cohort_quota(cq, snap.cluster_queues, matching) >= need:
        return [
            Check(
                "cluster-queue",
                Result.WARN,
                f"ClusterQueue {name} has {quota:g} {TPU_RESOURCE} for {key} of {need:g} needed; "
                f"the rest must be borrowed from cohort {_cohort(cq)} while the other teams leave it unused",
                "raise the team's quota_share in the spec and re-run python -m workloads queues apply, or run fewer --slices",
            )
        ]
    if quota < need:
        return [
            Check(
                "cluster-queue",
                Result.FAIL,
                f"ClusterQueue {name} has {quota:g} {TPU_RESOURCE} for {key}; {ask.slices} slice(s) need {need:g}",
                "raise the pool's slices or the team's quota_share in the spec and re-run python -m workloads queues apply, or run fewer --slices",
            )
        ]
    checks = [Check("cluster-queue", Result.PASS, f"ClusterQueue {name}: {quota:g} {TPU_RESOURCE} >= {need:g} needed")]
    missing = [r for r in ("cpu", "memory") if r not in covered]
    if missing:
        checks.append(
            Check(
                "cluster-queue-resources",
                Result.WARN,
                f"ClusterQueue {name} does not cover {', '.join(missing)}; pods that request them cannot be admitted",
                f"add {', '.join(missing)} to coveredResources ({QUEUES_FIX})",
            )
        )
    return checks


def _node_checks(ask: _Ask, tpu_nodes: list[Mapping[str, Any]]) -> list[Check]:
    """Enough complete, ready node pools of the shape, each VM advertising its chips."""
    shape, pool = ask.shape, ask.pool
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for n in tpu_nodes:
        by_pool.setdefault(_labels(n).get(NODEPOOL_LABEL, "?"), []).append(n)
    full_pools = [p for p, ns in by_pool.items() if sum(_ready(n) for n in ns) >= shape.nodes]
    ready = sum(_ready(n) for n in tpu_nodes)
    detail = (
        f"{ready} ready {shape.accelerator_label}/{shape.topology} nodes in {len(full_pools)} complete node pool(s); "
        f"{ask.slices} slice(s) need {ask.slices * shape.nodes} nodes in {ask.slices} pool(s) of {shape.nodes}"
    )
    if len(full_pools) >= ask.slices:
        checks = [Check("nodes", Result.PASS, detail)]
    elif ask.scales_from_zero:
        checks = [Check("nodes", Result.WARN, detail + " (pool scales from zero: nodes appear once the run is admitted)")]
    else:
        checks = [Check("nodes", Result.FAIL, detail, f"create the node pools: python -m infra deploy (pool {pool.name}: {', '.join(pool.node_pool_names())})")]
    bad_alloc = [_name(n) for n in tpu_nodes if _quantity(((n.get("status") or {}).get("allocatable") or {}).get(TPU_RESOURCE, 0)) < shape.chips_per_vm]
    if bad_alloc:
        checks.append(
            Check(
                "node-tpu-resource",
                Result.FAIL,
                f"{len(bad_alloc)} node(s) report fewer than {shape.chips_per_vm} allocatable {TPU_RESOURCE} (e.g. {bad_alloc[0]})",
                "wait for the TPU device plugin to start, or recreate the node",
            )
        )
    return checks


def _zone_check(ask: _Ask, tpu_nodes: list[Mapping[str, Any]]) -> Check:
    key, pool = ask.shape.key, ask.pool
    zone = ask.spec.pool_zone(pool)
    zones = sorted({_labels(n).get(ZONE_LABEL, "?") for n in tpu_nodes})
    if not tpu_nodes:
        fail = not ask.scales_from_zero
        return Check(
            "zone",
            Result.FAIL if fail else Result.WARN,
            f"no {key} nodes to compare with the spec's zone {zone}",
            "create the node pools first" if fail else "",
        )
    if zones == [zone]:
        return Check("zone", Result.PASS, f"all {key} nodes are in {zone}")
    return Check(
        "zone",
        Result.FAIL,
        f"{key} nodes are in {', '.join(zones)} but the spec puts pool {pool.name} in {zone}",
        f"set tpu_pools[{pool.name}].zone to the nodes' zone, or recreate the pool in {zone}",
    )


def asked_capabilities(spec: EnvSpec, recipe: str | None, *, multi_tier_checkpointing: bool, restart: str | None) -> tuple[str, ...]:
    """The capabilities a run of ``recipe`` asks of the cluster: multi-tier checkpointing (the flag or the recipe's),
    in-place restart (``--restart in-place``, or the spec's default for a JobSet recipe). Bad input is refused here."""
    from workloads.planning.recipes import load_recipe

    r = load_recipe(recipe) if recipe else None
    out = []
    if multi_tier_checkpointing or (r is not None and r.multi_tier_checkpointing):
        out.append("multi-tier-checkpointing")
    if restart is not None and restart not in ("in-place", "recreate"):
        raise SpecError("--restart", f"unknown restart path {restart[:20]!r}", "use in-place or recreate")
    if restart == "in-place" and not spec.cluster_has_in_place_restart:
        raise SpecError(
            "--restart", "the spec's cluster cannot restart in place (recovery.restart)", "set recovery.restart: in-place in the spec, or drop --restart"
        )
    jobset_recipe = r is None or not r.runtimes or r.runtimes[0] == "jobset"
    if restart == "in-place" or (restart is None and jobset_recipe and spec.restart_path == "in-place"):
        out.append("in-place-restart")
    return tuple(out)


def target(spec: EnvSpec, recipe: str | None, *, pool: str | None, slices: int | None, team: str | None) -> tuple[TpuPoolSpec, TeamSpec]:
    """(the pool, the team) preflight checks: the pool ``submit`` would use for the recipe and slice count
    (any pool without a recipe), and the team (the spec's first without ``team``). Bad input is raised here,
    before any cluster is reached."""
    from workloads.planning.recipes import load_recipe
    from workloads.planning.select import select_pool

    choice = select_pool(spec, load_recipe(recipe) if recipe else None, pool=pool, slices=slices or 1)
    return choice.pool, spec.team(team)


def gather(cluster: Any, team: TeamSpec, *, capabilities: tuple[str, ...] = ()) -> Snapshot:
    """Read what ``evaluate`` needs. ``cluster`` is a workloads.cluster.client.Cluster.

    Only a Kueue API group the cluster does not serve counts as "Kueue not installed";
    a refused or failed discovery is raised as it is, not reported as a missing Kueue.
    ``capabilities`` (names of ``CAPABILITIES``) are probed with ``workloads.cluster.capabilities``.
    """
    from toolkit.errors import NotFound
    from workloads.cluster import capabilities as probes

    found: dict[str, str | None] = {}
    for name in capabilities:
        found[name] = probes.multi_tier_problem(cluster) if name == "multi-tier-checkpointing" else probes.in_place_problem(cluster, team.ns)

    try:
        cluster.preferred_version(KUEUE_GROUP)
        kueue_ok = True
    except NotFound:
        kueue_ok = False
    nodes = tuple(cluster.list(cluster.resource("v1", "Node")))
    if not kueue_ok:
        return Snapshot(kueue_served=False, nodes=nodes, capabilities=found)
    return Snapshot(
        kueue_served=True,
        capabilities=found,
        resource_flavors=tuple(cluster.list(cluster.kueue("ResourceFlavor"))),
        cluster_queues=tuple(cluster.list(cluster.kueue("ClusterQueue"))),
        local_queues=tuple(cluster.list(cluster.kueue("LocalQueue"), team.ns)),
        nodes=nodes,
    )
