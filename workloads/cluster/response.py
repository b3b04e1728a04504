"""What the API server answered: a status and a body (every transport returns this)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300
