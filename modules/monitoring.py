"""Cloud Monitoring for one cluster's runs: two log-based metrics, four alert policies, their channels, the TPU dashboard.

The construct knows Cloud Monitoring and MaxText's log lines, not the spec: the stack passes
the thresholds and channels. What each piece reads, and why that signal:

  metric   <cluster>_steps     a distribution of the seconds of each MaxText ``completed step: N,
                              seconds: S`` line of the workload container (its count is the
                              steps): the step time on the dashboard, and the no-step alert
  metric   <cluster>_attempts  one count per attempt: the first worker (a JobSet's slice 0, pod 0; the
                              Job runtime's pod 0: ``JOBSET_FIRST_POD``, ``JOB_FIRST_POD``) writes
                              Orbax's restore line, or MaxText's "No existing checkpoints" line,
                              once each time its program starts (recreate and in-place alike);
                              the ``run`` label (both metrics) is the run's name, cut out of the
                              pod name (``RUN_OF_POD``)
  alert    restarts           a run's attempts in the last hour over the threshold (PromQL over the
                              attempts metric). A run's first attempt counts too: in its first
                              hour the alert fires one restart early, never late.
  alert    no step            a workload container up longer than the window whose pod wrote a step
                              line in the last day but none in the window (PromQL: container
                              uptime, and the steps metric's count). A worker that never stepped
                              is the hang bound's business (the attempt is ended and restarted);
                              a run that ends is not paged, its containers are gone.
  alert    goodput            MaxText's goodput library's Cloud Monitoring metrics (``workload/
                              goodput_time`` TOTAL over goodput + ``workload/badput_time``), per
                              workload, under the threshold for an hour
  alert    node pool errors   GKE's node pool log entries at ERROR (a failed create, upgrade,
                              repair or resize: how a pool leaves RUNNING). Cloud Monitoring has
                              no metric of a node pool's status; ``infra pools status`` reads it.
  dashboard                   TPU duty cycle and HBM in use (GKE's accelerator metrics of the
                              workload containers), attempts per run, step time

Every policy carries the same notification channels (none: incidents only in the console).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from cdktn import ITerraformDependable
from cdktn_provider_google.logging_metric import (
    LoggingMetric,
    LoggingMetricBucketOptions,
    LoggingMetricBucketOptionsExponentialBuckets,
    LoggingMetricMetricDescriptor,
    LoggingMetricMetricDescriptorLabels,
)
from cdktn_provider_google.monitoring_alert_policy import (
    MonitoringAlertPolicy,
    MonitoringAlertPolicyAlertStrategy,
    MonitoringAlertPolicyAlertStrategyNotificationRateLimit,
    MonitoringAlertPolicyConditions,
    MonitoringAlertPolicyConditionsConditionMatchedLog,
    MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage,
    MonitoringAlertPolicyDocumentation,
)
from cdktn_provider_google.monitoring_dashboard import MonitoringDashboard
from cdktn_provider_google.monitoring_notification_channel import MonitoringNotificationChannel
from constructs import Construct

# The JobSet's one replicated job (workloads/planning/target.py REPLICATED_JOB; a test keeps them equal).
REPLICATED_JOB = "slice"
# Worker pod names (RE2, as Cloud Logging's filters and extractors read them). JobSet names its Jobs
# <jobset>-<replicated job>-<job index> and the Job controller each pod <job>-<completion index>-<5 chars>;
# the Job runtime's one Job is the run itself.
JOBSET_POD = f"-{REPLICATED_JOB}-[0-9]+-[0-9]+-[a-z0-9]{{5}}$"
JOBSET_FIRST_POD = f"-{REPLICATED_JOB}-0-0-[a-z0-9]{{5}}$"
JOB_FIRST_POD = "-0-[a-z0-9]{5}$"
RUN_OF_POD = f"^(.+?)(?:-{REPLICATED_JOB}-[0-9]+)?-[0-9]+-[a-z0-9]{{5}}$"
STEP_LINE = "completed step: "
# Orbax's restore line and MaxText's no-checkpoint line: one of them at every start of the program.
ATTEMPT_LINES = ("restoring from this run's directory step", "No existing checkpoints found")
# The no-step alert pages only for workers that stepped within this (a worker that never stepped is the hang bound's).
STEPPED_LOOKBACK_MINUTES = 24 * 60
CHANNEL_TYPES = {"email": ("email", "email_address"), "pubsub": ("pubsub", "topic"), "webhook": ("webhook_tokenauth", "url")}


@dataclass(frozen=True, kw_only=True)
class ChannelProps:
    type: str  # email, pubsub or webhook
    address: str


@dataclass(frozen=True, kw_only=True)
class MonitoringProps:
    project: str
    cluster: str
    # The log-based metrics' names (infra.naming.log_metric_name): letters, digits and '_', as PromQL names them.
    steps_metric: str
    attempts_metric: str
    workload_container: str  # the container that runs the program (toolkit.names.WORKLOAD_CONTAINER)
    channels: Sequence[ChannelProps] = ()
    alerts: bool = True
    restarts_per_hour: int = 3
    no_step_minutes: int = 60
    goodput_below: float = 0.5
    node_pool_errors: bool = True
    dashboard: bool = True
    depends_on: Sequence[ITerraformDependable] = ()  # the Logging and Monitoring APIs

    def __post_init__(self) -> None:
        # The no-step query looks a day back for workers that stepped: a window of a day or more never fires.
        if self.restarts_per_hour < 1 or not 1 <= self.no_step_minutes < STEPPED_LOOKBACK_MINUTES or not 0 < self.goodput_below <= 1:
            raise ValueError(f"monitoring of {self.cluster}: thresholds out of range (the spec's rules refuse these first)")
        for c in self.channels:
            if c.type not in CHANNEL_TYPES:
                raise ValueError(f"monitoring of {self.cluster}: channel type {c.type!r} is not one of {', '.join(CHANNEL_TYPES)}")


class Monitoring(Construct):
    steps: LoggingMetric
    attempts: LoggingMetric
    channels: list[MonitoringNotificationChannel]
    policies: dict[str, MonitoringAlertPolicy]
    dashboard: MonitoringDashboard | None

    def __init__(self, scope: Construct, id_: str, *, props: MonitoringProps) -> None:
        super().__init__(scope, id_)
        self.props = p = props
        self.steps = LoggingMetric(
            self,
            "steps",
            project=p.project,
            name=p.steps_metric,
            description=f"seconds of each MaxText training step in cluster {p.cluster} (its count: steps)",
            filter=self._container_filter(f'textPayload:"{STEP_LINE}"'),
            value_extractor=r'REGEXP_EXTRACT(textPayload, "completed step: \\d+, seconds: ([0-9.]+)")',
            label_extractors={"run": self._run_extractor()},
            metric_descriptor=self._per_run("DISTRIBUTION", "s"),
            depends_on=list(p.depends_on) or None,
            bucket_options=LoggingMetricBucketOptions(
                exponential_buckets=LoggingMetricBucketOptionsExponentialBuckets(num_finite_buckets=40, growth_factor=1.4, scale=0.01)
            ),
        )
        attempt = " OR ".join(f'textPayload:"{line}"' for line in ATTEMPT_LINES)
        self.attempts = LoggingMetric(
            self,
            "attempts",
            project=p.project,
            name=p.attempts_metric,
            description=f"starts of a run's program in cluster {p.cluster} (its first worker's restore or no-checkpoint line)",
            filter=self._container_filter(f"{self._first_worker()} AND ({attempt})"),
            label_extractors={"run": self._run_extractor()},
            metric_descriptor=self._per_run("INT64", "1"),
            depends_on=list(p.depends_on) or None,
        )
        self.channels = [
            MonitoringNotificationChannel(
                self,
                f"channel-{i}",
                project=p.project,
                display_name=f"{p.cluster} {c.type} {i}",
                type=CHANNEL_TYPES[c.type][0],
                labels={CHANNEL_TYPES[c.type][1]: c.address},
                depends_on=list(p.depends_on) or None,
            )
            for i, c in enumerate(p.channels)
        ]
        self.policies = self._policies() if p.alerts else {}
        self.dashboard = self._dashboard() if p.dashboard else None

    # ---------------------------------------------------------------- log filters

    @staticmethod
    def _per_run(value_type: str, unit: str) -> LoggingMetricMetricDescriptor:
        """A counter of log lines (or of their values), by run."""
        return LoggingMetricMetricDescriptor(
            metric_kind="DELTA",
            value_type=value_type,
            unit=unit,
            labels=[LoggingMetricMetricDescriptorLabels(key="run", value_type="STRING", description="the run (its JobSet or Job)")],
        )

    def _container_filter(self, match: str) -> str:
        p = self.props
        return (
            f'resource.type="k8s_container" AND resource.labels.cluster_name="{p.cluster}" '
            f'AND resource.labels.container_name="{p.workload_container}" AND {match}'
        )

    @staticmethod
    def _run_extractor() -> str:
        return f'REGEXP_EXTRACT(resource.labels.pod_name, "{RUN_OF_POD}")'

    @staticmethod
    def _first_worker() -> str:
        """The pod of a run's first worker: a JobSet's slice 0, pod 0; or the Job runtime's pod 0 (a pod of no JobSet)."""
        pod = "resource.labels.pod_name"
        return f'({pod}=~"{JOBSET_FIRST_POD}" OR ({pod}!~"{JOBSET_POD}" AND {pod}=~"{JOB_FIRST_POD}"))'

    def _promql(self, metric: str) -> str:
        p = self.props
        return f'logging_googleapis_com:user_{metric}{{monitored_resource="k8s_container",cluster_name="{p.cluster}"}}'

    # ---------------------------------------------------------------- alert policies

    def _policies(self) -> dict[str, MonitoringAlertPolicy]:
        p = self.props
        steps, attempts = self._promql(f"{p.steps_metric}_count"), self._promql(p.attempts_metric)
        window = p.no_step_minutes
        uptime = f'kubernetes_io:container_uptime{{monitored_resource="k8s_container",cluster_name="{p.cluster}",container_name="{p.workload_container}"}}'
        out = {
            "restarts": self._promql_policy(
                "restarts",
                f"{p.cluster}: a run restarts more than {p.restarts_per_hour} times an hour",
                f"sum by (namespace_name, run) (increase({attempts}[1h])) > {p.restarts_per_hour}",
                "A run keeps restarting (a bad host, a crash loop). `python -m workloads status <run>` lists its attempts and why each ended.",
            ),
            "no-step": self._promql_policy(
                "no-step",
                f"{p.cluster}: a running worker wrote no training step for {window} min",
                f"(max by (namespace_name, pod_name) ({uptime}) > {window * 60})"
                f" and on (namespace_name, pod_name) (sum by (namespace_name, pod_name) (increase({steps}[{STEPPED_LOOKBACK_MINUTES}m])) > 0)"
                f" unless on (namespace_name, pod_name) (sum by (namespace_name, pod_name) (increase({steps}[{window}m])) > 0)",
                "A run's pods are up but its step counter stopped (a hung collective, a stuck data read): every chip is burning. "
                "`python -m workloads logs <run>` shows the last lines; restart the run's attempt if it does not recover.",
            ),
            "goodput": self._promql_policy(
                "goodput",
                f"{p.cluster}: a run's goodput is under {p.goodput_below:g}",
                'sum by (workload_id) (compute_googleapis_com:workload_goodput_time{goodput_source="TOTAL"})'
                ' / (sum by (workload_id) (compute_googleapis_com:workload_goodput_time{goodput_source="TOTAL"})'
                " + sum by (workload_id) (compute_googleapis_com:workload_badput_time))"
                f" < {p.goodput_below:g}",
                "A run spends too much of its time not training (restarts, restores, startup). `python -m workloads metrics <run>` splits the badput.",
                duration="3600s",
            ),
        }
        if p.node_pool_errors:
            out["node-pool"] = MonitoringAlertPolicy(
                self,
                "node-pool",
                project=p.project,
                display_name=f"{p.cluster}: a node pool reports an error",
                combiner="OR",
                conditions=[
                    MonitoringAlertPolicyConditions(
                        display_name="node pool error in GKE's logs",
                        condition_matched_log=MonitoringAlertPolicyConditionsConditionMatchedLog(
                            filter=f'resource.type="gke_nodepool" AND resource.labels.cluster_name="{p.cluster}" AND severity>=ERROR',
                            label_extractors={"nodepool": "EXTRACT(resource.labels.nodepool_name)"},
                        ),
                    )
                ],
                alert_strategy=MonitoringAlertPolicyAlertStrategy(
                    notification_rate_limit=MonitoringAlertPolicyAlertStrategyNotificationRateLimit(period="3600s"), auto_close="86400s"
                ),
                documentation=self._doc(
                    "A node pool left RUNNING (a failed create, upgrade, repair or resize). "
                    "`python -m infra pools status --spec <spec>` shows each pool's status and the way back."
                ),
                notification_channels=self._channel_ids(),
            )
        return out

    def _promql_policy(self, id_: str, name: str, query: str, doc: str, *, duration: str = "0s") -> MonitoringAlertPolicy:
        return MonitoringAlertPolicy(
            self,
            id_,
            project=self.props.project,
            display_name=name,
            combiner="OR",
            conditions=[
                MonitoringAlertPolicyConditions(
                    display_name=name,
                    condition_prometheus_query_language=MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage(
                        query=query, duration=duration, evaluation_interval="60s"
                    ),
                )
            ],
            alert_strategy=MonitoringAlertPolicyAlertStrategy(auto_close="86400s"),
            documentation=self._doc(doc),
            notification_channels=self._channel_ids(),
            # PromQL names the log-based metrics: Cloud Monitoring checks they exist when the policy is made.
            depends_on=[self.steps, self.attempts, *self.props.depends_on],
        )

    def _doc(self, text: str) -> MonitoringAlertPolicyDocumentation:
        return MonitoringAlertPolicyDocumentation(content=text, mime_type="text/markdown")

    def _channel_ids(self) -> list[str] | None:
        return [c.id for c in self.channels] or None

    # ---------------------------------------------------------------- dashboard

    def _dashboard(self) -> MonitoringDashboard:
        p = self.props
        container = f'resource.type="k8s_container" resource.label."cluster_name"="{p.cluster}" resource.label."container_name"="{p.workload_container}"'

        def chart(title: str, metric: str, reducer: str, aligner: str, group_by: list[str], *, extra: str = "") -> dict:
            return {
                "title": title,
                "xyChart": {
                    "dataSets": [
                        {
                            "plotType": "LINE",
                            "timeSeriesQuery": {
                                "timeSeriesFilter": {
                                    "filter": f'metric.type="{metric}" {container}{extra}',
                                    "aggregation": {
                                        "alignmentPeriod": "60s",
                                        "perSeriesAligner": aligner,
                                        "crossSeriesReducer": reducer,
                                        "groupByFields": group_by,
                                    },
                                }
                            },
                        }
                    ]
                },
            }

        tiles = [
            chart("TPU duty cycle (%), by pod", "kubernetes.io/container/accelerator/duty_cycle", "REDUCE_MEAN", "ALIGN_MEAN", ["resource.label.pod_name"]),
            chart("HBM in use (bytes), by pod", "kubernetes.io/container/accelerator/memory_used", "REDUCE_MAX", "ALIGN_MAX", ["resource.label.pod_name"]),
            chart("Attempts per run", f"logging.googleapis.com/user/{p.attempts_metric}", "REDUCE_SUM", "ALIGN_DELTA", ["metric.label.run"]),
            chart("Step time (s), by run", f"logging.googleapis.com/user/{p.steps_metric}", "REDUCE_MEAN", "ALIGN_DELTA", ["metric.label.run"]),
        ]
        layout = {
            "displayName": f"{p.cluster}: TPU training",
            "gridLayout": {"columns": "2", "widgets": tiles},
        }
        return MonitoringDashboard(
            self, "dashboard", project=p.project, dashboard_json=json.dumps(layout, sort_keys=True), depends_on=[self.steps, self.attempts, *p.depends_on]
        )
