"""Runs as a library: plan, render, submit and wait, below the CLI (``workloads.runs.service``).

A notebook or a pipeline step submits a run in a few lines, without Typer::

    from infra.spec import load_spec
    from workloads import runs
    from workloads.cluster.client import Cluster

    plan = runs.plan("maxtext-6b", load_spec("examples/default.yaml"), runs.Overrides(slices=2))
    result = runs.submit(Cluster.connect(), plan, timeout=600)
    result.refs, result.existing, result.admission

One submit renders the run once: ``runs.render(plan)`` is the tree, the objects it builds to
and their digest, and ``runs.apply(cluster, plan, rendered)`` applies exactly that.

``hooks`` decides, by the cluster's kubeconfig context, whether the cluster decorates a
run before it is applied (the local cluster makes it a rehearsal).
"""

from workloads.planning.overrides import Overrides
from workloads.runs.service import (
    TIMEOUT_S,
    ExistingRun,
    Submission,
    apply,
    checkpoint_check,
    fleet_options,
    manifests,
    parameters_note,
    plan,
    render,
    submit,
    summary,
    through_fleet,
    wait,
    warnings,
    write,
)

__all__ = [
    "TIMEOUT_S",
    "ExistingRun",
    "Overrides",
    "Submission",
    "apply",
    "checkpoint_check",
    "fleet_options",
    "manifests",
    "parameters_note",
    "plan",
    "render",
    "submit",
    "summary",
    "through_fleet",
    "wait",
    "warnings",
    "write",
]
