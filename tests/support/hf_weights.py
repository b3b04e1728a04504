"""A tiny model in Hugging Face's layout, written by tests/maxtext/write_hf_llama.py in the pinned MaxText venv (numpy, safetensors)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.paths import REPO

WRITER = REPO / "tests" / "maxtext" / "write_hf_llama.py"


def write_hf(venv: Path, out: Path, **dims: float) -> Path:
    """``out`` holding model.safetensors and config.json of a tiny Llama (``dims``: the writer's options, e.g. vocab=256, scale=0.5)."""
    args = [str(venv / "bin" / "python"), str(WRITER), str(out), *(f"--{k.replace('_', '-')}={v}" for k, v in dims.items())]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return out
