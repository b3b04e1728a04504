"""The TPU workers' Indexed Job as it stands in a ``base/`` skeleton, shared by the JobSet and Job runtimes.

Both runtimes run the same worker pods (``job.pod_spec`` starts from ``jobset.pod_spec``),
so their bases must agree too: a field left out of one base would not break anything,
it would just turn up in every run's patch for that runtime.
"""

from __future__ import annotations

from typing import Any

from infra.spec.teams import DEFAULT_RUN_AS_USER
from toolkit import names
from workloads.render import podsecurity

BASE_NAME = "tpu-run"  # every skeleton object's name; each run's overlay patches in its own


def worker_pod_template(ports: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod template's plan-independent fields; ``ports`` are the runtime's (a JobSet also opens megascale's)."""
    return {
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            # Non-root as every team's run is unless it chose otherwise: a base applied alone is not root either.
            "securityContext": podsecurity.pod_security_context(DEFAULT_RUN_AS_USER),
            "tolerations": [dict(names.TPU_TOLERATION)],
            "containers": [
                {
                    "name": names.WORKLOAD_CONTAINER,
                    "imagePullPolicy": "IfNotPresent",
                    "ports": ports,
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    "securityContext": podsecurity.container_security_context(),
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
    }


def indexed_job_spec(ports: list[dict[str, Any]]) -> dict[str, Any]:
    """An Indexed Job of one pod that fails on its first pod failure; the overlay patches in the hosts."""
    return {
        "parallelism": 1,
        "completions": 1,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": worker_pod_template(ports),
    }
