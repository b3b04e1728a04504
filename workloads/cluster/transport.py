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

Every exchange is bounded, because a socket timeout alone is not: it restarts with each
byte, so a server that trickles one byte every few seconds would hold a command forever.

- time: a request, from connecting to its last byte, has an overall deadline
  (``request_deadline()``: ``$TGK_REQUEST_TIMEOUT`` seconds, default 60); a watch has its
  own (its ``timeoutSeconds`` plus a grace), a followed log none (the user asked to
  follow it; each line is shown as it comes). At a deadline a watchdog shuts the socket
  down, which ends any read that is waiting, and the request is ``Unreachable`` (timed out);
- size: a response body is at most ``MAX_RESPONSE_BYTES`` and a streamed line at most
  ``MAX_LINE_BYTES``; more is one ``Rejected`` line, read no further.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlencode, urlsplit

from toolkit.deadline import Watchdog
from toolkit.errors import ClusterError, FieldError, Rejected, Unreachable
from toolkit.names import TGK
from workloads.cluster.errors import one_line, refusal, unreachable
from workloads.cluster.response import Response  # noqa: F401  (re-exported: what a transport returns)

if TYPE_CHECKING:
    import http.client
    import ssl

__all__ = [
    "DEADLINE_ENV",
    "MAX_LINE_BYTES",
    "MAX_RESPONSE_BYTES",
    "KubeClientTransport",
    "Response",
    "StdlibTransport",
    "Tls",
    "Transport",
    "request_deadline",
    "within",
]

T = TypeVar("T")

MIB = 1024 * 1024
# A list of a few thousand pods is a few MiB; an answer larger than this is not one we asked for.
MAX_RESPONSE_BYTES = 64 * MIB
# One watch event is one object (etcd stores at most ~1.5 MiB per object); one log line.
MAX_LINE_BYTES = 4 * MIB
DEADLINE_ENV = "TGK_REQUEST_TIMEOUT"
DEFAULT_DEADLINE_S = 60.0
MAX_DEADLINE_S = 3600.0  # an hour for one request is already no bound a user would want


def request_deadline() -> float:
    """Seconds one exchange with the cluster may take: ``$TGK_REQUEST_TIMEOUT``, else 60.

    An API request from connecting to its last byte, and a kubeconfig credential plugin's
    run. A value that is not a number in (0, 3600] is refused (exit 2).
    """
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_DEADLINE_S):
        raise FieldError(DEADLINE_ENV, f"{raw[:40]!r} is not a number of seconds in (0, {MAX_DEADLINE_S:g}]", f"unset it or set e.g. {DEADLINE_ENV}=60")
    return value


def _too_large(what: str, limit: int, part: str = "the API server's answer") -> Rejected:
    return Rejected(f"{what}: {part} is over {limit // MIB} MiB, more than any answer the toolkit asks for — check the server (--kubeconfig/--context)")


def _timed_out(server: str, seconds: float) -> Unreachable:
    return Unreachable(
        f"cannot reach the Kubernetes API server at {server} (timed out: no complete answer within {seconds:g} s)"
        f" — is the cluster up? check --kubeconfig/--context; ${DEADLINE_ENV} sets the limit"
    )


def within(seconds: float, call: Callable[[], T], late: Callable[[T], None], server: str) -> T:
    """``call()`` on a worker thread, waited for at most ``seconds``; ``late`` gets a result that arrives after.

    For what cannot be interrupted from outside (the kubernetes client up to a response's
    headers, its credential loading): the command goes on, and the worker ends when the
    call does. Python has no way to stop a thread.
    """
    box: dict[str, Any] = {}
    done = threading.Event()
    lock = threading.Lock()

    def work() -> None:
        try:
            value = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread as it is
            box["error"] = e
        else:
            with lock:
                if box.get("abandoned"):
                    late(value)
                    return
                box["value"] = value
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name="tgk-request").start()
    if not done.wait(seconds):
        with lock:
            if "value" not in box and "error" not in box:
                box["abandoned"] = True
                raise _timed_out(server, seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]


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
        accept: str | None = None,
    ) -> Response:
        """``accept``: another representation than plain JSON (e.g. only an object's metadata)."""
        ...

    def stream(
        self, path: str, *, query: list[tuple[str, str]] | None = None, timeout: float | None = None, deadline: float | None = None, ends: bool = True
    ) -> Iterator[bytes]:
        """GET that yields the body line by line (watches, logs); raises a typed ClusterError on non-2xx.

        ``timeout``: the most one read may wait (None: as long as the server keeps it open);
        ``deadline``: the most the whole stream may take (None: no limit). A stream that goes
        quiet or reaches its deadline ends quietly when ``ends`` (a watch: the caller polls
        again), else raises ``Unreachable`` (a log must not be cut short silently).
        """
        ...


class KubeClientTransport:
    """The kubernetes client's ApiClient, used as an authenticated HTTP sender.

    ``before`` runs before each request (``kubeconfig``: a credential plugin's token renewed
    when it expires).
    """

    def __init__(self, api_client: Any, timeout: float, deadline: float | None = None, before: Callable[[], None] | None = None) -> None:
        self._api = api_client
        self._timeout = timeout
        self._deadline = request_deadline() if deadline is None else deadline
        self._before = before
        self.server = api_client.configuration.host

    def _send(self, method: str, path: str, query, body, content_type, timeout, seconds: float, stream: bool, accept: str | None = None) -> Any:
        """The response, its headers read (within ``seconds``); the body is the caller's to read."""
        import urllib3

        if self._before is not None:
            self._before()
        headers = {"Accept": accept or "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            # param_serialize applies the kubeconfig's auth (tokens, refreshed exec credentials).
            m, url, hdrs, b, _ = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            per_read = min(timeout or self._timeout, seconds)
            to = (min(self._timeout, seconds), None if stream and timeout is None else per_read)
            # urllib3's timeouts restart with every byte: the headers are awaited on a worker, within the deadline.
            return within(
                seconds, lambda: self._api.call_api(m, url, header_params=hdrs, body=b, _request_timeout=to), lambda r: r.response.release_conn(), self.server
            )
        except urllib3.exceptions.HTTPError as e:
            raise unreachable(self.server, e) from None
        except OSError as e:
            raise unreachable(self.server, e) from None
        except ClusterError:
            raise
        except Exception as e:  # the client wraps TLS failures in ApiException(status=0)
            if getattr(e, "status", None) == 0:
                raise unreachable(self.server, e) from None
            raise

    @staticmethod
    def _stopper(raw: Any) -> Callable[[], None]:
        def stop() -> None:
            try:
                raw.shutdown()  # urllib3 >= 2.3: ends a read that is waiting
            except (ValueError, RuntimeError, OSError):
                raw.close()

        return stop

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None, accept=None) -> Response:
        import urllib3

        start = time.monotonic()
        r = self._send(method, path, query, body, content_type, timeout, self._deadline, stream=False, accept=accept)
        raw = r.response
        dog = Watchdog(self._deadline - (time.monotonic() - start), self._stopper(raw))
        try:
            data = raw.read(MAX_RESPONSE_BYTES + 1, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if dog.expired:
                raise _timed_out(self.server, self._deadline) from None
            raise unreachable(self.server, e) from None
        finally:
            dog.cancel()
            raw.release_conn()
        if dog.expired:
            raise _timed_out(self.server, self._deadline)
        if len(data) > MAX_RESPONSE_BYTES:
            raise _too_large(f"{method} {path}", MAX_RESPONSE_BYTES)
        return Response(status=r.status, body=data or b"")

    def stream(self, path, *, query=None, timeout=None, deadline=None, ends=True) -> Iterator[bytes]:
        import urllib3

        start = time.monotonic()
        r = self._send("GET", path, query, None, None, timeout, self._deadline if deadline is None else min(deadline, self._deadline), stream=True)
        raw = r.response
        if not 200 <= r.status < 300:
            try:
                body = raw.read(MAX_RESPONSE_BYTES, decode_content=True)
            finally:
                raw.release_conn()
            raise refusal(Response(r.status, body or b""), f"GET {path}", path=path, query=query)
        dog = Watchdog(None if deadline is None else deadline - (time.monotonic() - start), self._stopper(raw))
        try:
            buf = b""
            for chunk in raw.stream(64 * 1024, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line
                if len(buf) > MAX_LINE_BYTES:
                    raise _too_large(f"GET {path}", MAX_LINE_BYTES, "a line of the API server's answer")
            if buf and not dog.expired:
                yield buf
        except urllib3.exceptions.ReadTimeoutError:
            if not ends:
                raise _timed_out(self.server, timeout or 0) from None
            return  # a watch that went quiet for the read timeout: the caller decides
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if not dog.expired:
                raise unreachable(self.server, e) from None
        finally:
            dog.cancel()
            raw.release_conn()
        if dog.expired and not ends:
            raise _timed_out(self.server, deadline or 0)


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

    def __init__(self, server: str, tls: Tls | None, timeout: float, deadline: float | None = None) -> None:
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
        self._deadline = request_deadline() if deadline is None else deadline
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

    def _open(
        self, method, path, query, body, content_type, timeout, seconds: float, accept: str | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, Watchdog]:
        """Connect, send, read the headers; the watchdog then stops the connection ``seconds`` after the start."""
        import http.client
        import socket

        start = time.monotonic()
        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Accept": accept or "application/json", "User-Agent": TGK}
        if data is not None:
            headers["Content-Type"] = content_type or "application/json"
        conn = self._connection(min(timeout, seconds) if timeout else seconds)
        dog = None
        try:
            conn.connect()  # within the socket timeout; the watchdog needs the socket
            dog = Watchdog(seconds - (time.monotonic() - start), lambda: conn.sock.shutdown(socket.SHUT_RDWR) if conn.sock else None)
            conn.request(method, url, body=data, headers=headers)
            return conn, conn.getresponse(), dog
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if dog is not None:
                dog.cancel()
                if dog.expired:
                    raise _timed_out(self.server, seconds) from None
            raise unreachable(self.server, e) from None

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=None, accept=None) -> Response:
        import http.client

        conn, resp, dog = self._open(method, path, query, body, content_type, timeout or self._timeout, self._deadline, accept)
        try:
            data = resp.read(MAX_RESPONSE_BYTES + 1)
        except (OSError, http.client.HTTPException) as e:
            if dog.expired:
                raise _timed_out(self.server, self._deadline) from None
            raise unreachable(self.server, e) from None
        finally:
            dog.cancel()
            conn.close()
        if dog.expired:  # the server's last bytes never came; what was read is cut short
            raise _timed_out(self.server, self._deadline)
        if len(data) > MAX_RESPONSE_BYTES:
            raise _too_large(f"{method} {path}", MAX_RESPONSE_BYTES)
        return Response(status=resp.status, body=data or b"")

    def stream(self, path, *, query=None, timeout=None, deadline=None, ends=True) -> Iterator[bytes]:
        import http.client

        # The headers come within the request deadline; the body within the stream's own.
        conn, resp, dog = self._open("GET", path, query, None, None, self._timeout, self._deadline if deadline is None else min(deadline, self._deadline))
        try:
            if not 200 <= resp.status < 300:
                raise refusal(Response(resp.status, resp.read(MAX_RESPONSE_BYTES) or b""), f"GET {path}", path=path, query=query)
            dog.cancel()
            if dog.expired:
                raise _timed_out(self.server, self._deadline)
            dog = Watchdog(deadline, dog.stop) if deadline is not None else dog
            if conn.sock is not None:
                conn.sock.settimeout(timeout)  # None: as long as the server keeps it open
            while line := resp.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES:
                    raise _too_large(f"GET {path}", MAX_LINE_BYTES, "a line of the API server's answer")
                if dog.expired:
                    break
                yield line[:-1] if line.endswith(b"\n") else line
        except TimeoutError:
            if not ends:
                raise _timed_out(self.server, timeout or 0) from None
            return  # a watch that went quiet for the read timeout: the caller decides
        except (OSError, http.client.HTTPException) as e:
            if not dog.expired:
                raise unreachable(self.server, e) from None
        finally:
            dog.cancel()
            conn.close()
        if dog.expired and not ends:
            raise _timed_out(self.server, deadline or 0)
