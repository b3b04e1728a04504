"""Where the tests find the repository and its example environment specs."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLES = REPO / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
EXAMPLE_NAMES = [p.stem for p in EXAMPLE_FILES]
