"""One error hierarchy for the whole toolkit.

Every error a user can cause or meet carries a single human line; the CLIs catch
``ToolkitError`` once, print that line and exit non-zero. Nothing below the CLI
calls ``sys.exit``.
"""

from __future__ import annotations

import reprlib

from toolkit.credentials import redact

# The longest error line: a value quoted in a message (a YAML value, a flag, a server's
# answer) can be megabytes, and a line the user cannot read helps nobody.
MAX_MESSAGE_CHARS = 1000


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters in the middle, keeping its end (where a message's fix is)."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 4
    return f"{text[:head]} …[{len(text) - head - tail:,} characters cut]… {text[-tail:]}"


class _Shown(reprlib.Repr):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset, self.maxfrozenset = 2, 6, 6, 6, 6, 6
        self.maxother = limit

    def repr_str(self, x: str, level: int) -> str:
        return repr(x) if len(x) <= self.limit else f"{x[: self.limit]!r}…[{len(x):,} characters]"

    def repr_int(self, x: int, level: int) -> str:
        # repr() refuses ints of more than 4,300 digits, and a long one says nothing more.
        return repr(x) if x.bit_length() <= 128 else f"<an integer of about {int(x.bit_length() * 0.30103) + 1:,} digits>"


def shown(value: object, limit: int = 100) -> str:
    """``repr(value)`` for an error line: the same for a short value; a long, wide or deep one is cut, saying so.

    Bounded work whatever the value (``reprlib``), unlike ``repr`` of a list a YAML alias
    expanded to millions of items.
    """
    return clip(_Shown(limit).repr(value), limit * 2)


class ToolkitError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user (``clip``ped to MAX_MESSAGE_CHARS, credentials
    redacted: ``toolkit.credentials``, so a message carried in JSON or a report holds none either)."""

    exit_code = 2

    def __str__(self) -> str:
        return clip(redact(super().__str__()))


class FieldError(ToolkitError):
    """Bad input at a known place: ``field`` is its path or flag, ``fix`` says what to do."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"{field}: {problem}" if field else problem
        if fix:
            msg += f" — {fix}"
        super().__init__(msg)


class SpecError(FieldError):
    """The environment spec (or a value derived from it) is invalid."""


class CatalogError(ToolkitError):
    """A TPU shape that does not exist; the message lists the valid ones."""


class ExternalToolError(ToolkitError):
    """terraform, kustomize or another CLI failed or is missing."""

    exit_code = 1


class ClusterError(ToolkitError):
    """The Kubernetes API could not be reached or refused a request.

    Exit code 3 tells scripts "the cluster side failed" apart from bad input (2). The base
    class itself is what cannot be sorted by the server's answer: an unusable kubeconfig,
    a kind the toolkit cannot place. Where the API server answered, ``status`` is its HTTP
    status and the subclass says what kind of refusal it was, so a caller can treat
    "not there" differently from "not allowed" or "not reachable".
    """

    exit_code = 3
    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFound(ClusterError):
    """404: the object is not there, or its kind or API group is not served (a CRD not installed)."""

    status = 404


class Forbidden(ClusterError):
    """401/403 from authentication or RBAC: the kubeconfig's identity may not do this."""

    status = 403


class Conflict(ClusterError):
    """409: the object already exists, or another field manager owns fields an apply sets."""

    status = 409


class Unreachable(ClusterError):
    """No answer from the API server: connection refused, TLS handshake, timeout, DNS."""


class Rejected(ClusterError):
    """Any other refusal the server answered with: an invalid object (400/422), an admission
    webhook or Pod Security (403 that is not RBAC), throttling (429), a server failure (5xx)."""


class GoogleApiError(ToolkitError):
    """A Google service could not be reached in time, or answered what cannot be used: the cloud
    side failed, not the input (exit 3). The message names the API and the request."""

    exit_code = 3

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
