"""A loopback HTTP server that misbehaves on purpose: it trickles, or never stops talking.

Written on raw sockets (``http.server`` would frame its answers properly). Modes:

- ``trickle``: a 200 with a Content-Length of ``size`` whose body comes one byte every
  ``interval`` seconds (a socket timeout restarts with each byte and never fires);
- ``trickle-headers``: the status line and headers themselves, a byte at a time;
- ``endless``: a 200 with no length whose body never ends, as fast as the client reads;
- ``endless-line``: the same, without a line break (a watch or log stream with no end of line);
- ``json``: ``body`` at once (a well-behaved answer, e.g. for ``/version``), with ``status``
  (200 unless given) and ``headers`` (extra header lines, e.g. a ``Content-Encoding``).

``routes`` maps a path to a mode (``"*"`` for any other path). Every handler stops when
the client goes away or the server is closed.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


class Hostile:
    def __init__(
        self,
        routes: dict[str, str],
        *,
        interval: float = 0.2,
        size: int = 1000,
        body: bytes = b'{"gitVersion": "v1.34.2"}',
        status: int = 200,
        headers: tuple[str, ...] = (),
    ) -> None:
        self.routes, self.interval, self.size, self.body = routes, interval, size, body
        self.status, self.headers = status, headers
        self.stop = threading.Event()
        self.port = 0
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, directory: Path, user: dict | None = None) -> Path:
        p = directory / "kubeconfig"
        p.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "hostile",
                    "clusters": [{"name": "h", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": user if user is not None else {}}],
                    "contexts": [{"name": "hostile", "context": {"cluster": "h", "user": "u", "namespace": "research"}}],
                }
            )
        )
        return p

    def answer(self, conn: socket.socket, path: str) -> None:
        mode = self.routes.get(path.split("?")[0], self.routes.get("*", "json"))
        if mode == "json":
            head = f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\nConnection: close\r\n" + "".join(f"{h}\r\n" for h in self.headers)
            conn.sendall(head.encode() + f"Content-Length: {len(self.body)}\r\n\r\n".encode() + self.body)
        elif mode == "trickle":
            conn.sendall(_HEAD + f"Content-Length: {self.size}\r\n\r\n".encode())
            self._drip(conn, b"x" * self.size)
        elif mode == "trickle-headers":
            self._drip(conn, _HEAD + b"X-Slow: " + b"y" * 60000 + b"\r\n\r\n")
        elif mode in ("endless", "endless-line"):
            conn.sendall(_HEAD + b"Connection: close\r\n\r\n")
            chunk = (b"z" * 65535 + b"\n") if mode == "endless" else b"z" * 65536
            while not self.stop.is_set():
                conn.sendall(chunk)
        else:
            raise ValueError(mode)

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self.stop.wait(self.interval):
                return
            conn.sendall(data[i : i + 1])


@contextmanager
def serve(routes: dict[str, str], **kw) -> Iterator[Hostile]:
    h = Hostile(routes, **kw)

    class _Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, rest = data.partition(b"\r\n\r\n")
            # Read a request's body before answering: closing a socket with unread bytes resets it.
            length = next(
                (int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")[1:]) if k.strip().lower() == b"content-length" and v.strip().isdigit()),
                0,
            )
            while len(rest) < min(length, 1 << 20):
                more = conn.recv(65536)
                if not more:
                    return
                rest += more
            line = data.split(b"\r\n", 1)[0].decode(errors="replace")
            h.requests.append(line)
            try:
                h.answer(conn, line.split(" ")[1] if " " in line else "/")
            except OSError:
                return  # the client hung up: what a client with a deadline does

    class _Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = _Server(("127.0.0.1", 0), _Handler)
    h.port = server.server_address[1]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield h
    finally:
        h.stop.set()
        server.shutdown()
        server.server_close()
        time.sleep(0.05)  # let the handlers see the stop
