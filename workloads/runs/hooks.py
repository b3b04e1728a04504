"""What a cluster does to a run before it is applied, chosen by the cluster's kubeconfig context.

Real clusters take a run as rendered. A cluster that only plays one (the local simulated
cluster, context ``tgk-local``) may decorate it first: there, a run becomes a rehearsal
whose pods run for a simulated time and print MaxText's log. The service asks
``for_context(cluster.context)`` and gets such a hook or None; it never names the package
that provides one.

A package of the toolkit that plays a cluster declares its hooks in a module named
``runhooks`` (``workloads/<package>/runhooks.py``) as ``HOOKS: dict[str, RunHook]``, keyed by
the kubeconfig context it writes. They are found by that file name, imported on the first
real submit only (a dry run never asks).
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from workloads.planning.model import RunPlan

MODULE = "runhooks"


class RunHook(Protocol):
    """Decorates a run's objects for the cluster of one context; ``seconds`` is ``--rehearse-seconds`` (None: its own default)."""

    def decorate(self, objects: list[dict[str, Any]], plan: RunPlan, *, seconds: float | None) -> list[dict[str, Any]]: ...

    def note(self, plan: RunPlan, *, seconds: float | None) -> str:
        """One line for the user: what the decoration does to this run."""
        ...

    # Optional: ``helper(pod) -> pod`` for a cluster that plays the kubelet of the toolkit's Lustre
    # helper pod (workloads.runs.volume_store); without it, the pod is created as rendered.
    # Optional: ``storage(cluster) -> google.cloud.storage.Client`` for a cluster that plays its
    # buckets too (the local cluster's server); without it, runs' buckets are Cloud Storage's.
    # Optional: ``logging(cluster) -> google.cloud.logging.Client`` for a cluster that plays
    # Cloud Logging too; without it, runs' container logs are Cloud Logging's.


def storage_client(hook: RunHook | None, cluster: Any, project: str | None = None) -> Any:
    """The Cloud Storage client for the buckets the cluster's runs write: the hook's, else Cloud Storage (ADC)."""
    own = getattr(hook, "storage", None)
    if own is not None:
        return own(cluster)
    from workloads.observe.storage import make_client

    return make_client(project)


def storage_endpoint(hook: RunHook | None, cluster: Any) -> str | None:
    """The base URL of the cluster's own bucket server (for a FUSE mount of it), or None: Cloud Storage's."""
    own = getattr(hook, "storage_endpoint", None)
    return own(cluster) if own is not None else None


def logging_client(hook: RunHook | None, cluster: Any, project: str) -> Any:
    """The Cloud Logging client for the container logs of the cluster's runs: the hook's, else Cloud Logging (ADC)."""
    own = getattr(hook, "logging", None)
    if own is not None:
        return own(cluster)
    from workloads.observe.history import make_client

    return make_client(project)


@cache
def registry() -> dict[str, RunHook]:
    """Every context with a hook, from the ``runhooks`` modules of the toolkit's packages."""
    found: dict[str, RunHook] = {}
    # The sibling packages of this one (workloads/*), found on disk: importing the `workloads`
    # package itself would tie this layer to all of it (tests/test_layers.py).
    for path in sorted(Path(__file__).resolve().parents[1].glob(f"*/{MODULE}.py")):
        found.update(importlib.import_module(f"workloads.{path.parent.name}.{MODULE}").HOOKS)
    return found


def for_context(context: str | None) -> RunHook | None:
    """The hook of the cluster behind ``context``, None for a cluster that takes runs as rendered."""
    return registry().get(context) if context else None
