"""What the CLIs print, made safe for a terminal: control sequences shown, credentials redacted.

Text from the cluster and the cloud is not the toolkit's: an Event message, a node pool's
status message, a worker's log line, an API server's or Google's error answer. Anyone who may
create an Event in a team namespace chooses its bytes, and a terminal obeys some of them:
``\\x1b[2K\\r`` erases the line it is on, ``\\x1b[1A`` moves up, an OSC sequence sets the
window title or the clipboard, and the Unicode bidi controls (U+202E...) reorder what
follows. So ``status`` could be made to show a failed run as Succeeded.

One mechanism: ``clikit.run`` puts ``SafeStream`` over ``sys.stdout`` and ``sys.stderr`` for
the whole command, so every ``print``, ``typer.echo``, ``sys.stdout.write``, warning, progress
line and traceback goes through ``safe`` on its way out, whichever module wrote it; a child
process's output goes through it too (``toolkit.tools`` relays what it would have let the
child print). ``safe`` is:

- ``credentials.redact``: URL user information and credential values become ``***``;
- ``escape``: every C0 control but newline and tab, DEL, every C1 control, and the Unicode
  characters that reorder or break text (bidi embeddings, overrides, isolates and marks;
  the line and paragraph separators) are written as Python escapes (``\\x1b``, ``\\r``,
  ``\\u202e``): visible, and inert.

An error line is one line (``one_line``: a newline inside it is shown as ``\\n``).
``tests/test_terminal.py`` keeps every module on it: no code writes to the terminal another
way (``sys.__stdout__``, a file descriptor, a child that inherits the terminal), and a hostile
Event reaches ``status`` escaped.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from toolkit.credentials import redact

__all__ = ["SafeStream", "escape", "guarded", "one_line", "safe"]

# C0 but \t and \n, DEL, C1; ALM, LRM, RLM; LRE..RLO; LRI..PDI; the line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _shown(m: re.Match[str]) -> str:
    c = m.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
    if named:
        return named
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape(text: str) -> str:
    """``text`` with every character a terminal would act on (but newline and tab) written as an escape.

    A carriage return just before a newline (a Windows line end) is dropped, not shown: alone it
    moves the cursor back over the line, there it changes nothing.
    """
    return _UNSAFE.sub(_shown, text.replace("\r\n", "\n"))


def one_line(text: str) -> str:
    """``escape``, and newlines and tabs too: the text stays on one line."""
    return _UNSAFE_LINE.sub(_shown, text)


def safe(text: str) -> str:
    """What may reach a terminal of ``text``: credentials redacted, control characters escaped."""
    return escape(redact(text))


# A line longer than this is passed on in pieces (a huge JSON document on one line must not
# be held whole); a credential cut in two there would not be redacted, and no credential is that long.
_MAX_PENDING = 64 * 1024


class SafeStream(io.TextIOBase):
    """A text stream that writes ``safe`` of each line to ``raw``.

    Whole lines are filtered (a URL or ``key=value`` never straddles two writes of one
    line); ``flush`` passes on a partial line (a prompt). ``isatty``, ``fileno``,
    ``encoding`` and ``errors`` are ``raw``'s; there is no ``buffer``, so nothing can write
    bytes around the filter.
    """

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "errors", None) or "strict"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(getattr(self.raw, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.raw.fileno()

    def write(self, s: str) -> int:  # type: ignore[override]
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        text = self._pending + s
        head, sep, rest = text.rpartition("\n")
        if sep:
            self.raw.write(safe(head + "\n"))
            text = rest
        while len(text) > _MAX_PENDING:
            self.raw.write(safe(text[:_MAX_PENDING]))
            text = text[_MAX_PENDING:]
        self._pending = text
        return len(s)

    def flush(self) -> None:
        if self._pending:
            self.raw.write(safe(self._pending))
            self._pending = ""
        self.raw.flush()

    def close(self) -> None:  # the raw stream is not ours to close
        self.flush()


@contextmanager
def guarded() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as ``SafeStream``s for the block, then as they were."""
    saved = sys.stdout, sys.stderr
    out = saved[0] if isinstance(saved[0], SafeStream) else SafeStream(saved[0])
    err = saved[1] if isinstance(saved[1], SafeStream) else SafeStream(saved[1])
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        for s in (out, err):
            try:
                s.flush()
            except (ValueError, OSError):  # the raw stream was closed by the command, or is gone (a closed pipe)
                pass
        sys.stdout, sys.stderr = saved


def relay(line: bytes | str, *, err: bool = False) -> None:
    """A line of a child's output onto the CLI's own stream (so through ``safe``)."""
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    stream: Any = sys.stderr if err else sys.stdout
    stream.write(text)
