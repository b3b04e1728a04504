"""Where a run finds its dataset, and the MaxText flags that point its Grain pipeline there.

A run reads a dataset through a read-only GCS FUSE mount of the dataset's prefix (the CSI
driver's ``only-dir`` option), so the files appear at ``/data/<dataset>/`` in the container,
whatever the bucket is called. The local real-data run (``run-local --dataset``) mounts the
loopback bucket the same way and passes the same flags with its own mount point.
"""

from __future__ import annotations

from infra.spec import DatasetSpec

DATA_ROOT = "/data"  # where the run's container sees its datasets


def mount_dir(d: DatasetSpec, root: str = DATA_ROOT) -> str:
    return f"{root.rstrip('/')}/{d.name}"


def tokenizer_path(d: DatasetSpec, root: str = DATA_ROOT) -> str:
    """MaxText's own tokenizers are named relative to its package; a dataset's sits beside its files."""
    return d.tokenizer if d.bundled_tokenizer else f"{mount_dir(d, root)}/{d.tokenizer}"


def maxtext_data_args(d: DatasetSpec, root: str = DATA_ROOT) -> dict[str, str]:
    """The MaxText arguments that read ``d`` from its mount under ``root`` (replacing dataset_type=synthetic)."""
    return {
        "dataset_type": "grain",
        "grain_file_type": d.format.value,
        "grain_train_files": f"{mount_dir(d, root)}/{d.file_glob}",
        "tokenizer_path": tokenizer_path(d, root),
        "tokenizer_type": d.tokenizer_type.value,
        "train_data_columns": d.column,
        "tokenize_train_data": "false" if d.tokenized else "true",
    }
