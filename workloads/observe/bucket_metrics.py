"""MaxText's own step figures where they outlive the run's pods: its metrics files, else its TensorBoard events.

Process 0 of a MaxText run keeps each step's scalars and, every ``log_period`` steps and at
the last one, uploads them as ``metrics_step_<first>_to_step_<last>.txt`` (one JSON document
per line, the ``metrics_file`` format) under ``<base_output_directory>/<run_name>/metrics/``.
A restarted attempt writes its first file under the name of the period it resumed in, so a
file an earlier attempt wrote for that period is replaced: the files hold the run's final
path of steps, not every attempt (Cloud Logging has those; ``history``).

``gcs_metrics`` uploads to a ``gs://`` output only, so a run that checkpoints through a mount
(``--checkpoint-storage gcsfuse`` or ``lustre``: ``base_output_directory`` is the mount path)
has none, and MaxText derives ``metrics_dir`` from ``base_output_directory`` (no key sends the
files elsewhere). What every such run does write is TensorBoard's event files: process 0
writes each step's scalars into ``<base_output_directory>/<run_name>/tensorboard/<run_name>/``
(``max_utils.initialize_summary_writer`` adds the run name to ``tensorboard_dir``), one file
per attempt, closed when training stops (``workloads.observe.tb_events``). Through GCS FUSE
that directory is an object prefix of the mounted bucket, read here like the metrics files
(a file appears when its writer closes it, so an attempt killed before it could close leaves
none). On Lustre the toolkit cannot read it from here: ``metrics_place`` says where it is, and
``metrics --metrics-file`` takes an event file copied out of a pod that mounts the claim.

``metrics`` and ``report`` read them when Cloud Logging cannot answer, so a restarted run's
earlier steps are still in its figures.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.names import GCSFUSE_CSI_DRIVER, WORKLOAD_CONTAINER

_FILE = re.compile(r"metrics_step_([0-9]{6,10})_to_step_([0-9]{6,10})\.txt")
_EVENTS = re.compile(r"events\.out\.tfevents\.[^/]{1,200}")

METRICS, TENSORBOARD, LUSTRE = "metrics", "tensorboard", "lustre"


@dataclass(frozen=True)
class Place:
    """Where a run's step figures outside its log are: ``kind`` METRICS (gcs_metrics files) or TENSORBOARD (event files)
    under ``directory`` (gs://bucket/prefix/), or LUSTRE (event files at ``directory``, a path inside the run's pods)."""

    kind: str
    directory: str


def _args(c: Mapping[str, Any]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in [*(c.get("command") or []), *(c.get("args") or [])] if isinstance(a, str) and "=" in a and "\n" not in a)


def metrics_place(pod_specs: list[Mapping[str, Any]]) -> Place | None:
    """Where the run's workload container (its ``key=value`` args and mounts) leaves its step figures; None when nowhere."""
    for spec in pod_specs:
        for c in spec.get("containers") or []:
            if c.get("name") != WORKLOAD_CONTAINER:
                continue
            args = _args(c)
            base, name = args.get("base_output_directory", "").rstrip("/"), args.get("run_name", "")
            if not base or not name or "/" in name:
                return None
            if base.startswith("gs://"):
                if args.get("gcs_metrics", "").lower() == "true":
                    return Place(METRICS, f"{base}/{name}/metrics/")
                return Place(TENSORBOARD, f"{base}/{name}/tensorboard/{name}/") if _tensorboard_on(args) else None
            return _mounted(spec, c, base, name) if _tensorboard_on(args) else None
    return None


def _tensorboard_on(args: Mapping[str, str]) -> bool:
    return args.get("enable_tensorboard", "true").lower() != "false"  # on in MaxText's base.yml


def _mounted(spec: Mapping[str, Any], c: Mapping[str, Any], base: str, name: str) -> Place | None:
    """The event files of a run whose output is a mount: the GCS FUSE volume's bucket, or a claim's path."""
    mounts = [m for m in c.get("volumeMounts") or [] if isinstance(m, Mapping) and isinstance(m.get("mountPath"), str)]
    mount = max(
        (m for m in mounts if base == m["mountPath"].rstrip("/") or base.startswith(m["mountPath"].rstrip("/") + "/")),
        key=lambda m: len(m["mountPath"]),
        default=None,
    )
    if mount is None:
        return None
    volume = next((v for v in spec.get("volumes") or [] if isinstance(v, Mapping) and v.get("name") == mount.get("name")), None) or {}
    below = posixpath.relpath(base, mount["mountPath"].rstrip("/") or "/")
    csi = volume.get("csi") or {}
    if csi.get("driver") == GCSFUSE_CSI_DRIVER:
        attributes = csi.get("volumeAttributes") or {}
        bucket = attributes.get("bucketName", "")
        only = next((o.split("=", 1)[1] for o in str(attributes.get("mountOptions", "")).split(",") if o.startswith("only-dir=")), "")
        if not bucket:
            return None
        prefix = "/".join(p.strip("/") for p in (only, "" if below == "." else below, name, "tensorboard", name) if p.strip("/"))
        return Place(TENSORBOARD, f"gs://{bucket}/{prefix}/")
    if volume.get("persistentVolumeClaim"):
        return Place(LUSTRE, f"{base}/{name}/tensorboard/{name}/")
    return None


def metrics_dir(pod_specs: list[Mapping[str, Any]]) -> str | None:
    """The run's gcs_metrics directory from its workload container's ``key=value`` args; None when it writes none."""
    place = metrics_place(pod_specs)
    return place.directory if place is not None and place.kind == METRICS else None


def read(client: Any, directory: str, *, limit_bytes: int) -> tuple[str, int]:
    """(the files' lines in step order, how many files) under ``directory`` (gs://bucket/path/); ("", 0) when there are none.

    Storage failures are ``workloads.observe.storage.StorageError``.
    """
    from workloads.observe.storage import StorageError, storage_call

    bucket, _, prefix = directory.removeprefix("gs://").partition("/")
    blobs = storage_call(f"list {directory}", bucket, lambda: list(client.list_blobs(bucket, prefix=prefix)))
    found = []
    for b in blobs:
        m = _FILE.fullmatch(b.name[len(prefix) :])
        if m:
            found.append((int(m.group(1)), int(m.group(2)), b))
    found.sort(key=lambda x: (x[0], x[1]))
    parts, size = [], 0
    for _, _, b in found:
        size += int(b.size or 0)
        if size > limit_bytes:
            raise StorageError(f"the metrics files under {directory} are over {limit_bytes:,} bytes — pass the part you need as --metrics-file")
        parts.append(storage_call(f"read gs://{bucket}/{b.name}", bucket, b.download_as_text).rstrip("\n"))
    return "\n".join(p for p in parts if p), len(found)


def read_events(client: Any, directory: str, *, limit_bytes: int) -> tuple[str, int]:
    """(the TensorBoard event files under ``directory`` as one metrics-file text, how many files); ("", 0) when there are none.

    Files in name order (tensorboardX names them by their start time: attempt order); a step
    a later attempt did again is the later one's. Storage failures are ``StorageError``, as is
    a file that is not an event file.
    """
    from workloads.observe import tb_events
    from workloads.observe.storage import StorageError, storage_call

    bucket, _, prefix = directory.removeprefix("gs://").partition("/")
    blobs = storage_call(f"list {directory}", bucket, lambda: list(client.list_blobs(bucket, prefix=prefix, delimiter="/")))
    found = sorted((b for b in blobs if _EVENTS.fullmatch(b.name[len(prefix) :])), key=lambda b: b.name)
    datas, size = [], 0
    for b in found:
        size += int(b.size or 0)
        if size > limit_bytes:
            raise StorageError(f"the event files under {directory} are over {limit_bytes:,} bytes — copy the one you need and pass it as --metrics-file")
        datas.append(_download(b, bucket))
    try:
        by_step = tb_events.steps(datas)
    except tb_events.BadEvents as e:
        raise StorageError(f"an event file under {directory} cannot be read: {e}") from None
    return tb_events.as_metrics_file(by_step), len(found)


PART = 16 * 1024 * 1024  # one ranged read: a long run's event file is larger than the transport takes in one answer


def _download(blob: Any, bucket: str) -> bytes:
    """The object's bytes in ranged reads of at most PART each (each one answer within the transport's byte cap)."""
    from workloads.observe.storage import storage_call

    size = int(blob.size or 0)
    parts = [
        storage_call(f"read gs://{bucket}/{blob.name}", bucket, lambda start=start: blob.download_as_bytes(start=start, end=min(size, start + PART) - 1))
        for start in range(0, size, PART)
    ]
    return b"".join(parts)


def read_place(client: Any, place: Place, *, limit_bytes: int) -> tuple[str, int]:
    """``read`` or ``read_events``, by what the place holds (not LUSTRE, which is not reachable from here)."""
    return (read if place.kind == METRICS else read_events)(client, place.directory, limit_bytes=limit_bytes)
