"""The local cluster's daemons as one group: their ports, a wait that watches them all, and stopping them.

Each daemon is a ``procs.Daemon`` of the cluster's state dir (``run/<name>.pid``,
``logs/<name>.log``). Every wait of ``up`` polls a real readiness signal with a generous
deadline (none is a fixed sleep) and fails at once, with the daemon's log tail, when any
daemon that was started has exited; as ``PortTaken`` when it exited because another
process had bound its port first, which ``up`` answers by starting again on fresh ports
(``procs.free_port`` says why that can happen).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import ClusterError
from toolkit.paths import REPO_ROOT
from workloads.cluster.wait import WaitFailed, WaitTimeout, wait_for
from workloads.local import LocalClusterError
from workloads.local.procs import Daemon, free_port

Progress = Callable[[str], None]


class PortTaken(LocalClusterError):
    """A daemon exited at start-up because another process had bound its port first."""


@dataclass
class Ports:
    """The loopback ports of one start, each free when picked and none picked twice."""

    etcd: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    controller_manager: int = 0
    scheduler: int = 0
    kwok: int = 0
    kueue_webhook: int = 0
    kueue_health: int = 0
    jobset_webhook: int = 0
    jobset_health: int = 0
    gcs: int = 0
    logging: int = 0

    @classmethod
    def pick(cls) -> Ports:
        chosen: set[int] = set()
        values = {}
        for name in cls.__dataclass_fields__:
            p = free_port()
            while p in chosen:
                p = free_port()
            chosen.add(p)
            values[name] = p
        return cls(**values)


@dataclass(frozen=True)
class Daemons:
    """The daemons of one state dir: ``names`` in stop order (start order is the reverse)."""

    state_dir: Path
    names: tuple[str, ...]
    progress: Progress = field(default=lambda msg: None)

    def daemon(self, name: str) -> Daemon:
        return Daemon(name, self.state_dir)

    def report(self, expected: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Each daemon that should run (``expected``) or does: running, pid, memory and log, in start order."""
        out = {}
        for name in reversed(self.names):
            d = self.daemon(name)
            pid = d.pid()
            if name in expected or pid is not None:
                out[name] = {"running": pid is not None, "pid": pid, "rss_mib": round(d.rss_bytes() / 2**20, 1), "log": str(d.log_file)}
        return out

    def start_python(self, name: str, module: str, ready: Path, what: str, timeout: float, starting: str = "") -> None:
        """``python -m module --state-dir`` as daemon ``name``; up once it writes ``ready``."""
        self.progress(f"starting {starting or what}")
        ready.unlink(missing_ok=True)
        self.daemon(name).start([sys.executable, "-m", module, "--state-dir", str(self.state_dir)], env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
        self.wait(what, ready.is_file, timeout)

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll ``check`` until true; fail early if a daemon died, with its log tail."""
        t0 = last_note = time.monotonic()
        self.progress(f"waiting for {what}")

        def ready() -> bool:
            nonlocal last_note
            try:
                if check():
                    return True
            except (LocalClusterError, ClusterError):
                pass  # not up yet
            now = time.monotonic()
            if now - last_note > 15:
                self.progress(f"  still waiting for {what} ({now - t0:.0f}s)")
                last_note = now
            return False

        try:
            wait_for(ready, timeout=timeout, what=what, interval=0.25, fail=lambda _: self.exited_daemon())
        except WaitFailed as e:
            taken = any(d.port_taken() for d in self.exited())
            raise (PortTaken if taken else LocalClusterError)(str(e)) from None
        except WaitTimeout:
            raise LocalClusterError(f"timed out after {timeout:.0f}s waiting for {what} (logs in {self.state_dir / 'logs'})") from None
        self.progress(f"  {what}: ready after {time.monotonic() - t0:.1f}s")

    def exited(self) -> list[Daemon]:
        """The daemons that were started and are gone."""
        return [d for d in map(self.daemon, self.names) if d.pid_file.exists() and not d.alive()]

    def exited_daemon(self) -> str | None:
        """A daemon that was started and is gone, with its log tail; None while all run."""
        for d in self.exited():
            return f"{d.name} exited during start-up: {d.log_tail(4) or 'no output'} (log: {d.log_file})"
        return None

    def stop_all(self) -> list[str]:
        """Stop every daemon, in stop order; the names of those that were running."""
        stopped = []
        for name in self.names:
            if self.daemon(name).stop():
                stopped.append(name)
                self.progress(f"stopped {name}")
        return stopped
