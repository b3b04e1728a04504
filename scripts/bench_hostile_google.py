"""Worst-case time and memory of the Google API client (infra.gcp_api) against a hostile loopback server.

For each misbehaviour (tests/support/hostile_server.py and a few JSON bodies), one fresh process
runs ``Client.get`` (or ``Client.pages``) with the shipped bounds and reports how it ended,
the wall time, the peak Python allocation (tracemalloc) and the process's peak RSS. Nothing
here is asserted: the tests check each failure's kind and message; this prints the figures.

    .venv/bin/python scripts/bench_hostile_google.py            # every case, shipped bounds
    .venv/bin/python scripts/bench_hostile_google.py --case trickle
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

CASES = {
    # name: (hostile_server routes mode, body, listing?)
    "trickle-body": ("trickle", None, False),
    "trickle-headers": ("trickle-headers", None, False),
    "endless-body": ("endless", None, False),
    "endless-pages": ("json", b'{"timeSeries": [], "nextPageToken": "again"}', True),
    "deep-json": ("json", b"[" * 1_000_000 + b"]" * 1_000_000, False),
    "1e400": ("json", b'{"v": 1e400}', False),
    "nan": ("json", b'{"v": NaN}', False),
    "huge-integer": ("json", b'{"v": ' + b"9" * 1_000_000 + b"}", False),
    "refused": (None, None, False),
    "black-hole": (None, None, False),
}


def one(case: str) -> dict:
    from infra import gcp_api
    from tests.support.hostile_server import serve

    mode, body, listing = CASES[case]
    req = gcp_api.ApiRequest("cloudquotas", "/v1/projects/p/locations/global/services/compute.googleapis.com/quotaInfos/X", "bench")
    tracemalloc.start()
    start = time.monotonic()
    outcome = "returned"

    def run(url: str) -> None:
        client = gcp_api.Client(endpoint=url, token=lambda: "t")
        client.pages(req) if listing else client.get(req)

    try:
        if case == "refused":
            run("http://127.0.0.1:9")
        elif case == "black-hole":
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(0)
            port = server.getsockname()[1]
            fill = []
            for _ in range(8):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", port))
                fill.append(c)
            run(f"http://127.0.0.1:{port}")
        else:
            kw = {"interval": 0.05, "size": 10_000_000} if mode.startswith("trickle") else {}
            if body is not None:
                kw["body"] = body
            with serve({"*": mode}, **kw) as h:
                run(h.url)
    except gcp_api.ApiError as e:
        outcome = f"exit {e.exit_code}: {str(e).split('): ', 1)[-1][:110]}"
    seconds = time.monotonic() - start
    _, peak = tracemalloc.get_traced_memory()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"case": case, "seconds": round(seconds, 2), "peak_alloc_mib": round(peak / 2**20, 1), "peak_rss_mib": round(rss_kib / 1024, 1), "outcome": outcome}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES))
    args = ap.parse_args()
    if args.case:
        print(json.dumps(one(args.case)))
        return
    from infra import gcp_api

    b = gcp_api.Bounds()
    print(
        f"shipped bounds: connect {b.connect_timeout_s:g} s, read {b.read_timeout_s:g} s, deadline {b.deadline_s:g} s, "
        f"{b.max_bytes // 2**20} MiB, {b.max_pages} pages, depth {b.max_depth}"
    )
    print(f"{'case':<16} {'seconds':>8} {'alloc MiB':>10} {'RSS MiB':>8}  outcome")
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", case], capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            print(f"{case:<16} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout)
        print(f"{r['case']:<16} {r['seconds']:>8} {r['peak_alloc_mib']:>10} {r['peak_rss_mib']:>8}  {r['outcome']}")


if __name__ == "__main__":
    main()
