"""Where the toolkit's files are: the repository, and the cache outside it.

Everything built once (venvs, Node, the local-cluster binaries, the MaxText
environment, kustomize) lives under one cache directory keyed by version, never
inside the repository. ``$TGK_CACHE`` moves it; scripts/lib.sh spells the same
default for the shell entry points.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV_VAR = "TGK_CACHE"
RECIPES_ENV_VAR = "TGK_RECIPES"


def cache_dir() -> Path:
    """``$TGK_CACHE``, else ``~/.cache/tpu-gke-toolkit``."""
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "tpu-gke-toolkit"


def user_recipes_dir() -> Path:
    """``$TGK_RECIPES``, else ``~/.config/tpu-gke-toolkit/recipes``: the user's own recipes
    (``import-recipe`` writes there), found by name beside the shipped ones."""
    env = os.environ.get(RECIPES_ENV_VAR)
    if env:
        return Path(env)
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else Path.home() / ".config") / "tpu-gke-toolkit" / "recipes"


def script(name: str) -> Path:
    """A script of the project's ``scripts/`` directory."""
    return REPO_ROOT / "scripts" / name
