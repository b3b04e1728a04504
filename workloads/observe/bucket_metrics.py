"""MaxText's own metrics in the run's bucket (``gcs_metrics=true``): step figures that outlive the run's pods.

Process 0 of a MaxText run keeps each step's scalars and, every ``log_period`` steps and at
the last one, uploads them as ``metrics_step_<first>_to_step_<last>.txt`` (one JSON document
per line, the ``metrics_file`` format) under ``<base_output_directory>/<run_name>/metrics/``.
A restarted attempt writes its first file under the name of the period it resumed in, so a
file an earlier attempt wrote for that period is replaced: the files hold the run's final
path of steps, not every attempt (Cloud Logging has those; ``history``).

``metrics`` and ``report`` read them when Cloud Logging cannot answer, so a restarted run's
earlier steps are still in its figures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolkit.names import WORKLOAD_CONTAINER

_FILE = re.compile(r"metrics_step_([0-9]{6,10})_to_step_([0-9]{6,10})\.txt")


def metrics_dir(pod_specs: list[Mapping[str, Any]]) -> str | None:
    """The run's gcs_metrics directory from its workload container's ``key=value`` args; None when it writes none."""
    for spec in pod_specs:
        for c in spec.get("containers") or []:
            if c.get("name") != WORKLOAD_CONTAINER:
                continue
            args = dict(a.split("=", 1) for a in [*(c.get("command") or []), *(c.get("args") or [])] if isinstance(a, str) and "=" in a and "\n" not in a)
            base, name = args.get("base_output_directory", ""), args.get("run_name", "")
            if args.get("gcs_metrics", "").lower() == "true" and base.startswith("gs://") and name:
                return f"{base.rstrip('/')}/{name}/metrics/"
    return None


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
