"""The generic Kubernetes API client: discovery, apply, create, get, list, delete, watch, logs.

Requests are plain REST calls built from a small resource table (plus discovery for kinds
the table does not know), which keeps the wire behaviour explicit — method, path, query,
content type — whichever transport (``transport``) sends them.

Errors: a refused request raises the typed one-line error of ``errors.refusal``
(NotFound, Forbidden, Conflict, Rejected), no answer raises Unreachable. Two 404s are
normal outcomes and no error: ``get`` returns None and ``delete`` says ``deleted=False``;
``list`` of a namespace or CRD that does not exist is empty.

Run-level queries (find a run, its status, its pods, the Kueue admission wait) are
``runs.Cluster``, built on this class.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from toolkit.errors import ClusterError, Forbidden, NotFound, Unreachable
from toolkit.jsontext import load_json
from toolkit.names import JOB_API, JOBSET_API, KUEUE_GROUP, PRIORITY_CLASS_API, TGK_FIELD_MANAGER
from workloads.cluster import kubeconfig as kc
from workloads.cluster.errors import refusal
from workloads.cluster.transport import Response, StdlibTransport, Tls, Transport, request_deadline

__all__ = ["DeleteResult", "KubeApi", "LogsUnavailable", "ResourceInfo"]


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
    (JOB_API, "Job"): ("jobs", True),
    (PRIORITY_CLASS_API, "PriorityClass"): ("priorityclasses", False),
    (JOBSET_API, "JobSet"): ("jobsets", True),
}


@dataclass(frozen=True)
class DeleteResult:
    kind: str
    name: str
    namespace: str | None
    deleted: bool  # False: it was already gone (404), which is fine
    dry_run: bool = False


# A log read whole (not followed) may take this many request deadlines: a long run's log is large.
LOG_DEADLINE_FACTOR = 5
# Only an object's metadata (the API server's PartialObjectMetadata), plain JSON from a server without it.
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


class LogsUnavailable(ClusterError):
    """The API server could not serve a pod's log (no kubelet behind a simulated node, pod gone)."""


class KubeApi:
    """A connected API server. Build with ``connect`` (or pass a Transport in tests)."""

    def __init__(self, transport: Transport, *, default_namespace: str = "default", context: str | None = None) -> None:
        self.transport = transport
        self.default_namespace = default_namespace
        self.context = context
        self._discovered: dict[str, dict[str, ResourceInfo]] = {}
        self._preferred: dict[str, str] = {}

    # ------------------------------------------------------------ construction

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None, *, timeout: float = 10) -> Self:
        """Load a kubeconfig, check the server answers, return a client.

        Order of precedence for the file: the argument, $KUBECONFIG (first entry), ~/.kube/config.
        A client-certificate user is served by the standard library; tokens and exec plugins by
        the kubernetes client. Every failure (no file, bad YAML, unknown context, unreachable
        server) is a ClusterError.
        """
        path = kc.kubeconfig_path(kubeconfig)
        if not path.exists():  # anything else there (a FIFO, a directory) is read_kubeconfig's to refuse, without blocking
            raise ClusterError(f"no kubeconfig at {path} — pass --kubeconfig, set KUBECONFIG, or run gcloud container clusters get-credentials")
        chosen = kc.read_kubeconfig(path, context)
        client = cls(kc.transport_for(chosen, timeout), default_namespace=chosen.namespace, context=chosen.name)
        client.server_version()  # reachability + credentials, one line on failure
        return client

    @classmethod
    def with_client_cert(cls, server: str, *, ca: Path, cert: Path, key: Path, timeout: float = 30, context: str | None = None) -> Self:
        """A client on the standard-library transport, from certificate files; no request is sent.

        For a server that may not be up yet (``local up`` waits for it with ``healthy``).
        """
        return cls(StdlibTransport(server, Tls(ca_file=ca, cert_file=cert, key_file=key), timeout), context=context)

    # ------------------------------------------------------------------- basics

    def _send(self, method: str, path: str, what: str, *, query: list[tuple[str, str]] | None = None, **kw: Any) -> Response:
        """One request; a non-2xx answer raises its typed error (callers with a normal 404 ask the transport themselves)."""
        resp = self.transport.request(method, path, query=query, **kw)
        if not resp.ok:
            raise refusal(resp, what, method=method, path=path, query=query)
        return resp

    def server_version(self) -> str:
        resp = self._send("GET", "/version", f"API server {self.transport.server}")
        return str(resp.json().get("gitVersion", "unknown"))

    def healthy(self, path: str = "/readyz") -> bool:
        """True if the server says "ok" on ``path`` (/readyz, /livez); unreachable is just False."""
        try:
            resp = self.transport.request("GET", path, timeout=5)
        except Unreachable:
            return False
        return resp.ok and resp.body.strip() == b"ok"

    def request(self, method: str, path: str, body: Any = None, *, query: list[tuple[str, str]] | None = None, content_type: str | None = None) -> Any:
        """Any JSON call the verbs below do not cover (e.g. reading another API version, a merge patch); the parsed reply."""
        return self._send(method, path, f"{method} {path}", query=query, body=body, content_type=content_type).json()

    def forget_discovery(self) -> None:
        """Drop cached discovery, e.g. after installing CRDs or while they become served."""
        self._discovered.clear()
        self._preferred.clear()

    def resource(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind: from the table, else from the group-version's discovery doc.

        NotFound when the cluster does not serve the kind (its CRD is not installed).
        """
        known = _KNOWN.get((api_version, kind))
        if known:
            return ResourceInfo(api_version, kind, *known)
        if api_version not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resp = self.transport.request("GET", path)
            if resp.status == 404:
                raise NotFound(f"the cluster does not serve {api_version} — install the component that provides {kind} (JobSet/Kueue CRDs) first")
            if not resp.ok:
                raise refusal(resp, f"discovery of {api_version}", path=path)
            self._discovered[api_version] = {
                r["kind"]: ResourceInfo(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
                for r in resp.json().get("resources", [])
                if "/" not in r.get("name", "")
            }
        info = self._discovered[api_version].get(kind)
        if info is None:
            raise NotFound(f"the cluster serves {api_version} but not kind {kind} — check the apiVersion/kind or the installed CRD version")
        return info

    def preferred_version(self, group: str) -> str:
        """The group's preferred served version, e.g. kueue.x-k8s.io/v1beta2; NotFound when the group is not served."""
        if group not in self._preferred:
            path = f"/apis/{group}"
            resp = self.transport.request("GET", path)
            if resp.status == 404:
                raise NotFound(f"the cluster does not serve API group {group} — install {'Kueue' if group == KUEUE_GROUP else group} first")
            if not resp.ok:
                raise refusal(resp, f"discovery of {group}", path=path)
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
        field_manager: str = TGK_FIELD_MANAGER,
        dry_run: bool = False,
        force_conflicts: bool = False,
    ) -> list[dict]:
        """Server-side apply each object, in the order given; return what the server stored.

        Conflicts are not forced by default: if another manager (kubectl, a controller) owns a
        field we set, the server refuses (Conflict) and the user sees which — forcing would
        silently take the field over. Applying the same objects twice is a no-op on the server.
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
            where = f"{kind} {ns + '/' if ns else ''}{name}"
            resp = self._send("PATCH", info.path(ns, name), f"apply {where}", query=query, body=obj, content_type="application/apply-patch+yaml")
            out.append(resp.json())
        return out

    def create(self, obj: dict, *, field_manager: str = TGK_FIELD_MANAGER, dry_run: bool = False) -> dict:
        """POST one object (a create, with its status where the kind allows, e.g. a Node); what the server stored.

        Conflict when the name is taken.
        """
        meta = obj.get("metadata") or {}
        info = self.resource(obj.get("apiVersion", ""), obj.get("kind", ""))
        ns = (meta.get("namespace") or self.default_namespace) if info.namespaced else None
        query = [("fieldManager", field_manager)]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._send("POST", info.path(ns), f"create {info.kind} {ns + '/' if ns else ''}{meta.get('name', '')}", query=query, body=obj).json()

    # ----------------------------------------------------------------- read/del

    def get(self, info: ResourceInfo, name: str, namespace: str | None = None, *, accept: str | None = None) -> dict | None:
        """The object, None when it does not exist (``accept``: another representation of it)."""
        path = info.path(namespace, name)
        resp = self.transport.request("GET", path, accept=accept)
        if resp.status == 404:
            return None
        if not resp.ok:
            raise refusal(resp, f"get {info.kind} {name}", path=path)
        return resp.json()

    def metadata(self, info: ResourceInfo, name: str, namespace: str | None = None) -> dict | None:
        """An object's metadata only (``PartialObjectMetadata``), None when it does not exist.

        For objects whose content the toolkit must not read (a Secret's values): the server
        sends no ``data``. A server that answers with the whole object anyway has all but its
        metadata dropped here.
        """
        doc = self.get(info, name, namespace, accept=PARTIAL_METADATA)
        if doc is None:
            return None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        return {"kind": "PartialObjectMetadata", "metadata": meta if isinstance(meta, dict) else {}}

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
        path = info.path(namespace)
        resp = self.transport.request("GET", path, query=query)
        if resp.status == 404:
            # A namespace or CRD that does not exist lists as nothing.
            return []
        if not resp.ok:
            raise refusal(resp, f"list {info.plural}", path=path, query=query)
        return list(resp.json().get("items") or [])

    def delete(self, info: ResourceInfo, name: str, namespace: str | None = None, *, dry_run: bool = False, propagation: str = "Foreground") -> DeleteResult:
        query = [("propagationPolicy", propagation)]
        if dry_run:
            query.append(("dryRun", "All"))
        path = info.path(namespace, name)
        resp = self.transport.request("DELETE", path, query=query)
        if resp.status == 404:
            return DeleteResult(info.kind, name, namespace, deleted=False, dry_run=dry_run)
        if not resp.ok:
            raise refusal(resp, f"delete {info.kind} {name}", method="DELETE", path=path, query=query)
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
        # The server ends the watch after timeoutSeconds; one that does not is ended here a little later.
        for line in self.transport.stream(info.path(namespace), query=query, timeout=timeout + 5, deadline=timeout + 5):
            if not line.strip():
                continue
            try:
                ev = load_json(line, max_bytes=len(line))  # the stream bounded the line
            except (ValueError, RecursionError):
                continue
            if not isinstance(ev, dict):
                continue
            if ev.get("type") == "ERROR":
                return  # typically 410 Gone: the caller re-lists
            yield ev.get("type", ""), ev.get("object") or {}

    # --------------------------------------------------------------------- logs

    def logs(self, namespace: str, pod: str, *, container: str | None = None, follow: bool = False, tail_lines: int | None = None) -> Iterator[str]:
        """Lines of a pod's log; with follow, until the container exits.

        LogsUnavailable when the server cannot serve it (pod gone, container not started,
        no kubelet behind the node); a refusal by RBAC (Forbidden) or no answer
        (Unreachable) is raised as it is: those are not about the pod.
        """
        query: list[tuple[str, str]] = []
        if container:
            query.append(("container", container))
        if follow:
            query.append(("follow", "true"))
        if tail_lines is not None:
            query.append(("tailLines", str(tail_lines)))
        path = self.resource("v1", "Pod").path(namespace, pod, "log")
        if follow:
            yield from self._follow(namespace, pod, path, query)
            return
        try:
            for line in self.transport.stream(path, query=query, timeout=60, deadline=LOG_DEADLINE_FACTOR * request_deadline(), ends=False):
                yield line.decode(errors="replace")
        except (Forbidden, Unreachable):
            raise
        except ClusterError as e:
            raise LogsUnavailable(f"logs of pod {namespace}/{pod} are not available: {e}", status=e.status) from None

    FOLLOW_POLL_S = 2.0  # how often a followed log checks whether its pod is still running

    def _follow(self, namespace: str, pod: str, path: str, query: list[tuple[str, str]]) -> Iterator[str]:
        """A followed log that ends when the pod has stopped, even if the server keeps the stream open.

        A kubelet closes a followed stream when the container exits; kwok's file-backed logs
        (the local rehearsal) never do. So the stream is read on a thread, and the pod's phase
        is checked between lines: once it is Succeeded/Failed or gone and nothing more arrives
        within a poll, the log is over.
        """
        import queue
        import threading

        lines: queue.Queue[tuple[str, object]] = queue.Queue()

        def read() -> None:
            try:
                # No deadline: the user asked to follow; each line is shown as it comes.
                for raw in self.transport.stream(path, query=query, timeout=None, deadline=None, ends=False):
                    lines.put(("line", raw.decode(errors="replace")))
                lines.put(("end", None))
            except Exception as e:  # noqa: BLE001 - handed to the consuming thread as it is
                lines.put(("error", e))

        threading.Thread(target=read, daemon=True, name=f"logs-{pod}").start()
        info = self.resource("v1", "Pod")
        while True:
            try:
                what, value = lines.get(timeout=self.FOLLOW_POLL_S)
            except queue.Empty:
                live = self.get(info, pod, namespace)
                if live is None or (live.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    return
                continue
            if what == "line":
                yield str(value)
            elif what == "end":
                return
            elif isinstance(value, ClusterError) and not isinstance(value, (Forbidden, Unreachable)):
                raise LogsUnavailable(f"logs of pod {namespace}/{pod} are not available: {value}", status=value.status) from None
            else:
                raise value  # type: ignore[misc]
