"""A tiny recording HTTP server on 127.0.0.1 that answers like a Kubernetes API server.

Not a Kubernetes: it serves canned JSON per (method, path) so the REAL kubernetes client
(kubeconfig loading, auth headers, request encoding) is exercised end to end in unit tests.
The integration tier runs a real kube-apiserver instead.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

Handler = Callable[[dict, bytes], "tuple[int, Any]"]


class FakeApiServer:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {("GET", "/version"): lambda q, b: (200, {"gitVersion": "v1.34.2"})}
        self.seen: list[dict[str, Any]] = []
        self.port = 0
        self.url = ""

    def json(self, method: str, path: str, obj: Any, code: int = 200) -> None:
        self.routes[(method, path)] = lambda q, b: (code, obj)

    def kubeconfig(self, directory: Path, namespace: str = "default") -> Path:
        p = directory / "kubeconfig"
        p.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "loop",
                    "clusters": [{"name": "loop", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
                    "users": [{"name": "u", "user": {"token": "secret-token"}}],
                    "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "u", "namespace": namespace}}],
                }
            )
        )
        return p


def _client_cn(conn: Any) -> str | None:
    """The common name of the TLS client certificate, if the connection has one."""
    cert = conn.getpeercert() if isinstance(conn, ssl.SSLSocket) else None
    return next((v for rdn in (cert or {}).get("subject", ()) for k, v in rdn if k == "commonName"), None)


@contextmanager
def serve(tls: ssl.SSLContext | None = None) -> Iterator[FakeApiServer]:
    """Serve on loopback; with ``tls`` (a server-side context), over HTTPS."""
    api = FakeApiServer()

    class _H(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            u = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            query = dict(parse_qsl(u.query))
            api.seen.append(
                {
                    "method": self.command,
                    "path": u.path,
                    "query": query,
                    "content_type": self.headers.get("Content-Type"),
                    "body": body,
                    "auth": self.headers.get("Authorization"),
                    "accept": self.headers.get("Accept"),
                    "client_cn": _client_cn(self.connection),
                }
            )
            fn = api.routes.get((self.command, u.path))
            code, obj = fn(query, body) if fn else (404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": f"{u.path} not found"})
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    api.port = server.server_port
    api.url = f"{'https' if tls else 'http'}://127.0.0.1:{api.port}"
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
