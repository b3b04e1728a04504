"""The one seam between the toolkit and a Kubernetes API server.

Everything that talks to a cluster goes through ``Cluster``: server-side apply of any kind
(CRDs included), get/list/delete, watches, pod logs, and the Kueue admission wait. The
official ``kubernetes`` client is used only to load kubeconfigs (certs, tokens, exec auth
plugins such as gke-gcloud-auth-plugin) and to send requests; it is imported here, lazily, and
nowhere else, so importing the CLI stays cheap.

Requests are plain REST calls built from a small resource table (plus discovery for kinds
the table does not know), which keeps the wire behaviour explicit — method, path, query,
content type — and lets unit tests swap the transport for a recording fake while integration
tests point ``Cluster.connect`` at any kubeconfig.

Errors: anything the server or the network says becomes ``ClusterError`` with one line;
404 on delete is a normal outcome, not an error.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol
from urllib.parse import quote

from toolkit.errors import ClusterError
from workloads.cluster import status as st

__all__ = ["AdmissionResult", "Cluster", "ClusterError", "DeleteResult", "Response", "Transport", "ResourceInfo"]

FIELD_MANAGER = "tpu-gke-toolkit"

# Labels JobSet puts on every pod it creates (JobSet >= 0.5) and the indexed-Job label.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# Kueue labels the Workload it creates for a job with the job's UID.
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUEUE_GROUP = "kueue.x-k8s.io"


# ------------------------------------------------------------------ transport


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Transport(Protocol):
    """Sends one HTTP request to the API server. The real one wraps the kubernetes client."""

    server: str

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> Response: ...

    def stream(
        self, path: str, *, query: list[tuple[str, str]] | None = None, timeout: float | None = None
    ) -> Iterator[bytes]:
        """GET that yields the body line by line (watches, followed logs); raises ClusterError on non-2xx."""
        ...


def _reach_error(server: str, exc: BaseException) -> ClusterError:
    reason = str(getattr(exc, "reason", "") or exc)
    low = reason.lower()
    if "refused" in low:
        what = "connection refused"
    elif "timed out" in low or "timeout" in low:
        what = "timed out"
    elif "name or service not known" in low or "nodename nor servname" in low or "failed to resolve" in low:
        what = "host name does not resolve"
    elif "certificate" in low or "ssl" in low:
        what = "TLS handshake failed (certificate mismatch?)"
    else:
        what = reason.splitlines()[0][:160] if reason else type(exc).__name__
    return ClusterError(
        f"cannot reach the Kubernetes API server at {server} ({what}) — is the cluster up? check --kubeconfig/--context"
        " (for GKE: gcloud container clusters get-credentials)"
    )


class _KubeTransport:
    """The kubernetes client's ApiClient, used as an authenticated HTTP sender."""

    def __init__(self, api_client: Any, timeout: float) -> None:
        self._api = api_client
        self._timeout = timeout
        self.server = api_client.configuration.host

    def _send(self, method: str, path: str, query, body, content_type, timeout, stream: bool) -> Any:
        import urllib3

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            # param_serialize applies the kubeconfig's auth (tokens, refreshed exec credentials).
            m, url, hdrs, b, _ = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            to = (self._timeout, None) if stream else (self._timeout, timeout or self._timeout)
            return self._api.call_api(m, url, header_params=hdrs, body=b, _request_timeout=to)
        except urllib3.exceptions.HTTPError as e:
            raise _reach_error(self.server, e) from None
        except OSError as e:
            raise _reach_error(self.server, e) from None
        except Exception as e:  # the client wraps TLS failures in ApiException(status=0)
            if getattr(e, "status", None) == 0:
                raise _reach_error(self.server, e) from None
            raise

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None) -> Response:
        import urllib3

        r = self._send(method, path, query, body, content_type, timeout, stream=False)
        try:
            data = r.read()
        except urllib3.exceptions.HTTPError as e:
            raise _reach_error(self.server, e) from None
        return Response(status=r.status, body=data or b"")

    def stream(self, path, *, query=None, timeout=None) -> Iterator[bytes]:
        import urllib3

        r = self._send("GET", path, query, None, None, timeout, stream=True)
        if not 200 <= r.status < 300:
            raise _api_error(Response(r.status, r.read() or b""), f"GET {path}")
        raw = r.response
        try:
            buf = b""
            for chunk in raw.stream(64 * 1024, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line
            if buf:
                yield buf
        except urllib3.exceptions.ReadTimeoutError:
            return  # a watch or follow that went quiet for the read timeout: the caller decides
        except urllib3.exceptions.HTTPError as e:
            raise _reach_error(self.server, e) from None
        finally:
            raw.release_conn()


def _status_message(resp: Response) -> str:
    try:
        obj = resp.json()
    except ValueError:
        return resp.body.decode(errors="replace").strip().splitlines()[0][:300] if resp.body else ""
    if isinstance(obj, dict):
        return str(obj.get("message") or obj.get("reason") or "")
    return ""


def _api_error(resp: Response, what: str) -> ClusterError:
    msg = _status_message(resp) or f"HTTP {resp.status}"
    msg = " ".join(msg.split())
    if resp.status == 401:
        return ClusterError(f"{what}: unauthorized ({msg}) — refresh credentials (gcloud container clusters get-credentials) or check the kubeconfig user")
    if resp.status == 403 and "admission webhook" in msg:
        return ClusterError(f"{what}: refused by an admission webhook: {msg}")
    if resp.status == 403:
        return ClusterError(f"{what}: forbidden ({msg}) — the kubeconfig identity lacks RBAC permission for this")
    if resp.status == 409:
        return ClusterError(f"{what}: conflict ({msg}) — another field manager (kubectl, another tool) owns these fields; undo its change, or apply with force_conflicts to take them over")
    return ClusterError(f"{what}: {msg} (HTTP {resp.status})")


# ------------------------------------------------------------------ resources


@dataclass(frozen=True)
class ResourceInfo:
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


# Kinds the toolkit touches, so common calls need no discovery round trip. The Kueue
# kinds are resolved by discovery: which version is served depends on the installed Kueue.
_KNOWN: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Event"): ("events", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    (JOBSET_API, "JobSet"): ("jobsets", True),
}


@dataclass(frozen=True)
class DeleteResult:
    kind: str
    name: str
    namespace: str | None
    deleted: bool  # False: it was already gone (404), which is fine
    dry_run: bool = False


@dataclass(frozen=True)
class AdmissionResult:
    """How the wait for Kueue admission ended."""

    admitted: bool
    workload: str | None  # Workload name, None if Kueue never created one
    state: str  # a status.WorkloadState value
    flavors: dict[str, str] = field(default_factory=dict)  # podset -> ResourceFlavor
    reason: str = ""  # why it is not admitted (Kueue's condition message)
    waited_seconds: float = 0.0


# ---------------------------------------------------------------------- Cluster


class Cluster:
    """A connected API server. Build with ``Cluster.connect`` (or pass a Transport in tests)."""

    def __init__(self, transport: Transport, *, default_namespace: str = "default", context: str | None = None) -> None:
        self.transport = transport
        self.default_namespace = default_namespace
        self.context = context
        self._discovered: dict[str, dict[str, ResourceInfo]] = {}
        self._preferred: dict[str, str] = {}

    # ------------------------------------------------------------ construction

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None, *, timeout: float = 10) -> "Cluster":
        """Load a kubeconfig, check the server answers, return a Cluster.

        Order of precedence for the file: the argument, $KUBECONFIG (first entry), ~/.kube/config.
        Every failure (no file, bad YAML, unknown context, unreachable server) is a ClusterError.
        """
        path = _kubeconfig_path(kubeconfig)
        if not path.is_file():
            raise ClusterError(
                f"no kubeconfig at {path} — pass --kubeconfig, set KUBECONFIG, or run gcloud container clusters get-credentials"
            )
        try:
            from kubernetes import config as kconfig
            from kubernetes.client import Configuration
            from kubernetes.config.config_exception import ConfigException
        except ImportError:  # pragma: no cover - the dependency is pinned
            raise ClusterError("the kubernetes Python client is not installed — run scripts/setup.sh") from None

        try:
            contexts, active = kconfig.list_kube_config_contexts(config_file=str(path))
        except ConfigException as e:
            raise ClusterError(f"kubeconfig {path} is not usable: {_one_line(e)} — check the file or pass another --kubeconfig") from None
        except Exception as e:  # yaml errors and the like
            raise ClusterError(f"kubeconfig {path} cannot be read: {_one_line(e)} — check the file or pass another --kubeconfig") from None
        names = [c.get("name") for c in contexts or []]
        if context and context not in names:
            raise ClusterError(f"context {context!r} is not in {path}; contexts there: {', '.join(n for n in names if n) or 'none'}")
        if not context and not active:
            raise ClusterError(f"{path} has no current-context — pass --context ({', '.join(n for n in names if n) or 'no contexts defined'})")
        ctx = next(c for c in contexts if c.get("name") == (context or active.get("name")))
        namespace = (ctx.get("context") or {}).get("namespace") or "default"

        cfg = Configuration()
        try:
            kconfig.load_kube_config(config_file=str(path), context=context, client_configuration=cfg, persist_config=False)
        except ConfigException as e:
            raise ClusterError(f"kubeconfig {path}: {_one_line(e)} — fix the context's cluster/user entries") from None
        except Exception as e:  # exec plugins that fail, unreadable cert files
            raise ClusterError(f"kubeconfig {path}: cannot load credentials: {_one_line(e)}") from None
        # Fail fast instead of urllib3's default three retries per request.
        cfg.retries = False
        from kubernetes.client import ApiClient

        transport = _KubeTransport(ApiClient(configuration=cfg), timeout)
        cluster = cls(transport, default_namespace=namespace, context=ctx.get("name"))
        cluster.server_version()  # reachability + credentials, one line on failure
        return cluster

    # ------------------------------------------------------------------- basics

    def server_version(self) -> str:
        resp = self.transport.request("GET", "/version")
        if not resp.ok:
            raise _api_error(resp, f"API server {self.transport.server}")
        return str(resp.json().get("gitVersion", "unknown"))

    def resource(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind: from the table, else from the group-version's discovery doc."""
        known = _KNOWN.get((api_version, kind))
        if known:
            return ResourceInfo(api_version, kind, *known)
        if api_version not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resp = self.transport.request("GET", path)
            if resp.status == 404:
                raise ClusterError(f"the cluster does not serve {api_version} — install the component that provides {kind} (JobSet/Kueue CRDs) first")
            if not resp.ok:
                raise _api_error(resp, f"discovery of {api_version}")
            self._discovered[api_version] = {
                r["kind"]: ResourceInfo(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
                for r in resp.json().get("resources", [])
                if "/" not in r.get("name", "")
            }
        info = self._discovered[api_version].get(kind)
        if info is None:
            raise ClusterError(f"the cluster serves {api_version} but not kind {kind} — check the apiVersion/kind or the installed CRD version")
        return info

    def preferred_version(self, group: str) -> str:
        """The group's preferred served version, e.g. kueue.x-k8s.io/v1beta2."""
        if group not in self._preferred:
            resp = self.transport.request("GET", f"/apis/{group}")
            if resp.status == 404:
                raise ClusterError(f"the cluster does not serve API group {group} — install {'Kueue' if group == KUEUE_GROUP else group} first")
            if not resp.ok:
                raise _api_error(resp, f"discovery of {group}")
            pv = resp.json().get("preferredVersion", {}).get("groupVersion")
            if not pv:
                raise ClusterError(f"API group {group} has no preferred version")
            self._preferred[group] = pv
        return self._preferred[group]

    def kueue(self, kind: str) -> ResourceInfo:
        return self.resource(self.preferred_version(KUEUE_GROUP), kind)

    # -------------------------------------------------------------------- apply

    def apply(
        self,
        objects: list[dict],
        *,
        field_manager: str = FIELD_MANAGER,
        dry_run: bool = False,
        force_conflicts: bool = False,
    ) -> list[dict]:
        """Server-side apply each object, in the order given; return what the server stored.

        Conflicts are not forced by default: if another manager (kubectl, a controller) owns a
        field we set, the server refuses and the user sees which — forcing would silently take
        the field over. Applying the same objects twice is a no-op on the server.
        Order matters for dependencies (Namespace before namespaced objects, CRDs before their
        objects): callers pass objects already sorted.
        """
        out: list[dict] = []
        for obj in objects:
            api_version, kind = obj.get("apiVersion"), obj.get("kind")
            meta = obj.get("metadata") or {}
            name = meta.get("name")
            if not api_version or not kind or not name:
                raise ClusterError(f"cannot apply an object without apiVersion/kind/metadata.name: {str(obj)[:120]}")
            info = self.resource(api_version, kind)
            ns = (meta.get("namespace") or self.default_namespace) if info.namespaced else None
            query = [("fieldManager", field_manager), ("force", "true" if force_conflicts else "false")]
            if dry_run:
                query.append(("dryRun", "All"))
            resp = self.transport.request(
                "PATCH", info.path(ns, name), query=query, body=obj, content_type="application/apply-patch+yaml"
            )
            if not resp.ok:
                where = f"{kind} {ns + '/' if ns else ''}{name}"
                raise _api_error(resp, f"apply {where}")
            out.append(resp.json())
        return out

    # ----------------------------------------------------------------- read/del

    def get(self, info: ResourceInfo, name: str, namespace: str | None = None) -> dict | None:
        resp = self.transport.request("GET", info.path(namespace, name))
        if resp.status == 404:
            return None
        if not resp.ok:
            raise _api_error(resp, f"get {info.kind} {name}")
        return resp.json()

    def list(
        self,
        info: ResourceInfo,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        resp = self.transport.request("GET", info.path(namespace), query=query)
        if resp.status == 404:
            # A namespace or CRD that does not exist lists as nothing.
            return []
        if not resp.ok:
            raise _api_error(resp, f"list {info.plural}")
        return list(resp.json().get("items") or [])

    def delete(
        self, info: ResourceInfo, name: str, namespace: str | None = None, *, dry_run: bool = False, propagation: str = "Foreground"
    ) -> DeleteResult:
        query = [("propagationPolicy", propagation)]
        if dry_run:
            query.append(("dryRun", "All"))
        resp = self.transport.request("DELETE", info.path(namespace, name), query=query)
        if resp.status == 404:
            return DeleteResult(info.kind, name, namespace, deleted=False, dry_run=dry_run)
        if not resp.ok:
            raise _api_error(resp, f"delete {info.kind} {name}")
        return DeleteResult(info.kind, name, namespace, deleted=True, dry_run=dry_run)

    def watch(
        self,
        info: ResourceInfo,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 30,
    ) -> Iterator[tuple[str, dict]]:
        """(type, object) events until the server ends the watch (after about ``timeout`` s)."""
        query = [("watch", "true"), ("allowWatchBookmarks", "false"), ("timeoutSeconds", str(max(1, int(timeout))))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if resource_version:
            query.append(("resourceVersion", resource_version))
        for line in self.transport.stream(info.path(namespace), query=query, timeout=timeout + 5):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") == "ERROR":
                return  # typically 410 Gone: the caller re-lists
            yield ev.get("type", ""), ev.get("object") or {}

    # --------------------------------------------------------------------- runs

    def jobset(self, namespace: str, name: str) -> dict | None:
        return self.get(self.resource(JOBSET_API, "JobSet"), name, namespace)

    def workload_for(self, namespace: str, jobset: dict) -> dict | None:
        """The Kueue Workload owned by a JobSet (by Kueue's job-uid label, else owner reference)."""
        uid = (jobset.get("metadata") or {}).get("uid")
        info = self.kueue("Workload")
        if uid:
            items = self.list(info, namespace, label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}")
            if not items:
                items = [w for w in self.list(info, namespace) if _owned_by(w, uid)]
            if items:
                return max(items, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
        return None

    def pods(self, namespace: str, run: str) -> list[dict]:
        return self.list(self.resource("v1", "Pod"), namespace, label_selector=f"{JOBSET_NAME_LABEL}={run}")

    def run_status(self, namespace: str, run: str) -> st.RunStatus:
        js = self.jobset(namespace, run)
        if js is None:
            return st.run_status(namespace, run, None, None, [])
        try:
            wl = self.workload_for(namespace, js)
        except ClusterError:
            wl = None  # Kueue not installed: still show the JobSet and its pods
        return st.run_status(namespace, run, js, wl, self.pods(namespace, run))

    def find_pod(self, namespace: str, run: str, *, slice_index: int = 0, worker: int = 0) -> dict | None:
        selector = ",".join(
            [f"{JOBSET_NAME_LABEL}={run}", f"{JOB_INDEX_LABEL}={slice_index}", f"{COMPLETION_INDEX_LABEL}={worker}"]
        )
        pods = self.list(self.resource("v1", "Pod"), namespace, label_selector=selector)
        if not pods:
            return None
        # Several attempts after restarts: the newest is the one that is running.
        return max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")

    def logs(
        self, namespace: str, pod: str, *, container: str | None = None, follow: bool = False, tail_lines: int | None = None
    ) -> Iterator[str]:
        """Lines of a pod's log; with follow, until the container exits."""
        query: list[tuple[str, str]] = []
        if container:
            query.append(("container", container))
        if follow:
            query.append(("follow", "true"))
        if tail_lines is not None:
            query.append(("tailLines", str(tail_lines)))
        path = self.resource("v1", "Pod").path(namespace, pod, "log")
        try:
            for line in self.transport.stream(path, query=query, timeout=None if follow else 60):
                yield line.decode(errors="replace")
        except ClusterError as e:
            raise LogsUnavailable(f"logs of pod {namespace}/{pod} are not available: {e}") from None

    def delete_jobset(self, namespace: str, name: str, *, dry_run: bool = False) -> DeleteResult:
        # Foreground: the child Jobs and pods go before the JobSet disappears, so a
        # resubmit under the same name does not race the old pods.
        return self.delete(self.resource(JOBSET_API, "JobSet"), name, namespace, dry_run=dry_run, propagation="Foreground")

    # ---------------------------------------------------------------- admission

    def wait_admitted(
        self,
        namespace: str,
        jobset: str,
        *,
        timeout: float,
        on_progress: Callable[[str], None] | None = None,
        poll: float = 2.0,
    ) -> AdmissionResult:
        """Follow the JobSet's Workload until Kueue admits it or ``timeout`` passes.

        Watches Workloads in the namespace (re-listing when a watch ends) rather than
        sleeping, so admission is seen as soon as Kueue writes it. QuotaReserved without
        Admitted means admission checks (e.g. a ProvisioningRequest) are still pending.
        """
        start = time.monotonic()
        deadline = start + timeout
        last_msg = ""

        def say(msg: str) -> None:
            nonlocal last_msg
            if on_progress and msg != last_msg:
                on_progress(msg)
            last_msg = msg

        wl_state: st.WorkloadStatus | None = None
        wl_name: str | None = None
        while True:
            js = self.jobset(namespace, jobset)
            if js is None:
                raise ClusterError(f"JobSet {namespace}/{jobset} does not exist — submit it first (or check --namespace)")
            uid = (js.get("metadata") or {}).get("uid")
            wl = self.workload_for(namespace, js)
            if wl is not None:
                wl_state = st.workload_status(wl)
                wl_name = wl_state.name
                say(wl_state.describe())
                if wl_state.state in (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED):
                    return self._admission(wl_state, True, start)
                if wl_state.state is st.WorkloadState.INACTIVE:
                    return self._admission(wl_state, False, start)  # deactivated: Kueue will not retry it
            else:
                say(f"waiting for Kueue to create a Workload for JobSet {jobset} (is the queue-name label set and Kueue running?)")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            rv = None
            if wl is not None:
                rv = (wl.get("metadata") or {}).get("resourceVersion")
            watch_start = time.monotonic()
            try:
                for _typ, obj in self.watch(
                    self.kueue("Workload"), namespace,
                    label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}" if uid else None,
                    resource_version=rv, timeout=min(remaining, 30),
                ):
                    s = st.workload_status(obj)
                    wl_name = s.name
                    say(s.describe())
                    if s.state in (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED):
                        return self._admission(s, True, start)
                    if time.monotonic() >= deadline:
                        break
            except ClusterError:
                pass  # watch not possible (e.g. RBAC allows list only): poll instead
            # A watch that ended at once (410 Gone, refused) must not turn this into a busy loop.
            quick = poll - (time.monotonic() - watch_start)
            if quick > 0:
                time.sleep(min(quick, max(0.0, deadline - time.monotonic())))
        if wl_name is None:
            return AdmissionResult(False, None, st.WorkloadState.MISSING.value,
                                   reason="Kueue created no Workload (no kueue.x-k8s.io/queue-name label, or Kueue is not running)",
                                   waited_seconds=time.monotonic() - start)
        latest = self.get(self.kueue("Workload"), wl_name, namespace)
        final = st.workload_status(latest) if latest else wl_state
        if final is None:
            return AdmissionResult(False, wl_name, st.WorkloadState.MISSING.value, reason="the Workload disappeared (JobSet deleted?)",
                                   waited_seconds=time.monotonic() - start)
        return self._admission(final, final.state is st.WorkloadState.ADMITTED, start)

    @staticmethod
    def _admission(s: st.WorkloadStatus, admitted: bool, start: float) -> AdmissionResult:
        return AdmissionResult(
            admitted=admitted,
            workload=s.name,
            state=s.state.value,
            flavors=dict(s.flavors),
            reason="" if admitted else s.message,
            waited_seconds=time.monotonic() - start,
        )


class LogsUnavailable(ClusterError):
    """The API server could not serve a pod's log (no kubelet behind a simulated node, pod gone)."""


def _owned_by(obj: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _kubeconfig_path(kubeconfig: Path | None) -> Path:
    if kubeconfig:
        return Path(kubeconfig).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first).expanduser() if first else Path("~/.kube/config").expanduser()


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__
