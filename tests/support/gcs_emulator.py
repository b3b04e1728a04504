"""A real GCS-compatible server (PyPI gcp-storage-emulator) on 127.0.0.1 for the storage tests.

scripts/setup-gcs-emulator.sh builds its venv in the cache once (pinned version); each test
session starts one in-memory server process on a free loopback port (a new one if another
process took it first) and stops it at the end.

gcp-storage-emulator ignores generation preconditions (``ifGenerationMatch``), on which the
toolkit's create-only writes and generation-checked replaces and deletes rest
(``toolkit.ledger``). Those are tested against ``precondition_client``: fake-gcs-server
(scripts/build-fake-gcs-server.sh), which checks them as Cloud Storage does.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.support.paths import REPO
from workloads.local.procs import free_port

ATTEMPTS = 3


def _start(exe: str, timeout: float, argv: Callable[[int], list[str]]) -> tuple[subprocess.Popen[bytes], str] | None:
    """One server on a fresh port, answering; None if its port was taken before it bound it."""
    port = free_port()
    proc = subprocess.Popen(
        argv(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            if "address already in use" in err.lower():
                return None
            raise RuntimeError(f"gcs emulator exited: {err[-500:]}")
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b?project=test", timeout=1).read()
        except OSError:
            if time.monotonic() > deadline:
                _stop(proc)
                raise RuntimeError(f"gcs emulator did not answer on {url} within {timeout}s") from None
            time.sleep(0.2)
            continue
        if proc.poll() is None:  # the answer came from our process, not from whoever holds the port
            return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def _serving(script: str, what: str, timeout: float, argv: Callable[[str, int], list[str]]) -> Iterator[str]:
    """A server built by ``scripts/<script>`` (its executable on the last line), on a fresh loopback port; its base URL."""
    setup = subprocess.run(["bash", str(REPO / "scripts" / script)], capture_output=True, text=True, timeout=1800)
    if setup.returncode != 0:
        raise RuntimeError(f"{script} failed: {setup.stderr.strip()[-500:]}")
    exe = setup.stdout.strip().splitlines()[-1]
    # The port is a flag: picked free, it can be taken before the server binds it; then a new one.
    for _ in range(ATTEMPTS):
        started = _start(exe, timeout, lambda port: argv(exe, port))
        if started:
            break
    else:
        raise RuntimeError(f"{what}: its port was taken {ATTEMPTS} times in a row")
    proc, url = started
    try:
        yield url
    finally:
        _stop(proc)


@contextmanager
def running_emulator(timeout: float = 30) -> Iterator[str]:
    """Yield the emulator's base URL (the value for STORAGE_EMULATOR_HOST)."""
    with _serving(
        "setup-gcs-emulator.sh", "gcs emulator", timeout, lambda exe, port: [exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"]
    ) as url:
        yield url


@contextmanager
def emulator_client(project: str = "test-project") -> Iterator[object]:
    """A google-cloud-storage client on a fresh emulator, with the emulator's address in the
    environment for the code under test meanwhile (a module-scoped fixture cannot monkeypatch)."""
    from workloads.observe import storage

    with running_emulator() as url:
        old = os.environ.get(storage.EMULATOR_ENV)
        os.environ[storage.EMULATOR_ENV] = url
        try:
            yield storage.make_client(project=project)
        finally:
            if old is None:
                os.environ.pop(storage.EMULATOR_ENV, None)
            else:
                os.environ[storage.EMULATOR_ENV] = old


@contextmanager
def running_precondition_server(timeout: float = 30) -> Iterator[str]:
    """Yield the base URL of a fresh fake-gcs-server, which checks ifGenerationMatch as Cloud Storage does."""

    def argv(exe: str, port: int) -> list[str]:
        return [
            exe,
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"127.0.0.1:{port}",
            "-log-level",
            "error",
        ]

    with _serving("build-fake-gcs-server.sh", "fake-gcs-server", timeout, argv) as url:
        yield url


@contextmanager
def precondition_client(project: str = "test-project") -> Iterator[object]:
    """A google-cloud-storage client on a fresh fake-gcs-server (``running_precondition_server``)."""
    from workloads.observe import storage

    with running_precondition_server() as url:
        yield storage.make_client(project=project, endpoint=url)
