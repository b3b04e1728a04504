"""Who is told when a long run goes wrong: Cloud Monitoring alert policies, their notification channels, the TPU dashboard.

``monitoring.alerts`` are four alert policies the stack declares (``modules/monitoring.py`` says
how each is measured):

  restarts_per_hour    a run started more attempts than this in an hour (a restart loop)
  no_step_minutes      a worker up this long has written no MaxText step line for this long (a hang);
                       default derived from the pools (``EnvFields.no_step_needs``), never shorter
                       than a normal restart's way back to its first step
  goodput_below        a run's goodput (MaxText's goodput_time over goodput + badput) under this fraction
  node_pool_errors     GKE logs a node pool operation error (a pool leaving RUNNING: ERROR, failed repair or upgrade)

``monitoring.notification_channels`` are where the alerts go (email, a Pub/Sub topic, a webhook);
none means the incidents are only in the console. ``monitoring.dashboard`` is the TPU dashboard
(duty cycle, HBM, restarts, step time). ``monitoring.ml_diagnostics`` is GKE's managed ML
Diagnostics (``auto``: on where the cluster's GKE floor has it, ``infra.gke_features``; ``on``
raises the floor to it): the pinned Google provider has no field for it, so ``infra deploy``
turns it on with gcloud after the apply, and the teams' namespaces carry the label its webhook
selects workloads by. Thresholds that can never fire (or always fire) are
refused by ``infra.spec.rules.check_monitoring``, one line naming the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from infra.spec.section import FieldValueError, Section
from toolkit.patterns import fullmatch

CHANNEL_TYPES = ("email", "pubsub", "webhook")
# Whole values (toolkit.patterns.fullmatch: ASCII classes, no trailing newline): no space or control character anywhere.
_EMAIL = r"[^@ \x00-\x1f\x7f]+@[^@ \x00-\x1f\x7f]+\.[^@ \x00-\x1f\x7f]+"
_TOPIC = r"projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/[A-Za-z][A-Za-z0-9._~+%-]{2,254}"
_HTTPS = r"https://[^ \x00-\x1f\x7f]+"
_ADDRESS = {
    "email": (_EMAIL, "an email address, like oncall@example.com"),
    "pubsub": (_TOPIC, "a topic, like projects/my-project/topics/tpu-alerts"),
    "webhook": (_HTTPS, "an https:// URL"),
}


class NotificationChannelSpec(Section):
    type: Literal["email", "pubsub", "webhook"]
    address: str = Field(..., max_length=512, description="email: an address; pubsub: projects/<p>/topics/<t>; webhook: an https:// URL")

    @model_validator(mode="after")
    def _address(self) -> NotificationChannelSpec:
        pattern, what = _ADDRESS[self.type]
        if not fullmatch(pattern, self.address):
            raise FieldValueError("address", f"{self.address!r} is not {what.split(',')[0]}", f"write {what}")
        return self


# More attempts than one a minute cannot start: each one schedules (or restarts) its containers and
# looks for a checkpoint before the line the attempts metric counts.
MAX_RESTARTS_PER_HOUR = 60
# The no-step alert asks for workers that stepped in the last day but not in the window
# (modules/monitoring.py STEPPED_LOOKBACK_MINUTES): a window of a day or more could never fire. Half a
# day is the longest a hang may go unreported.
MAX_NO_STEP_MINUTES = 720


class AlertsSpec(Section):
    """The thresholds; the lower bounds (which depend on the spec's pools) are ``infra.spec.rules.check_monitoring``'s."""

    enabled: bool = Field(True, description="declare the alert policies (the log-based metrics they read are declared either way)")
    restarts_per_hour: int = Field(3, le=MAX_RESTARTS_PER_HOUR, description="alert when a run starts more attempts than this in one hour")
    no_step_minutes: int | None = Field(
        None, le=MAX_NO_STEP_MINUTES, description="alert when a running worker writes no step line for this long (default: derived)"
    )
    goodput_below: float = Field(0.5, allow_inf_nan=False, description="alert when a run's goodput fraction is under this (0 < x <= 1)")
    node_pool_errors: bool = Field(True, description="alert on GKE's node pool errors")


class MonitoringSpec(Section):
    notification_channels: list[NotificationChannelSpec] = Field(default_factory=list, description="where alerts go; none: incidents in the console only")
    alerts: AlertsSpec = Field(default_factory=AlertsSpec)
    dashboard: bool = Field(True, description="the TPU dashboard: duty cycle, HBM, restarts, step time")
    ml_diagnostics: Literal["auto", "on", "off"] = Field(
        "auto", description="GKE's managed ML Diagnostics: auto (on where the GKE floor has it), on (raises the floor to it), off"
    )
