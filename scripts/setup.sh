#!/usr/bin/env bash
# Create (or reuse) the toolkit's virtualenv and its tool environments.
#
# Everything lands in a cache outside the repository, keyed by the exact pins, so
# a second run — or CI on the same machine — reuses it in seconds, and a changed
# pin builds a fresh environment next to the old one.
#
#   scripts/setup.sh            prints the venv path on the last line of stdout
#   TGK_CACHE=/some/dir ...     moves the cache (default: scripts/lib.sh)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache
python="${TGK_PYTHON:-python3}"
mkdir -p "$cache"

log() { printf '[setup] %s\n' "$*" >&2; }

# Keyed on what decides the installed set: the [project] table (not tool settings
# such as pytest markers) and the transitive pins.
key=$( { sed -n '/^\[project\]/,/^\[tool\./p' "$repo/pyproject.toml"; cat "$repo/constraints.txt"; } | sha256sum | cut -c1-16)
venv="$cache/venv-$key"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  log "creating $venv (first run: ~2 min)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -c "$repo/constraints.txt" -e "$repo[dev]"
  touch "$venv/.complete"
else
  # Re-point the editable install at this checkout (CI clones to a new path each run).
  # Every top-level package must resolve into this checkout: the editable finder's
  # package map is fixed at install time, so a new package also needs a re-link.
  if ! (cd / && "$venv/bin/python" -c '
import importlib, pathlib, sys
root = pathlib.Path(sys.argv[1]).resolve()
for name in ("infra", "modules", "toolkit", "workloads"):
    if pathlib.Path(importlib.import_module(name).__file__).resolve().parent.parent != root:
        sys.exit(1)' "$repo") 2>/dev/null; then
    log "re-linking editable install to $repo"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$repo"
  fi
fi

# checkov pulls a large, conflicting dependency tree: it gets a venv of its own.
checkov_version="3.3.30"
checkov_venv="$cache/checkov-$checkov_version"
if [ ! -f "$checkov_venv/.complete" ]; then
  log "creating $checkov_venv"
  rm -rf "$checkov_venv"
  "$python" -m venv "$checkov_venv"
  "$checkov_venv/bin/pip" install -q --disable-pip-version-check "checkov==$checkov_version"
  touch "$checkov_venv/.complete"
fi

# Node 22 from the npm registry: the jsii runtime has dropped Node 20 (the machine's),
# and the cdktn CLI needs Node >= 22.19. Both come from npm, pinned.
node_version="22.22.0"
cdktn_cli_version="0.24.0"
node_dir="$cache/node-$node_version-cdktn-$cdktn_cli_version"
if [ ! -f "$node_dir/.complete" ]; then
  log "installing node $node_version and cdktn-cli $cdktn_cli_version into $node_dir"
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error \
    "node@$node_version" "cdktn-cli@$cdktn_cli_version" >&2
  "$node_dir/node_modules/.bin/node" --version >/dev/null
  touch "$node_dir/.complete"
fi

echo "$venv"
