"""One way to Google's APIs: every HTTP GET in infra/ goes through infra.gcp_api.http_get with its Bounds, every
paged listing through each_page, and gcloud's token is asked for in one place.

The structural tests keep it so (a second hand-made GET or token lookup fails them); the
others hold the bounds against a loopback server that misbehaves (tests/support/hostile_server.py).
"""

from __future__ import annotations

import ast
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra import gcp_api
from tests.support import REPO, cli
from tests.support.hostile_server import serve

INFRA = REPO / "infra"
# Modules that open HTTP connections themselves: only the client may.
HTTP_MODULES = {"http.client", "urllib.request", "requests", "httpx", "urllib3", "socket"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_only_the_client_speaks_http():
    speakers = sorted(str(p.relative_to(REPO)) for p in INFRA.rglob("*.py") if _imports(p) & HTTP_MODULES)
    assert speakers == ["infra/gcp_api.py"], f"a GET of its own beside infra/gcp_api.py's http_get: {speakers}"


def test_only_the_client_asks_gcloud_for_a_token():
    askers = []
    for p in INFRA.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.List) and [getattr(e, "value", None) for e in node.elts][-1:] == ["print-access-token"]:
                askers.append(str(p.relative_to(REPO)))
    assert askers == ["infra/gcp_api.py"], askers


def test_a_get_over_its_byte_bound_is_flagged_not_read_whole():
    with serve({"*": "json"}, body=b'{"items": "' + b"x" * 5000 + b'"}') as h:
        answer = gcp_api.http_get(h.url + "/v1/x", {}, gcp_api.Bounds(max_bytes=1000))
        whole = gcp_api.http_get(h.url + "/v1/x", {}, gcp_api.Bounds())
    assert answer.over and len(answer.body) == 1001 and answer.status == 200
    assert not whole.over and whole.body.endswith(b'"}')


def test_a_get_past_its_deadline_fails_as_expired():
    with serve({"*": "trickle"}, interval=0.1, size=100_000) as h:
        with pytest.raises(gcp_api.GetFailed) as failed:
            gcp_api.http_get(h.url + "/v1/x", {}, gcp_api.Bounds(read_timeout_s=5, deadline_s=0.5))
    assert failed.value.expired and failed.value.where == f"GET {h.url}/v1/x"


# ------------------------------------------------------------ the client against a hostile server: one line, exit 3

REQ = gcp_api.ApiRequest("cloudquotas", "/v1/projects/p/locations/global/services/compute.googleapis.com/quotaInfos/X", "a test")


def _client(url: str, **bounds) -> gcp_api.Client:
    return gcp_api.Client(endpoint=url, token=lambda: "t", bounds=gcp_api.Bounds(**bounds))


def _one_line(err: gcp_api.ApiError, *needles: str) -> str:
    text = str(err)
    assert "\n" not in text and err.exit_code == 3 and " — " in text
    assert text.startswith("Cloud Quotas API (GET http://127.0.0.1:"), text  # names the API
    for n in needles:
        assert n in text, text
    return text


@pytest.mark.parametrize("mode", ["trickle", "trickle-headers"])
def test_a_trickling_server_meets_the_overall_deadline(mode: str):
    with serve({"*": mode}, interval=0.05, size=100_000) as h:
        with pytest.raises(gcp_api.ApiError) as e:
            _client(h.url, read_timeout_s=5, deadline_s=0.5).get(REQ)
    _one_line(e.value, "no complete answer within 0.5 s")


def test_an_endless_body_is_cut_at_its_cap():
    with serve({"*": "endless"}) as h:
        with pytest.raises(gcp_api.ApiError) as e:
            _client(h.url, max_bytes=1024 * 1024).get(REQ)
    _one_line(e.value, "over 1 MiB")


def test_endless_pages_are_refused_at_the_page_cap():
    with serve({"*": "json"}, body=b'{"timeSeries": [], "nextPageToken": "again"}') as h:
        with pytest.raises(gcp_api.ApiError) as e:
            _client(h.url, max_pages=5).pages(REQ)
        asked = len(h.requests)
    _one_line(e.value, "more than 5 pages")
    assert asked == 5 and all("pageToken=again" in r for r in h.requests[1:])


@pytest.mark.parametrize(
    "body, needle",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than"),
        (b'{"a": ' * 70 + b"1" + b"}" * 70, "nested more than 64 deep"),
        (b'{"value": 1e400}', "out of a double's range"),
        (b'{"value": NaN}', "NaN is not a JSON number"),
        (b'{"value": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"value": ' + b"9" * 5000 + b"}", "longer than any 64-bit one"),
        (b'{"value": "\xff"}', "not UTF-8"),
        (b"<html>", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
    ],
    ids=["deep-100k", "deep-70", "1e400", "nan", "-inf", "5000-digits", "latin-1", "html", "array"],
)
def test_json_past_its_domain_is_one_line(body: bytes, needle: str):
    with serve({"*": "json"}, body=body) as h:
        with pytest.raises(gcp_api.ApiError) as e:
            _client(h.url).get(REQ)
    _one_line(e.value, needle)


def test_an_unreachable_endpoint_fails_at_once():
    with pytest.raises(gcp_api.ApiError) as e:
        _client("http://127.0.0.1:9").get(REQ)
    _one_line(e.value, "cannot connect", "Connection refused", "$TGK_GOOGLE_API_ENDPOINT")


def test_a_black_holed_endpoint_fails_at_the_connect_timeout():
    """A listener whose accept queue is full drops new handshakes, as a firewall that drops packets does:
    the connect timeout, not the kernel's minutes of SYN retries, ends it."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (its length is backlog + 1 on Linux)
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        with pytest.raises(gcp_api.ApiError) as e:
            _client(f"http://127.0.0.1:{port}", connect_timeout_s=0.5).get(REQ)
    finally:
        for c in fillers:
            c.close()
        server.close()
    _one_line(e.value, "cannot connect", "timed out")


def test_a_server_error_body_reaches_the_terminal_as_one_printable_line():
    body = rb'{"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "no\n\u001b[32mSucceeded\u001b[0m"}}'

    class Forbidden(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(gcp_api.ApiError) as e:
            _client(f"http://127.0.0.1:{server.server_address[1]}").get(REQ)
    finally:
        server.shutdown()
        server.server_close()
    text = _one_line(e.value, "HTTP 403 PERMISSION_DENIED")
    assert "\x1b" not in text and e.value.status == 403


def test_paging_stops_where_the_listing_ends():
    asked = []

    def three(token: str) -> dict:
        asked.append(token)
        return {"nextPageToken": f"p{len(asked)}"} if len(asked) < 3 else {}

    assert len(gcp_api.each_page(three, what="a listing", max_pages=3)) == 3 and asked == ["", "p1", "p2"]
    asked.clear()
    with pytest.raises(gcp_api.ApiError, match="^a listing: more than 2 pages"):
        gcp_api.each_page(three, what="a listing", max_pages=2)
    assert gcp_api.each_page(lambda token: {"skus": []}, what="a listing") == [{"skus": []}]


def test_infra_check_against_a_trickling_google_exits_3_in_one_line(monkeypatch):
    """The reported hang, as a user meets it: `infra check` against a server that sends a byte at a time."""
    monkeypatch.setenv("TGK_ACCESS_TOKEN", "t")
    monkeypatch.setattr(gcp_api, "DEADLINE_S", 0.5)
    with serve({"*": "trickle"}, interval=0.05, size=100_000) as h:
        proc = cli("infra", "check", "--spec", "examples/fallback.yaml", "--endpoint", h.url)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: Compute Engine API (GET ") and "no complete answer within 0.5 s" in lines[0]
