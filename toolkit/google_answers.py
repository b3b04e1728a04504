"""What the toolkit accepts of a Google API's answer: the bounds, and JSON it can read safely.

Both of the toolkit's ways to Google's services keep to these: ``infra.gcp_api`` (its own GETs
of Compute Engine, GKE, Cloud Quotas and the billing catalog) and
``workloads.observe.google_http`` (the transport Google's client libraries for Cloud Storage
and Cloud Logging are built on, and the IAM reads of the dataset check). One set of numbers,
so an answer one client refuses the other refuses too:

- ``connect_timeout_s``: a TCP (and TLS) handshake with a Google front end takes
  milliseconds; a black-holed endpoint fails in seconds, not at the kernel's TCP timeout;
- ``read_timeout_s``: each wait for bytes once connected;
- ``deadline_s``: one whole answer, from the request to its last byte. A socket timeout
  restarts with every byte, so a server that trickles one byte a second keeps it alive
  forever; ``toolkit.deadline.Watchdog`` ends such a read;
- ``max_bytes``: an answer longer than this is not read further (a reservation, an IAM
  policy, a page of a bucket listing or of log entries is KiBs to a few MiB);
- ``max_pages``: pages of one listing; more is refused, never cut short (a listing read in
  part would be a wrong answer that looks right);
- ``max_depth`` and the number domain (``decode_json``): ``json.loads`` alone takes NaN and
  Infinity (not JSON), turns ``1e400`` into inf, spends seconds on a 100,000-digit
  integer and raises RecursionError (a traceback) past ~1000 levels of nesting.

Crossing one is a ``toolkit.errors.GoogleApiError`` (exit 3), one line naming the API.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BadJson", "Bounds", "decode_json"]

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
DEADLINE_S = 60.0
MAX_BYTES = 32 * 1024 * 1024
MAX_PAGES = 1000
MAX_DEPTH = 64  # Google's answers the toolkit reads are under 10 deep

# Integers longer than this many digits are longer than any int64 or uint64 Google writes
# (larger ones travel as strings in Google's JSON: a bucket's size, an object's generation).
MAX_INTEGER_DIGITS = 20


@dataclass(frozen=True)
class Bounds:
    """What one request to a Google API may take; every bound on an answer is one of these fields."""

    read_timeout_s: float = READ_TIMEOUT_S
    deadline_s: float | None = DEADLINE_S  # None: only the read timeout
    max_bytes: int = MAX_BYTES
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    max_pages: int = MAX_PAGES
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("read_timeout_s", "connect_timeout_s", "max_bytes", "max_pages", "max_depth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Bounds.{name} must be positive, not {getattr(self, name)!r}")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ValueError(f"Bounds.deadline_s must be positive or None, not {self.deadline_s!r}")


class BadJson(ValueError):
    """An answer that is not JSON the toolkit will read; ``str()`` is the reason, in words."""


def _refuse_constant(word: str) -> Any:
    raise BadJson(f"{word} is not a JSON number")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise BadJson(f"the number {text[:24]} is out of a double's range")
    return x


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise BadJson(f"the integer {text[:24]}… is longer than any 64-bit one")
    return int(text)


def decode_json(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """UTF-8 JSON within a double's and an int64/uint64's number domain, at most ``max_depth`` deep; else BadJson."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError:
        raise BadJson("it is not UTF-8 text") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite, parse_int=_integer)
    except RecursionError:
        raise BadJson(f"it is nested more than {max_depth} deep") from None
    except BadJson:
        raise
    except ValueError as e:
        raise BadJson(f"it is not JSON ({str(e).splitlines()[0][:80]})") from None
    # Under the interpreter's recursion limit json.loads nests as deep as it is given: walk it
    # without recursion and refuse what is deeper than any answer the toolkit reads.
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= max_depth and children:
            if any(isinstance(c, dict | list) for c in children):
                raise BadJson(f"it is nested more than {max_depth} deep")
            continue
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return doc
