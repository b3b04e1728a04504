"""A small Kubernetes REST client for bringing the local cluster up.

Why not the ``kubernetes`` package: ``up`` needs a handful of calls (readiness,
server-side apply of CRDs, webhook configurations and Nodes) and must start in
well under a second; importing the generated client alone costs more than that.
The toolkit's own cluster client (workloads.cluster.client) is what users and tests use
against the cluster once it is up.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.local import LocalClusterError


class ApiError(LocalClusterError):
    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        self.status = status
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


@dataclass
class Kube:
    host: str
    port: int
    ca: Path
    cert: Path
    key: Path
    timeout: float = 30.0
    _plurals: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict, repr=False)
    _ctx: ssl.SSLContext | None = field(default=None, repr=False)

    def _context(self) -> ssl.SSLContext:
        if self._ctx is None:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            ctx.load_cert_chain(str(self.cert), str(self.key))
            self._ctx = ctx
        return self._ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        raw: bool = False,
        timeout: float | None = None,
    ) -> Any:
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        conn = http.client.HTTPSConnection(self.host, self.port, context=self._context(), timeout=timeout or self.timeout)
        try:
            conn.request(method, path, body=data, headers={"Content-Type": content_type, "Accept": "application/json"})
            resp = conn.getresponse()
            payload = resp.read()
        except OSError as e:
            raise ApiError(0, method, path, str(e) or type(e).__name__) from None
        finally:
            conn.close()
        if resp.status >= 400:
            try:
                msg = json.loads(payload).get("message", payload[:300].decode(errors="replace"))
            except ValueError:
                msg = payload[:300].decode(errors="replace")
            raise ApiError(resp.status, method, path, msg)
        if raw:
            return payload.decode(errors="replace")
        return json.loads(payload) if payload else None

    # ---------------------------------------------------------------- discovery

    def resource_path(self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespaced:
            if not namespace:
                raise LocalClusterError(f"{kind} is namespaced but no namespace was given")
            base += f"/namespaces/{namespace}"
        path = f"{base}/{plural}"
        return f"{path}/{name}" if name else path

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        key = (api_version, kind)
        if key not in self._plurals:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for r in self.request("GET", base).get("resources", []):
                if "/" not in r["name"]:
                    self._plurals[(api_version, r["kind"])] = (r["name"], r["namespaced"])
            if key not in self._plurals:
                raise LocalClusterError(f"the apiserver does not serve {kind} in {api_version}")
        return self._plurals[key]

    def forget_discovery(self) -> None:
        self._plurals.clear()

    # ------------------------------------------------------------------ verbs

    def apply(self, obj: dict[str, Any], *, field_manager: str = "tgk-local", dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (force: this tool owns what it applies here)."""
        meta = obj["metadata"]
        path = self.resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        params = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.request("PATCH", path, obj, content_type="application/apply-patch+yaml", params=params)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.resource_path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None, **params: str) -> list[dict[str, Any]]:
        plural, namespaced = self._resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        path = f"{base}/namespaces/{namespace}/{plural}" if namespaced and namespace else f"{base}/{plural}"
        return self.request("GET", path, params=params or None).get("items", [])

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self.request("DELETE", self.resource_path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status != 404:
                raise

    def healthy(self, path: str = "/readyz") -> bool:
        try:
            return self.request("GET", path, raw=True, timeout=5).strip() == "ok"
        except LocalClusterError:
            return False
