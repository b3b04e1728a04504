"""A dataset read the way a run reads it, on this machine: checked, tokenizer loaded, prefix FUSE-mounted.

``run-local --dataset`` enters ``reading`` around its MaxText run: the dataset checks of
``submit`` (files, format, the run identity's access), the tokenizer loaded by MaxText's own
loader (its id count sizes the tiny model's embedding), then the dataset's prefix mounted
read-only with gcsfuse at ``<root>/<dataset>`` with the run's own volume options
(``workloads.render.volumes.dataset_mount_options``), and the Grain flags pointing there
(``workloads.planning.dataset.maxtext_data_args`` with this root, the JobSet's with ``/data``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra import access
from infra.spec import EnvSpec
from workloads.data import checks, mount, tokenizer
from workloads.maxtext.run_local import LocalData
from workloads.planning.dataset import maxtext_data_args, mount_dir
from workloads.planning.model import RunPlan
from workloads.render import volumes


@contextmanager
def reading(spec: EnvSpec, plan: RunPlan, client: Any, endpoint: str | None, root: Path, venv: Path) -> Iterator[LocalData]:
    """While inside: the plan's dataset mounted under ``root`` with the plan's own volume options, and the flags that read it there."""
    d = plan.program.dataset
    assert d is not None, "the plan reads no dataset"
    checks.check_dataset(client, spec, d, access.run_member(spec, spec.team(plan.target.team), False))
    ids = tokenizer.check(client, spec, d, venv=venv).ids
    target = Path(mount_dir(d, str(root)))
    options = volumes.dataset_mount_options(plan).split(",")
    with mount.mounted(d.bucket, options, target, endpoint=endpoint, log_file=root.parent / f"gcsfuse-{d.name}.log"):
        yield LocalData(maxtext_data_args(d, str(root)), ids)
