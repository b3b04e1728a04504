"""A loopback server playing Google's REST APIs in their documented shapes, for tests that point ``--endpoint`` at it.

``routes`` maps a path to the JSON a GET answers; any other path gets Google's 404 error
body. A POST is recorded with its JSON body (``posts``) and answered ``post_answer``, or
Google's error body when ``refuse`` is set to ``(status, message)``. Every request is
recorded in ``seen`` as ``(method, path, Authorization header)``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def error_body(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


class FakeGoogle:
    def __init__(self, routes: dict[str, Any], *, post_answer: dict[str, Any] | None = None) -> None:
        self.routes = routes
        self.post_answer = post_answer or {}
        self.refuse: tuple[int, str] | None = None
        self.seen: list[tuple[str, str, str | None]] = []
        self.posts: list[tuple[str, Any, str | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                fake.seen.append(("GET", path, self.headers.get("Authorization")))
                body = fake.routes.get(path)
                if body is None:
                    self._answer(404, error_body(404, f"The resource '{path}' was not found", "NOT_FOUND"))
                else:
                    self._answer(200, body)

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                fake.seen.append(("POST", path, self.headers.get("Authorization")))
                fake.posts.append((path, json.loads(self.rfile.read(int(self.headers["Content-Length"]))), self.headers.get("Content-Type")))
                if fake.refuse:
                    code, message = fake.refuse
                    self._answer(code, error_body(code, message, "FAILED_PRECONDITION"))
                else:
                    self._answer(200, fake.post_answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
