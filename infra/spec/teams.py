"""The teams that share the cluster: each a namespace, a LocalQueue, a ClusterQueue's share of every TPU flavor, and an identity.

A team's quota is a fraction of every flavor's slices, in whole slices (``infra.quotas``);
idle quota is lent within the cluster's cohort and taken back by preemption
(``TeamPreemptionSpec``). Its pods may use the PriorityClasses up to its own
(``allowed_priorities``), enforced in the cluster by an admission policy.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from infra.spec.section import FieldValueError, Section
from toolkit.names import DNS1035_LABEL, K8S_NAME_MAX

# The de-facto PriorityClass names and values (shared with xpk).
PRIORITY_CLASSES: dict[str, int] = {
    "very-low": 100,
    "low": 250,
    "medium": 500,
    "high": 750,
    "very-high": 1000,
}


# The UID, GID and file-system group of a team's pods unless it names another (run_as_user) or opts
# into its image's user (run_as_root). Above 10000: clear of the UIDs a node's own users take, so a
# process that escaped its container is nobody on the host (checkov CKV_K8S_40's rule).
DEFAULT_RUN_AS_USER = 10001


class BorrowWithinCohortSpec(Section):
    """Kueue's borrowWithinCohort: may a run that borrows preempt lower-priority runs of other teams."""

    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = Field(
        None, ge=-(2**31), le=2**31 - 1, description="only runs at or below this priority value may be preempted (Kueue's int32)"
    )


class TeamPreemptionSpec(Section):
    """The team's ClusterQueue preemption policies (Kueue v1beta2 ``spec.preemption``)."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority", description="a team's higher-priority run preempts its own lower-priority ones"
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any", description="the team takes back its lent quota by preempting the borrowers' runs"
    )
    borrow_within_cohort: BorrowWithinCohortSpec | None = None


class TeamSpec(Section):
    name: str = Field(..., pattern=DNS1035_LABEL, max_length=30)
    namespace: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="defaults to the team name")
    local_queue: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="defaults to <namespace>-queue")
    service_account: str | None = Field(None, pattern=DNS1035_LABEL, max_length=K8S_NAME_MAX, description="KSA bound to the workload GSA")
    quota_share: float = Field(
        1.0, ge=0, le=1.0, description="fraction of every TPU shape's slices this team owns (whole slices: infra.quotas); 0 = it only borrows"
    )
    priority: str = Field("medium", description="default priority class for the team's runs")
    borrowing_limit: float | None = Field(
        None, ge=0, le=1.0, description="fraction of every TPU shape's chips the team may borrow beyond its quota (None: no limit)"
    )
    lending_limit: float | None = Field(
        None, ge=0, le=1.0, description="fraction of every TPU shape's chips of its quota the team lends when idle (None: all of it)"
    )
    fair_sharing_weight: float | None = Field(None, ge=0, le=1000, description="Kueue fair sharing: a heavier team gets more of the idle quota")
    preemption: TeamPreemptionSpec = Field(default_factory=TeamPreemptionSpec)
    host_network: bool = Field(
        False,
        description="allow hostNetwork runs (more DCN throughput); they act as the TPU nodes' SA, which then gets this team's buckets",
    )
    priorities: list[str] | None = Field(
        None,
        min_length=1,
        description="the PriorityClasses the team's pods may use, enforced in the cluster by an admission policy (default: its priority and every lower one)",
    )
    run_as_user: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description=f"the non-root UID the team's pods run as (also their GID and the volumes' group); default {DEFAULT_RUN_AS_USER}. "
        "The team's namespace enforces Pod Security restricted",
    )
    run_as_root: bool = Field(
        False,
        description="opt in: run the team's pods as their image's user (root for the toolkit's MaxText image), under Pod Security "
        "baseline; for an image or a node whose TPU devices a non-root user cannot open",
    )

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: str) -> str:
        if v not in PRIORITY_CLASSES:
            raise ValueError(f"unknown priority {v!r}; use one of {', '.join(PRIORITY_CLASSES)}")
        return v

    @field_validator("priorities")
    @classmethod
    def _priorities(cls, v: list[str] | None) -> list[str] | None:
        for p in v or ():
            if p not in PRIORITY_CLASSES:
                raise ValueError(f"unknown priority {p!r}; use some of {', '.join(PRIORITY_CLASSES)}")
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"{v} names a priority twice; list each once")
        return v

    @model_validator(mode="after")
    def _default_priority_allowed(self) -> TeamSpec:
        if self.priorities is not None and self.priority not in self.priorities:
            raise FieldValueError(
                "priorities", f"does not include the team's own priority ({self.priority})", f"add {self.priority} to priorities, or change priority"
            )
        return self

    @property
    def allowed_priorities(self) -> tuple[str, ...]:
        """The PriorityClasses the team may use, lowest first (``priorities``, else up to its ``priority``)."""
        if self.priorities is not None:
            return tuple(p for p in PRIORITY_CLASSES if p in self.priorities)
        ceiling = PRIORITY_CLASSES[self.priority]
        return tuple(p for p, v in PRIORITY_CLASSES.items() if v <= ceiling)

    @model_validator(mode="after")
    def _one_user(self) -> TeamSpec:
        if self.run_as_root and self.run_as_user is not None:
            raise FieldValueError(
                "run_as_root", f"is set beside run_as_user: {self.run_as_user}", "keep one: run_as_user for a non-root UID, run_as_root for the image's user"
            )
        return self

    @property
    def pod_user(self) -> int | None:
        """The UID (and GID, and fsGroup) the team's pods run as; None: the image's user (``run_as_root``)."""
        return None if self.run_as_root else (self.run_as_user or DEFAULT_RUN_AS_USER)

    @model_validator(mode="after")
    def _lend_own(self) -> TeamSpec:
        if self.lending_limit is not None and self.lending_limit > self.quota_share + 1e-9:
            raise FieldValueError(
                "lending_limit", f"{self.lending_limit:g} is more than the team's quota_share ({self.quota_share:g})", "lend at most the quota_share"
            )
        return self

    @property
    def ns(self) -> str:
        return self.namespace or self.name

    @property
    def queue(self) -> str:
        return self.local_queue or f"{self.ns}-queue"

    @property
    def ksa(self) -> str:
        return self.service_account or "tpu-training"
