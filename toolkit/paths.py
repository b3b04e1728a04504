"""Where the toolkit's files are: the repository, the cache outside it, and the tools in it.

Everything built once (venvs, Node, the local-cluster binaries, the MaxText
environment, kustomize) lives under one cache directory keyed by version, never
inside the repository. ``$TGK_CACHE`` moves it; scripts/lib.sh spells the same
default (and the same tool pins) for the shell entry points.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV_VAR = "TGK_CACHE"
RECIPES_ENV_VAR = "TGK_RECIPES"

# What scripts/setup.sh installs beside the Python environment (scripts/lib.sh has the same
# pins; tests/test_toolkit.py holds them equal).
NODE_VERSION = "22.22.0"
CDKTN_CLI_VERSION = "0.24.0"
CHECKOV_VERSION = "3.3.30"


def cache_dir() -> Path:
    """``$TGK_CACHE``, else ``~/.cache/tpu-gke-toolkit``."""
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "tpu-gke-toolkit"


def node_bin_dir() -> Path:
    """The pinned Node 22 and the cdktn CLI (scripts/setup.sh installs them from npm)."""
    return cache_dir() / f"node-{NODE_VERSION}-cdktn-{CDKTN_CLI_VERSION}" / "node_modules" / ".bin"


def checkov_bin() -> Path:
    """checkov in its own venv (its dependency tree conflicts with the toolkit's)."""
    return cache_dir() / f"checkov-{CHECKOV_VERSION}" / "bin" / "checkov"


def tool_environ(environ: MutableMapping[str, str] = os.environ) -> None:
    """Point the tools the toolkit starts at the cached ones, unless the caller chose others.

    The same defaults as scripts/env.sh, so a plain shell is as fast as the scripts: jsii on
    the machine's Node 20 (end of life, with a warning banner) and a fresh package cache cost
    ~2.3 s and ~900 MB more per synth than the cached Node 22 and jsii cache. Call it before
    the jsii runtime starts (the first import of cdktn): it reads the environment once.
    Nothing is set for a tool that is not built yet, so jsii falls back to the node on PATH.
    """
    cache = cache_dir()
    environ.setdefault(CACHE_ENV_VAR, str(cache))
    environ.setdefault("CHECKPOINT_DISABLE", "1")  # no telemetry call from the cdktn/jsii tools
    environ.setdefault("JSII_RUNTIME_PACKAGE_CACHE_ROOT", str(cache / "jsii"))
    node_bin = node_bin_dir()
    if (node_bin / "node").exists():
        environ.setdefault("TGK_NODE_BIN", str(node_bin))
        environ.setdefault("JSII_NODE", str(node_bin / "node"))
    if checkov_bin().exists():
        environ.setdefault("TGK_CHECKOV", str(checkov_bin()))


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
