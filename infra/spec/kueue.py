"""Kueue and the add-ons the toolkit installs: their pinned versions, Kueue's controller settings, and xpk's queue.

The queues themselves (one ClusterQueue per team) come from the teams and TPU pools
(``workloads.render.kueue``); these sections set how Kueue's controller admits and
requeues (waitForPodsReady, fair sharing) and whether xpk's own objects are rendered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from infra.spec.section import RELEASE, FieldValueError, Section
from toolkit.names import DNS1035_LABEL, K8S_NAME_MAX

# Pinned versions of the cluster add-ons the toolkit installs and renders for.
DEFAULT_KUEUE_VERSION = "v0.19.2"
DEFAULT_JOBSET_VERSION = "v0.12.0"

# Kueue v1beta2's ClusterQueue CRD: at most this many flavors in one resource group (maxItems).
KUEUE_MAX_FLAVORS_PER_GROUP = 16


class VersionsSpec(Section):
    kueue: str = Field(DEFAULT_KUEUE_VERSION, pattern=RELEASE)
    jobset: str = Field(DEFAULT_JOBSET_VERSION, pattern=RELEASE)


class WaitForPodsReadySpec(Section):
    """Kueue's all-or-nothing guard: a run whose pods are not all ready in time gives its quota back.

    ``timeout_seconds`` covers a first start (autoscaled TPU pools create their nodes
    only after admission, so it must exceed slice provisioning); ``recovery_timeout_seconds``
    covers a running run that lost pods (a preempted slice being recreated). Past either,
    Kueue evicts the Workload, suspends the job and requeues it with exponential backoff
    (``backoff_base_seconds`` doubling up to ``backoff_max_seconds``); ``requeue_limit``
    requeues before Kueue deactivates it (null: requeue until capacity returns).

    Both timeouts default to what the spec's pools need (``EnvFields.wait_for_pods_ready``,
    from the figures of ``infra.recovery`` by each pool's capacity mode and the restart
    path); one given shorter than that is refused (``rules.check_wait_for_pods_ready``).
    """

    enabled: bool = True
    # Ceilings: a week for a start or a recovery (flex-start's longest run); Kueue's int32 for the backoff and the count.
    timeout_seconds: int | None = Field(None, ge=30, le=7 * 24 * 3600, description="default: the slowest pool's slice provisioning + a pod's start")
    recovery_timeout_seconds: int | None = Field(
        None, ge=30, le=7 * 24 * 3600, description="default: the slowest pool's slice re-provisioning + the restart path + a pod's start"
    )
    backoff_base_seconds: int = Field(60, ge=1, le=2**31 - 1)
    backoff_max_seconds: int = Field(3600, ge=1, le=2**31 - 1)
    requeue_limit: int | None = Field(None, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def _backoff(self) -> WaitForPodsReadySpec:
        if self.backoff_max_seconds < self.backoff_base_seconds:
            raise FieldValueError(
                "backoff_max_seconds", f"{self.backoff_max_seconds} is below backoff_base_seconds ({self.backoff_base_seconds})", "raise backoff_max_seconds"
            )
        return self


class XpkSpec(Section):
    """Make the cluster take `xpk workload create` unchanged (workloads/render/xpk.py renders the objects)."""

    enabled: bool = Field(False, description="render xpk's ConfigMaps, ClusterQueue cluster-queue and LocalQueue multislice-queue")
    namespace: str = Field(
        "default", pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="the namespace xpk's kubectl uses (its context's; xpk passes no -n)"
    )
    quota_share: float = Field(
        0.0, ge=0, le=1.0, description="fraction of every TPU shape's chips xpk's queue owns; 0 = it only borrows what the teams leave idle"
    )


class FairSharingSpec(Section):
    """Kueue's fair sharing: idle quota in a cohort goes to teams by weight, and is reclaimed by share."""

    enabled: bool | None = Field(None, description="default: on when teams share a cohort (two or more teams)")
    preemption_strategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"], min_length=1
    )


class KueueSpec(Section):
    """Settings of the Kueue controller itself (not of its queues)."""

    wait_for_pods_ready: WaitForPodsReadySpec = Field(default_factory=WaitForPodsReadySpec)
    fair_sharing: FairSharingSpec = Field(default_factory=FairSharingSpec)
