"""The toolkit's CLIs run as a user would see them: in this process (``cli``) or as a real process (``run_module``).

``cli("workloads", ...)`` / ``cli("infra", ...)`` run a CLI in this process, as
``python -m <module>`` would run it: the same argv, environment defaults, working
directory, stdin, captured stdout/stderr (file descriptors 0-2 included, so a tool the
command starts writes into the same capture) and exit code. A Python process per case
cost most of the fast tier's time. ``run_module`` is the real process, kept for one
smoke test per entry point (tests/test_entry_points.py) and for the tiers that start
daemons (integration, maxtext).
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

# What every CLI run sees, in process or not: a wide terminal for help text, no colour,
# no $TGK_SPEC a developer may have exported.
CLI_ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
CLI_UNSET = ("TGK_SPEC",)


def run_module(
    module: str, *args: str, cwd: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` in a subprocess, as a user would run it."""
    full = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **CLI_ENV}
    for name in CLI_UNSET:
        full.pop(name, None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd or REPO,
        env=full,
        input=stdin,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


# ------------------------------------------------------------------ in-process CLIs

_CLI_MODULES = ("workloads", "infra")


@functools.cache
def _workloads_registered() -> None:
    # `python -m workloads` imports only the module of the command it runs; here every
    # module is imported once. A test may have imported one of them before (each registers
    # its commands on import): the commands are put in the order a fresh `--help` process
    # registers them (module by module, in MODULES order), so the help lists them alike.
    from workloads.cli import MODULES, _register, app

    _register(None)

    def rank(callback: Any) -> int:
        return MODULES.index(callback.__module__.rsplit(".", 1)[1])

    app.registered_commands.sort(key=lambda info: rank(info.callback))
    app.registered_groups.sort(key=lambda info: rank(info.typer_instance.registered_commands[0].callback))


def cli_app(module: str) -> Any:
    """What ``clikit.run`` runs for ``python -m <module>``: the app's click command, built once, every command registered."""
    if module == "workloads":
        _workloads_registered()
        from workloads.cli import app
    else:
        from infra.cli import app
    return _Built.of(app, f"python -m {module}")


class _Built:
    """A Typer app's click command, built once (Typer rebuilds it on every call, ~50 ms);
    ``clikit.run`` calls it exactly as it calls the app. The program name is the one click
    finds in a ``python -m`` process (usage lines and "see '... --help'" hints carry it)."""

    _built: dict[int, tuple[int, _Built]] = {}

    def __init__(self, app: Any, prog_name: str) -> None:
        import typer

        self.command = typer.main.get_command(app)
        self.prog_name = prog_name

    @classmethod
    def of(cls, app: Any, prog_name: str) -> _Built:
        size = len(app.registered_commands) + len(app.registered_groups)
        known = cls._built.get(id(app))
        if known is None or known[0] != size:
            known = cls._built[id(app)] = (size, cls(app, prog_name))
        return known[1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.command.main(*args, prog_name=self.prog_name, **kwargs)


def _clear_caches() -> None:
    """A fresh process starts with empty memo caches (recipes, price tables, ...): so does each run."""
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in ("infra", "workloads", "toolkit", "modules"):
            continue
        for value in list(vars(mod).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                value.cache_clear()


def _std_writer(fd: int, errors: str) -> io.TextIOWrapper:
    """sys.stdout (fd 1) or sys.stderr (fd 2) as Python makes them for a pipe: stdout buffered
    by block, stderr by line; both unbuffered under PYTHONUNBUFFERED (set on some machines)."""
    raw = io.FileIO(fd, "w", closefd=False)
    if os.environ.get("PYTHONUNBUFFERED"):
        return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)  # type: ignore[arg-type]
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors, line_buffering=fd == 2)


@contextmanager
def _as_a_process(module: str, argv: list[str], cwd: Path, env: dict[str, str], stdin: str | None) -> Iterator[dict[str, bytes]]:
    """Process-wide state as ``python -m <module> <argv>`` would have it, restored afterwards.

    fds 0-2 point at a stdin file and two capture files (what a child process of the
    command inherits); sys.std* are new text streams over them, buffered as Python buffers
    a pipe (stdout by block, stderr by line); the environment, argv and cwd are set and
    put back whole, so a command's ``os.environ`` changes (``--debug`` sets TGK_DEBUG)
    do not outlive it.
    """
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)
    for stream in saved_streams[1:3]:
        stream.flush()
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    result: dict[str, bytes] = {}
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        fin.write((stdin or "").encode())
        fin.flush()
        fin.seek(0)
        for fd, f in zip((0, 1, 2), (fin, fout, ferr), strict=True):
            os.dup2(f.fileno(), fd)
        new_in = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
        try:
            os.environ.update({"PYDANTIC_DISABLE_PLUGINS": "__all__", **CLI_ENV})  # __main__ sets the first
            for name in CLI_UNSET:
                os.environ.pop(name, None)
            os.environ.update(env)
            new_out, new_err = _std_writer(1, "strict"), _std_writer(2, "backslashreplace")
            sys.argv = [str(REPO / module / "__main__.py"), *argv]
            os.chdir(cwd)
            sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = new_in, new_out, new_err
            _clear_caches()
            yield result
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except ValueError:  # closed by the command
                    pass
            sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__ = saved_streams
            for fd, saved in zip((0, 1, 2), saved_fds, strict=True):
                os.dup2(saved, fd)
                os.close(saved)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
            for key, f in (("stdout", fout), ("stderr", ferr)):
                f.seek(0)
                result[key] = f.read()


def _text(data: bytes) -> str:
    # As subprocess.run(text=True) decodes: the locale's codec (UTF-8 here), universal newlines.
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def cli(
    module: str, *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` for the toolkit's CLIs, run in this process (see the module doc).

    What a user sees is what comes back: exit code, stdout, stderr. An exception the CLI
    does not handle prints its traceback to the captured stderr and exits 1, as Python does.
    """
    if module not in _CLI_MODULES:
        raise ValueError(f"cli() runs {_CLI_MODULES}; use run_module for {module}")
    from toolkit.clikit import run

    argv = [str(a) for a in args]
    app = cli_app(module)
    with _as_a_process(module, argv, cwd or REPO, env or {}, stdin) as captured:
        try:
            rc = run(app, argv)
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                rc = e.code or 0
            else:
                sys.stderr.write(f"{e.code}\n")
                rc = 1
        except BaseException:  # noqa: BLE001 — what Python prints for an uncaught exception, then exit 1
            traceback.print_exc()
            rc = 1
    return subprocess.CompletedProcess([sys.executable, "-m", module, *argv], rc, _text(captured["stdout"]), _text(captured["stderr"]))
