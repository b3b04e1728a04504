"""Worst-case time and memory of the Google clients the workloads side builds (Cloud Storage, Cloud
Logging, the IAM reads; all over ``workloads.observe.google_http``) against a hostile loopback server.

For each misbehaviour (tests/support/hostile_server.py, a few bodies no Google API sends, a refused and a
black-holed port), one fresh process asks one client with the shipped bounds
(``toolkit.google_answers``) and reports how it ended, the wall time, the peak Python allocation
(tracemalloc) and the process's peak RSS. Nothing is asserted here: the tests check each
failure's kind and message; this prints the figures. The trickles take the whole deadline.

    .venv/bin/python scripts/bench_google_clients.py                       # every case, every client
    .venv/bin/python scripts/bench_google_clients.py --client storage-listing --case endless-body
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PAGE = b'{"items": [], "entries": [], "nextPageToken": "again"}'


def _gzip_bomb(size: int) -> bytes:
    """``size`` bytes of one JSON object, gzipped (about 1 MiB per GiB), made without holding them."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    parts = [z.compress(b"{")] + [z.compress(chunk) for _ in range(size >> 20)] + [z.compress(b"}"), z.flush()]
    return b"".join(parts)


# name: (tests/support/hostile_server.py mode, its options, made when the case runs)
CASES: dict[str, tuple[str | None, object]] = {
    "trickle-body": ("trickle", lambda: {"interval": 0.05, "size": 100_000}),
    "trickle-headers": ("trickle-headers", lambda: {"interval": 0.05}),
    "endless-body": ("endless", dict),
    "gzip-bomb": ("json", lambda: {"body": _gzip_bomb(1 << 30), "headers": ("Content-Encoding: gzip",)}),
    "endless-pages": ("json", lambda: {"body": PAGE}),
    "deep-json": ("json", lambda: {"body": b"[" * 16_000_000 + b"]" * 16_000_000}),
    "1e400": ("json", lambda: {"body": b'{"items": [], "v": 1e400}'}),
    "huge-integer": ("json", lambda: {"body": b'{"items": [], "v": ' + b"9" * 16_000_000 + b"}"}),
    "always-503": ("json", lambda: {"status": 503, "body": b'{"error": {"code": 503, "message": "busy"}}'}),
    "refused": (None, dict),
    "black-hole": (None, dict),
}
CLIENTS = ("storage-listing", "storage-download", "logging-entries", "iam-rest")


def ask(client: str, url: str) -> None:
    from workloads.data import iam as iam_reads
    from workloads.observe import google_http as gh
    from workloads.observe import history

    if client == "storage-listing":
        list(gh.storage_client("p", gh.anonymous(), endpoint=url).list_blobs("b", prefix="d/"))
    elif client == "storage-download":
        gh.storage_client("p", gh.anonymous(), endpoint=url).bucket("b").blob("o").download_as_bytes()
    elif client == "logging-entries":
        scope = history.LogScope(project="p", location="l", cluster="c", namespace="n", run="r")
        history.read(gh.logging_client("p", gh.anonymous(), endpoint=url), scope, limit_bytes=1 << 40)
    else:
        iam_reads.GoogleIam(gh.anonymous(), url).hierarchy("1234")


def one(client: str, case: str) -> dict:
    from tests.support.hostile_server import serve
    from toolkit.errors import GoogleApiError
    from workloads.data import iam as iam_reads
    from workloads.observe import google_http as gh

    # Each client built once first (their libraries loaded): the figures are the handling of the answer, not imports.
    gh.storage_client("p", gh.anonymous(), endpoint="http://127.0.0.1:9")
    gh.logging_client("p", gh.anonymous(), endpoint="http://127.0.0.1:9")
    iam_reads.GoogleIam(gh.anonymous(), "http://127.0.0.1:9")

    mode, make = CASES[case]
    options = make()  # type: ignore[operator]
    tracemalloc.start()  # from here: the client's memory (and the loopback server's, which holds one chunk at a time)
    start = time.monotonic()
    outcome = "returned"
    try:
        if case == "refused":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            ask(client, f"http://127.0.0.1:{port}")
        elif case == "black-hole":
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(0)
            fill = []
            for _ in range(8):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(server.getsockname())
                fill.append(c)
            ask(client, f"http://127.0.0.1:{server.getsockname()[1]}")
        else:
            with serve({"*": mode}, **options) as h:
                ask(client, h.url)
    except GoogleApiError as e:
        outcome = f"exit {e.exit_code}: {str(e).split('): ', 1)[-1][:90]}"
    except Exception as e:  # noqa: BLE001 - a figure, not a test: say what else ended it
        outcome = f"{type(e).__name__}: {' '.join(str(e).split())[:90]}"
    seconds = time.monotonic() - start
    _, peak = tracemalloc.get_traced_memory()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "client": client,
        "case": case,
        "seconds": round(seconds, 2),
        "peak_alloc_mib": round(peak / 2**20, 1),
        "peak_rss_mib": round(rss_kib / 1024, 1),
        "outcome": outcome,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--client", choices=CLIENTS)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.client, args.case)))
        return
    from toolkit.google_answers import Bounds

    b = Bounds()
    print(
        f"shipped bounds: connect {b.connect_timeout_s:g} s, read {b.read_timeout_s:g} s, deadline {b.deadline_s:g} s, "
        f"{b.max_bytes // 2**20} MiB, {b.max_pages} pages, depth {b.max_depth}"
    )
    print(f"{'client':<17} {'case':<16} {'seconds':>8} {'alloc MiB':>10} {'RSS MiB':>8}  outcome")
    for client in [args.client] if args.client else CLIENTS:
        for case in [args.case] if args.case else CASES:
            out = subprocess.run([sys.executable, __file__, "--one", "--client", client, "--case", case], capture_output=True, text=True, cwd=REPO)
            if out.returncode != 0:
                print(f"{client:<17} {case:<16} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout)
            print(f"{r['client']:<17} {r['case']:<16} {r['seconds']:>8} {r['peak_alloc_mib']:>10} {r['peak_rss_mib']:>8}  {r['outcome']}")


if __name__ == "__main__":
    main()
