"""A run's log across its attempts, from Cloud Logging: what outlives the run's pods.

On GKE a JobSet restart deletes the old pods, and the new pod's log (``kubectl logs``)
begins with the new attempt. Every line of every attempt is still in Cloud Logging, where
GKE's logging agent sends each container's output stamped with the container and the pod's
labels. ``metrics``, ``report`` and goodput read worker 0 of a run from there — every pod
it has had, in order — and fall back to the current pod's log (the last attempt alone,
said on stderr) where Cloud Logging cannot answer.

Worker 0 is the pod of job 0, completion index 0, of the run's JobSet; a JobSet uid, when
the run is still there, keeps an earlier run under the same name out. The client is
Google's (``google-cloud-logging``) over its REST transport, the one the local cluster's
server plays (``workloads.local.cloudlogging``); the filter always bounds ``timestamp``,
as the client otherwise reads only the last 24 hours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from toolkit.errors import Forbidden, ToolkitError
from toolkit.names import JOBSET_JOB_INDEX_LABEL, JOBSET_NAME_LABEL, K8S_COMPLETION_INDEX_LABEL, WORKLOAD_CONTAINER

JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
PAGE_SIZE = 1000  # the API's largest page
EPOCH = "1970-01-01T00:00:00Z"


class HistoryUnavailable(ToolkitError):
    """Cloud Logging could not be asked (no credentials, unreachable, an error answer)."""

    exit_code = 3


@dataclass(frozen=True)
class LogScope:
    """Which container's entries are worker 0 of a run."""

    project: str
    location: str
    cluster: str
    namespace: str
    run: str
    run_uid: str | None = None  # the JobSet's uid, when the run is still there
    since: str | None = None  # RFC 3339: the run's creation
    container: str = WORKLOAD_CONTAINER

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
    """The Logging query language filter for worker 0's entries of the run (every worker's with ``worker0=False``) (pure)."""
    terms = [
        ("resource.type", "k8s_container"),
        ("resource.labels.project_id", scope.project),
        ("resource.labels.location", scope.location),
        ("resource.labels.cluster_name", scope.cluster),
        ("resource.labels.namespace_name", scope.namespace),
        ("resource.labels.container_name", scope.container),
        (pod_label(JOBSET_NAME_LABEL), scope.run),
    ]
    if worker0:
        terms += [(pod_label(JOBSET_JOB_INDEX_LABEL), "0"), (pod_label(K8S_COMPLETION_INDEX_LABEL), "0")]
    if scope.run_uid:
        terms.append((pod_label(JOBSET_UID_LABEL), scope.run_uid))
    out = [f"{field}={_quoted(value)}" for field, value in terms]
    out.append(f"timestamp>={_quoted(scope.since or EPOCH)}")
    return " AND ".join(out)


def make_client(project: str, *, endpoint: str | None = None) -> Any:
    """Google's Logging client over REST: anonymous against a loopback server (``endpoint``), ADC otherwise."""
    from google.cloud import logging as cloud_logging

    if endpoint:
        from google.auth.credentials import AnonymousCredentials

        return cloud_logging.Client(project=project, credentials=AnonymousCredentials(), _use_grpc=False, client_options={"api_endpoint": endpoint})
    try:
        return cloud_logging.Client(project=project, _use_grpc=False)
    except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and friends
        raise HistoryUnavailable(f"no Google credentials for Cloud Logging ({_one_line(e, 120)}) — run gcloud auth application-default login") from None


def _one_line(e: BaseException, limit: int = 160) -> str:
    return " ".join(str(e).split())[:limit]


def read(client: Any, scope: LogScope, *, limit_bytes: int, filter_: str | None = None) -> History:
    """Worker 0's entries (or those ``filter_`` selects), oldest first, at most ``limit_bytes`` of text (a SpecError-free cut: the newest lines are dropped).

    Refused (no permission) is ``Forbidden``; any other failure ``HistoryUnavailable``.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud import logging as cloud_logging

    lines: list[str] = []
    pods: list[str] = []
    times: list[str] = []
    labels: list[dict[str, str]] = []
    size = 0
    try:
        entries = client.list_entries(
            resource_names=[f"projects/{scope.project}"], filter_=filter_ or worker_filter(scope), order_by=cloud_logging.ASCENDING, page_size=PAGE_SIZE
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
    except OSError as e:  # refused connection, DNS, TLS
        raise HistoryUnavailable(f"Cloud Logging unreachable ({os.environ.get('TGK_LOGGING_ENDPOINT') or 'logging.googleapis.com'}): {_one_line(e)}") from None
    return History(tuple(lines), tuple(pods), scope.where, tuple(times), tuple(labels))


def _text(payload: Any) -> str | None:
    """A line of text from an entry: textPayload, or jsonPayload's ``message`` (how structured loggers write)."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return payload["message"]
    return None
