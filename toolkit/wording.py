"""Small pieces of the sentences the toolkit's one-line errors and warnings are made of. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def listing(words: Sequence[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c`` (``last``: the word before the final item, e.g. "or")."""
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else "".join(words)
