"""An overall deadline for a network read, which socket timeouts cannot give.

A socket timeout bounds one wait for bytes and restarts with each byte, so a peer that sends
one byte every few seconds keeps a read alive forever. ``Watchdog`` calls ``stop`` (shut the
socket down, which ends any read waiting on it) once the deadline has passed; the reader
then sees an error or the end of the stream and asks ``expired`` which it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Watchdog"]


class Watchdog:
    """Calls ``stop`` once ``seconds`` have passed, unless cancelled first; ``seconds`` None: never."""

    def __init__(self, seconds: float | None, stop: Callable[[], None]) -> None:
        self.expired = False
        self.stop = stop
        self._timer = threading.Timer(max(0.0, seconds), self._fire) if seconds is not None else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.expired = True
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - the connection may be gone already; the flag is what counts
            pass

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
