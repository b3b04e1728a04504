"""One bounded client for Google's services: every request the Cloud Storage and Cloud Logging
clients (and the dataset check's IAM reads) send passes through ``workloads.observe.google_http``,
and a server that misbehaves meets its bounds as one line naming the API, exit 3.

The structural test keeps it so across the repository's code (toolkit, infra, modules,
workloads, scripts, cloudbuild, tools; the tests talk to loopback servers only): no other
module imports an HTTP client library or builds a Google client, and those that speak HTTP to
something else are a reviewed list, each with whom it speaks to. The others hold each bound against a loopback server that
misbehaves on purpose (tests/support/hostile_server.py), through Google's own client libraries, and
say which bound ended it by the message: no test here asserts how long anything took
(scripts/bench_google_clients.py measures that).
"""

from __future__ import annotations

import ast
import gzip
import socket
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import REPO, cli
from tests.support.hostile_server import serve
from toolkit.errors import GoogleApiError
from toolkit.google_answers import MAX_DEPTH, BadJson, Bounds, decode_json
from workloads.data import iam as iam_reads
from workloads.observe import google_http as gh
from workloads.observe import history, storage

# ------------------------------------------------------------------ one way to Google: the import layer

PRODUCT = ("toolkit", "infra", "modules", "workloads", "scripts", "cloudbuild", "tools")
# Libraries that open HTTP connections, and Google's client libraries (each builds its own transport).
HTTP = ("http.client", "urllib.request", "urllib3", "requests", "httpx", "aiohttp", "httplib2", "pycurl", "websocket", "grpc")
GOOGLE_CLIENTS = ("google.cloud", "google.auth", "googleapiclient", "google_auth_httplib2", "google.api_core.gapic_v1", "google.api_core.operations_v1")
# What a module may import of google without talking to Google: error types to catch.
GOOGLE_ERRORS = ("google.api_core.exceptions", "google.auth.exceptions", "google.cloud.exceptions")

# Who else may speak HTTP, and to whom: never to Google.
HTTP_ELSEWHERE = {
    "infra/gcp_api.py": "infra's GETs of Google's REST APIs, within the same bounds (toolkit.google_answers)",
    "workloads/cluster/transport.py": "the Kubernetes API server",
    "workloads/local/kuberay.py": "the local Ray head, on loopback",
    "workloads/local/loopback.py": "the local cluster's own servers' health, on loopback",
    "workloads/local/procs.py": "the local control plane's health, on loopback",
    "workloads/ray/standin_head.py": "the stand-in Ray head's own dashboard, on loopback",
}
THE_CLIENT = "workloads/observe/google_http.py"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (a lazy import inside a function still talks HTTP)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {f"{node.module}.{a.name}" for a in node.names}  # what is taken: `from google.auth import exceptions` is the errors
    return out


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _speakers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for top in PRODUCT:
        for p in sorted((REPO / top).rglob("*.py")):
            rel = str(p.relative_to(REPO))
            names = {n for n in _imports(p) if _under(n, HTTP + GOOGLE_CLIENTS) and not _under(n, GOOGLE_ERRORS)}
            if names:
                found[rel] = names
    return found


def test_only_the_bounded_client_talks_http_to_google() -> None:
    speakers = _speakers()
    google = sorted(f for f, names in speakers.items() if any(_under(n, GOOGLE_CLIENTS) for n in names))
    assert google == [THE_CLIENT], f"only {THE_CLIENT} may build a Google client or session (the others call it): {google}"
    others = {f: sorted(n) for f, n in speakers.items() if f != THE_CLIENT and f not in HTTP_ELSEWHERE}
    assert not others, f"an HTTP library imported outside the bounded client (workloads/observe/google_http.py) and the reviewed list: {others}"
    stale = sorted(set(HTTP_ELSEWHERE) - set(speakers))
    assert not stale, f"reviewed as speaking HTTP but no longer does: drop from HTTP_ELSEWHERE: {stale}"


def test_the_import_scan_sees_a_lazy_import_and_a_from_import(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("def f():\n    import requests\n    from google.cloud import storage\n    from google.api_core import exceptions\n")
    names = _imports(p)
    assert {"requests", "google.cloud.storage", "google.api_core.exceptions"} <= names
    assert [n for n in names if _under(n, HTTP + GOOGLE_CLIENTS) and not _under(n, GOOGLE_ERRORS)] != []
    assert not _under("google.api_core.exceptions", GOOGLE_CLIENTS) or _under("google.api_core.exceptions", GOOGLE_ERRORS)


def _adapters(session) -> list:
    return [session.get_adapter("https://storage.googleapis.com/x"), session.get_adapter("http://127.0.0.1:1/x")]


def test_every_client_the_toolkit_builds_sends_through_the_bounded_adapter(monkeypatch) -> None:
    monkeypatch.delenv(storage.EMULATOR_ENV, raising=False)
    s = storage.make_client("p", endpoint="http://127.0.0.1:9")
    lg = history.make_client("p", endpoint="http://127.0.0.1:9")
    reads = iam_reads.GoogleIam(gh.anonymous(), "http://127.0.0.1:9")
    for session, api in ((s._http, gh.STORAGE), (lg._http, gh.LOGGING), (reads._rm, gh.RESOURCE_MANAGER), (reads._iam, gh.IAM)):
        assert all(isinstance(a, gh.BoundedAdapter) and a.api == api for a in _adapters(session)), api
        refresh = session._auth_request.session  # token refreshes go the same way
        assert all(isinstance(a, gh.BoundedAdapter) and a.api == gh.OAUTH for a in _adapters(refresh))
    monkeypatch.setenv(storage.EMULATOR_ENV, "http://127.0.0.1:9")
    assert isinstance(storage.make_client("p")._http.get_adapter("http://127.0.0.1:9/x"), gh.BoundedAdapter)


# ------------------------------------------------------------------ decode_json: depth and the number domain


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, f"nested more than {MAX_DEPTH} deep"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} deep"),
        (b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} deep"),
        (b'{"v": 1e400}', "the number 1e400 is out of a double's range"),
        (b'{"v": -1e400}', "out of a double's range"),
        (b'{"v": NaN}', "NaN is not a JSON number"),
        (b'{"v": Infinity}', "Infinity is not a JSON number"),
        (b'{"v": ' + b"9" * 100_000 + b"}", "is longer than any 64-bit one"),
        (b'{"v": "\xff"}', "not UTF-8"),
        (b"{'v': 1}", "it is not JSON"),
    ],
    ids=["deep-list", "depth-65", "deep-object", "1e400", "-1e400", "nan", "infinity", "huge-integer", "not-utf8", "not-json"],
)
def test_decode_json_refuses_what_no_google_api_answers(raw: bytes, reason: str) -> None:
    with pytest.raises(BadJson, match=reason.replace("(", r"\(").replace(")", r"\)")):
        decode_json(raw)


def test_decode_json_reads_what_google_answers() -> None:
    at_the_bound = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert decode_json(at_the_bound) is not None
    doc = decode_json(b'{"size": "123", "n": 18446744073709551615, "x": -1.5e300, "ok": true, "s": "\\u00e9"}')
    assert doc == {"size": "123", "n": 2**64 - 1, "x": -1.5e300, "ok": True, "s": "é"}
    with pytest.raises(ValueError):
        Bounds(max_pages=0)


# ------------------------------------------------------------------ each client against a hostile server

B = Bounds(read_timeout_s=30, deadline_s=0.5, max_bytes=1 << 20, connect_timeout_s=2, max_pages=5)
PAGE = b'{"items": [], "entries": [], "nextPageToken": "again"}'


def _storage(url: str):
    return gh.storage_client("p", gh.anonymous(), endpoint=url, bounds=B)


def _logging(url: str):
    return gh.logging_client("p", gh.anonymous(), endpoint=url, bounds=B)


SCOPE = history.LogScope(project="p", location="us-east5", cluster="c", namespace="research", run="r")

# client -> (the API's name in the error, what the toolkit asks of it)
CLIENTS: dict[str, tuple[str, Callable[[str], object]]] = {
    "storage-listing": (gh.STORAGE, lambda url: list(_storage(url).list_blobs("b", prefix="d/"))),
    "storage-metadata": (gh.STORAGE, lambda url: _storage(url).lookup_bucket("b")),
    "storage-download": (gh.STORAGE, lambda url: _storage(url).bucket("b").blob("o").download_as_bytes()),
    "logging-entries": (gh.LOGGING, lambda url: history.read(_logging(url), SCOPE, limit_bytes=1 << 30)),
    "iam-rest": (gh.RESOURCE_MANAGER, lambda url: _iam(url).hierarchy("1234")),
}


def _iam(url: str) -> iam_reads.GoogleIam:
    reads = iam_reads.GoogleIam(gh.anonymous(), url)
    for s, api in ((reads._rm, gh.RESOURCE_MANAGER), (reads._iam, gh.IAM)):
        gh._mount(s, api, B)
    return reads


# behaviour -> (server routes and options, the words of the failure, the clients it applies to)
JSON_ONLY = ("storage-listing", "storage-metadata", "logging-entries", "iam-rest")  # a media download is bytes, not JSON
BEHAVIOURS: dict[str, tuple[dict, str, tuple[str, ...]]] = {
    "trickle-body": ({"routes": {"*": "trickle"}, "interval": 0.05, "size": 10_000_000}, "no complete answer within 0.5", tuple(CLIENTS)),
    "trickle-headers": ({"routes": {"*": "trickle-headers"}, "interval": 0.05}, "no complete answer within 0.5", tuple(CLIENTS)),
    "endless-body": ({"routes": {"*": "endless"}}, "the answer is over 1 MiB", tuple(CLIENTS)),
    "gzip-bomb": (
        {"routes": {"*": "json"}, "body": gzip.compress(b"{" + b" " * (8 << 20) + b"}"), "headers": ("Content-Encoding: gzip",)},
        "the answer is over 1 MiB once decompressed",
        tuple(CLIENTS),
    ),
    "endless-pages": ({"routes": {"*": "json"}, "body": PAGE}, "more than 5 pages in one listing", ("storage-listing", "logging-entries")),
    "deep-json": ({"routes": {"*": "json"}, "body": b"[" * 200_000 + b"]" * 200_000}, f"nested more than {MAX_DEPTH} deep", JSON_ONLY),
    "1e400": ({"routes": {"*": "json"}, "body": b'{"items": [], "v": 1e400}'}, "the number 1e400 is out of a double's range", JSON_ONLY),
    "nan": ({"routes": {"*": "json"}, "body": b'{"items": [], "v": NaN}'}, "NaN is not a JSON number", JSON_ONLY),
    "huge-integer": ({"routes": {"*": "json"}, "body": b'{"items": [], "v": ' + b"7" * 50_000 + b"}"}, "longer than any 64-bit one", JSON_ONLY),
    "always-503": (
        {"routes": {"*": "json"}, "status": 503, "body": b'{"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}'},
        "answered HTTP 503 3 times in a row",
        ("storage-listing", "storage-metadata", "storage-download"),  # the storage library retries; the others fail on the first
    ),
}
CASES = [(b, c) for b, (_, _, cs) in BEHAVIOURS.items() for c in cs]


@pytest.fixture()
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage library's retry backoff without its sleeps (its count is what the bound sees)."""
    import time

    from google.api_core.retry import retry_unary

    monkeypatch.setattr(retry_unary, "time", types.SimpleNamespace(sleep=lambda s: None, monotonic=time.monotonic, time=time.time))


def one_line(err: GoogleApiError, api: str, *words: str) -> str:
    text = str(err)
    assert err.exit_code == 3 and "\n" not in text and " — " in text, text
    assert text.startswith(f"{api} (") and "http://127.0.0.1:" in text, text
    assert "?" not in text.split(" — ")[0], text  # never the query (a page token, a signed URL)
    for w in words:
        assert w in text, text
    return text


@pytest.mark.parametrize(("behaviour", "client"), CASES, ids=[f"{b}-{c}" for b, c in CASES])
def test_a_hostile_server_meets_a_bound_in_one_line(no_backoff, behaviour: str, client: str) -> None:
    options, words, _ = BEHAVIOURS[behaviour]
    api, ask = CLIENTS[client]
    routes = options["routes"]
    with serve(routes, **{k: v for k, v in options.items() if k != "routes"}) as h:
        with pytest.raises(GoogleApiError) as failed:
            ask(h.url)
    if client == "logging-entries":
        assert isinstance(failed.value, history.HistoryUnavailable)  # what `metrics` falls back from, with a warning
    one_line(failed.value, api, words)


@contextmanager
def _black_hole() -> Iterator[str]:
    """A listening socket whose backlog is full: a connection is never accepted nor refused."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fill = []
    try:
        for _ in range(8):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fill.append(c)
        yield f"http://127.0.0.1:{port}"
    finally:
        for c in fill:
            c.close()
        server.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("client", list(CLIENTS))
def test_an_unreachable_endpoint_fails_at_once_without_retries(client: str) -> None:
    api, ask = CLIENTS[client]
    with pytest.raises(GoogleApiError) as failed:
        ask(_closed_port())
    text = one_line(failed.value, api, "cannot connect", "check the network and the endpoint")
    assert "Retry" not in text and "Connection refused" in text


@pytest.mark.parametrize("client", ["storage-metadata", "logging-entries"])
def test_a_black_holed_endpoint_meets_the_connect_timeout(client: str) -> None:
    api, ask = CLIENTS[client]
    with _black_hole() as url:
        with pytest.raises(GoogleApiError) as failed:
            ask(url)
    one_line(failed.value, api, "cannot connect")


def test_the_page_cap_counts_one_listing_and_starts_again_for_the_next() -> None:
    pages = b'{"items": [{"name": "a", "bucket": "b"}], "nextPageToken": "t"}'
    with serve({"*": "json"}, body=pages) as h:
        client = _storage(h.url)
        for _ in range(2):  # each listing its own count: the second is not refused for the first one's pages
            it = client.list_blobs("b")
            got = []
            with pytest.raises(GoogleApiError, match="more than 5 pages"):
                for blob in it:
                    got.append(blob.name)
            assert len(got) == 5
    assert sum("pageToken=t" in r for r in h.requests) == 8  # pages 2..5 of each listing; the sixth is never sent


def test_a_well_behaved_answer_passes_through_unchanged() -> None:
    body = b'{"kind": "storage#bucket", "name": "b", "projectNumber": "1234", "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": true}}}'
    with serve({"*": "json"}, body=body) as h:
        b = _storage(h.url).lookup_bucket("b")
    assert b.name == "b" and b.project_number == 1234 and b.iam_configuration.uniform_bucket_level_access_enabled
    small = gzip.compress(b'{"name": "b", "kind": "storage#bucket"}')
    with serve({"*": "json"}, body=small, headers=("Content-Encoding: gzip",)) as h:
        assert _storage(h.url).lookup_bucket("b").name == "b"


# ------------------------------------------------------------------ through the CLI: one line, exit 3, nothing done


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [("endless-body", "the answer is over 32 MiB"), ("deep-json", "nested more than 64 deep"), ("1e400", "out of a double's range")],
)
def test_data_check_against_a_hostile_storage_server_is_one_line_exit_3(tmp_path: Path, behaviour: str, words: str) -> None:
    options, _, _ = BEHAVIOURS[behaviour]
    with serve(options["routes"], **{k: v for k, v in options.items() if k != "routes"}) as h:
        env = {"STORAGE_EMULATOR_HOST": h.url, "KUBECONFIG": "", "HOME": "/nonexistent-home"}
        spec = REPO / "examples" / "v6e-reservation.yaml"
        done = cli("workloads", "data", "check", "--dataset", _first_dataset(spec), "--spec", str(spec), "--no-load-tokenizer", env=env)
    assert done.returncode == 3 and done.stdout == "", (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Cloud Storage (GET http://127.0.0.1:") and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_data_check_against_an_unreachable_storage_server_is_one_line_exit_3() -> None:
    spec = REPO / "examples" / "v6e-reservation.yaml"
    env = {"STORAGE_EMULATOR_HOST": _closed_port(), "KUBECONFIG": "", "HOME": "/nonexistent-home"}
    done = cli("workloads", "data", "check", "--dataset", _first_dataset(spec), "--spec", str(spec), "--no-load-tokenizer", env=env)
    assert done.returncode == 3 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: Cloud Storage (GET http://127.0.0.1:") and "cannot connect" in done.stderr and "RetryError" not in done.stderr


def _first_dataset(spec: Path) -> str:
    import yaml

    return yaml.safe_load(spec.read_text())["datasets"][0]["name"]
