"""Detached daemons with pid files, logs, and a stop that leaves nothing behind.

Each daemon runs in its own session (so a Ctrl-C in the terminal that ran ``up``
does not reach it) with stdout/stderr in ``<state>/logs/<name>.log``. Its pid
file also records the process start time from /proc, so a recycled pid is never
mistaken for our daemon — ``down`` only ever signals processes this module
started.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workloads.local import LocalClusterError


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing) while the block runs; other processes wait their turn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces; fields after it are fixed.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest[19] if len(rest) > 19 else None


def _is_zombie(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return raw[raw.rfind(")") + 2 :].split()[0] == "Z"


@dataclass(frozen=True)
class Daemon:
    name: str
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "run" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid if our process is alive (same pid *and* start time), else None."""
        try:
            pid_s, started = self.pid_file.read_text().split()[:2]
            pid = int(pid_s)
        except (FileNotFoundError, ValueError):
            return None
        if _start_time(pid) != started or _is_zombie(pid):
            return None
        return pid

    def alive(self) -> bool:
        return self.pid() is not None

    def start(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        if self.alive():
            raise LocalClusterError(f"{self.name} is already running (pid {self.pid()}); run 'local down' first")
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        if not Path(argv[0]).is_file():
            raise LocalClusterError(f"{self.name}: binary {argv[0]} is missing; run scripts/build-local-cluster.sh")
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                close_fds=True,
            )
        started = _start_time(proc.pid) or "0"
        self.pid_file.write_text(f"{proc.pid} {started} {argv[0]}\n")
        return proc.pid

    def stop(self, timeout: float = 20.0) -> bool:
        """SIGTERM, wait, then SIGKILL. Returns True if a process was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            _reap(pid)
            time.sleep(0.1)
        if self.pid() is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            end = time.monotonic() + 5
            while time.monotonic() < end and self.pid() is not None:
                _reap(pid)
                time.sleep(0.05)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:] if line.strip())

    def rss_bytes(self) -> int:
        pid = self.pid()
        if pid is None:
            return 0
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0


def _reap(pid: int) -> None:
    # When `up` and `down` run in one Python process (tests), our children become
    # zombies on exit until waited for.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
