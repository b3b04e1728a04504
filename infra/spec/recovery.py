"""How a run comes back after a disruption: the JobSet restart path, for the whole cluster.

``restart`` chooses how JobSet restarts every worker of every slice together (a multi-host JAX
program cannot take one replacement process; workloads/render/jobset.py renders either):

  recreate   every child Job and pod deleted and created again (JobSet's Recreate; any JobSet)
  in-place   healthy pods keep their VMs and restart their containers in place, only the lost
             pods are new; a barrier holds every worker until all are at the same attempt
             (JobSet's InPlaceRestart, alpha from v0.11.0: the controller's InPlaceRestart gate,
             JobSet's agent in each pod, Kubernetes 1.35's container restart rules)
  auto       in-place where the cluster has all of that (JobSet >= v0.11.0 and a GKE floor of
             1.35), else recreate

``EnvFields.restart_path`` is the path ``auto`` resolves to; a run can still ask for the other
with ``--restart``. docs/runs.md says why each exists.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infra.gke_features import IN_PLACE_RESTART_MIN_GKE_VERSION, IN_PLACE_RESTART_MIN_JOBSET
from infra.recovery import IN_PLACE, RECREATE, RESTART_PATHS
from infra.spec.section import Section

__all__ = ["IN_PLACE", "IN_PLACE_RESTART_MIN_GKE_VERSION", "IN_PLACE_RESTART_MIN_JOBSET", "RECREATE", "RESTART_PATHS", "RecoverySpec"]


class RecoverySpec(Section):
    restart: Literal["auto", "in-place", "recreate"] = Field(
        "auto", description="in-place (JobSet InPlaceRestart: raises the GKE floor to 1.35), recreate, or auto: in-place where the cluster has it"
    )
    agent_image: str | None = Field(
        None,
        max_length=512,
        description="JobSet's in-place restart agent image (default: jobset-in-place-restart-agent:<versions.jobset> in the spec's Artifact Registry)",
    )
