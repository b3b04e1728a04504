"""The one way the toolkit talks to Google's REST APIs: GETs (and one kind of POST), JSON in, every answer bounded.

Every HTTP request infra makes to a Google API goes through ``http_get`` here (``http_request``
for the one write, ``infra exclude-upgrades``'s setMaintenancePolicy), with its ``Bounds``, and
every paged listing through ``each_page``; the bounds' values and ``decode_json`` are
``toolkit.google_answers``', the ones the workloads side's transport of Google's client
libraries keeps too (``workloads.observe.google_http``). ``tests/test_gcp_api.py`` keeps other
infra modules from talking HTTP another way, and ``tests/test_google_http.py`` the whole
repository. What a misbehaving (or unreachable) service meets:

- **unreachable**: a connect timeout (``connect_timeout_s``), so a black-holed endpoint fails
  in seconds, not at the kernel's TCP timeout;
- **a trickle**: an overall deadline per request (``deadline_s``), which a per-read socket
  timeout cannot give (it restarts with every byte: ``toolkit.deadline.Watchdog``);
- **an endless body**: a byte cap per answer (``max_bytes``), read no further;
- **endless pages**: a page cap per listing (``max_pages``), refused, never silently cut;
- **hostile JSON**: ``decode_json`` refuses nesting deeper than ``max_depth``, NaN and
  Infinity (not JSON), numbers out of a double's range (``1e400``) and integers longer than
  an int64/uint64 is written.

Each is one line naming the API and what to do, exit 3 (``ApiError``; the price refresh's
``FetchError`` is one). Two callers use the client:

- ``Client`` (Compute Engine, GKE, Cloud Quotas, Cloud Monitoring): the capacity checks
  (``infra.cloud_checks``) and ``infra pools status`` read a handful of documented
  resources; a client library per API would be four heavy dependencies for a few GETs. Every
  request is an ``ApiRequest`` first, so ``--dry-run`` prints exactly what a real run sends,
  and the host part of every URL can be replaced (``$TGK_GOOGLE_API_ENDPOINT`` or
  ``--endpoint``): the tests point it at a loopback server that answers in the documented
  shapes (and at ``tests/support/hostile_server.py``, which misbehaves on purpose).
- the price table's refresh from the Cloud Billing Catalog API (``infra.price_refresh``).

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

from toolkit.errors import ExternalToolError, GoogleApiError
from toolkit.google_answers import (  # noqa: F401 - re-exported: the bounds of infra's client
    CONNECT_TIMEOUT_S,
    DEADLINE_S,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_PAGES,
    READ_TIMEOUT_S,
    BadJson,
    Bounds,
    decode_json,
)

ENDPOINT_ENV_VAR = "TGK_GOOGLE_API_ENDPOINT"
TOKEN_ENV_VAR = "TGK_ACCESS_TOKEN"

# The real hosts, by API; an override replaces all of them (the paths never collide).
HOSTS = {
    "compute": "https://compute.googleapis.com",
    "container": "https://container.googleapis.com",
    "cloudquotas": "https://cloudquotas.googleapis.com",
    "monitoring": "https://monitoring.googleapis.com",
}
# What an error calls each API.
API_NAMES = {
    "compute": "Compute Engine API",
    "container": "GKE API",
    "cloudquotas": "Cloud Quotas API",
    "monitoring": "Cloud Monitoring API",
    "cloudbilling": "Cloud Billing Catalog API",
}
# The bounds on an answer, shared with the workloads side's client (workloads.observe.google_http)
# so an answer one refuses the other refuses too; this module's names for them stay.
MAX_BODY = MAX_BYTES
TIMEOUT_S = READ_TIMEOUT_S


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most Bounds.max_bytes + 1 bytes
    over: bool  # the answer was longer than Bounds.max_bytes


class GetFailed(Exception):
    """No answer: the connection failed (``connecting``), or the deadline passed (``expired``). Each caller words it for its own users."""

    def __init__(self, where: str, error: BaseException | None, *, expired: bool, connecting: bool = False) -> None:
        super().__init__(f"{where}: {error}")
        self.where, self.error, self.expired, self.connecting = where, error, expired, connecting

    def reason(self, bounds: Bounds) -> str:
        """What went wrong, in words: no connection, the deadline, or the read timeout."""
        if self.expired:
            return f"no complete answer within {bounds.deadline_s:g} s"
        if self.connecting:
            return f"cannot connect ({self.error or 'timed out'})"
        if isinstance(self.error, TimeoutError):
            return f"no bytes for {bounds.read_timeout_s:g} s"
        return f"the connection failed ({self.error})"


def where(url: str, method: str = "GET") -> str:
    """``GET scheme://host/path`` of ``url``: what an error names (never the query, which may hold an API key)."""
    u = urlsplit(url)
    return f"{method} {u.scheme}://{u.netloc}{u.path}"


def http_get(url: str, headers: Mapping[str, str], bounds: Bounds) -> Answer:
    """The one HTTP GET of a Google API: the status and body, within ``bounds``; GetFailed when there is no answer."""
    return http_request("GET", url, headers, bounds)


def http_request(method: str, url: str, headers: Mapping[str, str], bounds: Bounds, body: bytes | None = None) -> Answer:
    """A request of a Google API (GET, or a POST with a JSON ``body``) within ``bounds``; GetFailed when there is no answer."""
    import http.client
    import socket

    from toolkit.deadline import Watchdog

    u = urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname or "", u.port, timeout=bounds.connect_timeout_s)
    dog = None
    try:
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as e:
            raise GetFailed(where(url, method), e, expired=False, connecting=True) from None
        if conn.sock is not None:
            conn.sock.settimeout(bounds.read_timeout_s)
        dog = Watchdog(bounds.deadline_s, lambda: conn.sock.shutdown(socket.SHUT_RDWR) if conn.sock else None)
        conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body, headers=dict(headers))
        resp = conn.getresponse()
        body = _read_capped(resp, bounds.max_bytes + 1)
    except (OSError, http.client.HTTPException) as e:
        raise GetFailed(where(url, method), e, expired=dog is not None and dog.expired) from None
    finally:
        if dog is not None:
            dog.cancel()
        conn.close()
    if dog.expired:
        raise GetFailed(where(url, method), None, expired=True)
    return Answer(resp.status, body, len(body) > bounds.max_bytes)


def _read_capped(resp: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of the body, read in chunks: memory follows what came, not the cap
    (``resp.read(n)`` allocates ``n`` bytes up front, 32 MiB for every small answer)."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = resp.read(min(1 << 16, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def each_page(get_page: Callable[[str], dict[str, Any]], *, what: str, max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every page of a listing: ``get_page(page_token)`` ("" first) until a page has no ``nextPageToken``.

    More than ``max_pages`` pages is refused (ApiError naming ``what``), never cut short: a
    listing read in part would be a wrong answer that looks right.
    """
    pages: list[dict[str, Any]] = []
    token = ""
    while True:
        page = get_page(token)
        pages.append(page)
        token = str(page.get("nextPageToken") or "")
        if not token:
            return pages
        if len(pages) >= max_pages:
            raise ApiError(f"{what}: more than {max_pages} pages, more than this listing ever is — check the endpoint (or ${ENDPOINT_ENV_VAR})")


class ApiError(GoogleApiError):
    """The API refused, could not be reached or answered what cannot be used: the cloud side failed, not the input (exit 3)."""


@dataclass(frozen=True)
class ApiRequest:
    """One GET (or POST with ``body``): which API, its path (with the version prefix) and query, and why the toolkit asks."""

    api: str
    path: str
    why: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None  # a POST's JSON body; None: a GET

    @property
    def method(self) -> str:
        return "GET" if self.body is None else "POST"

    def url(self, endpoint: str | None = None, *, page_token: str = "") -> str:
        base = (endpoint or HOSTS[self.api]).rstrip("/")
        query = self.query + ((("pageToken", page_token),) if page_token else ())
        return base + self.path + (f"?{urlencode(query)}" if query else "")

    def render(self, endpoint: str | None = None) -> str:
        line = f"{self.method} {self.url(endpoint)}  # {self.why}"
        return line if self.body is None else line + "\n" + json.dumps(self.body, indent=2, sort_keys=True)


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
    bounds: Bounds = field(default_factory=lambda: Bounds(TIMEOUT_S, DEADLINE_S, MAX_BODY, CONNECT_TIMEOUT_S, MAX_PAGES, MAX_DEPTH))
    _token: str | None = field(default=None, init=False)

    def get(self, req: ApiRequest, *, page_token: str = "") -> dict[str, Any] | None:
        """A GET's answer, or a POST's (``req.body``): the parsed JSON object, None for a 404."""
        url = req.url(self.endpoint, page_token=page_token)
        api = f"{API_NAMES.get(req.api, req.api)} ({where(url, req.method)})"
        if self._token is None:
            self._token = self.token()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        body = None
        if req.body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(req.body).encode()
        try:
            answer = http_request(req.method, url, headers, self.bounds, body)
        except GetFailed as e:
            raise ApiError(f"{api}: {e.reason(self.bounds)} — check the network (or ${ENDPOINT_ENV_VAR})") from None
        if answer.over:
            raise ApiError(f"{api}: the answer is over {self.bounds.max_bytes // (1024 * 1024)} MiB, more than this resource ever is — check the endpoint")
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise ApiError(
                f"{api}: HTTP {answer.status} {_error_message(answer.body)} — check the project, your gcloud login and its permissions", status=answer.status
            )
        try:
            doc = decode_json(answer.body, self.bounds.max_depth)
        except BadJson as e:
            raise ApiError(f"{api}: the answer cannot be used: {e} — check the endpoint") from None
        if not isinstance(doc, dict):
            raise ApiError(f"{api}: the answer is not a JSON object — check the endpoint")
        return doc

    def post(self, req: ApiRequest) -> dict[str, Any] | None:
        """Send a POST (``req.method``): the answer (a long-running Operation for a call that acts), or None for a 404."""
        if req.method != "POST":
            raise ValueError(f"{req.path}: not a POST request")
        return self.get(req)

    def pages(self, req: ApiRequest) -> list[dict[str, Any]]:
        """Every page of a listing (``pageToken`` / ``nextPageToken``), at most ``bounds.max_pages``; a 404 is an empty listing."""
        what = f"{API_NAMES.get(req.api, req.api)} ({where(req.url(self.endpoint))})"
        return each_page(lambda token: self.get(req, page_token=token) or {}, what=what, max_pages=self.bounds.max_pages)


def _error_message(body: bytes) -> str:
    """Google's error body is {"error": {"code", "message", "status"}}: its status and message, else nothing."""
    try:
        err = decode_json(body[:65536]).get("error") or {}
        text = f"{err.get('status', '')}: {str(err.get('message', ''))[:200]}".strip(": ")
    except (ValueError, AttributeError):
        return ""
    # the server's words go to a terminal in one line: no line breaks, no control sequences
    return "".join(c if c.isprintable() else " " for c in text)
