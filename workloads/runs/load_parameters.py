"""The checkpoint a run on a cluster starts from, read where the run will read it, before the run is applied.

``submit --load-parameters PATH`` (or a recipe's ``load_parameters_path``) is checked in the
buckets the cluster's runs read (the local cluster's own server, else Cloud Storage) by
``checkpoint_shapes.check``: it exists, holds a checkpoint, and its shapes are the model's.
What is read is a few small JSON files beside the arrays, never the weights.
(``run-local --load-parameters DIR`` reads a directory on this machine the same way:
``workloads.maxtext.run_local``.)
"""

from __future__ import annotations

from typing import Any

from toolkit.errors import FieldError
from workloads.planning import checkpoint_shapes as cs
from workloads.planning.checkpoint_shapes import Checked, LoadParameters, Read


def on_cluster(lp: LoadParameters, client: Any) -> Checked:
    """The check of a run on a cluster: its pods read Cloud Storage, so the path must be a gs:// one, read through ``client``."""
    if not lp.path.startswith("gs://"):
        raise FieldError(
            lp.field,
            f"{lp.path} is a path on this machine; a run on the cluster reads its parameters from Cloud Storage",
            "upload the checkpoint to a bucket the team reads and pass its gs:// path (`convert` writes one there)",
        )
    return cs.check(lp, gcs_reader(client, lp.path))


def gcs_reader(client: Any, path: str) -> Read:
    """Files under a gs:// checkpoint path, through the storage client (``storage_call``: one line for any failure)."""
    from workloads.observe.storage import storage_call

    rest = path.removeprefix("gs://")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")

    def read(name: str) -> bytes | None:
        parts = prefix.split("/") if prefix else []
        for seg in name.split("/"):
            parts = parts[:-1] if seg == ".." else [*parts, seg]
        key = "/".join(parts)
        blob = storage_call(f"read gs://{bucket}/{key}", bucket, lambda: client.bucket(bucket).get_blob(key))
        return None if blob is None else storage_call(f"read gs://{bucket}/{key}", bucket, blob.download_as_bytes)

    return read
