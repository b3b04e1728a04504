"""The one runner for external programs: terraform, kustomize, MaxText, build scripts.

Argument lists only (never a shell). Every failure becomes one ``ExternalToolError``
line with the same trimming: the last meaningful line of the tool's stderr, without
Terraform's box drawing or blank lines. Output can go to pipes (small outputs, read
by the caller) or to files (MaxText writes megabytes; a full pipe would stall it).
The child's own peak RSS is measured with ``wait4``, so a benchmark of one run is
not confused by other children of this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from toolkit.errors import ExternalToolError

_DECORATION = ("╷", "╵", "│")


def last_line(text: str, *, first: bool = False) -> str:
    """The line of a tool's output worth showing: its last (or first) non-decoration line."""
    lines = [ln.strip().lstrip("│ ").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(_DECORATION)]
    if not lines:
        return ""
    return (lines[0] if first else lines[-1])[:500]


@dataclass(frozen=True)
class Completed:
    """How a program ended. ``stdout``/``stderr`` hold text when piped, else ''."""

    argv: tuple[str, ...]
    returncode: int
    seconds: float
    peak_rss_bytes: int
    stdout: str = ""
    stderr: str = ""
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def stderr_text(self) -> str:
        if self.stderr_path is not None:
            return self.stderr_path.read_text(errors="replace")
        return self.stderr

    def stdout_text(self) -> str:
        if self.stdout_path is not None:
            return self.stdout_path.read_text(errors="replace")
        return self.stdout

    def failure(self, what: str | None = None, *, first_line: bool = False) -> ExternalToolError:
        """One line for a failed run: what ran, its exit code and the line worth reading."""
        what = what or " ".join(Path(self.argv[0]).name if i == 0 else a for i, a in enumerate(self.argv[:3]))
        if self.timed_out:
            return ExternalToolError(f"`{what}` timed out after {self.seconds:.0f} s")
        detail = last_line(self.stderr_text(), first=first_line) or last_line(self.stdout_text())
        return ExternalToolError(f"`{what}` failed with exit code {self.returncode}" + (f": {detail}" if detail else ""))


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    capture: bool = True,
    log_dir: Path | None = None,
    log_name: str = "run",
    stderr_to_terminal: bool = False,
    check: bool = False,
    what: str | None = None,
) -> Completed:
    """Run ``argv`` and wait for it.

    ``capture``: stdout/stderr as text; with ``log_dir``, into ``<log_dir>/<log_name>.{stdout,stderr}``
    instead; without either, inherited. ``stderr_to_terminal`` keeps stderr on the terminal
    (build progress) while stdout is captured. A timeout kills the whole process group.
    ``check`` raises the one-line failure instead of returning it.
    """
    argv = [str(a) for a in argv]
    out_f = err_f = None
    out_path = err_path = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        out_path, err_path = log_dir / f"{log_name}.stdout", log_dir / f"{log_name}.stderr"
        out_f, err_f = open(out_path, "wb"), open(err_path, "wb")
        stdout, stderr = out_f, err_f
    elif capture:
        stdout = subprocess.PIPE
        stderr = None if stderr_to_terminal else subprocess.PIPE
    else:
        stdout = stderr = None
    timed_out = threading.Event()
    start = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(
                argv, env=dict(env) if env is not None else None, cwd=cwd, stdout=stdout, stderr=stderr,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as e:
            raise ExternalToolError(f"cannot run {argv[0]!r}: {e.strerror or e}") from None

        def _kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: only this run's processes
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, _kill) if timeout else None
        if timer:
            timer.start()
        out_text = err_text = ""
        try:
            if stdout is subprocess.PIPE or stderr is subprocess.PIPE:
                o, e = proc.communicate()
                out_text = (o or b"").decode(errors="replace")
                err_text = (e or b"").decode(errors="replace")
            _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
        except ChildProcessError:
            status, usage = None, None
        except KeyboardInterrupt:
            _kill()
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
        if status is not None and proc.returncode is None:
            proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        for f in (out_f, err_f):
            if f is not None:
                f.close()
    done = Completed(
        argv=tuple(argv),
        returncode=proc.returncode if proc.returncode is not None else -1,
        seconds=time.monotonic() - start,
        peak_rss_bytes=(usage.ru_maxrss * 1024) if usage is not None else 0,  # Linux reports KiB
        stdout=out_text,
        stderr=err_text,
        stdout_path=out_path,
        stderr_path=err_path,
        timed_out=timed_out.is_set(),
    )
    if check and not done.ok:
        raise done.failure(what)
    return done


def last_path_line(done: Completed) -> Path:
    """The path a build script prints on its last stdout line (the cache scripts' contract)."""
    lines = done.stdout_text().strip().splitlines()
    return Path(lines[-1]) if lines else Path()
