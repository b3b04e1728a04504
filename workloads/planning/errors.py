"""How planning refuses a run: one ``PlanError`` naming the flag or recipe field, the problem and the fix.

``PlanError`` joins the toolkit's hierarchy as a ``FieldError`` (``toolkit/errors.py``: one
line, exit 2). ``suggest`` is the "did you mean" its messages offer for a mistyped name.
"""

from __future__ import annotations

import difflib

from toolkit.errors import FieldError


class PlanError(FieldError):
    """A run that cannot work as asked. ``field`` is the flag or recipe field."""


def suggest(word: str, choices: list[str] | frozenset[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
