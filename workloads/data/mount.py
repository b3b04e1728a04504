"""A dataset's prefix mounted read-only with Cloud Storage FUSE, as a run's GCS FUSE CSI volume presents it.

On GKE the CSI driver runs gcsfuse in the pod's sidecar and the container sees the
dataset at ``/data/<dataset>``. ``run-local --dataset`` does the same on this machine: the
real gcsfuse (built by scripts/build-gcsfuse.sh), the same mount options, against the
local cluster's Cloud Storage server, so MaxText's Grain pipeline reads the files through
a FUSE filesystem rather than from a copy.

Two local differences, both because the server is not Cloud Storage: gcsfuse is pointed at
it (``--custom-endpoint``, anonymous), and its hierarchical-namespace probe is off
(``--enable-hns=false``: the probe is a gRPC call to the Storage Control API, which the
local server does not have; the dataset buckets are flat buckets either way).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from toolkit import tools
from toolkit.errors import ExternalToolError, ToolkitError
from toolkit.paths import script

GCSFUSE_VERSION = "v3.11.4"  # keep in step with scripts/build-gcsfuse.sh
BUILD_SCRIPT = script("build-gcsfuse.sh")

# The read side of a training dataset, as gcsfuse flags: the dataset's objects do not change
# during a run, so names and listings are cached for the run's life, and directories that
# exist only as object prefixes are shown (a converted dataset rarely has folder objects).
TRAINING_READ_FLAGS: tuple[str, ...] = (
    "--implicit-dirs",
    "--metadata-cache-ttl-secs=-1",
    "--stat-cache-max-size-mb=-1",
    "--type-cache-max-size-mb=-1",
    "--kernel-list-cache-ttl-secs=-1",
)


class MountError(ToolkitError):
    exit_code = 1


def gcsfuse(timeout: float = 1800) -> str:
    """The gcsfuse binary (built and cached on first use)."""
    try:
        done = tools.run(["bash", str(BUILD_SCRIPT)], timeout=timeout)
    except ExternalToolError as e:
        raise MountError(f"cannot build gcsfuse: {e}") from None
    if not done.ok or not done.stdout.strip():
        raise MountError(f"scripts/{BUILD_SCRIPT.name} failed: {tools.last_line(done.stderr) or done.returncode}")
    return done.stdout.strip().splitlines()[-1]


def argv(
    binary: str, bucket: str, only_dir: str, mountpoint: Path, *, endpoint: str | None, log_file: Path, flags: Sequence[str] = TRAINING_READ_FLAGS
) -> list[str]:
    out = [binary, "--foreground", "-o", "ro", f"--only-dir={only_dir}", *flags, f"--log-file={log_file}", "--log-severity=info"]
    if endpoint is not None:
        out += [f"--custom-endpoint={endpoint.rstrip('/')}/storage/v1/", "--anonymous-access", "--enable-hns=false"]
    return [*out, bucket, str(mountpoint)]


@contextmanager
def mounted(bucket: str, only_dir: str, mountpoint: Path, *, endpoint: str | None, log_file: Path, timeout: float = 60) -> Iterator[Path]:
    """``gs://bucket/only_dir`` mounted read-only at ``mountpoint`` (an empty directory this call makes) while inside."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if any(mountpoint.iterdir()) or os.path.ismount(mountpoint):
        raise MountError(f"{mountpoint} is not an empty directory: gcsfuse would hide what is there")
    proc = subprocess.Popen(
        argv(gcsfuse(), bucket, only_dir, mountpoint, endpoint=endpoint, log_file=log_file),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None:
                err = (proc.stderr.read() or b"").decode(errors="replace").strip().splitlines() if proc.stderr else []
                raise MountError(f"gcsfuse could not mount gs://{bucket}/{only_dir}: {err[-1] if err else f'exit {proc.returncode}'} (log: {log_file})")
            if time.monotonic() > deadline:
                raise MountError(f"gcsfuse did not mount gs://{bucket}/{only_dir} within {timeout:.0f}s (log: {log_file})")
            time.sleep(0.1)
        yield mountpoint
    finally:
        if os.path.ismount(mountpoint):
            subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
