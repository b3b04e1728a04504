"""A MaxText number as text: what a script or ``--set`` may write for a key MaxText reads as a number.

Two questions, each with one answer here:

- ``PLAIN_INT``: is this text an integer as MaxText reads one, and nothing else (no ``1e3``,
  ``0x10``, ``007``, ``4_0`` or `` 4``, which Python's ``int()`` would take)?
- ``number_problem``: can the value of a numeric key be held by the number types MaxText
  reads its config into (Python, NumPy and JAX: finite floats, integers within int64)?
"""

from __future__ import annotations

import math
import re
from typing import Any

# A MaxText integer as a script or --set writes it: what is read as an int, and nothing else (no 1e3, 0x10, 007).
PLAIN_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")

_NON_FINITE = re.compile(r"^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
_INTEGER = re.compile(r"^[-+]?[0-9]+$")
INT64_MAX = 2**63 - 1


def number_problem(value: Any) -> str | None:
    """Why the value of a numeric MaxText key (``maxtext_keys.numeric_keys``) is a number MaxText cannot
    hold, else None (not a number: MaxText judges it).

    MaxText reads its config into Python, NumPy and JAX numbers: none holds a NaN or infinite
    setting (no MaxText 0.2.5 key has one by default; abort_on_nan_loss treats NaN as a
    failure), and none an integer past int64. Text is judged as MaxText's parser reads it.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "is not a finite number (MaxText takes finite numbers only)"
    if isinstance(value, int):
        return None if abs(value) <= INT64_MAX else "is beyond any integer MaxText can hold (int64)"
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _NON_FINITE.fullmatch(text):
        return "is not a finite number (MaxText takes finite numbers only)"
    if _INTEGER.fullmatch(text):
        return None if len(text.lstrip("+-")) <= 19 and abs(int(text)) <= INT64_MAX else "is beyond any integer MaxText can hold (int64)"
    try:
        number = float(text) if len(text) <= 64 else 0.0
    except ValueError:
        return None
    return None if math.isfinite(number) else "is beyond any float MaxText can hold (it reads as infinity)"
