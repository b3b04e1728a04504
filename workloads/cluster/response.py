"""What the API server answered: a status and a body (every transport returns this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.errors import Rejected
from toolkit.jsontext import load_json


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""

    def json(self) -> Any:
        """The body as a JSON object; anything else (not JSON, nested past the parser's recursion limit, a list) is one Rejected line."""
        if not self.body:
            return {}
        try:
            obj = load_json(self.body, max_bytes=len(self.body))  # the transport bounded its size: depth and numbers here
        except (ValueError, RecursionError) as e:
            obj = e
        if not isinstance(obj, dict):  # every JSON answer of the Kubernetes API is an object
            raise Rejected(
                f"the API server's answer (HTTP {self.status}) is not a JSON object — check that --kubeconfig/--context name a Kubernetes API server"
            )
        return obj

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300
