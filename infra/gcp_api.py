"""A thin read-only client of Google's REST APIs (Compute Engine, GKE, Cloud Quotas): GETs, JSON in.

The capacity checks (``infra.cloud_checks``) and ``infra pools status`` read a handful of
documented resources; a client library per API would be three heavy dependencies for
six GETs. Every request is an ``ApiRequest`` first, so ``--dry-run`` prints exactly what
a real run sends, and the host part of every URL can be replaced
(``$TGK_GOOGLE_API_ENDPOINT`` or ``--endpoint``): the tests point it at a loopback
server that answers in the documented shapes.

Auth: ``$TGK_ACCESS_TOKEN`` when set, else ``gcloud auth print-access-token``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from toolkit.errors import ExternalToolError, ToolkitError

ENDPOINT_ENV_VAR = "TGK_GOOGLE_API_ENDPOINT"
TOKEN_ENV_VAR = "TGK_ACCESS_TOKEN"

# The real hosts, by API; an override replaces all of them (the paths never collide).
HOSTS = {
    "compute": "https://compute.googleapis.com",
    "container": "https://container.googleapis.com",
    "cloudquotas": "https://cloudquotas.googleapis.com",
}
MAX_BODY = 32 * 1024 * 1024  # a reservation or node pool list is KiBs; this bounds a runaway answer
TIMEOUT_S = 60.0


class ApiError(ToolkitError):
    """The API refused or could not be reached: the cloud side failed, not the input (exit 3)."""

    exit_code = 3

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ApiRequest:
    """One GET: which API, its path (with the version prefix) and query, and why the toolkit asks."""

    api: str
    path: str
    why: str
    query: tuple[tuple[str, str], ...] = ()

    def url(self, endpoint: str | None = None) -> str:
        base = (endpoint or HOSTS[self.api]).rstrip("/")
        return base + self.path + (f"?{urlencode(self.query)}" if self.query else "")

    def render(self, endpoint: str | None = None) -> str:
        return f"GET {self.url(endpoint)}  # {self.why}"


def endpoint_override(flag: str = "") -> str | None:
    """--endpoint, else $TGK_GOOGLE_API_ENDPOINT, else None (the real hosts)."""
    return flag or os.environ.get(ENDPOINT_ENV_VAR) or None


def gcloud_token() -> str:
    import shutil

    from toolkit import tools

    token = os.environ.get(TOKEN_ENV_VAR)
    if token:
        return token
    if shutil.which("gcloud") is None:
        raise ExternalToolError(
            f"gcloud is not installed: set ${TOKEN_ENV_VAR} to an OAuth access token, print the requests with --dry-run, or deploy with --no-checks"
        )
    proc = tools.run(["gcloud", "auth", "print-access-token"], timeout=60, max_output=1024 * 1024)
    if not proc.ok:
        raise proc.failure("gcloud auth print-access-token")
    return proc.stdout.strip()


@dataclass
class Client:
    """GETs ``ApiRequest``s: the parsed JSON object, or None for a 404 (the resource is not there)."""

    endpoint: str | None = None
    token: Callable[[], str] = gcloud_token
    _token: str | None = field(default=None, init=False)

    def get(self, req: ApiRequest) -> dict[str, Any] | None:
        import http.client

        url = req.url(self.endpoint)
        u = urlsplit(url)
        if self._token is None:
            self._token = self.token()
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname or "", u.port, timeout=TIMEOUT_S)
        where = f"GET {u.scheme}://{u.netloc}{u.path}"
        try:
            conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"})
            resp = conn.getresponse()
            body = resp.read(MAX_BODY + 1)
        except (OSError, http.client.HTTPException) as e:
            raise ApiError(f"{where}: {e} — check the network (or {ENDPOINT_ENV_VAR})") from None
        finally:
            conn.close()
        if len(body) > MAX_BODY:
            raise ApiError(f"{where}: the answer is over {MAX_BODY // (1024 * 1024)} MiB, more than this resource ever is")
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise ApiError(f"{where}: HTTP {resp.status} {_error_message(body)} — check the project, your gcloud login and its permissions", status=resp.status)
        try:
            doc = json.loads(body)
        except ValueError:
            raise ApiError(f"{where}: the answer is not JSON") from None
        if not isinstance(doc, dict):
            raise ApiError(f"{where}: the answer is not a JSON object")
        return doc


def _error_message(body: bytes) -> str:
    """Google's error body is {"error": {"code", "message", "status"}}: its status and message, else nothing."""
    try:
        err = json.loads(body).get("error") or {}
        return f"{err.get('status', '')}: {str(err.get('message', ''))[:200]}".strip(": ")
    except (ValueError, AttributeError):
        return ""
