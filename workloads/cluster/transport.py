"""How a request reaches the API server: the Transport protocol and its two senders.

- ``StdlibTransport``: ``http.client`` + ``ssl`` only, for client-certificate (or no)
  credentials. ``local up`` uses it (``Cluster.with_client_cert``): it must start in well
  under a second, and importing the ``kubernetes`` package alone costs about that.
  ``Cluster.connect`` picks it for kubeconfigs whose user is a client certificate.
- ``KubeClientTransport``: the official ``kubernetes`` client, for every other kubeconfig
  (bearer tokens, exec auth plugins such as gke-gcloud-auth-plugin). It is imported here,
  lazily, and nowhere else, so importing the CLI stays cheap.

A transport returns every HTTP answer as a ``Response`` (the caller judges the status);
only a failure to get an answer raises, as ``Unreachable``. Unit tests swap in a
recording fake Transport.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode, urlsplit

from toolkit.errors import ClusterError
from toolkit.names import TGK
from workloads.cluster.errors import one_line, refusal, unreachable
from workloads.cluster.response import Response  # noqa: F401  (re-exported: what a transport returns)

if TYPE_CHECKING:
    import http.client
    import ssl

__all__ = ["KubeClientTransport", "Response", "StdlibTransport", "Tls", "Transport"]


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
        """GET that yields the body line by line (watches, followed logs); raises a typed ClusterError on non-2xx."""
        ...


class KubeClientTransport:
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
            raise unreachable(self.server, e) from None
        except OSError as e:
            raise unreachable(self.server, e) from None
        except Exception as e:  # the client wraps TLS failures in ApiException(status=0)
            if getattr(e, "status", None) == 0:
                raise unreachable(self.server, e) from None
            raise

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None) -> Response:
        import urllib3

        r = self._send(method, path, query, body, content_type, timeout, stream=False)
        try:
            data = r.read()
        except urllib3.exceptions.HTTPError as e:
            raise unreachable(self.server, e) from None
        return Response(status=r.status, body=data or b"")

    def stream(self, path, *, query=None, timeout=None) -> Iterator[bytes]:
        import urllib3

        r = self._send("GET", path, query, None, None, timeout, stream=True)
        if not 200 <= r.status < 300:
            raise refusal(Response(r.status, r.read() or b""), f"GET {path}", path=path, query=query)
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
            raise unreachable(self.server, e) from None
        finally:
            raw.release_conn()


@dataclass(frozen=True)
class Tls:
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


class StdlibTransport:
    """http.client + ssl: an API-server sender with client-certificate (or no) credentials.

    One connection per request (as the small client ``local up`` used before; a TLS handshake
    on loopback costs about a millisecond), so it is safe from any thread. The TLS context is
    built on the first request, so a client can be made before its server has started.
    """

    def __init__(self, server: str, tls: Tls | None, timeout: float) -> None:
        u = urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClusterError(f"API server address {server!r} is not an http(s) URL — check the kubeconfig's cluster.server")
        self.server = server
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")  # servers behind a path prefix (proxies)
        self._tls = tls or Tls()
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
                # Our own files, not the server: a configuration error, not an unreachable server.
                raise ClusterError(f"cannot load the TLS certificates for {self.server}: {one_line(e)} — check the kubeconfig's certificate entries") from None
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
            raise unreachable(self.server, e) from None

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None) -> Response:
        import http.client

        conn, resp = self._open(method, path, query, body, content_type, timeout or self._timeout)
        try:
            return Response(status=resp.status, body=resp.read() or b"")
        except (OSError, http.client.HTTPException) as e:
            raise unreachable(self.server, e) from None
        finally:
            conn.close()

    def stream(self, path, *, query=None, timeout=None) -> Iterator[bytes]:
        import http.client

        conn, resp = self._open("GET", path, query, None, None, self._timeout)
        try:
            if not 200 <= resp.status < 300:
                raise refusal(Response(resp.status, resp.read() or b""), f"GET {path}", path=path, query=query)
            if conn.sock is not None:
                conn.sock.settimeout(timeout)  # None: as long as the server keeps it open
            while line := resp.readline():
                yield line[:-1] if line.endswith(b"\n") else line
        except TimeoutError:
            return  # a watch or follow that went quiet for the read timeout: the caller decides
        except (OSError, http.client.HTTPException) as e:
            raise unreachable(self.server, e) from None
        finally:
            conn.close()
