"""A run's log across its attempts, from Cloud Logging: what outlives the run's pods.

On GKE a JobSet restart deletes the old pods, and the new pod's log (``kubectl logs``)
begins with the new attempt. Every line of every attempt is still in Cloud Logging, where
GKE's logging agent sends each container's output stamped with the container and the pod's
labels. ``metrics``, ``report`` and goodput read worker 0 of a run from there — every pod
it has had, in order — and fall back to the current pod's log (the last attempt alone,
said on stderr) where Cloud Logging cannot answer.

Whose lines are the run's, by runtime (``worker_filter``, from the pod labels each runtime's
controller writes and the agent stamps):

- **jobset**: worker 0 is the pod of job 0, completion index 0, of the run's JobSet; a
  restart makes new pods. The JobSet's uid, when the run is still there, keeps an earlier
  run under the same name out;
- **job**: worker 0 is completion index 0 of the run's Indexed Job; its attempts are Kueue
  evictions (the Job suspended, its pods deleted, new pods at re-admission). The Job's uid
  (the Job controller's ``controller-uid`` label) keeps an earlier run out;
- **ray**: the run's own log is its submitter pod's (K8sJobMode: ``ray job submit`` follows
  the Ray job, so it holds what the JaxTrainer's workers print); a KubeRay retry
  (``backoffLimit``) makes a new RayCluster and a new submitter pod. Its pods carry no label
  with the RayJob's uid, so an earlier run under the same name is kept out by time only
  (``since``, the RayJob's creation).

A run no longer there is asked for as each runtime in turn (``RUNTIMES``). The client is
Google's (``google-cloud-logging``) over its REST transport and the bounded transport
(``workloads.observe.google_http``), the one the local cluster's server plays
(``workloads.local.cloudlogging``); the filter always bounds ``timestamp``, as the client
otherwise reads only the last 24 hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.errors import Forbidden, GoogleApiError
from toolkit.names import (
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    K8S_COMPLETION_INDEX_LABEL,
    K8S_JOB_NAME_LABEL,
    RAY_SUBMITTER_CONTAINER,
    WORKLOAD_CONTAINER,
)

JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"  # the Job controller's, on every pod of a Job
RUNTIMES = ("jobset", "job", "ray")  # the planner's runtimes (workloads.planning.model.RUNTIMES), in the order a gone run is asked for
PAGE_SIZE = 1000  # the API's largest page
OLDEST_FIRST = "timestamp asc"  # entries:list's orderBy (google.cloud.logging.ASCENDING)
EPOCH = "1970-01-01T00:00:00Z"


class HistoryUnavailable(GoogleApiError):
    """Cloud Logging could not be asked (no credentials, unreachable, an error or unusable answer): exit 3."""


@dataclass(frozen=True)
class LogScope:
    """Which container's entries are worker 0 of a run."""

    project: str
    location: str
    cluster: str
    namespace: str
    run: str
    run_uid: str | None = None  # the JobSet's or Job's uid, when the run is still there (a RayJob's pods carry none)
    since: str | None = None  # RFC 3339: the run's creation
    runtime: str = "jobset"  # whose pods: jobset | job | ray

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"LogScope.runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}")

    @property
    def container(self) -> str:
        return RAY_SUBMITTER_CONTAINER if self.runtime == "ray" else WORKLOAD_CONTAINER

    @property
    def where(self) -> str:
        return f"Cloud Logging (project {self.project}, cluster {self.location}/{self.cluster}, namespace {self.namespace})"


@dataclass(frozen=True)
class History:
    """Worker 0's lines, every attempt, oldest first, and the pod each came from ("" when an entry names none)."""

    lines: tuple[str, ...]
    line_pods: tuple[str, ...]
    where: str
    line_times: tuple[str, ...] = ()  # each entry's timestamp (RFC 3339)
    line_labels: tuple[dict[str, str], ...] = ()  # each entry's labels (the pod's, as ``labels."k8s-pod/<key>"`` stamps them)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def pods(self) -> tuple[str, ...]:
        """The pods, in order of their first line."""
        return tuple(p for p in dict.fromkeys(self.line_pods) if p)

    def per_pod(self) -> tuple[str, ...]:
        """Each pod's lines (one attempt each: a restarted JobSet's pods are new pods), in order of their first line."""
        groups: dict[str, list[str]] = {}
        for line, pod in zip(self.lines, self.line_pods, strict=True):
            groups.setdefault(pod, []).append(line)
        return tuple("\n".join(g) for g in groups.values())


def _quoted(value: str) -> str:
    """A filter string literal: the value can never close the quote or add a term."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pod_label(key: str) -> str:
    """A pod label as a filter field: ``labels."k8s-pod/<key, its dots as underscores>"`` (how GKE's agent stamps it)."""
    return "labels." + _quoted("k8s-pod/" + key.replace(".", "_"))


def worker_filter(scope: LogScope, *, worker0: bool = True) -> str:
    """The Logging query language filter for the run's own entries, by runtime: worker 0's (every worker's with ``worker0=False``) (pure; see the module)."""
    terms = [
        ("resource.type", "k8s_container"),
        ("resource.labels.project_id", scope.project),
        ("resource.labels.location", scope.location),
        ("resource.labels.cluster_name", scope.cluster),
        ("resource.labels.namespace_name", scope.namespace),
        ("resource.labels.container_name", scope.container),
    ]
    if scope.runtime == "jobset":
        terms.append((pod_label(JOBSET_NAME_LABEL), scope.run))
        if worker0:
            terms += [(pod_label(JOBSET_JOB_INDEX_LABEL), "0"), (pod_label(K8S_COMPLETION_INDEX_LABEL), "0")]
        if scope.run_uid:
            terms.append((pod_label(JOBSET_UID_LABEL), scope.run_uid))
    elif scope.runtime == "job":
        terms.append((pod_label(K8S_JOB_NAME_LABEL), scope.run))
        if worker0:
            terms.append((pod_label(K8S_COMPLETION_INDEX_LABEL), "0"))
        if scope.run_uid:
            terms.append((pod_label(JOB_UID_LABEL), scope.run_uid))
    else:  # ray: the submitter Job carries the RayJob's name
        terms.append((pod_label(K8S_JOB_NAME_LABEL), scope.run))
    out = [f"{field}={_quoted(value)}" for field, value in terms]
    out.append(f"timestamp>={_quoted(scope.since or EPOCH)}")
    return " AND ".join(out)


def make_client(project: str, *, endpoint: str | None = None) -> Any:
    """Google's Logging client over REST on the bounded transport (``workloads.observe.google_http``):
    anonymous against a loopback server (``endpoint``), Application Default Credentials otherwise."""
    from workloads.observe import google_http

    if endpoint:
        return google_http.logging_client(project, google_http.anonymous(), endpoint=endpoint)
    try:
        credentials, _ = google_http.default_credentials()
    except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and friends
        raise HistoryUnavailable(f"no Google credentials for Cloud Logging ({_one_line(e, 120)}) — run gcloud auth application-default login") from None
    return google_http.logging_client(project, credentials)


def _one_line(e: BaseException, limit: int = 160) -> str:
    return " ".join(str(e).split())[:limit]


def read(client: Any, scope: LogScope, *, limit_bytes: int, filter_: str | None = None) -> History:
    """Worker 0's entries (or those ``filter_`` selects), oldest first, at most ``limit_bytes`` of text (a SpecError-free cut: the newest lines are dropped).

    Refused (no permission) is ``Forbidden``; any other failure ``HistoryUnavailable``.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    lines: list[str] = []
    pods: list[str] = []
    times: list[str] = []
    labels: list[dict[str, str]] = []
    size = 0
    try:
        entries = client.list_entries(
            resource_names=[f"projects/{scope.project}"], filter_=filter_ or worker_filter(scope), order_by=OLDEST_FIRST, page_size=PAGE_SIZE
        )
        for entry in entries:
            text = _text(entry.payload)
            if text is None:
                continue
            size += len(text) + 1
            if size > limit_bytes:
                raise HistoryUnavailable(
                    f"worker 0 of run {scope.run!r} has more than {limit_bytes:,} bytes of log in {scope.where} — pass a saved part of it as LOGFILE"
                )
            lines.append(text)
            pods.append(str(((getattr(entry.resource, "labels", None) or {}) if entry.resource else {}).get("pod_name") or ""))
            stamp = getattr(entry, "timestamp", None)
            times.append(stamp.isoformat() if hasattr(stamp, "isoformat") else str(stamp or ""))
            labels.append({str(k): str(v) for k, v in (getattr(entry, "labels", None) or {}).items()})
    except (gexc.Forbidden, gexc.PermissionDenied, gexc.Unauthorized) as e:
        raise Forbidden(f"Cloud Logging refused to list run {scope.run!r}'s entries ({_one_line(e)}) — grant roles/logging.viewer") from None
    except auth_exc.GoogleAuthError as e:
        raise HistoryUnavailable(f"no usable Google credentials for Cloud Logging ({_one_line(e, 120)}) — run gcloud auth application-default login") from None
    except gexc.GoogleAPICallError as e:
        raise HistoryUnavailable(f"Cloud Logging answered {_one_line(e)}") from None
    except GoogleApiError as e:  # the transport's bounds: unreachable, too slow, too long, endless pages, unusable JSON
        raise HistoryUnavailable(str(e)) from None
    return History(tuple(lines), tuple(pods), scope.where, tuple(times), tuple(labels))


def _text(payload: Any) -> str | None:
    """A line of text from an entry: textPayload, or jsonPayload's ``message`` (how structured loggers write)."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return payload["message"]
    return None
