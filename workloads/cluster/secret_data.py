"""A value of a Secret the API server answered with, decoded within bounds. Pure.

A Secret's ``data`` is base64 text (the API server's encoding of the bytes), but what comes
back is whatever the server, or whoever may write the Secret, put there: not a mapping, not a
string, not base64, megabytes, bytes that are not the text they should be. Every such answer
is one ``ClusterError`` line (exit 3, "the cluster side misbehaved") naming the Secret and
key, before anything is built from it; never a traceback after half the work was applied.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from toolkit.errors import ClusterError

MAX_VALUE_BYTES = 64 * 1024  # a service-account token is ~1 KiB, a CA bundle a few KiB


def data_of(obj: Any) -> Mapping[str, Any] | None:
    """A Secret object's ``data`` mapping, or None when there is none (not filled yet)."""
    data = obj.get("data") if isinstance(obj, Mapping) else None
    return data if isinstance(data, Mapping) else None


def value(data: Mapping[str, Any], key: str, where: str, *, text: bool = False) -> Any:
    """``data[key]`` decoded: bytes, or printable ASCII text with ``text`` (a token). ``where`` names the Secret."""
    raw = data.get(key)
    fix = f"check the Secret {where} (delete it to have it filled again)"
    if not isinstance(raw, str) or len(raw) > (MAX_VALUE_BYTES * 4) // 3 + 4:
        raise ClusterError(f"the Secret {where} holds no usable {key!r} (not text, or over {MAX_VALUE_BYTES // 1024} KiB) — {fix}")
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ClusterError(f"the Secret {where} holds {key!r} that is not base64 — {fix}") from None
    if len(decoded) > MAX_VALUE_BYTES:
        raise ClusterError(f"the Secret {where} holds a {key!r} of {len(decoded):,} bytes, over the {MAX_VALUE_BYTES // 1024} KiB it may be — {fix}")
    if not text:
        return decoded
    if not decoded or not all(0x21 <= b <= 0x7E for b in decoded):
        raise ClusterError(f"the Secret {where} holds {key!r} that is not a token (printable ASCII without spaces) — {fix}")
    return decoded.decode("ascii")
