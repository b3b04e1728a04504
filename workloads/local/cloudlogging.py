"""The local cluster's Cloud Logging: what GKE's logging agent keeps of every pod, served on loopback.

On GKE a container's stdout and stderr go two ways: to the kubelet's log of that pod
(``kubectl logs``; gone with the pod, and a restarted pod's log begins afresh) and, through
the node's logging agent, to Cloud Logging, where every attempt's lines stay, each entry
stamped with the container (``resource`` type ``k8s_container``) and the pod's labels
(``labels."k8s-pod/<key>"``, a key's dots written as underscores). ``metrics``, ``report``
and goodput read a run's earlier attempts from there.

The local cluster plays both sides: the rehearsal daemon, as the agent, appends each line it
writes to a pod's log to this store too (``Store.ship``); ``local up`` runs this module as
daemon ``logging``, a server of the v2 ``entries:list`` call (the request and response
shapes of the Cloud Logging REST API), which Google's client reaches through the ConfigMap
``kube-public/tgk-local-logging`` (``workloads.local.loopback``). Filters are the conjunctions the
toolkit sends (``FIELD OP "VALUE"`` joined by ``AND``); any other filter is answered 400
INVALID_ARGUMENT, as a filter the real API cannot parse is, never silently widened.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.paths import REPO_ROOT
from workloads.local import loopback
from workloads.local.loopback import LoopbackService
from workloads.observe.history import make_client

if TYPE_CHECKING:
    from workloads.local.daemons import Daemons

SERVICE = LoopbackService(daemon="logging", configmap_name="tgk-local-logging", what="Cloud Logging server", health="/healthz", make_client=make_client)
MAX_PAGE = 1000  # the API's largest pageSize
MAX_BODY = 64 * 1024  # an entries:list request is a small JSON document


def store_file(state_dir: Path) -> Path:
    return state_dir / "cloud-logging" / "entries.jsonl"


def ready_file(state_dir: Path) -> Path:
    return state_dir / "cloud-logging" / "ready"


def argv(port: int, state_dir: Path) -> list[str]:
    return [sys.executable, "-m", "workloads.local.cloudlogging", "--state-dir", str(state_dir), "--port", str(port)]


def start(daemons: Daemons, port: int, timeout: float) -> str:
    """This module as daemon ``logging`` on ``port``, its store in ``<state>/cloud-logging/``, answering; its base URL."""
    return SERVICE.start(daemons, port, timeout, lambda: argv(port, daemons.state_dir), env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)


def pod_label_key(key: str) -> str:
    """The entry label GKE's agent gives a pod label: ``k8s-pod/`` and the key with its dots as underscores."""
    return "k8s-pod/" + key.replace(".", "_")


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as the API takes it (``Z`` or an offset; any number of fraction digits)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text, re.ASCII)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    frac = (m.group(2) or "")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")


@dataclass(frozen=True)
class Container:
    """Where a line came from, as the agent stamps it."""

    project: str
    location: str
    cluster: str
    namespace: str
    pod: str
    container: str
    pod_labels: Mapping[str, str]


_CRI = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) [FP] (.*)", re.ASCII)


def cri_fields(line: str, at: float) -> tuple[str, str, str]:
    """(RFC 3339 time, stream, text) of a CRI log line; a plain line is stderr's at ``at``."""
    m = _CRI.fullmatch(line)
    if m:
        try:
            return rfc3339(parse_time(m.group(1)).timestamp()), m.group(2), m.group(3)
        except ValueError:
            pass
    return rfc3339(at), "stderr", line


class Store:
    """The entries the agent shipped, one JSON document per line (appended; read whole per request)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seq = 0

    def ship(self, source: Container, lines: Iterable[str], at: float) -> None:
        """Append one entry per line, read as the agent reads the kubelet's files.

        A line in the CRI log format (``<time> <stream> <F|P> <text>``, what the pod's log
        file holds) gives its own time, stream and text, as the agent takes them; any other
        line is stderr's, at ``at``.
        """
        labels = {pod_label_key(k): v for k, v in source.pod_labels.items()}
        resource = {
            "type": "k8s_container",
            "labels": {
                "project_id": source.project,
                "location": source.location,
                "cluster_name": source.cluster,
                "namespace_name": source.namespace,
                "pod_name": source.pod,
                "container_name": source.container,
            },
        }
        out = []
        with self._lock:
            for raw in lines:
                self._seq += 1
                when, stream, line = cri_fields(raw.rstrip("\n"), at)
                out.append(
                    json.dumps(
                        {
                            "logName": f"projects/{source.project}/logs/{stream}",
                            "resource": resource,
                            "labels": labels,
                            "textPayload": line,
                            "timestamp": when,
                            "receiveTimestamp": rfc3339(at),
                            "severity": "ERROR" if stream == "stderr" else "INFO",
                            "insertId": f"{os.getpid():x}-{at:.6f}-{self._seq}",
                        }
                    )
                    + "\n"
                )
            if out:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:
                    f.write("".join(out))

    def entries(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        # A line being appended while read is cut short: it is the next request's.
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


# ------------------------------------------------------------------ filters

_TERM = re.compile(
    r"""\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|"(?:[^"\\]|\\.)*"))*)"""
    r"""\s*(?P<op>>=|<=|!=|=|>|<|:)\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*""",
    re.ASCII,
)


class FilterError(ValueError):
    pass


@dataclass(frozen=True)
class Term:
    path: tuple[str, ...]
    op: str
    value: str


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_filter(text: str) -> list[Term]:
    """``FIELD OP "VALUE"`` terms joined by AND; anything else is a FilterError."""
    terms: list[Term] = []
    rest = text.strip()
    while rest:
        m = _TERM.match(rest)
        if not m:
            raise FilterError(f'unparseable filter at {rest[:40]!r}: this server takes FIELD OP "VALUE" terms joined by AND')
        path = tuple(_unquote(p[1:-1]) if p.startswith('"') else p for p in re.findall(r'"(?:[^"\\]|\\.)*"|[^.]+', m.group("field")))
        terms.append(Term(path, m.group("op"), _unquote(m.group("value"))))
        rest = rest[m.end() :]
        if rest:
            if not rest.startswith("AND "):
                raise FilterError(f"unparseable filter at {rest[:40]!r}: only AND joins terms here")
            rest = rest[4:]
    return terms


def _field(entry: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = entry
    for p in path:
        if not isinstance(node, Mapping) or p not in node:
            return None
        node = node[p]
    return node


def matches(entry: Mapping[str, Any], terms: list[Term]) -> bool:
    for t in terms:
        have = _field(entry, t.path)
        if t.path == ("timestamp",):
            if have is None:
                return False
            a, b = parse_time(have), parse_time(t.value)
        elif have is None:
            if t.op == "!=":
                continue
            return False
        else:
            a, b = str(have), t.value
        # ':' is the filter language's "has": for a text field, the value occurs in it (case-insensitively).
        ok = {"=": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b, ":": str(b).lower() in str(a).lower()}[t.op]
        if not ok:
            return False
    return True


def list_entries(entries: list[dict[str, Any]], request: Mapping[str, Any]) -> dict[str, Any]:
    """The ``entries:list`` answer for one request (pure): filtered, ordered, one page."""
    names = request.get("resourceNames") or []
    if not names or not all(isinstance(n, str) and n.startswith("projects/") for n in names):
        raise FilterError("resourceNames: name at least one projects/PROJECT")
    projects = {n.split("/", 1)[1] for n in names}
    order = request.get("orderBy") or "timestamp asc"
    if order not in ("timestamp asc", "timestamp desc"):
        raise FilterError(f"orderBy: {order!r} is not 'timestamp asc' or 'timestamp desc'")
    size = request.get("pageSize") or 50
    if not isinstance(size, int) or not 0 < size <= MAX_PAGE:
        raise FilterError(f"pageSize: {size!r} is not 1..{MAX_PAGE}")
    try:
        start = int(base64.urlsafe_b64decode((request.get("pageToken") or "MA==").encode()).decode())
    except ValueError:
        raise FilterError("pageToken: not one this server gave") from None
    terms = parse_filter(request.get("filter") or "")
    chosen = [e for e in entries if e.get("logName", "").split("/")[1:2] and e["logName"].split("/")[1] in projects and matches(e, terms)]
    chosen.sort(key=lambda e: parse_time(e["timestamp"]), reverse=order.endswith("desc"))
    page = chosen[start : start + size]
    out: dict[str, Any] = {"entries": page}
    if start + size < len(chosen):
        out["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return out


# ------------------------------------------------------------------ the server


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # the daemon's log is for what matters
            pass

        def _answer(self, code: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, status: str, message: str) -> None:
            self._answer(code, {"error": {"code": code, "message": message, "status": status}})

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(200, {"ok": True})
            else:
                self._error(404, "NOT_FOUND", f"no such path {self.path}")

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/v2/entries:list":
                self._error(404, "NOT_FOUND", f"this server plays entries:list only, not {self.path}")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(400, "INVALID_ARGUMENT", "request too large")
                return
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(request, dict):
                    raise FilterError("the request body is not a JSON object")
                self._answer(200, list_entries(store.entries(), request))
            except (FilterError, json.JSONDecodeError, ValueError) as e:
                self._error(400, "INVALID_ARGUMENT", str(e))

    return Handler


def serve(state_dir: Path, port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), _handler(Store(store_file(state_dir))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads.local.cloudlogging", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    server = serve(args.state_dir, args.port)
    ready = ready_file(args.state_dir)
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_text(f"{os.getpid()}\n")
    sys.stderr.write(f"local Cloud Logging on {loopback.url(args.port)} ({store_file(args.state_dir)})\n")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
