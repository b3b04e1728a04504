"""The ``env`` of a run's workload container, for every runtime: its plain values, then its Secret references. Pure.

Plain values are the program's environment (the recipe's ``env``, ``LIBTPU_INIT_ARGS``, the
profiler's), each with its ``$`` doubled against the kubelet's ``$(NAME)`` expansion
(``kubelet_escape``). A Secret reference (``--secret-env``, a recipe's ``secret_env``:
``plan.program.secret_env``) is a ``secretKeyRef``: the kubelet reads the value from the Secret
in the run's namespace when the container starts, so no manifest, render or dry run holds it.
The JobSet and Job workers and the RayJob's TPU workers (where MaxText runs) all take this
list; each runtime adds its own variables after it (megascale, worker index, hostnames).
"""

from __future__ import annotations

from typing import Any

from workloads.planning.model import Program
from workloads.render.kubelet_escape import k8s_literal


def program_env(program: Program) -> list[dict[str, Any]]:
    plain = [{"name": k, "value": k8s_literal(v)} for k, v in program.env]
    refs = [{"name": r.name, "valueFrom": {"secretKeyRef": {"name": r.secret, "key": r.key}}} for r in program.secret_env]
    return plain + refs
