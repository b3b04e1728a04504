"""Whole numbers read from text that anyone may have written (logs, bucket object names, run objects).

``str.isdigit`` is true for '²', '٣' and other Unicode digits that ``int`` refuses (or reads
as Arabic-Indic numbers): every "digits, then int()" in the toolkit goes through here, so a
stray character is "not a number", never a traceback.
"""

from __future__ import annotations


def is_decimal(text: str) -> bool:
    """Only ASCII 0-9, at least one."""
    return text.isascii() and text.isdigit()


def whole_number(text: str, max_digits: int | None = None) -> int | None:
    """``text`` as a non-negative int when it is ASCII digits only (at most ``max_digits``), else None."""
    if not is_decimal(text) or (max_digits is not None and len(text) > max_digits):
        return None
    return int(text)
