#!/usr/bin/env bash
# Create (or reuse) the checkout's Python environment and the tools beside it.
#
# Two layers, so that every checkout runs its own code and a new checkout costs seconds:
#   $cache/pydeps-<key>   the pinned dependencies (pyproject [project] + constraints.txt),
#                         never the toolkit itself; shared by every checkout, built once
#                         (~3 min cold), keyed by the pins;
#   <checkout>/.venv      this checkout's thin venv: no packages of its own, one .pth that
#                         adds the dependency layer's site-packages and one that puts this
#                         checkout on sys.path (~0.1 s to make).
# Two clones on one machine therefore never import each other's code (an editable install
# in a shared venv points at whichever checkout installed it last).
#
#   scripts/setup.sh            prints the checkout's venv path on the last line of stdout
#   TGK_CACHE=/some/dir ...     moves the cache (default: scripts/lib.sh)
#   TGK_PYTHON=python3.12 ...   the interpreter for the dependency layer (default python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache, tool pins
python="${TGK_PYTHON:-python3}"
mkdir -p "$cache/locks"

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

# `locked <name> <command...>`: run a build step under a lock of its own, so two checkouts
# (or CI beside a developer) setting up at once never build into the same directory.
locked() {
  local name="$1"; shift
  ( exec 9>"$cache/locks/$name.lock"; flock 9; "$@" )
}

# ---- the dependency layer, keyed on what decides the installed set: the [project] table
# (not tool settings such as pytest markers or ruff rules) and the transitive pins.
key=$( { sed -n '/^\[project\]/,/^\[tool\./p' "$repo/pyproject.toml"; cat "$repo/constraints.txt"; "$python" -c 'import sys; print(sys.version_info[:2])'; } | sha256sum | cut -c1-16)
deps="$cache/pydeps-$key"
build_deps() {
  [ -f "$deps/.complete" ] && return 0
  log "creating $deps (the pinned dependencies; first run: ~3 min)"
  rm -rf "$deps"
  "$python" -m venv "$deps"
  # The requirement list is read from pyproject (runtime + dev), so it cannot drift from it.
  "$deps/bin/python" - "$repo/pyproject.toml" >"$deps/requirements.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join([*project["dependencies"], *project["optional-dependencies"]["dev"]]))
PY
  "$deps/bin/pip" install -q --disable-pip-version-check -c "$repo/constraints.txt" -r "$deps/requirements.txt" >&2
  touch "$deps/.complete"
}
locked "pydeps-$key" build_deps
deps_site="$("$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
base_py="$("$deps/bin/python" -c 'import sys; print(sys._base_executable)')"

# ---- this checkout's own thin venv: remade whenever the layer or the checkout's path changes.
venv="$repo/.venv"
layer="deps=$deps repo=$repo"
checkout_key="$(printf '%s' "$repo" | sha256sum | cut -c1-16)"
make_venv() {
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.tgk-layer" 2>/dev/null)" = "$layer" ]; then
    return 0
  fi
  # Only a venv this script made (its .tgk-layer stamp) is remade: a .venv of your own is never deleted.
  if [ -e "$venv" ] || [ -L "$venv" ]; then
    [ -f "$venv/.tgk-layer" ] && [ ! -L "$venv" ] || die "$venv is not a venv scripts/setup.sh made (no .tgk-layer): move it away, then run scripts/setup.sh again"
  fi
  rm -rf "$venv"
  "$base_py" -m venv --without-pip "$venv"
  local site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # addsitedir (not a bare path line) so the layer's own .pth files are processed too.
  printf 'import site; site.addsitedir(%s)\n' "$("$base_py" -c 'import sys; print(repr(sys.argv[1]))' "$deps_site")" >"$site/tgk-deps.pth"
  printf '%s\n' "$repo" >"$site/tgk-checkout.pth"
  # Scripts the dependencies install (pytest, ruff, ...) for a shell with .venv/bin on PATH.
  local exe
  for exe in "$deps"/bin/*; do
    case "$(basename "$exe")" in python*|pip*|activate*|Activate*) continue ;; esac
    if head -c 2 "$exe" 2>/dev/null | grep -q '^#!'; then
      # Console scripts start with the layer's interpreter; run them with this one instead.
      sed "1s|^#!.*|#!$venv/bin/python|" "$exe" >"$venv/bin/$(basename "$exe")"
      chmod +x "$venv/bin/$(basename "$exe")"
    else
      ln -sf "$exe" "$venv/bin/$(basename "$exe")"
    fi
  done
  printf '%s' "$layer" >"$venv/.tgk-layer"
  log "made $venv (this checkout over $(basename "$deps"))"
}
locked "checkout-$checkout_key" make_venv
(cd / && "$venv/bin/python" -c 'import pathlib, sys, toolkit; sys.exit(pathlib.Path(toolkit.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]).resolve())' "$repo") \
  || die "$venv does not import this checkout's toolkit package"

# ---- checkov pulls a large, conflicting dependency tree: it gets a venv of its own.
checkov_venv="$cache/checkov-$checkov_version"
build_checkov() {
  [ -f "$checkov_venv/.complete" ] && return 0
  log "creating $checkov_venv"
  rm -rf "$checkov_venv"
  "$python" -m venv "$checkov_venv"
  "$checkov_venv/bin/pip" install -q --disable-pip-version-check "checkov==$checkov_version" >&2
  touch "$checkov_venv/.complete"
}
locked "checkov-$checkov_version" build_checkov

# ---- Node 22 from the npm registry: the jsii runtime has dropped Node 20 (the machine's),
# and the cdktn CLI needs Node >= 22.19. Both come from npm, pinned.
node_dir="$cache/node-$node_version-cdktn-$cdktn_cli_version"
build_node() {
  [ -f "$node_dir/.complete" ] && return 0
  log "installing node $node_version and cdktn-cli $cdktn_cli_version into $node_dir"
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error \
    "node@$node_version" "cdktn-cli@$cdktn_cli_version" >&2
  "$node_dir/node_modules/.bin/node" --version >/dev/null
  touch "$node_dir/.complete"
}
locked "node-$node_version-cdktn-$cdktn_cli_version" build_node

echo "$venv"
