"""A loopback Google for the dataset access check: Cloud Resource Manager v3 and IAM v1 answering
from the test's own policies and roles, in the shapes the REST references document, and Cloud
Storage passed through to the real GCS-compatible server behind it.

- ``GET /v3/projects/{id or number}``, ``GET /v3/folders/{id}``: ``{"name", "projectId", "parent"}``;
- ``POST /v3/{resource}:getIamPolicy``: ``{"version": 3, "etag", "bindings": [...]}``;
- ``GET /v1/roles/{r}``, ``/v1/projects/{p}/roles/{r}``, ``/v1/organizations/{o}/roles/{r}``:
  ``{"name", "includedPermissions"}``;
- a resource in ``forbidden``: 403 ``PERMISSION_DENIED``; an unknown one: 404 ``NOT_FOUND``;
- anything else goes to the storage server (``upstream``). The emulator keeps no
  uniform bucket-level access setting, so a bucket's metadata is shown with it on, as
  ``infra deploy`` (and any bucket the check can trust the policies of) has it.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Hierarchy:
    project_id: str = "tgk-proj"
    project_number: str = "1234"  # what the emulator gives every bucket as its projectNumber
    parents: dict[str, str] = field(default_factory=dict)  # resource -> its parent ("projects/1234" -> "folders/77")
    policies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # resource -> bindings
    roles: dict[str, list[str]] = field(default_factory=dict)  # role name -> included permissions
    forbidden: set[str] = field(default_factory=set)  # resources whose reads are refused (403)
    requests: list[str] = field(default_factory=list)

    def canonical(self, resource: str) -> str:
        return f"projects/{self.project_number}" if resource in (f"projects/{self.project_id}", f"projects/{self.project_number}") else resource


def _handler(h: Hierarchy, upstream: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, doc: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
            body = raw if raw is not None else json.dumps(doc).encode()
            self.send_response(status)
            for k, v in (headers or {"Content-Type": "application/json"}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, what: str) -> None:
            self._send(status, {"error": {"code": status, "message": what, "status": {403: "PERMISSION_DENIED", 404: "NOT_FOUND"}[status]}})

        def _ours(self, method: str) -> bool:
            path = unquote(urlsplit(self.path).path)
            if not path.startswith(("/v3/", "/v1/")):
                return False
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)  # the request's body, read before answering on a connection that stays open
            h.requests.append(f"{method} {path}")
            if path.startswith("/v3/") and path.endswith(":getIamPolicy") and method == "POST":
                res = h.canonical(path[len("/v3/") : -len(":getIamPolicy")])
                if res in h.forbidden:
                    self._error(403, f"The caller does not have permission resourcemanager getIamPolicy on {res}")
                else:
                    self._send(200, {"version": 3, "etag": "BwX=", "bindings": h.policies.get(res, [])})
                return True
            if path.startswith(("/v3/projects/", "/v3/folders/")) and method == "GET":
                res = h.canonical(path[len("/v3/") :])
                if res in h.forbidden:
                    self._error(403, f"no permission to get {res}")
                    return True
                doc = {"name": res, **({"parent": h.parents[res]} if res in h.parents else {})}
                if res.startswith("projects/"):
                    doc["projectId"] = h.project_id
                self._send(200, doc)
                return True
            if method == "GET" and path.startswith("/v1/") and "/roles/" in path:
                role = path[len("/v1/") :]
                if role in h.roles:
                    self._send(200, {"name": role, "includedPermissions": h.roles[role], "stage": "GA"})
                else:
                    self._error(404, f"role {role} not found")
                return True
            self._error(404, f"{method} {path} is not served here")
            return True

        def _forward(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if upstream is None:
                self._error(404, "no storage server")
                return
            u = urlsplit(upstream)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "accept-encoding")}
                conn.request(method, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                out = {k: v for k, v in resp.getheaders() if k.lower() not in ("content-length", "transfer-encoding", "connection")}
            finally:
                conn.close()
            path = urlsplit(self.path).path
            parts = path.strip("/").split("/")
            if method == "GET" and resp.status == 200 and len(parts) == 4 and parts[:3] == ["storage", "v1", "b"]:
                doc = json.loads(data)
                doc["iamConfiguration"] = {"uniformBucketLevelAccess": {"enabled": True}, "bucketPolicyOnly": {"enabled": True}}
                doc["projectNumber"] = h.project_number
                data = json.dumps(doc).encode()
            self._send(resp.status, None, out, raw=data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's names
            if not self._ours("GET"):
                self._forward("GET")

        def do_POST(self) -> None:  # noqa: N802
            if not self._ours("POST"):
                self._forward("POST")

        def do_PUT(self) -> None:  # noqa: N802
            self._forward("PUT")

        def do_PATCH(self) -> None:  # noqa: N802
            self._forward("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            self._forward("DELETE")

    return Handler


@contextmanager
def serve(hierarchy: Hierarchy, upstream: str | None = None) -> Iterator[str]:
    """The server's base URL while inside (``$TGK_GOOGLE_API_ENDPOINT``, and ``$STORAGE_EMULATOR_HOST`` with ``upstream``)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hierarchy, upstream))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
