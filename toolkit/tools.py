"""The one runner for external programs: terraform, kustomize, MaxText, build scripts.

Argument lists only (never a shell). Every failure becomes one ``ExternalToolError``
line with the same trimming: the last meaningful line of the tool's stderr, without
Terraform's box drawing or blank lines. Output can go to pipes (small outputs, read
by the caller) or to files (MaxText writes megabytes; a full pipe would stall it).
Output meant for the user (``capture=False``: terraform's plan, gcloud, a build's
progress) is relayed line by line onto the CLI's own stdout and stderr, never given the
terminal: what a tool prints of the cloud's answers reaches the user through
``toolkit.terminal`` like everything else. The child's own peak RSS is measured with
``wait4``, so a benchmark of one run is not confused by other children of this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ExternalToolError, ToolkitError

_DECORATION = ("╷", "╵", "│")


def _meaningful(text: str) -> list[str]:
    """A tool's output lines without blank lines and Terraform's box drawing, each cut at 500 characters."""
    lines = [ln.strip().lstrip("│ ").strip() for ln in text.splitlines()]
    return [ln[:500] for ln in lines if ln and not ln.startswith(_DECORATION)]


def last_line(text: str, *, first: bool = False) -> str:
    """The line of a tool's output worth showing: its last (or first) non-decoration line."""
    lines = _meaningful(text)
    if not lines:
        return ""
    return lines[0] if first else lines[-1]


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
    overflowed: bool = False  # more output than ``max_output``: cut there, and the process killed

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.overflowed

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
        if self.overflowed:
            return ExternalToolError(f"`{what}` printed more output than it ever should (stopped)")
        detail = last_line(self.stderr_text(), first=first_line) or last_line(self.stdout_text())
        return ExternalToolError(f"`{what}` failed with exit code {self.returncode}" + (f": {detail}" if detail else ""))


def _streams(capture: bool, log_dir: Path | None, log_name: str, interactive: bool):
    """(stdout, stderr, files to close, stdout path, stderr path) for Popen."""
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        out_path, err_path = log_dir / f"{log_name}.stdout", log_dir / f"{log_name}.stderr"
        out_f, err_f = open(out_path, "wb"), open(err_path, "wb")
        return out_f, err_f, (out_f, err_f), out_path, err_path
    if capture or not interactive:
        return subprocess.PIPE, subprocess.PIPE, (), None, None  # uncaptured: relayed (_relay)
    return None, None, (), None, None


def _relay(proc: subprocess.Popen, stop: threading.Event, stdout_too: bool) -> bytes:
    """Pass the child's stderr (and stdout, with ``stdout_too``) on line by line through ``toolkit.terminal``
    as it comes; the stdout kept is returned when not passed on. Ends at EOF on both, or at ``stop``."""
    import selectors

    from toolkit import terminal

    kept = bytearray()
    partial = {proc.stdout: b"", proc.stderr: b""}
    sel = selectors.DefaultSelector()
    for f in partial:
        sel.register(f, selectors.EVENT_READ)
    try:
        while sel.get_map() and not stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                chunk = os.read(key.fd, 65536)
                f = key.fileobj
                err = f is proc.stderr
                if not err and not stdout_too:
                    if chunk:
                        kept.extend(chunk)
                    else:
                        sel.unregister(f)
                    continue
                if not chunk:
                    sel.unregister(f)
                    if partial[f]:
                        terminal.relay(partial[f], err=err)
                    continue
                lines = (partial[f] + chunk).split(b"\n")
                partial[f] = lines.pop()
                if lines:
                    terminal.relay(b"\n".join(lines) + b"\n", err=err)
    finally:
        sel.close()
    return bytes(kept)


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only this run's processes
    except ProcessLookupError:
        pass


def _collect(proc: subprocess.Popen, limit: int, stop: threading.Event, kill) -> tuple[bytes, bytes]:
    """Read both pipes to their end, at most ``limit`` bytes each: past it the group is killed (a flood is not an answer).

    Also ends at ``stop`` (the timeout): a grandchild that left the process group could
    keep a pipe open forever.
    """
    import selectors

    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        if f is not None:
            sel.register(f, selectors.EVENT_READ)
    try:
        while sel.get_map() and not stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.fileobj]
                buf += chunk
                if len(buf) > limit:
                    del buf[limit:]
                    kill()
                    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr])
    finally:
        sel.close()
    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr])


def _wait(proc: subprocess.Popen, timeout: float | None, max_output: int | None = None, relay: str | None = None) -> tuple[str, str, int, bool, bool]:
    """Wait for ``proc`` (killing its process group at ``timeout``): stdout, stderr, peak RSS, timed out, output overflowed.

    ``relay``: "all" passes both streams on to the terminal, "stderr" only stderr (stdout is returned)."""
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        _killpg(proc)

    timer = threading.Timer(timeout, _kill) if timeout else None
    if timer:
        timer.start()
    out = err = ""
    rss = 0
    overflowed = False
    try:
        if relay is not None:
            o = _relay(proc, timed_out, stdout_too=relay == "all")
            for f in (proc.stdout, proc.stderr):
                f.close()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            rss = usage.ru_maxrss * 1024
            out = o.decode(errors="replace")
        elif max_output is not None and (proc.stdout is not None or proc.stderr is not None):
            o, e = _collect(proc, max_output, timed_out, lambda: _killpg(proc))
            overflowed = max(len(o), len(e)) >= max_output
            if overflowed:
                _killpg(proc)  # a flood: it must not run on after its answer was refused
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
            proc.wait()
            out, err = o.decode(errors="replace"), e.decode(errors="replace")
        elif proc.stdout is not None or proc.stderr is not None:
            o, e = proc.communicate()  # reaps the child: no rusage for piped runs
            out, err = (o or b"").decode(errors="replace"), (e or b"").decode(errors="replace")
        else:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            rss = usage.ru_maxrss * 1024  # Linux reports KiB
    except KeyboardInterrupt:
        _kill()
        proc.wait()
        raise
    finally:
        if timer:
            timer.cancel()
    return out, err, rss, timed_out.is_set(), overflowed


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
    interactive: bool = False,
    max_output: int | None = None,
) -> Completed:
    """Run ``argv`` and wait for it.

    ``capture``: stdout/stderr as text; with ``log_dir``, into ``<log_dir>/<log_name>.{stdout,stderr}``
    instead (and the child's peak RSS is measured); without either, relayed line by line to
    this process's stdout and stderr (``toolkit.terminal``). ``stderr_to_terminal`` relays
    stderr (build progress) while stdout is captured. A timeout kills the whole process group. ``check`` raises the one-line
    failure instead of returning it. ``interactive`` (with ``capture=False``) also gives the
    child the terminal's stdin and session, so it can ask questions and gets the user's
    Ctrl-C itself; otherwise stdin is empty and the child runs in a session of its own.
    ``max_output`` (with ``capture``) keeps at most that many bytes of each stream and kills
    the process group when one overflows (``Completed.overflowed``).
    """
    argv = [str(a) for a in argv]
    stdout, stderr, files, out_path, err_path = _streams(capture, log_dir, log_name, interactive)
    relay = None if log_dir is not None or interactive else "all" if not capture else "stderr" if stderr_to_terminal else None
    start = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(
                argv,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdout=stdout,
                stderr=stderr,
                stdin=None if interactive else subprocess.DEVNULL,
                start_new_session=not interactive,
            )
        except OSError as e:
            raise ExternalToolError(f"cannot run {argv[0]!r}: {e.strerror or e}") from None
        out, err, rss, timed_out, overflowed = _wait(proc, timeout, max_output if capture and log_dir is None else None, relay)
    finally:
        for f in files:
            f.close()
    done = Completed(
        argv=tuple(argv),
        returncode=proc.returncode,
        seconds=time.monotonic() - start,
        peak_rss_bytes=rss,
        stdout=out,
        stderr=err,
        stdout_path=out_path,
        stderr_path=err_path,
        timed_out=timed_out,
        overflowed=overflowed,
    )
    if check and not done.ok:
        raise done.failure(what)
    return done


def script_path(
    script: Path,
    *args: str,
    what: str,
    error: type[ToolkitError] = ExternalToolError,
    timeout: float | None = None,
    stderr_to_terminal: bool = False,
    holds: str | None = None,
) -> Path:
    """Run a cache script (``bash scripts/<setup or build script> [args]``) and return the path on its last stdout line.

    The contract of every script that sets up or builds a cached tool: progress on stderr,
    the path of what it made on its last stdout line. ``stderr_to_terminal``: its progress
    goes to the terminal (a long build) instead of being captured. ``holds``: a file the
    path must contain (``bin/python`` for a venv). Each way it can fail is one ``error``
    line that starts with ``what`` (e.g. "cannot set up the Ray venv") and names the script.
    """
    shown = " ".join((f"scripts/{script.name}", *args))
    try:
        done = run(["bash", str(script), *args], timeout=timeout, stderr_to_terminal=stderr_to_terminal)
    except ExternalToolError as e:  # bash itself could not be started
        raise error(f"{what}: {e}") from None
    if done.timed_out:
        raise error(f"{what}: {shown} timed out after {done.seconds:.0f} s")
    if not done.ok:
        if stderr_to_terminal:
            raise error(f"{what}: {shown} failed (exit {done.returncode}); see its output above")
        tail = " | ".join(_meaningful(done.stderr_text())[-3:])
        raise error(f"{what}: {shown} failed (exit {done.returncode})" + (f": {tail}" if tail else ""))
    lines = done.stdout_text().strip().splitlines()
    if not lines:
        raise error(f"{what}: {shown} printed no path")
    path = Path(lines[-1].strip())
    if holds is not None and not (path / holds).exists():
        raise error(f"{what}: {shown} printed {path} but it holds no {holds}")
    return path
