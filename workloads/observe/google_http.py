"""The one transport of Google's client libraries: every request to Cloud Storage, Cloud Logging,
Cloud Resource Manager and IAM within the bounds of ``toolkit.google_answers``.

``google-cloud-storage`` and ``google-cloud-logging`` (over its REST transport) send every
request through a ``requests`` session; ``session`` builds that session, and the clients
(``workloads.observe.storage.make_client``, ``workloads.observe.history.make_client``) and
the dataset check's IAM reads (``workloads.observe.iam``) are built on it, nothing else.
``tests/test_google_http.py`` fails when other code imports an HTTP library or builds a
Google client itself. What a misbehaving or unreachable service meets, in ``BoundedAdapter``
(a ``requests`` adapter, so the libraries' own code paths — JSON calls, media downloads,
resumable uploads, token refreshes — all pass through it):

- **unreachable**: the connect timeout, and no retry of a failed connection: the error is
  the toolkit's own (``GoogleApiError``), which no library retry predicate matches, so a
  refused or black-holed endpoint ends at once or after the connect timeout, not after the
  storage library's two minutes of retries (a 150-line RetryError);
- **an answer in pieces**: the overall deadline per request (``toolkit.deadline.Watchdog``
  shuts the socket down; a request that sends a body gets time for it too, ``UPLOAD_RATE``);
- **an endless body**: the byte cap; the answer is read here, whole and capped, and handed
  to the library as the same response over the bytes read (a compressed answer is also
  capped as it would be decompressed);
- **endless pages**: the page cap per listing: requests that carry a ``pageToken`` (in the
  query, or in a POST body as Cloud Logging's ``entries:list``) are counted per listing;
- **hostile JSON**: ``response.json()`` is ``toolkit.google_answers.decode_json`` (depth,
  NaN/Infinity, ``1e400``, over-long integers), whoever asks for it, the libraries included;
- **a service that keeps failing**: the libraries retry 408/429/5xx answers with backoff for
  up to two minutes; the same request answered so ``MAX_RETRIED`` times in a row is refused.

Each is one line naming the API and the request (never its query: a signed URL or a page
token is not for a terminal), exit 3.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.response import HTTPResponse

from toolkit.deadline import Watchdog
from toolkit.errors import GoogleApiError
from toolkit.google_answers import BadJson, Bounds, decode_json

STORAGE = "Cloud Storage"
LOGGING = "Cloud Logging"
RESOURCE_MANAGER = "Cloud Resource Manager"
IAM = "IAM"
OAUTH = "Google OAuth"

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
UPLOAD_RATE = 256 * 1024  # bytes a second a request's own body is given on top of the deadline
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})  # what the storage library retries
MAX_RETRIED = 3  # the same request answered with one of RETRYABLE this many times in a row: refused
UNREACHABLE_FIX = "check the network and the endpoint"
MISBEHAVING_FIX = "check the endpoint: a Google API never answers this"

_current = threading.local()  # .request: the _Sending of the request this thread is sending


def where(method: str, url: str) -> str:
    """``METHOD scheme://host/path``: what an error names (never the query)."""
    u = urlsplit(url)
    return f"{method} {u.scheme}://{u.netloc}{u.path}"


def _pool_classes() -> dict[str, type]:
    """urllib3's pools, each noting the connection it hands out (the watchdog shuts that one down)."""

    class _Noting:
        def _get_conn(self, timeout: float | None = None) -> Any:
            conn = super()._get_conn(timeout)  # type: ignore[misc]
            sending = getattr(_current, "request", None)
            if sending is not None:
                sending.conn = conn
            return conn

    return {
        "http": type("NotingHTTPConnectionPool", (_Noting, HTTPConnectionPool), {}),
        "https": type("NotingHTTPSConnectionPool", (_Noting, HTTPSConnectionPool), {}),
    }


class _Sending:
    """One request on its way: the connection it got from the pool, which the watchdog (another thread) shuts down."""

    conn: Any = None

    def stop(self) -> None:
        sock = getattr(self.conn, "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)


@dataclass
class _Listing:
    pages: int = 0


class BoundedAdapter(HTTPAdapter):
    """A ``requests`` transport adapter that holds every request to ``api`` within ``bounds`` (see the module)."""

    def __init__(self, api: str, bounds: Bounds | None = None, fix: str = UNREACHABLE_FIX) -> None:
        self.api, self.bounds, self.fix = api, bounds or Bounds(), fix
        self._lock = threading.Lock()
        self._listings: dict[tuple[str, ...], _Listing] = {}
        self._failing: dict[str, int] = {}
        super().__init__(max_retries=0)  # no retry below the library's own: a failed connection fails

    # -- urllib3 pools that note the connection in use

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes()

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _pool_classes()
        return manager

    # -- one request

    def fail(self, here: str, reason: str, fix: str | None = None, *, status: int | None = None) -> GoogleApiError:
        text = " ".join(f"{self.api} ({here}): {reason} — {fix or self.fix}".split())
        return GoogleApiError(text, status=status)

    def send(self, request: Any, stream: bool = False, timeout: Any = None, verify: Any = True, cert: Any = None, proxies: Any = None) -> Any:
        b = self.bounds
        here = where(request.method or "GET", request.url or "")
        self._count_page(request, here)
        sent = _body_size(request.body)
        deadline = None if b.deadline_s is None else b.deadline_s + sent / UPLOAD_RATE
        sending = _current.request = _Sending()
        dog = Watchdog(deadline, sending.stop)
        resp = None
        try:
            resp = super().send(request, stream=True, timeout=(b.connect_timeout_s, b.read_timeout_s), verify=verify, cert=cert, proxies=proxies)
            body, over = _read_capped(resp.raw, b.max_bytes)
        except (requests.exceptions.ConnectTimeout, requests.exceptions.SSLError) as e:
            raise self.fail(here, f"cannot connect ({_connect_reason(e, b)})") from None
        except requests.exceptions.ConnectionError as e:
            if dog.expired:
                raise self.fail(here, f"no complete answer within {deadline:.3g} s", MISBEHAVING_FIX) from None
            if _is_connect_error(e):
                raise self.fail(here, f"cannot connect ({_connect_reason(e, b)})") from None
            raise self.fail(here, f"the connection failed ({_short(e)})") from None
        except requests.exceptions.ReadTimeout:
            raise self.fail(here, f"no bytes for {b.read_timeout_s:g} s") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as e:
            if dog.expired:
                raise self.fail(here, f"no complete answer within {deadline:.3g} s", MISBEHAVING_FIX) from None
            raise self.fail(here, f"the connection failed ({_short(e)})") from None
        finally:
            dog.cancel()
            _current.request = None
        if dog.expired:
            resp.close()
            raise self.fail(here, f"no complete answer within {deadline:.3g} s", MISBEHAVING_FIX)
        if over:
            resp.close()
            raise self.fail(here, f"the answer is over {_mib(b.max_bytes)}, more than this API ever answers", MISBEHAVING_FIX)
        self._check_encoding(resp, body, here)
        resp.raw.release_conn()
        resp.raw = _replay(resp.raw, body)
        self._count_failure(request, resp.status_code, here)
        resp.json = _bounded_json(resp, b.max_depth, lambda reason: self.fail(here, f"the answer cannot be used: {reason}", MISBEHAVING_FIX))
        return resp

    def _check_encoding(self, resp: Any, body: bytes, here: str) -> None:
        """A compressed answer decompresses to at most the byte cap (the library inflates it later)."""
        coding = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
        if coding in ("identity", ""):
            return
        if coding not in ("gzip", "deflate"):
            raise self.fail(here, f"the answer is in Content-Encoding {coding[:20]!r}, which was not asked for", MISBEHAVING_FIX)
        # Counted a MiB at a time and let go: the check holds no more than that of the inflated answer.
        d = zlib.decompressobj(47 if coding == "gzip" else 15)
        pending, total = body, 0
        try:
            while pending and total <= self.bounds.max_bytes:
                total += len(d.decompress(pending, 1 << 20))
                pending = d.unconsumed_tail
        except zlib.error as e:
            raise self.fail(here, f"the {coding} answer does not decompress ({e})", MISBEHAVING_FIX) from None
        if total > self.bounds.max_bytes:
            raise self.fail(here, f"the answer is over {_mib(self.bounds.max_bytes)} once decompressed", MISBEHAVING_FIX)

    def _count_page(self, request: Any, here: str) -> None:
        """Pages of one listing: a request with a pageToken continues the listing of the same request without it."""
        key, token = _listing_key(request)
        with self._lock:
            listing = self._listings.setdefault(key, _Listing())
            listing.pages = listing.pages + 1 if token else 1
            pages = listing.pages
            if len(self._listings) > 10_000:  # a long-lived client lists many things: forget the oldest
                self._listings.pop(next(iter(self._listings)))
        if pages > self.bounds.max_pages:
            raise self.fail(here, f"more than {self.bounds.max_pages} pages in one listing, more than the toolkit ever reads", MISBEHAVING_FIX)

    def _count_failure(self, request: Any, status: int, here: str) -> None:
        key = where(request.method or "GET", request.url or "")
        with self._lock:
            n = self._failing.get(key, 0) + 1 if status in RETRYABLE else 0
            if n:
                self._failing[key] = n
            else:
                self._failing.pop(key, None)
        if n >= MAX_RETRIED:
            with self._lock:
                self._failing.pop(key, None)
            raise self.fail(here, f"answered HTTP {status} {n} times in a row", "try again later, or check the endpoint", status=status)


def _body_size(body: Any) -> int:
    if body is None:
        return 0
    if isinstance(body, bytes | bytearray | str):
        return len(body)
    try:
        return max(0, int(getattr(body, "len", None) or len(body)))
    except TypeError:
        return 0


def _listing_key(request: Any) -> tuple[tuple[str, ...], bool]:
    """(the request without its page token, whether it had one): the pages of one listing share the key."""
    u = urlsplit(request.url or "")
    query = parse_qsl(u.query, keep_blank_values=True)
    token = any(k == "pageToken" and v for k, v in query)
    rest = urlencode(sorted((k, v) for k, v in query if k != "pageToken"))
    body = request.body
    body_key = ""
    if body and isinstance(body, bytes | str) and len(body) <= 64 * 1024:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            token = token or bool(doc.pop("pageToken", None))
            body_key = json.dumps(doc, sort_keys=True)
        else:
            body_key = body if isinstance(body, str) else body.decode("latin-1")
    return (request.method or "GET", u.scheme, u.netloc, u.path, rest, body_key), token


def _read_capped(raw: Any, limit: int) -> tuple[bytes, bool]:
    """The body as sent (not decoded), at most ``limit`` bytes, and whether there was more.

    Into one growing buffer, handed over without a copy: the memory an answer takes is about
    its size (at most the cap), not the cap for every answer nor twice the answer."""
    buf = io.BytesIO()
    got = 0
    while got <= limit:
        chunk = raw.read(min(1 << 16, limit + 1 - got), decode_content=False)
        if not chunk:
            break
        buf.write(chunk)
        got += len(chunk)
    return buf.getvalue(), got > limit


def _replay(raw: Any, body: bytes) -> Any:
    """The same urllib3 response over the bytes read: the libraries read ``raw`` (media downloads) or ``content``."""
    return HTTPResponse(
        body=io.BytesIO(body),
        headers=raw.headers,
        status=raw.status,
        version=getattr(raw, "version", 11),
        reason=raw.reason,
        preload_content=False,
        decode_content=True,
        request_method=getattr(raw, "_request_method", None),
        request_url=getattr(raw, "_request_url", None),
    )


class UnusableAnswer(GoogleApiError, ValueError):
    """An answer that is not JSON the toolkit reads. A ValueError too, which is what ``response.json()``
    raises for text that is not JSON: a library that reads an error body's text instead (as
    ``google.api_core.exceptions.from_http_response`` does) still can; anywhere else it is one line, exit 3."""


def _bounded_json(resp: Any, max_depth: int, failure: Callable[[str], GoogleApiError]) -> Callable[..., Any]:
    def parsed(**_: Any) -> Any:
        try:
            return decode_json(resp.content, max_depth)
        except BadJson as e:
            err = failure(str(e))
            raise UnusableAnswer(str(err), status=resp.status_code) from None

    return parsed


def _is_connect_error(e: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[Any] = [e]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError | ConnectionRefusedError | socket.gaierror):
            return True
        stack.extend([getattr(x, "reason", None), x.__cause__, x.__context__, *[a for a in getattr(x, "args", ()) if isinstance(a, BaseException)]])
    return False


def _short(e: BaseException) -> str:
    """The innermost reason of a requests/urllib3 error, in one short line, without urllib3's object reprs."""
    chain: list[Any] = []
    x: Any = e
    for _ in range(8):
        chain.append(x)
        inner = getattr(x, "reason", None) or next((a for a in getattr(x, "args", ()) if isinstance(a, BaseException)), None)
        if inner is None or inner is x:
            break
        x = inner
    if any(isinstance(c, urllib3.exceptions.ConnectTimeoutError) and not isinstance(c, urllib3.exceptions.NewConnectionError) for c in chain):
        return "timed out"
    text = " ".join(str(chain[-1]).split())
    # urllib3 words it "<HTTPConnection(host=..., port=...) ...>: Failed to establish a new connection: [Errno 111] ..."
    text = text.split("Failed to establish a new connection: ", 1)[-1]
    if text.startswith(("<", "(")) and ">: " in text:
        text = text.split(">: ", 1)[1]
    return text[:160] or type(chain[-1]).__name__


def _connect_reason(e: BaseException, b: Bounds) -> str:
    reason = _short(e)
    return f"no answer within {b.connect_timeout_s:g} s" if reason == "timed out" else reason


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


# ------------------------------------------------------------------ sessions and credentials


def session(api: str, credentials: Any, *, bounds: Bounds | None = None) -> Any:
    """A ``google.auth`` AuthorizedSession for ``api`` whose every request (and token refresh) is bounded."""
    from google.auth.transport.requests import AuthorizedSession, Request

    refresh = plain_session(OAUTH, bounds=bounds)
    s = AuthorizedSession(credentials, auth_request=Request(session=refresh))
    _mount(s, api, bounds)
    return s


def plain_session(api: str, *, bounds: Bounds | None = None) -> Any:
    """A bounded ``requests`` session without credentials (token refreshes, anonymous loopback servers)."""
    s = requests.Session()
    _mount(s, api, bounds)
    return s


def _mount(s: Any, api: str, bounds: Bounds | None) -> None:
    adapter = BoundedAdapter(api, bounds)
    s.mount("https://", adapter)
    s.mount("http://", adapter)
    # The answer as it is: what is measured against the byte cap is what the library holds.
    # A library that asks for gzip itself (media downloads) still gets it, within the cap.
    s.headers["Accept-Encoding"] = "identity"


def default_credentials() -> tuple[Any, str | None]:
    """Application Default Credentials and their project; google.auth's DefaultCredentialsError when there are none."""
    import google.auth

    return google.auth.default(scopes=list(SCOPES))


def anonymous() -> Any:
    """Credentials for a loopback server that checks none (an emulator, the local cluster's servers)."""
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def storage_client(project: str | None, credentials: Any, *, endpoint: str | None = None, bounds: Bounds | None = None) -> Any:
    """google-cloud-storage's Client over the bounded session (``endpoint``: another host than Google's)."""
    from google.cloud import storage

    options = {"api_endpoint": endpoint} if endpoint else None
    client = storage.Client(project=project, credentials=credentials, _http=session(STORAGE, credentials, bounds=bounds), client_options=options)
    # google-cloud-storage 3.x fetches a bucket's metadata on a background thread at the first call
    # naming it, for OpenTelemetry span attributes the toolkit never exports: a second request per
    # bucket (needing storage.buckets.get) that no caller waits for. Off.
    if getattr(client, "_bucket_metadata_cache", None) is not None:
        client._bucket_metadata_cache = None
    return client


def logging_client(project: str, credentials: Any, *, endpoint: str | None = None, bounds: Bounds | None = None) -> Any:
    """google-cloud-logging's Client, over REST, over the bounded session (``endpoint``: another host than Google's)."""
    from google.cloud import logging as cloud_logging

    options = {"api_endpoint": endpoint} if endpoint else None
    return cloud_logging.Client(
        project=project, credentials=credentials, _http=session(LOGGING, credentials, bounds=bounds), _use_grpc=False, client_options=options
    )


@dataclass(frozen=True)
class Answer:
    status: int
    doc: Any  # the JSON answer (decode_json), None when empty


def call(s: Any, method: str, url: str, *, body: dict[str, Any] | None = None) -> Answer:
    """One REST call without a client library (Resource Manager, IAM) over a bounded session: the status and JSON answer.

    An answer that is not JSON the toolkit reads is the adapter's GoogleApiError; what the
    status means is the caller's (a 403 can be an answer, as in "cannot prove").
    """
    resp = s.request(method, url, json=body, headers={"Accept": "application/json"})
    if not resp.content:
        return Answer(resp.status_code, None)
    try:
        doc = resp.json()
    except UnusableAnswer:
        if resp.status_code >= 400:
            return Answer(resp.status_code, None)  # an error page that is not JSON: the status says enough
        raise
    return Answer(resp.status_code, doc)


def error_message(doc: Any) -> str:
    """Google's error body ({"error": {"status", "message"}}) as printable words, at most 200 characters."""
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return ""
    text = f"{err.get('status', '')}: {str(err.get('message', ''))[:200]}".strip(": ")
    return "".join(c if c.isprintable() else " " for c in text)
