"""Reading JSON that anyone may have written (an API server's answer, a credential plugin's, a file in a bucket), within bounds.

``load_json`` is the one JSON reader of untrusted input (``tests/test_parsers.py`` keeps new code
on it, and feeds it deep, long and repeated input):

- at most ``max_bytes``, refused before it is parsed;
- UTF-8 only (JSON's own rule; a BOM or another encoding is refused, not guessed);
- at most ``max_depth`` nested arrays and objects: Python's parser stops at its recursion limit
  with a RecursionError (a traceback where it is not caught), and a structure a few hundred deep
  is no answer any caller reads; checked without recursion;
- numbers a double holds: ``NaN``, ``Infinity`` and ``1e400`` (which Python reads as infinity)
  are refused, as is an integer of more digits than Python converts (4,300).

Every failure is a ``JsonTextError`` (a ValueError) whose ``problem`` each caller turns into
its own one-line error: exit 3 for a server's answer, 2 for the user's file.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_DEPTH", "JsonTextError", "load_json"]

MAX_DEPTH = 100


class JsonTextError(ValueError):
    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonTextError(f"holds the number {text[:40]}, which no double holds")
    return value


def _constant(word: str) -> Any:
    raise JsonTextError(f"holds {word}, which JSON does not have")


def load_json(raw: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH, finite: bool = True) -> Any:
    """The JSON value of ``raw`` within the bounds above; ``JsonTextError`` otherwise.

    ``finite=False`` keeps ``NaN`` and ``Infinity`` as Python floats, for a reader that judges each
    number itself (MaxText writes a diverged loss as ``NaN`` into its metrics file)."""
    size = len(raw.encode("utf-8", errors="surrogatepass")) if isinstance(raw, str) else len(raw)
    if size > max_bytes:
        raise JsonTextError(f"is {size:,} bytes, over the {max_bytes:,} it may be")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonTextError(f"is not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_constant) if finite else json.loads(raw)
    except JsonTextError:
        raise
    except RecursionError:
        raise JsonTextError(f"is nested more than {max_depth} deep") from None
    except json.JSONDecodeError as e:
        raise JsonTextError(f"is not JSON ({e.msg} at line {e.lineno})") from None
    except ValueError:  # int() of 4,300+ digits
        raise JsonTextError("holds an integer of more than 4,300 digits") from None
    _check_depth(value, max_depth)
    return value


def _check_depth(value: Any, max_depth: int) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            raise JsonTextError(f"is nested more than {max_depth} deep")
        stack.extend((c, depth + 1) for c in children)
