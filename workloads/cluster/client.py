"""The one seam between the toolkit and a Kubernetes API server.

Everything that talks to a cluster goes through ``Cluster``: server-side apply of any kind
(CRDs included), create/get/list/delete, watches, pod logs, health, and the Kueue admission
wait. Requests are plain REST calls built from a small resource table (plus discovery for
kinds the table does not know), which keeps the wire behaviour explicit — method, path,
query, content type — whatever sends them.

Two transports send them:

- ``_StdlibTransport``: ``http.client`` + ``ssl`` only, for client-certificate (or no)
  credentials. ``local up`` uses it (``Cluster.with_client_cert``): it must start in well
  under a second, and importing the ``kubernetes`` package alone costs about that.
  ``Cluster.connect`` picks it for kubeconfigs whose user is a client certificate.
- ``_KubeTransport``: the official ``kubernetes`` client, for every other kubeconfig
  (bearer tokens, exec auth plugins such as gke-gcloud-auth-plugin). It is imported here,
  lazily, and nowhere else, so importing the CLI stays cheap.

Unit tests swap in a recording fake Transport; integration tests point ``Cluster.connect``
at the local cluster's kubeconfig.

Errors: anything the server or the network says becomes ``ClusterError`` with one line;
404 on delete is a normal outcome, not an error.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

from toolkit.errors import ClusterError
from toolkit.names import (
    JOB_API,
    JOBSET_API,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_QUEUE_LABEL,
    PRIORITY_CLASS_API,
    TGK,
    TGK_FIELD_MANAGER,
    TGK_RUN_LABEL,
)
from workloads.cluster import runkinds as rk
from workloads.cluster import status as st
from workloads.cluster.wait import WaitTimeout, wait_for

if TYPE_CHECKING:
    import http.client
    import ssl

__all__ = ["AdmissionResult", "Cluster", "ClusterError", "DeleteResult", "Response", "Transport", "ResourceInfo"]


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

    def stream(self, path: str, *, query: list[tuple[str, str]] | None = None, timeout: float | None = None) -> Iterator[bytes]:
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


@dataclass(frozen=True)
class _Tls:
    """Where the CA and the client certificate come from: files, or PEM bytes from a kubeconfig."""

    ca_file: Path | None = None
    ca_data: bytes | None = None
    cert_file: Path | None = None
    cert_data: bytes | None = None
    key_file: Path | None = None
    key_data: bytes | None = None
    insecure: bool = False  # insecure-skip-tls-verify

    def context(self) -> ssl.SSLContext:
        import ssl
        import tempfile

        ctx = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None, cadata=self.ca_data.decode() if self.ca_data else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if not (self.cert_file or self.cert_data):
            return ctx
        # ssl loads a client certificate from files only: inline data goes through a private temp dir.
        with tempfile.TemporaryDirectory(prefix="tgk-tls-") as tmp:
            cert, key = self.cert_file, self.key_file
            if self.cert_data is not None:
                cert = Path(tmp) / "client.crt"
                cert.write_bytes(self.cert_data)
            if self.key_data is not None:
                key = Path(tmp) / "client.key"
                key.write_bytes(self.key_data)
            ctx.load_cert_chain(str(cert), str(key) if key else None)
        return ctx


class _StdlibTransport:
    """http.client + ssl: an API-server sender with client-certificate (or no) credentials.

    One connection per request (as the small client ``local up`` used before; a TLS handshake
    on loopback costs about a millisecond), so it is safe from any thread. The TLS context is
    built on the first request, so a client can be made before its server has started.
    """

    def __init__(self, server: str, tls: _Tls | None, timeout: float) -> None:
        u = urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClusterError(f"API server address {server!r} is not an http(s) URL — check the kubeconfig's cluster.server")
        self.server = server
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")  # servers behind a path prefix (proxies)
        self._tls = tls or _Tls()
        self._timeout = timeout
        self._ctx: ssl.SSLContext | None = None

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        import http.client

        if not self._https:
            return http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        if self._ctx is None:
            try:
                self._ctx = self._tls.context()
            except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                raise ClusterError(f"cannot load the TLS certificates for {self.server}: {_one_line(e)} — check the kubeconfig's certificate entries") from None
        return http.client.HTTPSConnection(self._host, self._port, context=self._ctx, timeout=timeout)

    def _open(self, method, path, query, body, content_type, timeout) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        import http.client

        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": TGK}
        if data is not None:
            headers["Content-Type"] = content_type or "application/json"
        conn = self._connection(timeout)
        try:
            conn.request(method, url, body=data, headers=headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise _reach_error(self.server, e) from None

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None) -> Response:
        import http.client

        conn, resp = self._open(method, path, query, body, content_type, timeout or self._timeout)
        try:
            return Response(status=resp.status, body=resp.read() or b"")
        except (OSError, http.client.HTTPException) as e:
            raise _reach_error(self.server, e) from None
        finally:
            conn.close()

    def stream(self, path, *, query=None, timeout=None) -> Iterator[bytes]:
        import http.client

        conn, resp = self._open("GET", path, query, None, None, self._timeout)
        try:
            if not 200 <= resp.status < 300:
                raise _api_error(Response(resp.status, resp.read() or b""), f"GET {path}")
            if conn.sock is not None:
                conn.sock.settimeout(timeout)  # None: as long as the server keeps it open
            while line := resp.readline():
                yield line[:-1] if line.endswith(b"\n") else line
        except TimeoutError:
            return  # a watch or follow that went quiet for the read timeout: the caller decides
        except (OSError, http.client.HTTPException) as e:
            raise _reach_error(self.server, e) from None
        finally:
            conn.close()


# ---------------------------------------------------------------- kubeconfig

# What the standard-library transport understands; anything else (tokens, exec plugins,
# auth providers, proxies) goes to the kubernetes client.
_STDLIB_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data"}
_STDLIB_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "extensions"}


@dataclass(frozen=True)
class _KubeconfigContext:
    path: Path
    name: str
    namespace: str
    cluster: dict
    user: dict


def _read_kubeconfig(path: Path, context: str | None) -> _KubeconfigContext:
    """The chosen context of one kubeconfig file, with its cluster and user entries."""
    import yaml

    from toolkit.errors import ToolkitError
    from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

    fix = "check the file or pass another --kubeconfig"
    try:
        # The spec's reader: refuses binary, gzip and UTF-16 files with one line.
        doc = load_yaml(read_capped(path))
    except YamlFileError as e:
        # The file the flag names is not text YAML: bad input (exit 2), not a cluster problem.
        from toolkit.errors import FieldError

        where = f" ({e.key_path})" if e.key_path else ""
        raise FieldError("--kubeconfig", f"{path}{where} {e.problem}", e.fix) from None
    except (OSError, yaml.YAMLError, ToolkitError) as e:
        raise ClusterError(f"kubeconfig {path} cannot be read: {_one_line(e)} — {fix}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"kubeconfig {path} is not usable: it is not a kubeconfig (a YAML mapping) — {fix}")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    known = ", ".join(str(n) for n in contexts if n)
    if context and context not in contexts:
        raise ClusterError(f"context {context!r} is not in {path}; contexts there: {known or 'none'}")
    name = context or doc.get("current-context")
    if not name:
        raise ClusterError(f"{path} has no current-context — pass --context ({known or 'no contexts defined'})")
    if name not in contexts:
        raise ClusterError(f"kubeconfig {path} is not usable: current-context {name!r} is not defined (contexts: {known or 'none'}) — {fix}")
    ctx = contexts[name]

    def entry(section: str, key: str) -> dict:
        wanted = ctx.get(key)
        for item in doc.get(section) or []:
            if isinstance(item, dict) and item.get("name") == wanted:
                return item.get(key) or {}
        return {}

    cluster = entry("clusters", "cluster")
    if not cluster.get("server"):
        raise ClusterError(f"kubeconfig {path}: context {name!r} has no cluster with a server — fix the context's cluster/user entries")
    return _KubeconfigContext(path, str(name), ctx.get("namespace") or "default", cluster, entry("users", "user"))


def _stdlib_transport(kc: _KubeconfigContext, timeout: float) -> _StdlibTransport | None:
    """The standard-library transport for a client-certificate (or anonymous) context, else None."""
    if not set(kc.user) <= _STDLIB_USER_KEYS or not set(kc.cluster) <= _STDLIB_CLUSTER_KEYS:
        return None

    def file(entry: dict, key: str) -> Path | None:
        value = entry.get(key)
        return (kc.path.parent / Path(value).expanduser()) if value else None

    def data(entry: dict, key: str) -> bytes | None:
        value = entry.get(f"{key}-data")
        if not value:
            return None
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ClusterError(f"kubeconfig {kc.path}: {key}-data of context {kc.name!r} is not base64 — fix the context's cluster/user entries") from None

    tls = _Tls(
        ca_file=file(kc.cluster, "certificate-authority"),
        ca_data=data(kc.cluster, "certificate-authority"),
        cert_file=file(kc.user, "client-certificate"),
        cert_data=data(kc.user, "client-certificate"),
        key_file=file(kc.user, "client-key"),
        key_data=data(kc.user, "client-key"),
        insecure=bool(kc.cluster.get("insecure-skip-tls-verify")),
    )
    if bool(tls.cert_file or tls.cert_data) != bool(tls.key_file or tls.key_data):
        raise ClusterError(f"kubeconfig {kc.path}: user of context {kc.name!r} has a client certificate without its key, or a key without its certificate")
    return _StdlibTransport(kc.cluster["server"], tls, timeout)


def _kube_transport(kc: _KubeconfigContext, timeout: float) -> _KubeTransport:
    """The kubernetes client's transport: tokens, exec auth plugins, auth providers."""
    try:
        from kubernetes import config as kconfig
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # pragma: no cover - the dependency is pinned
        raise ClusterError("the kubernetes Python client is not installed — run scripts/setup.sh") from None
    cfg = Configuration()
    try:
        kconfig.load_kube_config(config_file=str(kc.path), context=kc.name, client_configuration=cfg, persist_config=False)
    except ConfigException as e:
        raise ClusterError(f"kubeconfig {kc.path}: {_one_line(e)} — fix the context's cluster/user entries") from None
    except Exception as e:  # exec plugins that fail, unreadable cert files
        raise ClusterError(f"kubeconfig {kc.path}: cannot load credentials: {_one_line(e)}") from None
    # Fail fast instead of urllib3's default three retries per request.
    cfg.retries = False
    return _KubeTransport(ApiClient(configuration=cfg), timeout)


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
        return ClusterError(
            f"{what}: conflict ({msg}) — another field manager (kubectl, another tool) owns these fields; undo its change, or apply with force_conflicts to take them over"
        )
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
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None, *, timeout: float = 10) -> Cluster:
        """Load a kubeconfig, check the server answers, return a Cluster.

        Order of precedence for the file: the argument, $KUBECONFIG (first entry), ~/.kube/config.
        A client-certificate user is served by the standard library; tokens and exec plugins by
        the kubernetes client. Every failure (no file, bad YAML, unknown context, unreachable
        server) is a ClusterError.
        """
        path = _kubeconfig_path(kubeconfig)
        if not path.is_file():
            raise ClusterError(f"no kubeconfig at {path} — pass --kubeconfig, set KUBECONFIG, or run gcloud container clusters get-credentials")
        kc = _read_kubeconfig(path, context)
        transport = _stdlib_transport(kc, timeout) or _kube_transport(kc, timeout)
        cluster = cls(transport, default_namespace=kc.namespace, context=kc.name)
        cluster.server_version()  # reachability + credentials, one line on failure
        return cluster

    @classmethod
    def with_client_cert(cls, server: str, *, ca: Path, cert: Path, key: Path, timeout: float = 30, context: str | None = None) -> Cluster:
        """A Cluster on the standard-library transport, from certificate files; no request is sent.

        For a server that may not be up yet (``local up`` waits for it with ``healthy``).
        """
        return cls(_StdlibTransport(server, _Tls(ca_file=ca, cert_file=cert, key_file=key), timeout), context=context)

    # ------------------------------------------------------------------- basics

    def server_version(self) -> str:
        resp = self.transport.request("GET", "/version")
        if not resp.ok:
            raise _api_error(resp, f"API server {self.transport.server}")
        return str(resp.json().get("gitVersion", "unknown"))

    def healthy(self, path: str = "/readyz") -> bool:
        """True if the server says "ok" on ``path`` (/readyz, /livez); unreachable is just False."""
        try:
            resp = self.transport.request("GET", path, timeout=5)
        except ClusterError:
            return False
        return resp.ok and resp.body.strip() == b"ok"

    def request(self, method: str, path: str, body: Any = None, *, query: list[tuple[str, str]] | None = None) -> Any:
        """Any JSON call the verbs below do not cover (e.g. reading another API version); the parsed reply."""
        resp = self.transport.request(method, path, query=query, body=body)
        if not resp.ok:
            raise _api_error(resp, f"{method} {path}")
        return resp.json()

    def forget_discovery(self) -> None:
        """Drop cached discovery, e.g. after installing CRDs or while they become served."""
        self._discovered.clear()
        self._preferred.clear()

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
        field_manager: str = TGK_FIELD_MANAGER,
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
            resp = self.transport.request("PATCH", info.path(ns, name), query=query, body=obj, content_type="application/apply-patch+yaml")
            if not resp.ok:
                where = f"{kind} {ns + '/' if ns else ''}{name}"
                raise _api_error(resp, f"apply {where}")
            out.append(resp.json())
        return out

    def create(self, obj: dict, *, field_manager: str = TGK_FIELD_MANAGER, dry_run: bool = False) -> dict:
        """POST one object (a create, with its status where the kind allows, e.g. a Node); what the server stored."""
        meta = obj.get("metadata") or {}
        info = self.resource(obj.get("apiVersion", ""), obj.get("kind", ""))
        ns = (meta.get("namespace") or self.default_namespace) if info.namespaced else None
        query = [("fieldManager", field_manager)]
        if dry_run:
            query.append(("dryRun", "All"))
        resp = self.transport.request("POST", info.path(ns), query=query, body=obj)
        if not resp.ok:
            raise _api_error(resp, f"create {info.kind} {ns + '/' if ns else ''}{meta.get('name', '')}")
        return resp.json()

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

    def delete(self, info: ResourceInfo, name: str, namespace: str | None = None, *, dry_run: bool = False, propagation: str = "Foreground") -> DeleteResult:
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

    def find_run(self, namespace: str, run: str) -> tuple[rk.RunKind, dict] | None:
        """The run's top-level object, whichever runtime made it (runkinds.LOOKUP_ORDER); None if there is none."""
        for kind in rk.LOOKUP_ORDER:
            try:
                info = self.resource(kind.api_version, kind.kind)
            except ClusterError:
                continue  # that runtime's CRDs are not installed: no run of it here
            obj = self.get(info, run, namespace)
            if obj is not None:
                return kind, obj
        return None

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

    def pods(self, namespace: str, run: str, kind: rk.RunKind = rk.JOBSET) -> list[dict]:
        return self.list(self.resource("v1", "Pod"), namespace, label_selector=kind.pod_selector(run))

    def run_status(self, namespace: str, run: str) -> st.RunStatus:
        found = self.find_run(namespace, run)
        if found is None:
            return st.run_status(namespace, run, None, None, [])
        kind, obj = found
        try:
            wl = self.workload_for(namespace, obj)
        except ClusterError:
            wl = None  # Kueue not installed: still show the run and its pods
        return st.run_status(namespace, run, obj, wl, self.pods(namespace, run, kind), self.events(namespace, kind.kind, run))

    def events(self, namespace: str, kind: str, name: str) -> list[dict]:
        """Events about one object; none (not an error) when the server will not list them."""
        try:
            return self.list(self.resource("v1", "Event"), namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
        except ClusterError:
            return []

    def find_pod(self, namespace: str, run: str, *, slice_index: int | None = None, worker: int | None = None, head: bool = False) -> dict | None:
        """A pod of the run: with neither slice nor worker, the run's own log (a RayJob's driver,
        else worker 0 of slice 0); ``head``: a RayJob's head."""
        found = self.find_run(namespace, run)
        kind = found[0] if found else rk.JOBSET
        pod_info = self.resource("v1", "Pod")
        driver = kind.driver_selector(run) if slice_index is None and worker is None else None
        if head:
            selector = f"{kind.run_label}={run},{rk.RAY_HEAD_FILTER}"
        elif driver:
            selector = driver
        else:
            selector = kind.worker_selector(run, slice_index or 0, worker or 0)
        pods = self.list(pod_info, namespace, label_selector=selector)
        if not pods and kind is rk.RAYJOB and not head and not driver and not worker:
            # KubeRay labels a host index only in multi-host groups: a one-VM slice's worker has none.
            in_slice = f"{kind.pod_selector(run)},{kind.slice_label}={slice_index or 0}"
            pods = [
                p for p in self.list(pod_info, namespace, label_selector=in_slice) if kind.worker_label not in ((p.get("metadata") or {}).get("labels") or {})
            ]
        if not pods:
            return None
        # Several attempts after restarts: the newest is the one that is running.
        return max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")

    def logs(self, namespace: str, pod: str, *, container: str | None = None, follow: bool = False, tail_lines: int | None = None) -> Iterator[str]:
        """Lines of a pod's log; with follow, until the container exits."""
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
            for line in self.transport.stream(path, query=query, timeout=60):
                yield line.decode(errors="replace")
        except ClusterError as e:
            raise LogsUnavailable(f"logs of pod {namespace}/{pod} are not available: {e}") from None

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
                for raw in self.transport.stream(path, query=query, timeout=None):
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
            elif isinstance(value, ClusterError):
                raise LogsUnavailable(f"logs of pod {namespace}/{pod} are not available: {value}") from None
            else:
                raise value  # type: ignore[misc]

    def delete_jobset(self, namespace: str, name: str, *, dry_run: bool = False) -> DeleteResult:
        # Foreground: the child Jobs and pods go before the JobSet disappears, so a
        # resubmit under the same name does not race the old pods.
        return self.delete(self.resource(JOBSET_API, "JobSet"), name, namespace, dry_run=dry_run, propagation="Foreground")

    def delete_run(self, namespace: str, name: str, *, dry_run: bool = False) -> list[DeleteResult]:
        """Delete a run of any runtime (Foreground), and the headless Service a plain Job run has beside it.

        The Service is also deleted when the Job is already gone (its ``ttlSecondsAfterFinished``
        removes the Job but nothing owns the Service). Only a Service labelled as this run's is
        touched. Nothing found: one result with ``deleted`` False (a JobSet, the default runtime's kind).
        """
        found = self.find_run(namespace, name)
        out: list[DeleteResult] = []
        if found is not None:
            kind, _ = found
            out.append(self.delete(self.resource(kind.api_version, kind.kind), name, namespace, dry_run=dry_run, propagation="Foreground"))
        if found is None or found[0] is rk.JOB:
            svc_info = self.resource("v1", "Service")
            svc = self.get(svc_info, name, namespace)
            if svc is not None and ((svc.get("metadata") or {}).get("labels") or {}).get(TGK_RUN_LABEL) == name:
                out.append(self.delete(svc_info, name, namespace, dry_run=dry_run))
        return out or [DeleteResult("JobSet", name, namespace, deleted=False, dry_run=dry_run)]

    # ---------------------------------------------------------------- admission

    def wait_admitted(
        self,
        namespace: str,
        jobset: str,
        *,
        timeout: float,
        kind: rk.RunKind = rk.JOBSET,
        on_progress: Callable[[str], None] | None = None,
        poll: float = 2.0,
    ) -> AdmissionResult:
        """Follow the JobSet's Workload until Kueue admits it (or deactivates it) or ``timeout`` passes.

        Between polls it watches the Workload (the watch is the wait's sleep), so admission is
        seen as soon as Kueue writes it. QuotaReserved without Admitted means admission checks
        (e.g. a ProvisioningRequest) are still pending.
        """
        start = time.monotonic()
        uid: str | None = None
        followed: str | None = None  # the Workload's name, once seen

        def seen(wl: dict | None) -> dict | None:
            nonlocal followed
            if wl is not None:
                followed = (wl.get("metadata") or {}).get("name") or followed
            return wl

        def current() -> dict | None:
            nonlocal uid
            js = self.get(self.resource(kind.api_version, kind.kind), jobset, namespace)
            if js is None:
                raise ClusterError(f"{kind.kind} {namespace}/{jobset} does not exist — submit it first (or check --namespace)")
            uid = (js.get("metadata") or {}).get("uid")
            return seen(self.workload_for(namespace, js))

        def changes(wl: dict | None, remaining: float) -> Iterator[dict]:
            for obj in self._workload_changes(namespace, uid, wl, min(remaining, 30)):
                yield seen(obj)

        def describe(wl: dict | None) -> str:
            if wl is None:
                return f"waiting for Kueue to create a Workload for {kind.kind} {jobset} (is the queue-name label set and Kueue running?)"
            return st.workload_status(wl).describe()

        try:
            wl = wait_for(
                current,
                timeout=timeout,
                what=f"admission of {kind.kind} {namespace}/{jobset}",
                interval=poll,
                between=changes,
                until=lambda w: w is not None and st.workload_status(w).state in _ADMISSION_OVER,
                key=describe,
                on_change=(lambda w: on_progress(describe(w))) if on_progress else None,
            )
        except WaitTimeout:
            return self._not_admitted(namespace, followed, start)
        final = st.workload_status(wl)
        # Deactivated (INACTIVE) ends the wait too: Kueue will not retry it.
        return self._admission(final, final.state in (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED), start)

    def _workload_changes(self, namespace: str, uid: str | None, after: dict | None, seconds: float) -> Iterator[dict]:
        """The job's Workload as Kueue changes it after ``after``, for about ``seconds``; nothing if watching is refused."""
        rv = (after.get("metadata") or {}).get("resourceVersion") if after else None
        selector = f"{KUEUE_JOB_UID_LABEL}={uid}" if uid else None
        try:
            for _typ, obj in self.watch(self.kueue("Workload"), namespace, label_selector=selector, resource_version=rv, timeout=seconds):
                yield obj
        except ClusterError:
            return  # watch not possible (e.g. RBAC allows list only): the wait polls instead

    def _not_admitted(self, namespace: str, workload: str | None, start: float) -> AdmissionResult:
        """Where a Workload stands when the wait for its admission timed out."""
        if workload is None:
            return AdmissionResult(
                False,
                None,
                st.WorkloadState.MISSING.value,
                reason=f"Kueue created no Workload (no {KUEUE_QUEUE_LABEL} label, or Kueue is not running)",
                waited_seconds=time.monotonic() - start,
            )
        latest = self.get(self.kueue("Workload"), workload, namespace)
        if latest is None:
            return AdmissionResult(
                False, workload, st.WorkloadState.MISSING.value, reason="the Workload disappeared (JobSet deleted?)", waited_seconds=time.monotonic() - start
            )
        final = st.workload_status(latest)
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


# Workload states that end the wait for admission: admitted (or already done), or deactivated.
_ADMISSION_OVER = (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED, st.WorkloadState.INACTIVE)


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
