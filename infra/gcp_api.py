"""The one way the toolkit reads Google's REST APIs: GETs, JSON in, read-only.

Every HTTP request to a Google API goes through ``http_get`` here, with its ``Bounds`` (the
per-read timeout, an overall deadline, the largest answer), and every paged listing through
``each_page`` (its page cap): a bound the toolkit sets on Google's answers is set here, once.
Two callers use it:

- ``Client`` (Compute Engine, GKE, Cloud Quotas): the capacity checks (``infra.cloud_checks``)
  and ``infra pools status`` read a handful of documented resources; a client library per
  API would be three heavy dependencies for six GETs. Every request is an ``ApiRequest``
  first, so ``--dry-run`` prints exactly what a real run sends, and the host part of every
  URL can be replaced (``$TGK_GOOGLE_API_ENDPOINT`` or ``--endpoint``): the tests point it at
  a loopback server that answers in the documented shapes.
- the price table's refresh from the Cloud Billing Catalog API (``infra.price_refresh``),
  with an overall deadline per page and its own size cap.

Auth is one lookup too: ``access_token`` (``$TGK_ACCESS_TOKEN`` when set, else
``gcloud auth print-access-token``, ``gcloud_token``); the catalog refresh, which takes an
API key first, asks gcloud alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
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
MAX_PAGES = 1000  # a paged listing stops after this many pages and one more


@dataclass(frozen=True)
class Bounds:
    """What one GET may take. Every bound on a Google API's answer is one of these fields."""

    read_timeout_s: float = TIMEOUT_S  # each wait for bytes (connecting, then every read)
    deadline_s: float | None = None  # the whole answer, from connected to its last byte; None: only the read timeout
    max_bytes: int = MAX_BODY  # an answer longer than this is cut here and flagged (``Answer.over``)


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most Bounds.max_bytes + 1 bytes
    over: bool  # the answer was longer than Bounds.max_bytes


class GetFailed(Exception):
    """No answer: the connection failed, or the deadline passed (``expired``). Each caller words it for its own users."""

    def __init__(self, where: str, error: BaseException | None, *, expired: bool) -> None:
        super().__init__(f"{where}: {error}")
        self.where, self.error, self.expired = where, error, expired


def where(url: str) -> str:
    """``GET scheme://host/path`` of ``url``: what an error names (never the query, which may hold an API key)."""
    u = urlsplit(url)
    return f"GET {u.scheme}://{u.netloc}{u.path}"


def http_get(url: str, headers: Mapping[str, str], bounds: Bounds) -> Answer:
    """The one HTTP GET of a Google API: the status and body, within ``bounds``; GetFailed when there is no answer."""
    import http.client
    import socket

    from toolkit.deadline import Watchdog

    u = urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname or "", u.port, timeout=bounds.read_timeout_s)
    dog = None
    try:
        conn.connect()
        dog = Watchdog(bounds.deadline_s, lambda: conn.sock.shutdown(socket.SHUT_RDWR) if conn.sock else None)
        conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read(bounds.max_bytes + 1)
    except (OSError, http.client.HTTPException) as e:
        raise GetFailed(where(url), e, expired=dog is not None and dog.expired) from None
    finally:
        if dog is not None:
            dog.cancel()
        conn.close()
    if dog.expired:
        raise GetFailed(where(url), None, expired=True)
    return Answer(resp.status, body, len(body) > bounds.max_bytes)


def each_page(get_page: Callable[[str], dict[str, Any]], *, max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every page of a listing: ``get_page(page_token)`` ("" first) until a page has no ``nextPageToken`` (or past ``max_pages``)."""
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        page = get_page(token)
        pages.append(page)
        token = str(page.get("nextPageToken") or "")
        if not token or len(pages) > max_pages:
            return pages


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


def access_token() -> str:
    """The bearer token of a Google API call: ``$TGK_ACCESS_TOKEN`` when set, else gcloud's (``gcloud_token``)."""
    token = os.environ.get(TOKEN_ENV_VAR)
    if token:
        return token
    return gcloud_token(f"set ${TOKEN_ENV_VAR} to an OAuth access token, print the requests with --dry-run, or deploy with --no-checks")


def gcloud_token(without_gcloud: str) -> str:
    """``gcloud auth print-access-token``; ``without_gcloud`` is the way on when gcloud is not installed."""
    import shutil

    from toolkit import tools

    if shutil.which("gcloud") is None:
        raise ExternalToolError(f"gcloud is not installed: {without_gcloud}")
    # A token is a few KiB: a minute and 1 MiB of output bound a gcloud that hangs or floods.
    proc = tools.run(["gcloud", "auth", "print-access-token"], timeout=60, max_output=1024 * 1024)
    if not proc.ok:
        raise proc.failure("gcloud auth print-access-token")
    return proc.stdout.strip()


@dataclass
class Client:
    """GETs ``ApiRequest``s: the parsed JSON object, or None for a 404 (the resource is not there)."""

    endpoint: str | None = None
    token: Callable[[], str] = access_token
    bounds: Bounds = Bounds()
    _token: str | None = field(default=None, init=False)

    def get(self, req: ApiRequest) -> dict[str, Any] | None:
        url = req.url(self.endpoint)
        if self._token is None:
            self._token = self.token()
        try:
            answer = http_get(url, {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}, self.bounds)
        except GetFailed as e:
            raise ApiError(f"{e.where}: {e.error} — check the network (or {ENDPOINT_ENV_VAR})") from None
        here = where(url)
        if answer.over:
            raise ApiError(f"{here}: the answer is over {self.bounds.max_bytes // (1024 * 1024)} MiB, more than this resource ever is")
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise ApiError(
                f"{here}: HTTP {answer.status} {_error_message(answer.body)} — check the project, your gcloud login and its permissions", status=answer.status
            )
        try:
            doc = json.loads(answer.body)
        except ValueError:
            raise ApiError(f"{here}: the answer is not JSON") from None
        if not isinstance(doc, dict):
            raise ApiError(f"{here}: the answer is not a JSON object")
        return doc


def _error_message(body: bytes) -> str:
    """Google's error body is {"error": {"code", "message", "status"}}: its status and message, else nothing."""
    try:
        err = json.loads(body).get("error") or {}
        return f"{err.get('status', '')}: {str(err.get('message', ''))[:200]}".strip(": ")
    except (ValueError, AttributeError):
        return ""
