"""One error hierarchy for the whole toolkit.

Every error a user can cause or meet carries a single human line; the CLIs catch
``ToolkitError`` once, print that line and exit non-zero. Nothing below the CLI
calls ``sys.exit``.
"""

from __future__ import annotations


class ToolkitError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user."""

    exit_code = 2


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

    Exit code 3 tells scripts "the cluster side failed" apart from bad input (2).
    """

    exit_code = 3
