"""Whether the files a MaxText run reads and writes are on a volume the run mounts. Pure.

A published recipe reads its data and checkpoints at container paths its launcher mounted:
tpu-recipes' ``-gcs`` variants mount a bucket at ``/tmp/dataset`` (``--mount gs://...;/tmp/dataset;ro``),
the ``-lustre`` ones a Lustre volume at ``/mnt/lustre`` with ``grain_train_files`` and the
checkpoints under it. Imported, such a recipe keeps those MaxText paths (``mounts`` records
where they came from), and a run mounts only what the toolkit gives it:

| volume of the run | mounted at |
|---|---|
| the dataset (``--dataset`` / the recipe's ``dataset:``) | ``/data/<dataset>`` (``workloads.planning.dataset``), and its keys replace the recipe's |
| checkpoint storage ``gcsfuse`` / ``lustre`` | ``/checkpoints`` (Lustre: the whole instance) |
| multi-tier checkpointing's RAM disk | its ``local_checkpoint_directory`` |

``check_paths`` runs once the run's MaxText arguments are final. A path key in use (the data
keys of the run's ``dataset_type``, the checkpoint keys, ``base_output_directory``) holding an
absolute container path that none of those volumes holds would fail only after the slices
are held, so it is refused with the fix. One mapping is made: a path under the recipe's own
Lustre mount, when the run checkpoints to the spec's Lustre, is the same file on the same
file system, so it is rewritten to the run's mount of it (and said so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloads.planning.dataset import mount_dir
from workloads.planning.recipes import shown_path
from workloads.planning.select import PlanError

if TYPE_CHECKING:
    from infra.spec import DatasetSpec
    from workloads.planning.model import CheckpointStorage, MultiTierCheckpointing
    from workloads.planning.recipes import Recipe

# MaxText keys naming files a run reads, with the dataset_type values that read them (None: read whenever set).
PATH_KEYS: dict[str, tuple[str, ...] | None] = {
    "grain_train_files": ("grain",),
    "grain_eval_files": ("grain",),
    "dataset_path": ("tfds", "c4_mlperf"),
    "hf_train_files": ("hf",),
    "hf_eval_files": ("hf",),
    "hf_data_dir": ("hf",),
    "load_parameters_path": None,
    "load_full_state_path": None,
}
MAXTEXT_DEFAULT_DATASET_TYPE = "tfds"  # MaxText's base.yml
_DATA_KEYS = frozenset(k for k, kinds in PATH_KEYS.items() if kinds is not None)


def local_paths(value: Any) -> list[str]:
    """The absolute container paths in a MaxText path value (Grain's ``a,0.3;b,0.7`` mixtures: each file pattern).

    None for ``gs://`` and other URLs, relative paths (the image's own files), empty values
    and unresolved shell expansions.
    """
    out: list[str] = []
    for part in str(value).split(";"):
        path = part.split(",", 1)[0].strip().strip("'\"")
        if path.startswith("/") and "$" not in path:
            out.append(path)
    return out


def local_path(value: Any) -> str | None:
    found = local_paths(value)
    return found[0] if found else None


def _under(path: str, directory: str) -> bool:
    d = directory.rstrip("/") or "/"
    return path == d or path.startswith(d.rstrip("/") + "/")


@dataclass(frozen=True)
class Volume:
    path: str
    what: str


def run_volumes(dataset: DatasetSpec | None, storage: CheckpointStorage | None, multi_tier: MultiTierCheckpointing | None) -> list[Volume]:
    """The directories a run's container has from the toolkit's volumes."""
    out: list[Volume] = []
    if dataset is not None:
        out.append(Volume(mount_dir(dataset), f"dataset {dataset.name}"))
    if storage is not None:
        out.append(Volume(storage.mount_dir, f"checkpoint storage {storage.kind}"))
    if multi_tier is not None:
        out.append(Volume(multi_tier.directory, "the multi-tier checkpointing RAM disk"))
    return out


def _in_use(key: str, args: dict[str, str]) -> bool:
    kinds = PATH_KEYS.get(key)
    return kinds is None or args.get("dataset_type", MAXTEXT_DEFAULT_DATASET_TYPE).strip("'\"") in kinds


def check_paths(
    recipe: Recipe,
    args: dict[str, str],
    sets: dict[str, str],
    *,
    dataset: DatasetSpec | None,
    storage: CheckpointStorage | None,
    multi_tier: MultiTierCheckpointing | None,
) -> list[str]:
    """Refuse a path key in use that no volume of the run holds; map the recipe's Lustre paths onto the run's
    Lustre mount (``args`` is updated). Returns the warnings (one per path mapped)."""
    volumes = run_volumes(dataset, storage, multi_tier)
    lustre_mounts = [m for m in recipe.mounts if m.kind == "lustre" and m.path]
    notes: list[str] = []
    for key in [*PATH_KEYS, "base_output_directory"]:
        if key not in args or not _in_use(key, args):
            continue
        value = args[key]
        for path in local_paths(value):
            if any(_under(path, v.path) for v in volumes):
                continue
            theirs = next((m for m in lustre_mounts if _under(path, m.path or "")), None)
            if theirs is not None and storage is not None and storage.kind == "lustre" and key not in sets:
                mapped = storage.mount_dir.rstrip("/") + path[len((theirs.path or "").rstrip("/")) :]
                value = value.replace(path, mapped)
                notes.append(
                    f"{key}: {path} is on the recipe's Lustre mount {theirs.path}; this run mounts the spec's Lustre instance at"
                    f" {storage.mount_dir}, so it reads {mapped} (the files must be there)"
                )
                continue
            raise _refusal(recipe, key, path, sets, storage, shown_path(recipe.name))
        args[key] = value
    return notes


def _refusal(recipe: Recipe, key: str, path: str, sets: dict[str, str], storage: CheckpointStorage | None, file: str) -> PlanError:
    mount = next((m for m in recipe.mounts if m.path and _under(path, m.path)), None)
    source = next((m for m in recipe.mounts if m.path is None), None)
    had = (
        f" (the published script mounted {mount.source} there)"
        if mount is not None
        else f" (the published script mounted {source.source}, at a path it does not give)"
        if source is not None
        else ""
    )
    field = "--set" if key in sets else f"recipe {recipe.name} maxtext.args.{key}"
    problem = f"MaxText {key}={path} is a container path no volume of this run mounts{had}, so the run would fail after its slices are held"
    on_lustre = mount is not None and mount.kind == "lustre" and (storage is None or storage.kind != "lustre")
    lustre = " or --checkpoint-storage lustre (the spec's Lustre instance, mounted at /checkpoints)" if on_lustre else ""
    if key in _DATA_KEYS:
        fix = f"train on a dataset of the spec: --dataset NAME, or `dataset: NAME` in {file}{lustre}"
        if key == "dataset_path":
            fix += "; or --set dataset_path=gs://BUCKET/PATH"
    elif key == "base_output_directory":
        fix = "drop --set base_output_directory (the team's bucket), give a gs:// path, or --checkpoint-storage gcsfuse or lustre"
    else:
        fix = f"--set {key}=gs://BUCKET/PATH (MaxText reads checkpoints from GCS){lustre}"
    return PlanError(field, problem, fix)
