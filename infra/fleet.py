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

```yaml
name: tpu-fleet                 # the MultiKueueConfig and its AdmissionCheck
manager: {cluster: tpu-fleet-mgr, region: us-central1}
workers:
  - {name: west, spec: west.yaml}   # a MultiKueueCluster per worker; spec paths are relative to this file
  - {name: east, spec: east.yaml}
multikueue: {worker_lost_timeout_seconds: 900, gc_interval_seconds: 60}
```

Pure but for reading the fleet file and the worker specs it names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra.naming import REGION, ZONE
from infra.spec import EnvSpec, format_validation_error, load_spec, parse_spec, read_document, spec_path
from toolkit.errors import SpecError, shown
from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

# A Kubernetes object name that is also a DNS label: MultiKueueCluster and Secret names are built from it.
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
# Kueue's own defaults (config.kueue.x-k8s.io/v1beta2 MultiKueue): 15 min and 1 min.
DEFAULT_WORKER_LOST_TIMEOUT_SECONDS = 900
DEFAULT_GC_INTERVAL_SECONDS = 60


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FleetManagerSpec(_Model):
    cluster: str = Field(..., pattern=_DNS_LABEL, description="the manager's GKE cluster name")
    region: str | None = Field(None, pattern=REGION, description="default: the first worker's region")
    zones: list[str] | None = Field(None, min_length=1)
    context: str | None = Field(None, description="the kubeconfig context that reaches the manager")
    kubeconfig: str | None = Field(None, min_length=1, description="the kubeconfig file with that context, relative to the fleet file (default: --kubeconfig)")


class FleetWorkerSpec(_Model):
    name: str = Field(..., pattern=_DNS_LABEL, description="the MultiKueueCluster name")
    spec: str = Field(..., min_length=1, description="the worker's environment spec, relative to the fleet file")
    context: str | None = Field(None, description="the kubeconfig context that reaches the worker")
    kubeconfig: str | None = Field(None, min_length=1, description="the kubeconfig file with that context, relative to the fleet file (default: --kubeconfig)")


class MultiKueueSpec(_Model):
    worker_lost_timeout_seconds: int = Field(DEFAULT_WORKER_LOST_TIMEOUT_SECONDS, ge=1, le=7 * 86400)
    gc_interval_seconds: int = Field(DEFAULT_GC_INTERVAL_SECONDS, ge=0, le=86400)


class FleetSpec(_Model):
    name: str = Field(..., pattern=_DNS_LABEL)
    manager: FleetManagerSpec
    workers: list[FleetWorkerSpec] = Field(..., min_length=1)
    multikueue: MultiKueueSpec = Field(default_factory=MultiKueueSpec)


@dataclass(frozen=True)
class Worker:
    name: str
    spec: EnvSpec
    spec_path: Path
    context: str | None
    kubeconfig: Path | None = None


@dataclass(frozen=True)
class Fleet:
    """A validated fleet: the workers' specs loaded, the manager's derived (``manager_spec``)."""

    name: str
    manager_cluster: str
    manager_context: str | None
    manager_kubeconfig: Path | None
    manager_spec: EnvSpec
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

    def manager_env(self) -> EnvSpec:
        """The manager as an environment spec, for code that takes one (planning a run submitted through it)."""
        return self.manager_spec

    @staticmethod
    def secret_name(worker: str) -> str:
        """The kubeconfig Secret (in kueue-system on the manager) of ``worker``."""
        return f"{worker}-multikueue"


def load_fleet(path: str | os.PathLike[str]) -> Fleet:
    p = Path(path)
    data = read_document(p, "--fleet", "pass an existing fleet file (see README, 'A fleet of clusters')")
    return parse_fleet(data, base=p.parent, source=p)


def parse_fleet(data: Any, *, base: Path, source: Path) -> Fleet:
    if not isinstance(data, dict):
        raise SpecError("", f"{source}: a fleet file must be a YAML mapping, got {type(data).__name__}", "start from examples/fleet/fleet.yaml")
    try:
        doc = FleetSpec.model_validate(data)
    except ValidationError as e:
        err = format_validation_error(e)
        raise SpecError(err.field, err.problem, err.fix.replace("examples/default.yaml", "examples/fleet/fleet.yaml")) from None
    workers = tuple(_load_worker(i, w, base) for i, w in enumerate(doc.workers))
    check_fleet(doc, workers)
    return Fleet(
        doc.name,
        doc.manager.cluster,
        doc.manager.context,
        _relative(doc.manager.kubeconfig, base),
        manager_spec(doc.manager, workers),
        workers,
        doc.multikueue,
        source,
    )


def _relative(path: str | None, base: Path) -> Path | None:
    if path is None:
        return None
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _load_worker(i: int, w: FleetWorkerSpec, base: Path) -> Worker:
    path = Path(w.spec) if Path(w.spec).is_absolute() else base / w.spec
    try:
        spec = load_spec(path)
    except SpecError as e:
        where = f"workers[{i}].spec" + (f" ({path}) {e.field}" if e.field and e.field != "--spec" else "")
        raise SpecError(where, e.problem, e.fix) from None
    return Worker(w.name, spec, path, w.context, _relative(w.kubeconfig, base))


def _cluster_key(spec: EnvSpec) -> tuple[str, str, str]:
    return (spec.project, spec.region, spec.cluster.name)


def check_fleet(doc: FleetSpec, workers: tuple[Worker, ...]) -> None:
    """What MultiKueue needs of a fleet and no single spec can see; one SpecError naming the field."""
    names: dict[str, int] = {}
    clusters: dict[tuple[str, str, str], int] = {}
    for i, w in enumerate(workers):
        if w.name in names:
            raise SpecError(
                f"workers[{i}].name", f"worker {shown(w.name)} is named twice (also workers[{names[w.name]}])", "give each worker a name of its own"
            )
        names[w.name] = i
        if w.name == doc.manager.cluster or w.spec.cluster.name == doc.manager.cluster:
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


def manager_spec(manager: FleetManagerSpec, workers: tuple[Worker, ...]) -> EnvSpec:
    """The manager's environment: the first worker's, with the manager's cluster and every worker's pools.

    Not validated again as one spec (the workers' zones lie in several regions; each pool
    was checked in its own worker's spec). A pool name two workers share gets its worker's
    name in front, so each stays a pool of its own (a multislice run plans against one
    worker's slices); pools of one shape share a flavor, whose quota adds up.
    """
    first = workers[0].spec
    seen = {p.name for w in workers for p in w.spec.tpu_pools}
    counts = {n: sum(1 for w in workers for p in w.spec.tpu_pools if p.name == n) for n in seen}
    pools = [p if counts[p.name] == 1 else p.model_copy(update={"name": f"{w.name}-{p.name}"}) for w in workers for p in w.spec.tpu_pools]
    region = manager.region or first.region
    zones = manager.zones or (first.zones if region == first.region else [f"{region}-a"])
    for z in zones:
        if not z.startswith(region) or not re.match(ZONE, z):
            raise SpecError("manager.zones", f"zone {shown(z)} is not in the manager's region {region}", f"use zones of {region}")
    cluster = first.cluster.model_copy(update={"name": manager.cluster})
    return first.model_copy(update={"cluster": cluster, "region": region, "zones": zones, "tpu_pools": pools})


def is_fleet_document(data: Any) -> bool:
    return isinstance(data, dict) and "workers" in data and "manager" in data


def maybe_fleet(path: str | os.PathLike[str] | None) -> Fleet | None:
    """The fleet ``--spec`` names, None when it names an environment spec (or nothing readable)."""
    from infra.spec import spec_path

    p = spec_path(path)
    try:
        data = load_yaml(read_capped(p))
    except (OSError, YamlFileError):
        return None
    return parse_fleet(data, base=p.parent, source=p) if is_fleet_document(data) else None


def load_spec_or_fleet(path: str | os.PathLike[str] | None, *, want: str = "either") -> EnvSpec | Fleet:
    """What ``--spec`` (``want="either"``: a fleet document is a ``Fleet``, anything else an ``EnvSpec``) or
    ``--fleet`` (``want="fleet"``) names, read once; ``want="spec"`` parses it as a spec whatever it holds."""
    if want == "fleet":
        p = Path(path) if path is not None else spec_path(None)
        return parse_fleet(read_document(p, "--fleet", "pass an existing fleet file (see README, 'A fleet of clusters')"), base=p.parent, source=p)
    p = spec_path(path)
    data = read_document(p, "--spec", "pass an existing file, e.g. examples/default.yaml")
    if want == "either" and is_fleet_document(data):
        return parse_fleet(data, base=p.parent, source=p)
    try:
        return parse_spec(data, source=str(p))
    except SpecError as e:
        raise SpecError(e.field, e.problem, e.fix) from None


def load_env(path: str | os.PathLike[str] | None) -> EnvSpec:
    """``--spec``: an environment spec, or a fleet file standing for its manager's (``manager_spec``).

    A run submitted through a fleet's manager is planned against every worker's pools and
    the teams they share; everything else reads a spec as before.
    """
    from infra.spec import spec_path

    p = spec_path(path)
    try:
        data = load_yaml(read_capped(p))
    except (OSError, YamlFileError):
        return load_spec(p)  # its own one-line refusal
    return parse_fleet(data, base=p.parent, source=p).manager_spec if is_fleet_document(data) else load_spec(p)


def stack_specs(fleet: Fleet) -> list[EnvSpec]:
    """One environment per cluster, in deploy order: every worker as its own spec says, then the manager.

    The manager's cluster holds queues, never a TPU pod: no TPU pools, buckets, datasets,
    Lustre instance, registry, TensorBoard or build trigger of its own (each worker has its own, and a second copy in
    the manager's stack would be a second owner of the workers' buckets). Nothing ties
    the stacks together in Terraform: the manager reaches the workers through the
    kubeconfig Secrets ``queues apply --fleet`` writes once all are up.
    """
    from infra.spec import ArtifactRegistrySpec, CloudBuildSpec, TensorBoardSpec

    manager = fleet.manager_spec.model_copy(
        update={
            "tpu_pools": [],
            "buckets": [],
            "datasets": [],
            "lustre": None,
            "artifact_registry": ArtifactRegistrySpec(enabled=False),
            "tensorboard": TensorBoardSpec(enabled=False),
            "cloud_build": CloudBuildSpec(enabled=False),
        }
    )
    return [*(w.spec for w in fleet.workers), manager]
