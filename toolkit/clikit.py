"""What both CLIs (``python -m infra`` and ``python -m workloads``) share.

Errors are caught once, here: a ``ToolkitError`` becomes one line on stderr and
its exit code; the traceback only with ``--debug`` (or TGK_DEBUG=1). Everything a command
prints, its errors and tracebacks included, goes through ``toolkit.terminal`` (control
sequences escaped, credentials redacted). Kept free of heavy imports so ``--help`` stays fast.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from toolkit import terminal
from toolkit.errors import ToolkitError


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


# Options both CLIs share, declared once so their flags and help cannot drift apart.
SpecOpt = Annotated[
    Optional[Path],
    typer.Option("--spec", help="environment spec YAML (default: $TGK_SPEC, else examples/default.yaml)"),
]
Output = Annotated[OutputFormat, typer.Option("--output", "-o", help="text or json")]


def make_app(name: str, help: str, **settings: Any) -> typer.Typer:
    """A Typer app with the settings both CLIs share.

    Plain click help: rich's help renderer costs ~150 ms per ``--help``. Errors are
    printed by :func:`run`, never by Typer's pretty traceback.
    """
    app = typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        **settings,
    )
    # Always a group of commands: without a callback Typer runs an app that holds a single
    # command as that command, and `python -m workloads` registers only the command it runs.
    app.callback()(_group)
    return app


def _group() -> None:
    pass


def option_group(name: str, options: list[inspect.Parameter], build: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command ``options`` in place of its parameter ``name``; call it with ``name=build(**their values)``.

    Typer reads a command's options from its signature, so a group of options declared once
    (the fields of a dataclass) becomes options of every command that takes the group, at
    the place of that parameter in ``--help``.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            params += options if p.name == name else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)]
        keys = [p.name for p in options]

        def wrapper(**kwargs: Any) -> Any:
            group = build(**{k: kwargs.pop(k) for k in keys})
            return command(**{name: group}, **kwargs)

        # Not functools.wraps: its __wrapped__ would make inspect (and Typer) read the command's own signature.
        wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = command.__name__, command.__qualname__, command.__doc__
        wrapper.__module__ = command.__module__
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def dataclass_options(cls: type) -> list[inspect.Parameter]:
    """The fields of a dataclass whose annotations are Typer options, as keyword parameters with their defaults."""
    from dataclasses import fields
    from typing import get_type_hints

    hints = get_type_hints(cls, include_extras=True)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]) for f in fields(cls)]


def check_out_dir(path: Path, flag: str = "--out") -> None:
    """Refuse an output directory that cannot be created or written to, before any work is done.

    Writes nothing: the nearest existing ancestor gets a probe directory that is removed at
    once (as root, permission bits say nothing; /proc, read-only mounts and files do).
    """
    import tempfile

    from toolkit.errors import FieldError

    fix = "pass a directory you can write to (it is created if missing)"
    try:
        p = Path(os.path.abspath(path))
        if p.exists() and not p.is_dir():
            raise FieldError(flag, f"{path} is a file, not a directory", fix)
        base = p
        while not base.exists():
            base = base.parent
        if not base.is_dir():
            raise FieldError(flag, f"cannot create {path}: {base} is a file, not a directory", fix)
        os.rmdir(tempfile.mkdtemp(prefix=".tgk-probe-", dir=base))
    except OSError as e:
        raise FieldError(flag, f"cannot write to {path}: {e.strerror or e}", fix) from None


def debug_enabled() -> bool:
    return os.environ.get("TGK_DEBUG", "") not in ("", "0") or "--debug" in sys.argv


def err_line(message: str) -> None:
    """The one line of an error: whatever the message holds, it stays one line (``terminal.one_line``)."""
    sys.stderr.write(f"error: {terminal.one_line(message)}\n")


def print_json(data: Any) -> None:
    """``data`` as JSON; a NaN or infinity (which JSON has no word for) is written as null, never as NaN."""
    try:
        text = json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")


def _finite(data: Any) -> Any:
    import math

    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def run(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run a Typer app; return its exit code with toolkit errors as one line.

    The whole command runs under ``terminal.guarded``: what it prints, and the traceback of
    an error it did not expect (printed here, exit 1, as Python would), reaches the terminal
    escaped and redacted.
    """
    with terminal.guarded():
        try:
            return _run(app, argv)
        except Exception:  # noqa: BLE001 - a bug: its traceback, through the guard, and exit 1 as Python's own
            import traceback

            traceback.print_exc()
            return 1


def _run(app: typer.Typer, argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
        os.environ["TGK_DEBUG"] = "1"
    try:
        # With standalone_mode off, click returns a typer.Exit's code instead of raising it.
        rc = app(args=args, standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except ToolkitError as e:
        if debug_enabled():
            import traceback

            traceback.print_exc()
            return e.exit_code
        err_line(str(e))
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        err_line("aborted")
        return 1
    except KeyboardInterrupt:
        err_line("interrupted")
        return 130
    except Exception as e:
        # Typer vendors click; its usage errors are the only other user-caused ones.
        from typer._click import exceptions as click_exc

        if isinstance(e, click_exc.NoArgsIsHelpError):
            sys.stdout.write(e.ctx.get_help() + "\n" if e.ctx else "")
            return 0
        if isinstance(e, click_exc.UsageError):
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
            err_line(f"{e.format_message()}{hint}")
            return 2
        if isinstance(e, click_exc.ClickException):
            err_line(e.format_message())
            return e.exit_code
        raise


def confirm(question: str, *, yes: bool) -> None:
    """Ask before a destructive action; refuse when there is no terminal."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise ToolkitError(f"{question} needs confirmation; no terminal to ask — pass --yes to proceed")
    if not typer.confirm(question, default=False):
        raise typer.Abort()
