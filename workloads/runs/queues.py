"""Kueue, the teams' namespaces and the cluster's settings from the spec: the flow behind ``queues``, as functions returning data.

    objects(spec)        -> [objects]   PriorityClasses, team Namespaces/KSAs/NetworkPolicies/priority
                                        policies, ResourceFlavors, ClusterQueues, LocalQueues
                                        (+ xpk's, the DCN network's): ``workloads.render.kueue``
    fleet_objects(fleet) -> [objects]   the manager's (MultiKueue), then each worker's
    apply(cluster, objects) -> [refs]   server-side apply, as the toolkit's field manager
    connect_fleet(fleet, kubeconfig) -> (manager, {worker: client})   every member its own cluster, workers on TLS
    apply_fleet(fleet, manager, workers) -> (FleetApplied, {worker: Active})
    rotate_fleet(fleet, manager, workers, names) -> [Rotated]   new worker tokens in, old ones revoked
    manager_config(spec, merge) -> dict   Kueue's controller settings, alone or laid over a file

Nothing here prints; the CLI (``workloads.cli.runs``) reads the spec or fleet once and passes it in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import FieldError
from toolkit.names import TGK_FIELD_MANAGER

if TYPE_CHECKING:
    from infra.fleet import Fleet
    from infra.spec import EnvSpec
    from workloads.cluster.client import Cluster
    from workloads.runs.fleet import FleetApplied, Rotated

FLEET_ACTIVE_WAIT_S = 60.0  # how long `queues apply --fleet` waits for each MultiKueueCluster to be Active


def objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Every object ``queues apply`` applies for one environment, in apply order."""
    from workloads.render.kueue import cluster_objects

    return cluster_objects(spec)


def fleet_objects(fleet: Fleet) -> list[dict[str, Any]]:
    """What ``queues apply --fleet`` applies: the manager's objects, then each worker's (``--dry-run`` prints them)."""
    from workloads.render import multikueue

    docs = [*multikueue.manager_objects(fleet)]
    for w in fleet.workers:
        # The identity's token Secret too: created on a worker that holds none yet (the token is the worker's to fill).
        docs += [*multikueue.worker_objects(fleet, w), multikueue.token_secret()]
    return docs


def apply(cluster: Cluster, objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Server-side apply ``objects`` as the toolkit; kind, name (and namespace) of each, in order."""
    from workloads.runs.service import ref

    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    return [ref(o) for o in objects]


def apply_fleet(
    fleet: Fleet, manager: Cluster, workers: dict[str, Cluster], *, progress: Callable[[str], None] = lambda m: None
) -> tuple[FleetApplied, dict[str, str]]:
    """Each worker's side, the manager's kubeconfig Secrets and its side (``workloads.runs.fleet``), then each
    MultiKueueCluster's Active condition once the manager has seen it."""
    from workloads.runs.fleet import apply_fleet as apply_all
    from workloads.runs.fleet import wait_active

    applied = apply_all(fleet, manager, workers, progress=progress)
    return applied, wait_active(manager, fleet, timeout=FLEET_ACTIVE_WAIT_S)


def connect_fleet(fleet: Fleet, kubeconfig: Path | None) -> tuple[Cluster, dict[str, Cluster]]:
    """The manager's and each worker's client, once every member is found to be a cluster of its own and every worker on TLS."""
    from workloads.runs.fleet import connect

    return connect(fleet, kubeconfig)


def rotate_fleet(
    fleet: Fleet, manager: Cluster, workers: dict[str, Cluster], names: list[str] | None, *, progress: Callable[[str], None] = lambda m: None
) -> list[Rotated]:
    """The manager's token on each named worker (default: all) replaced, and the old one revoked (``workloads.runs.fleet.rotate``)."""
    from workloads.runs.fleet import rotate

    return rotate(fleet, manager, workers, names, progress=progress)


# The controllers whose settings the spec decides, and what their configuration is called.
CONTROLLERS = {"kueue": "Kueue", "jobset": "JobSet"}
# The API group of each one's Configuration: both kinds are "Configuration", so the group tells them apart.
CONFIG_GROUPS = {"kueue": "config.kueue.x-k8s.io", "jobset": "config.jobset.x-k8s.io"}


def _settings(spec: EnvSpec | Fleet, controller: str) -> dict[str, Any]:
    from infra.fleet import Fleet
    from workloads.render import multikueue
    from workloads.render.inplace import jobset_settings
    from workloads.render.kueue import manager_settings

    if controller == "kueue":
        return multikueue.manager_settings(spec) if isinstance(spec, Fleet) else manager_settings(spec)
    if isinstance(spec, Fleet):
        # The manager's JobSet webhook admits a run before MultiKueue dispatches it: the gate if any worker has it.
        return next((s for s in (jobset_settings(w.spec) for w in spec.workers) if s), {})
    return jobset_settings(spec)


def manager_config(spec: EnvSpec | Fleet, merge: Path | None = None, *, controller: str = "kueue") -> dict[str, Any]:
    """A controller's settings from the spec (Kueue: waitForPodsReady, fair sharing; JobSet: its in-place restart gate),
    or ``merge`` (that controller's Configuration file) with them laid over it.

    For a fleet, its manager's: Kueue's with ``multiKueue`` (``workloads.render.multikueue.manager_settings``).
    """
    from workloads.render import yamlio
    from workloads.render.kueue import merge_manager_config

    if controller not in CONTROLLERS:
        raise FieldError("--controller", f"unknown controller {controller[:20]!r}", f"use one of {', '.join(CONTROLLERS)}")
    settings = _settings(spec, controller)
    if merge is None:
        return settings
    from toolkit.yamlfile import YamlFileError, read_capped

    try:
        base = yamlio.load(read_capped(merge))
    except OSError as e:
        raise FieldError("--merge", f"cannot read {merge}: {e.strerror or e}", f"pass the {CONTROLLERS[controller]} configuration YAML file") from None
    except YamlFileError as e:
        raise FieldError("--merge", f"{merge} {e.problem}", e.fix) from None
    group = str(base.get("apiVersion", "")).partition("/")[0] if isinstance(base, dict) else ""
    if not isinstance(base, dict) or base.get("kind") != "Configuration" or group != CONFIG_GROUPS[controller]:
        raise FieldError(
            "--merge",
            f"{merge} is not a {CONTROLLERS[controller]} Configuration (kind Configuration, apiVersion {CONFIG_GROUPS[controller]}/...)",
            f"pass the controller_manager_config.yaml of {controller}-manager-config",
        )
    return merge_manager_config(base, settings)
