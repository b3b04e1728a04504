"""Ports of the local cluster's daemons: picked where nothing else is handed them, retried when taken.

A port picked free and released before its daemon binds it can be taken meanwhile (the
Ray head's dashboard once failed three starts in a row that way). The toolkit's own
daemons bind their ports themselves and name them in their ready files; a daemon that
takes its port as a flag gets one from below the kernel's ephemeral range, and a start
that finds it taken anyway is started again on new ports.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from workloads.local import LocalClusterError, kuberay
from workloads.local.controlplane import LocalCluster
from workloads.local.daemons import PortTaken
from workloads.local.procs import START_MARK, Daemon, _ephemeral_low, free_port


def test_free_port_is_free_and_outside_the_range_of_outgoing_connections() -> None:
    ports = {free_port() for _ in range(20)}
    assert all(p < _ephemeral_low() for p in ports), ports
    assert len(ports) > 1  # drawn at random, not the same port each time
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_port_taken_reads_the_latest_start_only(tmp_path: Path) -> None:
    d = Daemon("etcd", tmp_path)
    d.log_file.parent.mkdir(parents=True)
    old = f"{START_MARK}2026-01-01T00:00:00 starting: etcd\nlisten tcp 127.0.0.1:20001: bind: address already in use\n"
    d.log_file.write_text(old)
    assert d.port_taken()
    d.log_file.write_text(old + f"{START_MARK}2026-01-01T00:01:00 starting: etcd\nsome other failure\n")
    assert not d.port_taken()


def _bind_and_exit(port: int) -> list[str]:
    return [sys.executable, "-c", f"import socket; socket.socket().bind(('127.0.0.1', {port}))"]


def test_a_daemon_that_finds_its_port_taken_fails_the_start_as_port_taken(tmp_path: Path) -> None:
    lc = LocalCluster(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        lc.daemon("kwok").start(_bind_and_exit(holder.getsockname()[1]))
        with pytest.raises(PortTaken, match="kwok exited during start-up"):
            lc.daemons.wait("kwok", lambda: False, timeout=30)


def test_a_daemon_that_fails_otherwise_is_not_retried(tmp_path: Path) -> None:
    lc = LocalCluster(tmp_path)
    lc.daemon("kwok").start([sys.executable, "-c", "raise SystemExit('bad flag')"])
    with pytest.raises(LocalClusterError, match="bad flag") as err:
        lc.daemons.wait("kwok", lambda: False, timeout=30)
    assert not isinstance(err.value, PortTaken)


def test_a_start_that_found_a_port_taken_starts_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    lc = LocalCluster(tmp_path, progress=said.append)
    calls: list[str] = []

    def start(*_a: object) -> None:
        calls.append("start")
        if len(calls) == 1:
            raise PortTaken("etcd exited during start-up: bind: address already in use")

    monkeypatch.setattr(lc, "_start", start)
    monkeypatch.setattr(lc, "_stop_all", lambda: calls.append("stop") or [])
    lc._start_on_free_ports(tmp_path, None, "spec.yaml", 1)  # type: ignore[arg-type]
    assert calls == ["start", "stop", "start"]
    assert any("starting again on new ports (attempt 2 of 3)" in m for m in said)


def test_a_start_that_keeps_finding_ports_taken_gives_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc = LocalCluster(tmp_path)
    starts: list[int] = []

    def start(*_a: object) -> None:
        starts.append(1)
        raise PortTaken("taken")

    monkeypatch.setattr(lc, "_start", start)
    monkeypatch.setattr(lc, "_stop_all", list)
    with pytest.raises(PortTaken):
        lc._start_on_free_ports(tmp_path, None, "spec.yaml", 1)  # type: ignore[arg-type]
    assert len(starts) == 3


def test_the_ray_standin_names_the_port_it_bound(tmp_path: Path) -> None:
    ready = tmp_path / "standin.ready"
    ready.write_text(json.dumps({"port": 41234}) + "\n")
    assert kuberay.ready_port(ready) == 41234
    ready.write_text("ok\n")
    with pytest.raises(LocalClusterError, match="does not name the port"):
        kuberay.ready_port(ready)
