"""The conversion Job's command, run for real on this machine's CPU: ``convert --local``.

The command is the ``Conversion``'s — MaxText's ``maxtext.checkpoint_conversion.to_maxtext``
with every argument the Job passes — in the pinned MaxText venv (``workloads.maxtext.env``),
with the local substitutions:

- ``hf_model_path``: the directory of Hugging Face files here (the Job's is the bucket's
  GCS FUSE mount), checked first to hold ``model.safetensors`` or its index;
- ``base_output_directory``: ``<out>/<name>`` (the Job's is the team's bucket), so the
  checkpoint lands in ``<out>/<name>/0/items`` — what ``run-local --load-parameters`` takes;
- with ``tiny``: the tiny model's dimensions (``run_local.TINY_MODEL``: what ``run-local
  --tiny`` trains) and ``override_model_config=true``; a ``--set`` of the same key wins (a
  tiny run on a dataset has the tokenizer's vocabulary, so its conversion needs
  ``--set vocab_size=N``).

MaxText's Hugging Face mapping for a family is written for the published model's layer
count; a tiny model of fewer layers converts only with ``scan_layers=false`` (the scanned
mapping stacks every published layer), which the runs that load it must use too.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import SpecError
from workloads.maxtext import env as maxtext_env
from workloads.maxtext.run_local import TINY_MODEL, LocalRunError, last_error
from workloads.planning.checkpoint_shapes import DIMS, METADATA
from workloads.planning.conversion import CONVERT_MODULE, Conversion

LOG_NAME = "convert.log"
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")


@dataclass(frozen=True)
class LocalConversion:
    conversion: Conversion
    argv: tuple[str, ...]
    checkpoint: Path  # <out>/<name>/0/items
    log_path: Path
    seconds: float
    peak_rss_bytes: int


def check_source(hf_dir: Path) -> None:
    if not hf_dir.is_dir():
        raise SpecError("--from", f"{hf_dir} is not a directory", "pass the directory holding the Hugging Face files (config.json, *.safetensors)")
    if not any((hf_dir / n).is_file() for n in SAFETENSORS):
        raise SpecError("--from", f"{hf_dir} holds no model.safetensors (or its index)", "download the model's safetensors files into it")


def local_args(c: Conversion, hf_dir: Path, out: Path, workdir: Path, *, tiny: bool, kept: Iterable[str] = ()) -> list[str]:
    """The conversion's arguments with the local substitutions (``env.local_args``: scratch files in ``workdir``);
    ``kept``: the keys ``--set`` gave, which win over the tiny model's."""
    subs = {"hf_model_path": str(hf_dir), "base_output_directory": str(out / c.name)}
    if tiny:
        kept = set(kept)
        subs |= {k: TINY_MODEL[k] for k in DIMS if k not in kept}
        if "override_model_config" not in kept:
            subs["override_model_config"] = "true"
    return maxtext_env.local_args(c.args, workdir, subs)


def convert(c: Conversion, venv: Path, hf_dir: Path, out: Path, *, tiny: bool, kept: Iterable[str] = (), timeout: float = 1800) -> LocalConversion:
    """Run MaxText's conversion; the log lands in ``<out>/convert.log`` and the checkpoint in ``<out>/<name>/0/items``."""
    hf_dir, out = Path(hf_dir).resolve(), Path(out).resolve()
    check_source(hf_dir)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="tgk-convert-"))
    argv = [str(maxtext_env.python(venv)), "-m", CONVERT_MODULE, *local_args(c, hf_dir, out, workdir, tiny=tiny, kept=kept)]
    try:
        done = maxtext_env.run(argv, maxtext_env.local_env(()), workdir, "convert", timeout=timeout)
        log_path = out / LOG_NAME
        shutil.copyfile(done.stderr_path, log_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    checkpoint = out / c.name / "0" / "items"
    if done.timed_out:
        raise LocalRunError(f"MaxText's conversion timed out after {timeout:g} s — log: {log_path}")
    if done.returncode != 0:
        raise LocalRunError(f"MaxText's conversion exited {done.returncode}: {last_error(log_path.read_text(errors='replace'))} — log: {log_path}")
    if not (checkpoint / METADATA).is_file():
        raise LocalRunError(f"MaxText's conversion finished but wrote no checkpoint at {checkpoint} — log: {log_path}")
    return LocalConversion(c, tuple(argv), checkpoint, log_path, done.seconds, done.peak_rss_bytes)
