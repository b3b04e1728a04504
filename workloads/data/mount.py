"""A dataset's prefix mounted read-only with Cloud Storage FUSE, as a run's GCS FUSE CSI volume presents it.

On GKE the CSI driver runs gcsfuse in the pod's sidecar and the container sees the
dataset at ``/data/<dataset>``. ``run-local --dataset`` does the same on this machine: the
real gcsfuse (built by scripts/build-gcsfuse.sh), the run's own volume mount options (split
into flags and a config file as the CSI driver splits them), against the
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
from typing import Any

import yaml

from toolkit import tools
from toolkit.errors import ToolkitError
from toolkit.paths import script

GCSFUSE_VERSION = "v3.11.4"  # keep in step with scripts/build-gcsfuse.sh
BUILD_SCRIPT = script("build-gcsfuse.sh")


def gcsfuse_options(options: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """(flags, config file) of a CSI volume's ``mountOptions``, split as the GCS FUSE CSI driver splits them.

    ``a:b:c`` is the config file's ``a: {b: c}``; ``k=v`` and ``k`` are the flags ``--k=v`` and ``--k``.
    """
    flags: list[str] = []
    config: dict[str, Any] = {}
    for opt in options:
        if ":" in opt:
            *path, value = opt.split(":")
            node = config
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = _value(value)
        else:
            flags.append(f"--{opt}")
    return flags, config


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


class MountError(ToolkitError):
    exit_code = 1


def gcsfuse(timeout: float = 1800) -> str:
    """The gcsfuse binary (built and cached on first use)."""
    return str(tools.script_path(BUILD_SCRIPT, what="cannot build gcsfuse", error=MountError, timeout=timeout))


def argv(
    binary: str, bucket: str, mountpoint: Path, flags: Sequence[str], config_file: Path, *, endpoint: str | None, log_file: Path, read_only: bool = True
) -> list[str]:
    """gcsfuse mounting ``bucket`` (read-only: the dataset volume's ``readOnly``; else as the checkpoint volume) with the volume's flags and config file."""
    out = [
        binary,
        "--foreground",
        *(["-o", "ro"] if read_only else []),
        *flags,
        f"--config-file={config_file}",
        f"--log-file={log_file}",
        "--log-severity=info",
    ]
    if endpoint is not None:
        out += [f"--custom-endpoint={endpoint.rstrip('/')}/storage/v1/", "--anonymous-access", "--enable-hns=false"]
    return [*out, bucket, str(mountpoint)]


@contextmanager
def mounted(
    bucket: str, options: Sequence[str], mountpoint: Path, *, endpoint: str | None, log_file: Path, timeout: float = 60, read_only: bool = True
) -> Iterator[Path]:
    """``bucket`` mounted at ``mountpoint`` (an empty directory this call makes; read-only unless ``read_only`` is False)
    with a CSI volume's ``mountOptions`` (``options``: e.g. ``workloads.render.volumes.dataset_mount_options``) while inside."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if any(mountpoint.iterdir()) or os.path.ismount(mountpoint):
        raise MountError(f"{mountpoint} is not an empty directory: gcsfuse would hide what is there")
    flags, config = gcsfuse_options(options)
    config_file = log_file.with_suffix(".config.yaml")
    config_file.write_text(yaml.safe_dump(config))
    where = next((f.split("=", 1)[1] for f in flags if f.startswith("--only-dir=")), "")
    proc = subprocess.Popen(
        argv(gcsfuse(), bucket, mountpoint, flags, config_file, endpoint=endpoint, log_file=log_file, read_only=read_only),
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
                raise MountError(f"gcsfuse could not mount gs://{bucket}/{where}: {err[-1] if err else f'exit {proc.returncode}'} (log: {log_file})")
            if time.monotonic() > deadline:
                raise MountError(f"gcsfuse did not mount gs://{bucket}/{where} within {timeout:.0f}s (log: {log_file})")
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
