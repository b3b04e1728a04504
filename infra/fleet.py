"""A fleet: one Kueue MultiKueue manager cluster in front of several regional worker clusters.

The fleet file names the manager and lists the workers, each by its own environment spec
(``infra.spec``, unchanged: a worker is a whole environment with its own TPU pools, teams
and buckets). The manager is derived, not written twice: its cluster name and region come
from the fleet file, everything else from the workers — their teams (which must agree:
MultiKueue creates each run in the worker under the manager's namespace and LocalQueue)
and their TPU pools, all of them, so the manager's ClusterQueues hold every worker's
flavors with the fleet's quota (the sum of the workers'), and a run is planned against
the pools it could land on. The workers' own Kueue still admits by their own quota:
the manager's quota only keeps it from dispatching more than the fleet holds.

A fleet is its members, each distinct: every name a member's stack creates that GCP holds
one of (its Terraform state, cluster, VPC, service accounts, buckets...: ``infra.owned_names``)
is its own, refused at load when two members share one (``check_distinct``); the manager
has its own state and network. A run submitted through the manager may land on any worker,
and be moved to another when its worker is lost, so it checkpoints to the fleet's own
buckets (``buckets:`` of the fleet file): the manager's stack creates them and grants them to
every worker's team identity, so the planner's "can this run's identity write it" holds on
every worker it may land on.

The manager is a ``FleetManager``, a model of its own holding what its stack and its Kueue
objects need; it is not an environment spec (it has no TPU pool, and the pools its queues
cover lie in other regions). Code that takes an ``EnvSpec`` gets the manager as one through
``Fleet.manager_env()``, which says what that view is. Whether a ``--spec`` file is a spec
or a fleet is decided in one place, ``load_spec_or_fleet``.

```yaml
name: tpu-fleet                 # the MultiKueueConfig and its AdmissionCheck
manager: {cluster: tpu-fleet-mgr, region: us-central1}
workers:
  - {name: west, spec: west.yaml}   # a MultiKueueCluster per worker; spec paths are relative to this file
  - {name: east, spec: east.yaml}
buckets:                        # the fleet's runs' checkpoints, writable from every worker
  - {name: my-tpu-project-fleet-ckpt, purpose: checkpoints}
multikueue: {worker_lost_timeout_seconds: 900, gc_interval_seconds: 60}
```

Pure but for reading the fleet file and the worker specs it names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra.naming import REGION, ZONE
from infra.spec import (
    BucketPurpose,
    BucketSpec,
    Cidrs,
    ClusterSpec,
    CpuPoolSpec,
    EnvSpec,
    KueueSpec,
    NetworkSpec,
    StateSpec,
    TeamSpec,
    TpuPoolSpec,
    derive_cidrs,
    format_validation_error,
    load_spec,
    parse_spec,
    read_document,
    spec_path,
)
from infra.spec.env import ClusterDerived, cluster_floors, highest
from infra.spec.load import SPEC_MISSING_FIX
from toolkit.errors import SpecError, shown

Want = Literal["spec", "fleet", "either"]

# A Kubernetes object name that is also a DNS label: MultiKueueCluster and Secret names are built from it.
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
# Kueue's own defaults (config.kueue.x-k8s.io/v1beta2 MultiKueue): 15 min and 1 min.
DEFAULT_WORKER_LOST_TIMEOUT_SECONDS = 900
DEFAULT_GC_INTERVAL_SECONDS = 60
# Cloud Storage's multi-regions, by the first word of the regions they span.
MULTI_REGIONS = {"us": "US", "europe": "EU", "asia": "ASIA"}
BUCKET_LOCATION = r"^[A-Za-z][A-Za-z0-9-]{1,40}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FleetManagerSpec(_Model):
    cluster: str = Field(..., pattern=_DNS_LABEL, description="the manager's GKE cluster name")
    region: str | None = Field(None, pattern=REGION, description="default: the first worker's region")
    zones: list[str] | None = Field(None, min_length=1)
    context: str | None = Field(None, description="the kubeconfig context that reaches the manager")
    kubeconfig: str | None = Field(None, min_length=1, description="the kubeconfig file with that context, relative to the fleet file (default: --kubeconfig)")
    state: StateSpec | None = Field(None, description="the manager's Terraform state (default: the first worker's bucket, prefix tpu-gke-toolkit/<cluster>)")


class FleetBucketSpec(BucketSpec):
    """A bucket of the fleet's own: the manager's stack creates it and grants it to every worker's team identity."""

    location: str | None = Field(None, pattern=BUCKET_LOCATION, description="default: the multi-region holding every worker (US, EU, ASIA)")


class FleetWorkerSpec(_Model):
    name: str = Field(..., pattern=_DNS_LABEL, description="the MultiKueueCluster name")
    spec: str = Field(..., min_length=1, description="the worker's environment spec, relative to the fleet file")
    context: str | None = Field(None, description="the kubeconfig context that reaches the worker")
    kubeconfig: str | None = Field(None, min_length=1, description="the kubeconfig file with that context, relative to the fleet file (default: --kubeconfig)")


class MultiKueueSpec(_Model):
    worker_lost_timeout_seconds: int = Field(DEFAULT_WORKER_LOST_TIMEOUT_SECONDS, ge=1, le=7 * 86400)
    gc_interval_seconds: int = Field(DEFAULT_GC_INTERVAL_SECONDS, ge=0, le=86400)


# Kueue v0.17.1's MultiKueueConfig takes at most 20 clusters (its CRD: spec.clusters maxItems 20). Checked on the
# fleet file before any worker's spec is read: a file of thousands of aliased workers is one line, not thousands of loads.
MAX_WORKERS = 20


class FleetSpec(_Model):
    name: str = Field(..., pattern=_DNS_LABEL)
    manager: FleetManagerSpec
    workers: list[FleetWorkerSpec] = Field(..., min_length=1, max_length=MAX_WORKERS)
    buckets: list[FleetBucketSpec] = Field(default_factory=list, description="the buckets runs through the manager write, on whichever worker")
    multikueue: MultiKueueSpec = Field(default_factory=MultiKueueSpec)


def gke_context(project: str, region: str, cluster: str) -> str:
    """The kubeconfig context ``gcloud container clusters get-credentials`` writes for a regional cluster."""
    return f"gke_{project}_{region}_{cluster}"


@dataclass(frozen=True)
class Worker:
    name: str
    spec: EnvSpec
    spec_path: Path
    context: str | None
    kubeconfig: Path | None = None
    index: int = 0  # its place in the fleet file's workers:

    @property
    def field(self) -> str:
        return f"workers[{self.index}]"

    @property
    def reach_context(self) -> str | None:
        """The context that reaches it: as written; else, with no kubeconfig of its own either, the one
        ``gcloud container clusters get-credentials`` names its cluster (never just the current context,
        which would send every member to one cluster)."""
        if self.context is not None or self.kubeconfig is not None:
            return self.context
        return gke_context(self.spec.project, self.spec.region, self.spec.cluster.name)


@dataclass(frozen=True)
class BucketGrant:
    """``role`` on the fleet's ``bucket`` for ``member`` (a worker's team or node service account)."""

    bucket: str
    role: str
    member: str
    worker: str


@dataclass(frozen=True)
class FleetManager(ClusterDerived):
    """The fleet's MultiKueue manager: a cluster of its own that holds the fleet's queues and never a TPU pod.

    Exactly what its stack (``infra.stack.build_manager_stack``: network, cluster, CPU pool,
    the teams' identities, the Terraform state, the fleet's buckets and their grants to
    every worker) and its Kueue objects (the teams' queues over every worker's flavors,
    Kueue's own settings) are made from. Derived, not written twice: its name, region,
    zones, state and buckets come from the fleet file, everything else from the first
    worker (the teams, which every worker must share, and the cluster's settings under the
    manager's name; its network is named for its own cluster, with no DCN network). Checked as a fleet (``check_fleet``, ``derive_manager``), not as an
    environment spec: it has no TPU pool of its own, and ``pools`` lie in the workers'
    regions, each validated in its own worker's spec.
    """

    cluster: ClusterSpec  # the first worker's cluster settings, under the manager's name
    project: str
    region: str
    zones: tuple[str, ...]
    labels: dict[str, str]
    network: NetworkSpec
    cpu_pool: CpuPoolSpec
    state: StateSpec
    teams: tuple[TeamSpec, ...]
    kueue: KueueSpec
    # Every worker's TPU pools, a name two workers share prefixed with its worker's: the
    # flavors the manager's ClusterQueues hold the fleet's quota of (the workers' summed).
    pools: tuple[TpuPoolSpec, ...]
    context: str | None = None
    kubeconfig: Path | None = None
    buckets: tuple[FleetBucketSpec, ...] = ()
    bucket_locations: tuple[str, ...] = ()  # one per bucket
    bucket_grants: tuple[BucketGrant, ...] = ()

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def field(self) -> str:
        return "manager"

    @property
    def reach_context(self) -> str | None:
        """As ``Worker.reach_context``: as written, else the context gcloud names the manager's cluster."""
        if self.context is not None or self.kubeconfig is not None:
            return self.context
        return gke_context(self.project, self.region, self.cluster.name)

    @property
    def tpu_nodes(self) -> int:
        return 0  # the queues' pools are the workers' nodes

    @property
    def cidrs(self) -> Cidrs:
        return derive_cidrs(self.network, self.cluster, tpu_nodes=self.tpu_nodes, cpu_nodes=self.cpu_nodes)

    @property
    def gke_version_floor(self) -> str | None:
        """Only the cluster's own add-ons set it: the manager runs no TPU pod (``cluster_floors``)."""
        return highest(cluster_floors(self.cluster))

    @property
    def min_master_version(self) -> str | None:
        return self.cluster.min_version or self.gke_version_floor


@dataclass(frozen=True)
class Fleet:
    """A validated fleet: the workers' specs loaded, the manager derived from them (``manager``)."""

    name: str
    manager: FleetManager
    workers: tuple[Worker, ...]
    multikueue: MultiKueueSpec
    path: Path

    def worker(self, name: str) -> Worker:
        for w in self.workers:
            if w.name == name:
                return w
        raise SpecError("--worker", f"no worker named {shown(name)} in {self.path}", f"use one of {', '.join(w.name for w in self.workers)}")

    @property
    def admission_check(self) -> str:
        return self.name

    # The manager's cluster name and how to reach it, as the commands that connect to it read them.
    @property
    def manager_cluster(self) -> str:
        return self.manager.name

    @property
    def manager_context(self) -> str | None:
        return self.manager.reach_context

    @property
    def manager_kubeconfig(self) -> Path | None:
        return self.manager.kubeconfig

    def manager_env(self) -> EnvSpec:
        """The manager as an environment spec, for the code that takes one: planning a run submitted through the
        manager (``load_env``), rendering the manager's Kueue objects (``workloads.render.multikueue``) and its
        local control plane (``workloads.local.fleet``).

        Every section the ``FleetManager`` holds (its cluster, region, zones, network and state;
        the fleet's pools, so a run is planned against every pool it could land on, under the
        teams every worker shares; the fleet's buckets, the only ones every worker's identity
        may write), over the first worker's spec. Built here, at the boundary, and not
        validated again as one spec, because it is not one: its pools lie in the workers'
        regions (each checked in its own worker's spec). It has no dataset and no Lustre
        instance: those are one worker's, and a run through the manager may land on another.
        The sections a manager has no part in (xpk, prices, TensorBoard...) are the first
        worker's.
        """
        m = self.manager
        held = {
            **{"project": m.project, "region": m.region, "zones": list(m.zones), "labels": dict(m.labels), "network": m.network, "cluster": m.cluster},
            **{"cpu_pool": m.cpu_pool, "state": m.state, "teams": list(m.teams), "kueue": m.kueue, "tpu_pools": list(m.pools)},
            **{"buckets": list(m.buckets), "datasets": [], "lustre": None},
        }
        return self.workers[0].spec.model_copy(update=held)

    def bucket_bindings(self) -> dict[str, list[tuple[str, str]]]:
        """Per fleet bucket, the (role, member) pairs the manager's stack grants: what its IAM policy holds after a deploy."""
        out: dict[str, list[tuple[str, str]]] = {b.name: [] for b in self.manager.buckets}
        for g in self.manager.bucket_grants:
            out[g.bucket].append((g.role, g.member))
        return out

    @staticmethod
    def secret_name(worker: str) -> str:
        """The kubeconfig Secret (in kueue-system on the manager) of ``worker``."""
        return f"{worker}-multikueue"


def load_fleet(path: str | os.PathLike[str]) -> Fleet:
    """``--fleet``: the fleet file at ``path`` (``load_spec_or_fleet``, a fleet only)."""
    return load_spec_or_fleet(path, want="fleet")


def parse_fleet(data: Any, *, base: Path, source: Path) -> Fleet:
    """The fleet ``data`` describes, every check passed; each check before the work the next one needs.

    The file's own shape and names first (a workers: list of tens of thousands of YAML
    aliases is refused before any spec is read), then each distinct worker spec read once,
    then what MultiKueue needs of the workers, then the manager derived and every member's
    names held distinct.
    """
    if not isinstance(data, dict):
        raise SpecError("", f"{source}: a fleet file must be a YAML mapping, got {type(data).__name__}", "start from examples/fleet/fleet.yaml")
    listed = data.get("workers")
    if isinstance(listed, list) and len(listed) > MAX_WORKERS:
        raise SpecError(
            "workers", f"{len(listed)} workers, and a MultiKueueConfig holds at most {MAX_WORKERS} clusters", "split the fleet, or list fewer workers"
        )
    try:
        doc = FleetSpec.model_validate(data)
    except ValidationError as e:
        err = format_validation_error(e)
        raise SpecError(err.field, err.problem, err.fix.replace("examples/default.yaml", "examples/fleet/fleet.yaml")) from None
    _check_names(doc)
    loaded: dict[Path, EnvSpec] = {}
    workers = tuple(_load_worker(i, w, base, loaded) for i, w in enumerate(doc.workers))
    check_fleet(doc, workers)
    manager = derive_manager(doc, workers, base)
    check_distinct(workers, manager)
    return Fleet(doc.name, manager, workers, doc.multikueue, source)


def _relative(path: str | None, base: Path) -> Path | None:
    if path is None:
        return None
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _load_worker(i: int, w: FleetWorkerSpec, base: Path, loaded: dict[Path, EnvSpec]) -> Worker:
    path = Path(w.spec) if Path(w.spec).is_absolute() else base / w.spec
    key = path.resolve()
    if key not in loaded:
        try:
            loaded[key] = load_spec(path)
        except SpecError as e:
            where = f"workers[{i}].spec" + (f" ({path}) {e.field}" if e.field and e.field != "--spec" else "")
            raise SpecError(where, e.problem, e.fix) from None
    return Worker(w.name, loaded[key], path, w.context, _relative(w.kubeconfig, base), i)


def _check_names(doc: FleetSpec) -> None:
    """The fleet file's own names: each worker's distinct, none the manager's. Before any worker spec is read."""
    names: dict[str, int] = {}
    for i, w in enumerate(doc.workers):
        if w.name in names:
            raise SpecError(
                f"workers[{i}].name", f"worker {shown(w.name)} is named twice (also workers[{names[w.name]}])", "give each worker a name of its own"
            )
        names[w.name] = i
        if w.name == doc.manager.cluster:
            raise SpecError(
                f"workers[{i}]",
                f"worker {shown(w.name)} is the manager cluster {shown(doc.manager.cluster)} itself; a MultiKueue manager cannot be its own worker",
                "remove it from workers or run the manager as a cluster of its own",
            )


def _cluster_key(spec: EnvSpec) -> tuple[str, str, str]:
    return (spec.project, spec.region, spec.cluster.name)


def check_fleet(doc: FleetSpec, workers: tuple[Worker, ...]) -> None:
    """What MultiKueue needs of a fleet and no single spec can see; one SpecError naming the field."""
    clusters: dict[tuple[str, str, str], int] = {}
    for i, w in enumerate(workers):
        if w.spec.cluster.name == doc.manager.cluster:
            raise SpecError(
                f"workers[{i}]",
                f"worker {shown(w.name)} is the manager cluster {shown(doc.manager.cluster)} itself; a MultiKueue manager cannot be its own worker",
                "remove it from workers or run the manager as a cluster of its own",
            )
        key = _cluster_key(w.spec)
        if key in clusters:
            raise SpecError(
                f"workers[{i}].spec",
                f"cluster {key[2]} in {key[1]} of {key[0]} is already workers[{clusters[key]}]; a worker named twice would take two runs for one",
                "list each cluster once",
            )
        clusters[key] = i
    _check_teams(workers)
    _check_pools(workers)
    _check_buckets(doc, workers)


def _check_teams(workers: tuple[Worker, ...]) -> None:
    """Every worker has the manager's teams, in the same namespace with the same LocalQueue."""
    first = workers[0]
    want = {t.name: (t.ns, t.queue) for t in first.spec.teams}
    for i, w in enumerate(workers[1:], start=1):
        have = {t.name: (t.ns, t.queue) for t in w.spec.teams}
        for j, t in enumerate(w.spec.teams):
            if t.name not in want:
                raise SpecError(
                    f"workers[{i}].spec teams[{j}].name",
                    f"team {shown(t.name)} is not on worker {shown(first.name)}; every worker must hold every team (MultiKueue creates a run under the manager's namespace and queue)",
                    f"add the team to {first.spec_path.name} or remove it here",
                )
            if (t.ns, t.queue) != want[t.name]:
                raise SpecError(
                    f"workers[{i}].spec teams[{j}].namespace",
                    f"team {shown(t.name)} is in namespace {shown(t.ns)} here but {shown(want[t.name][0])} on worker {shown(first.name)}",
                    "give the team the same namespace on every worker",
                )
        missing = [n for n in want if n not in have]
        if missing:
            raise SpecError(
                f"workers[{i}].spec teams",
                f"team {shown(missing[0])} of worker {shown(first.name)} is missing; every worker must hold every team",
                f"add it to {w.spec_path.name}",
            )


def _check_pools(workers: tuple[Worker, ...]) -> None:
    """Every worker has a TPU pool each team can use: a whole slice of quota for every team.

    A worker's own spec refuses shares that strand a slice; here a worker whose pools give a
    team no whole slice of any flavor would take that team's runs only to hold them.
    """
    from infra.quotas import owned_slices

    for i, w in enumerate(workers):
        slices = w.spec.flavor_slices()
        for j, t in enumerate(w.spec.teams):
            if not any(owned_slices(t.quota_share, n) >= 1 for n in slices.values()):
                raise SpecError(
                    f"workers[{i}].spec teams[{j}].quota_share",
                    f"worker {shown(w.name)} gives team {shown(t.name)} no whole slice of any pool, so no run of its queue fits there",
                    "raise the share or add a pool to that worker",
                )


def _check_buckets(doc: FleetSpec, workers: tuple[Worker, ...]) -> None:
    """The fleet's buckets: each listed once, each one team's (as in a spec: ``infra.spec.rules``), never a data bucket.

    A dataset is one worker's (its spec's ``datasets:``); the fleet's buckets are where runs
    write, on whichever worker they land.
    """
    teams = [t.name for t in workers[0].spec.teams]
    seen: dict[str, int] = {}
    for i, b in enumerate(doc.buckets):
        if b.name in seen:
            raise SpecError(
                f"buckets[{i}].name", f"bucket {shown(b.name)} is listed twice (also buckets[{seen[b.name]}])", "bucket names are global; list each once"
            )
        seen[b.name] = i
        if b.purpose is BucketPurpose.DATA:
            raise SpecError(
                f"buckets[{i}].purpose",
                "a fleet bucket is where runs write (checkpoints, artifacts); training data is a worker's dataset",
                "use purpose: checkpoints or artifacts, and list data buckets in the workers' specs",
            )
        if b.team is None and len(teams) > 1:
            raise SpecError(f"buckets[{i}].team", f"the fleet has {len(teams)} teams and a bucket belongs to one", f"set team to one of {', '.join(teams)}")
        if b.team is not None and b.team not in teams:
            raise SpecError(f"buckets[{i}].team", f"no team {shown(b.team)} on the fleet's workers", f"use one of {', '.join(teams)}")


def bucket_location(regions: list[str]) -> str | None:
    """The Cloud Storage location holding every region: one region itself, else the multi-region of their continent; None when none does."""
    if len(set(regions)) == 1:
        return regions[0].upper()
    found = {MULTI_REGIONS.get(r.split("-", 1)[0]) for r in regions}
    return found.pop() if len(found) == 1 and None not in found else None


def _fleet_buckets(doc: FleetSpec, workers: tuple[Worker, ...], teams: tuple[TeamSpec, ...]) -> tuple[tuple[str, ...], tuple[BucketGrant, ...]]:
    """Each fleet bucket's location, and what the manager's stack grants on it: the bucket's team's service account on
    every worker (and the worker's node service account for a team that allows hostNetwork runs), with the roles a
    worker's own bucket of that purpose gets (``infra.access.BUCKET_ROLES``)."""
    from infra import access

    regions = [w.spec.region for w in workers]
    locations = []
    for i, b in enumerate(doc.buckets):
        where = b.location or bucket_location(regions)
        if where is None:
            raise SpecError(
                f"buckets[{i}].location",
                f"the workers' regions ({', '.join(sorted(set(regions)))}) are in no one Cloud Storage multi-region",
                "set location: (a multi-region such as US or EU, or a dual-region) where every worker can reach it",
            )
        locations.append(where)
    grants = []
    for b in doc.buckets:
        owner = teams[0] if b.team is None else next(t for t in teams if t.name == b.team)
        node_role, team_role = access.BUCKET_ROLES[b.purpose]
        for w in workers:
            team = next(t for t in w.spec.teams if t.name == owner.name)
            grants.append(BucketGrant(b.name, team_role, access.team_member(w.spec, team), w.name))
            if team.host_network:
                grants.append(BucketGrant(b.name, node_role, access.node_member(w.spec), w.name))
    return tuple(locations), tuple(grants)


def derive_manager(doc: FleetSpec, workers: tuple[Worker, ...], base: Path) -> FleetManager:
    """The manager from the fleet file's ``manager:`` and ``buckets:`` and the workers: the first worker's settings, every worker's pools.

    A pool name two workers share gets its worker's name in front, so each stays a pool of
    its own (a multislice run plans against one worker's slices); pools of one shape share a
    flavor, whose quota adds up. Without ``manager.region`` it is the first worker's; without
    ``manager.zones``, the first worker's zones in its region, else ``<region>-a``. Its
    Terraform state is its own (``manager.state``, else the first worker's state bucket under
    ``tpu-gke-toolkit/<manager cluster>``), and so is its network (named for its cluster).
    """
    manager = doc.manager
    first = workers[0].spec
    seen = {p.name for w in workers for p in w.spec.tpu_pools}
    counts = {n: sum(1 for w in workers for p in w.spec.tpu_pools if p.name == n) for n in seen}
    pools = tuple(p if counts[p.name] == 1 else p.model_copy(update={"name": f"{w.name}-{p.name}"}) for w in workers for p in w.spec.tpu_pools)
    region = manager.region or first.region
    zones = manager.zones or (first.zones if region == first.region else [f"{region}-a"])
    for z in zones:
        if not z.startswith(region) or not re.fullmatch(ZONE, z):
            raise SpecError("manager.zones", f"zone {shown(z)} is not in the manager's region {region}", f"use zones of {region}")
    state = manager.state or StateSpec(bucket=first.state_bucket)
    teams = tuple(first.teams)
    locations, grants = _fleet_buckets(doc, workers, teams)
    return FleetManager(
        cluster=first.cluster.model_copy(update={"name": manager.cluster}),
        project=first.project,
        region=region,
        zones=tuple(zones),
        labels=dict(first.labels),
        # The first worker's address plan, but a VPC of its own: no name of the worker's, no DCN network (no TPU node).
        network=first.network.model_copy(update={"name": None, "dcn": None}),
        cpu_pool=first.cpu_pool,
        state=state,
        teams=teams,
        kueue=first.kueue,
        pools=pools,
        context=manager.context,
        kubeconfig=_relative(manager.kubeconfig, base),
        buckets=tuple(doc.buckets),
        bucket_locations=locations,
        bucket_grants=grants,
    )


def check_distinct(workers: tuple[Worker, ...], manager: FleetManager) -> None:
    """Every name a member's stack creates that GCP holds one of is that member's alone (``infra.owned_names``).

    One SpecError naming the field, the thing, and both members: two stacks sharing one
    would adopt or delete each other's (the second state prefix plans the first cluster
    away; one service account acts for two clusters).
    """
    from infra.owned_names import owned_names

    seen: dict[tuple[str, ...], tuple[str, str]] = {}
    members: list[tuple[str, str, EnvSpec | FleetManager]] = [(f"worker {w.name}", f"workers[{w.index}].spec", w.spec) for w in workers]
    members.append((f"the manager {manager.name}", "manager", manager))
    for who, where, member in members:
        for o in owned_names(member):
            field = _manager_field(o.field) if member is manager else f"{where} {o.field}"
            if o.key in seen:
                other, other_field = seen[o.key]
                raise SpecError(
                    field,
                    f"{o.kind} {o.shown} of {who} is also {other}'s ({other_field}); two stacks would manage one, and deploying one would change or delete the other's",
                    _distinct_fix(field, member.project),
                )
            seen[o.key] = (who, field)


def _distinct_fix(field: str, project: str) -> str:
    last = field.rsplit(" ", 1)[-1]
    if last in ("cluster.name", "manager.cluster"):
        return f"give the cluster a name of its own in {project}: its VPC, service accounts and Terraform state prefix are named for it"
    if last.endswith("state.prefix"):
        return "set state.prefix to a prefix of its own"
    if last.startswith("buckets["):
        return "rename the bucket: Cloud Storage bucket names are global, and each bucket has one owner"
    return f"set {last} to a name of its own"


def _manager_field(field: str) -> str:
    """A manager's name field as the fleet file spells it (the rest of its names follow from its cluster)."""
    if field == "state.prefix":
        return "manager.state.prefix"
    if field.startswith("buckets["):
        return field
    return "manager.cluster"


# ------------------------------------------------------------------ "is this --spec a spec or a fleet?"


def is_fleet_document(data: Any) -> bool:
    """A fleet file is a YAML mapping with both ``manager:`` and ``workers:`` (an environment spec has neither)."""
    return isinstance(data, dict) and "workers" in data and "manager" in data


@overload
def load_spec_or_fleet(path: str | os.PathLike[str] | None, *, want: Literal["spec"]) -> EnvSpec: ...
@overload
def load_spec_or_fleet(path: str | os.PathLike[str] | None, *, want: Literal["fleet"]) -> Fleet: ...
@overload
def load_spec_or_fleet(path: str | os.PathLike[str] | None, *, want: Literal["either"] = "either") -> EnvSpec | Fleet: ...
def load_spec_or_fleet(path: str | os.PathLike[str] | None, *, want: Want = "either") -> EnvSpec | Fleet:
    """What ``--spec`` (or ``--fleet``) names, read once: an environment spec or a fleet file.

    The one place that says "this is a fleet": a document ``is_fleet_document`` accepts. A
    command reads its file here once, at the CLI's edge, and passes the object down.

    - ``want="either"``: ``--spec`` of a command that takes both (``submit``, ``status``,
      ``logs``...): a fleet document is a ``Fleet``, anything else an ``EnvSpec``; use
      ``Fleet.manager_env()`` where the command needs the manager as an environment.
    - ``want="spec"``: ``--spec`` of a command that takes only an environment (every
      ``python -m infra`` command): parsed as a spec whatever it holds, so a fleet file is
      refused as a spec is (``project: is required``) — the same as ``infra.spec.load_spec``.
    - ``want="fleet"``: ``--fleet`` (``infra synth --fleet``, ``queues apply --fleet``,
      ``local up --fleet``): parsed as a fleet whatever it holds.

    ``path`` None means ``$TGK_SPEC``, else examples/default.yaml (``infra.spec.spec_path``),
    for ``--spec``. A file that is missing, unreadable or not YAML is one SpecError naming
    the flag (``read_document``); a document that does not validate, one naming its field.
    """
    p, data = _document(path, want)
    if want == "fleet" or (want == "either" and is_fleet_document(data)):
        return parse_fleet(data, base=p.parent, source=p)
    try:
        return parse_spec(data, source=str(p))
    except SpecError as e:
        raise SpecError(e.field, e.problem, e.fix) from None


def _document(path: str | os.PathLike[str] | None, want: Want) -> tuple[Path, Any]:
    """The file ``--fleet`` (``want="fleet"``) or ``--spec`` names, and its YAML document; a SpecError naming the flag."""
    if want == "fleet":
        p = Path(path) if path is not None else spec_path(None)
        return p, read_document(p, "--fleet", "pass an existing fleet file (see README, 'A fleet of clusters')")
    p = spec_path(path)
    return p, read_document(p, "--spec", SPEC_MISSING_FIX)


def maybe_fleet(path: str | os.PathLike[str] | None) -> Fleet | None:
    """The fleet ``--spec`` names, None when it names an environment spec (or nothing readable).

    Kept for the commands that load the spec first and ask this after (a second read of the
    file); new code reads once with ``load_spec_or_fleet``.
    """
    try:
        p, data = _document(path, "either")
    except SpecError:
        return None  # unreadable: the spec's own load says why
    return parse_fleet(data, base=p.parent, source=p) if is_fleet_document(data) else None


def load_env(path: str | os.PathLike[str] | None) -> EnvSpec:
    """``--spec``: an environment spec, or a fleet file standing for its manager's (``Fleet.manager_env``).

    A run submitted through a fleet's manager is planned against every worker's pools and
    the teams they share; everything else reads a spec as before.
    """
    found = load_spec_or_fleet(path)
    return found.manager_env() if isinstance(found, Fleet) else found


@dataclass(frozen=True)
class Member:
    """One cluster of a fleet, as the commands that act on every member see it (``infra`` on a fleet file)."""

    name: str  # the worker's name, or "manager"
    model: EnvSpec | FleetManager  # what its stack is made from
    field: str  # where the fleet file names it: workers[0], manager
    source: Path  # the file its settings come from: the worker's spec, the fleet file for the manager

    @property
    def is_manager(self) -> bool:
        return isinstance(self.model, FleetManager)

    @property
    def cluster(self) -> str:
        return self.model.cluster.name

    @property
    def label(self) -> str:
        return f"manager {self.cluster}" if self.is_manager else f"worker {self.name} ({self.cluster})"


def members(fleet: Fleet) -> list[Member]:
    """One entry per cluster, in deploy order: every worker as its own spec says, then the manager (destroy: the reverse).

    The manager's cluster holds queues, never a TPU pod: its stack has no TPU pools,
    datasets, Lustre instance, registry, TensorBoard or build trigger (each worker has its
    own). It holds the fleet's buckets and grants them to the workers' service accounts by
    their names: those accounts must exist first, so the manager comes last when creating
    and first when destroying. The manager reaches the workers through the kubeconfig
    Secrets ``queues apply --fleet`` writes once all are up.
    """
    out = [Member(w.name, w.spec, w.field, w.spec_path) for w in fleet.workers]
    return [*out, Member("manager", fleet.manager, "manager", fleet.path)]
