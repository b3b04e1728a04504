"""One way to Google's APIs: every HTTP GET in infra/ goes through infra.gcp_api.http_get with its Bounds, every
paged listing through each_page, and gcloud's token is asked for in one place.

The structural tests keep it so (a second hand-made GET or token lookup fails them); the
others hold the bounds against a loopback server that misbehaves (tests/support/hostile_server.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from infra import gcp_api
from tests.support import REPO
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


def test_the_api_client_words_a_refused_connection_as_before():
    client = gcp_api.Client(endpoint="http://127.0.0.1:9", token=lambda: "t")
    with pytest.raises(gcp_api.ApiError, match=r"^GET http://127.0.0.1:9/compute/v1/x: .* — check the network \(or TGK_GOOGLE_API_ENDPOINT\)$"):
        client.get(gcp_api.ApiRequest("compute", "/compute/v1/x", "a test"))


def test_paging_stops_at_its_cap():
    asked = []

    def endless(token: str) -> dict:
        asked.append(token)
        return {"nextPageToken": f"p{len(asked)}"}

    pages = gcp_api.each_page(endless, max_pages=3)
    assert len(pages) == 4 and asked == ["", "p1", "p2", "p3"]
    assert gcp_api.each_page(lambda token: {"skus": []}) == [{"skus": []}]
