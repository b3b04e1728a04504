"""A real GCS-compatible server (PyPI gcp-storage-emulator) on 127.0.0.1 for the storage tests.

scripts/setup-gcs-emulator.sh builds its venv in the cache once (pinned version); each test
session starts one in-memory server process on a free loopback port and stops it at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_emulator(timeout: float = 30) -> Iterator[str]:
    """Yield the emulator's base URL (the value for STORAGE_EMULATOR_HOST)."""
    setup = subprocess.run(["bash", str(REPO / "scripts" / "setup-gcs-emulator.sh")], capture_output=True, text=True, timeout=600)
    if setup.returncode != 0:
        raise RuntimeError(f"setup-gcs-emulator.sh failed: {setup.stderr.strip()[-500:]}")
    exe = setup.stdout.strip().splitlines()[-1]
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gcs emulator exited: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b?project=test", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gcs emulator did not answer on {url} within {timeout}s") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
