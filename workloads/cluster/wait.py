"""The one way the toolkit waits for something: poll a condition until it holds.

In the spirit of lightkube's ``wait(for_conditions=..., raise_for_conditions=...)``, over
any probe rather than one object's conditions:

- ``poll()`` reads the current state (any value: a Workload, a RunStatus, a bool);
- ``until(state)`` says the wait is over (by default: the state is truthy);
- ``fail(state)`` names a state that will not get better, as one line: the wait raises
  ``WaitFailed`` at once instead of running into the deadline;
- ``on_change(state)`` sees each state whose ``key(state)`` differs from the last one seen,
  so progress is reported once per change, not once per poll;
- ``between(state, remaining)`` replaces the sleep: it may block (e.g. a watch) and yield
  newer states as they arrive, each judged like a polled one, so a change is seen at once.
  Whatever it does, two polls are never closer than ``interval``.

At the deadline the wait raises ``WaitTimeout``, which carries the last state so the
caller can say where things stood. Both errors are one-line ``ToolkitError``s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from toolkit.errors import ToolkitError

T = TypeVar("T")

__all__ = ["WaitFailed", "WaitTimeout", "wait_for"]


class WaitTimeout(ToolkitError):
    """The condition did not hold within the timeout; ``last`` is the last state seen."""

    exit_code = 1

    def __init__(self, what: str, timeout: float, last: object) -> None:
        self.what, self.timeout, self.last = what, timeout, last
        super().__init__(f"timed out after {timeout:g}s waiting for {what}")


class WaitFailed(ToolkitError):
    """A fail-fast predicate matched: waiting longer would not help."""

    exit_code = 1

    def __init__(self, reason: str, last: object) -> None:
        self.reason, self.last = reason, last
        super().__init__(reason)


class _Changes:
    """Calls ``on_change`` with each state whose key differs from the previous one."""

    _NOTHING = object()

    def __init__(self, on_change: Callable[[T], None] | None, key: Callable[[T], Hashable] | None) -> None:
        self.on_change, self.key, self.last = on_change, key, self._NOTHING

    def __call__(self, state: T) -> None:
        k = self.key(state) if self.key else state
        if k != self.last:
            self.last = k
            if self.on_change:
                self.on_change(state)


def wait_for(
    poll: Callable[[], T],
    *,
    timeout: float,
    what: str = "the condition",
    until: Callable[[T], bool] = bool,
    interval: float = 1.0,
    fail: Callable[[T], str | None] | None = None,
    on_change: Callable[[T], None] | None = None,
    key: Callable[[T], Hashable] | None = None,
    between: Callable[[T, float], Iterable[T]] | None = None,
) -> T:
    """Poll until ``until(state)``; return that state. See the module docstring for the hooks."""
    deadline = time.monotonic() + timeout
    changed = _Changes(on_change, key)

    def settled(state: T) -> bool:
        changed(state)
        if until(state):
            return True
        reason = fail(state) if fail else None
        if reason:
            raise WaitFailed(reason, state)
        return False

    while True:
        state = poll()
        if settled(state):
            return state
        if time.monotonic() >= deadline:
            raise WaitTimeout(what, timeout, state)
        started = time.monotonic()
        if between is not None:
            newer = between(state, deadline - started)
            try:
                for state in newer:
                    if settled(state):
                        return state
                    if time.monotonic() >= deadline:
                        break
            finally:
                getattr(newer, "close", lambda: None)()  # end a watch now, not when collected
        # A `between` that returned at once (a refused watch) must not make this a busy loop.
        rest = min(interval - (time.monotonic() - started), deadline - time.monotonic())
        if rest > 0:
            time.sleep(rest)
