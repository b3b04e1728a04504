"""One way to write a pattern that checks text anyone may have written.

Two habits of Python's ``re`` let through what Kubernetes, GCP and Terraform refuse:

- ``$`` matches at the end *or before a trailing newline*, so ``re.match(r"^[a-z]+$", "run\\n")``
  matches: a run name, a bucket path or a label with a newline passes the check and reaches
  a manifest or a stack. A whole value is checked with a full match (``fullmatch`` here, or
  ``re.fullmatch``), which must span the whole text.
- ``\\d``, ``\\w``, ``\\s`` and ``\\b`` follow Unicode by default: ``\\d`` takes '٣' and '１',
  ``\\w`` letters of every script. A class is written out (``[0-9]``, ``[A-Za-z0-9_]``) or the
  pattern is compiled with ``re.ASCII`` (``fullmatch`` here does).

A pydantic ``pattern=`` is matched by pydantic-core with Rust's ``regex`` crate, which
*searches* (so the pattern needs both ``^`` and ``$``; there ``$`` is the end of the text) and
whose ``\\d`` is Unicode too; for a pattern Rust's crate cannot compile (a lookaround, a
backreference) pydantic falls back to Python's ``re``, where ``$`` takes the newline again.
So a field's pattern is ``^...$`` with written-out classes and no lookaround.

``tests/test_patterns.py`` holds every module of the toolkit to these rules (it reads the
code) and feeds each pattern-checked field of the spec and the recipes a trailing newline
and Unicode digits and letters.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["fullmatch"]


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII)


def fullmatch(pattern: str | re.Pattern[str], text: str) -> re.Match[str] | None:
    """``pattern`` over the whole of ``text``, ASCII classes; a compiled pattern is taken as it was compiled."""
    if isinstance(pattern, re.Pattern):
        return pattern.fullmatch(text)
    return _compiled(pattern).fullmatch(text)
