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
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workloads.local import LocalClusterError

# What a daemon that could not bind its port says: Go's net package ("bind: address already
# in use"), Python's OSError (errno 98), Ray's own check ("already occupied").
_BIND_FAILED = re.compile(r"address already in use|already occupied|EADDRINUSE", re.IGNORECASE)
START_MARK = "\n=== "  # the line Daemon.start writes to the log before each start


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
            log.write(f"{START_MARK}{time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
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

    def port_taken(self) -> bool:
        """Whether the daemon's latest start failed because another process held its port."""
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return False
        return bool(_BIND_FAILED.search(text[text.rfind(START_MARK) + 1 :]))

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


def _ephemeral_low() -> int:
    """Where the kernel's range for the local ends of outgoing connections starts."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# Ports handed to daemons come from here: below the ephemeral range, above the usual fixed ones.
PORT_FLOOR = 20000


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a daemon that takes its port as a flag.

    Between this check and the daemon's bind the port is free for anyone. It is drawn at
    random below the kernel's ephemeral range, so no outgoing connection (the apiserver's
    clients open many) can be given it meanwhile; another process binding the same port
    first is still possible, and a start that fails that way is retried on new ports
    (``Daemon.port_taken``). A daemon of our own binds port 0 itself instead.
    """
    top = _ephemeral_low()
    if top - PORT_FLOOR >= 1000:
        for _ in range(100):
            port = random.randrange(PORT_FLOOR, top)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below the range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def http_ok(url: str, needle: str = "") -> bool:
    """Whether a daemon's plain-HTTP health URL (built here, on loopback) answers 200, with ``needle`` in its body."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - loopback URL built here
            return r.status == 200 and needle in r.read().decode(errors="replace")
    except OSError:
        return False


def https_ok(port: int, path: str) -> bool:
    """Whether a daemon's HTTPS health path on loopback ``port`` answers 200 "ok".

    The controller-manager and scheduler serve with self-signed certs; their health paths
    are unauthenticated. Only loopback is ever contacted.
    """
    import http.client
    import ssl

    if not port_open(port):
        return False
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=3)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status == 200 and resp.read().decode().strip() == "ok"
    except OSError:
        return False
    finally:
        conn.close()
