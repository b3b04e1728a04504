#!/usr/bin/env bash
# Create (or reuse) the project's pinned MaxText environment; print its path last.
#
# MaxText needs Python >= 3.12 and a ~2.8 GB dependency tree (jax, libtpu, ...), so it
# gets a virtualenv of its own, outside the repository and separate from the
# toolkit's venv: the toolkit never imports MaxText, it runs this venv's python as a
# subprocess (workloads/maxtext/env.py).
#
#   scripts/setup-maxtext.sh          builds or reuses; last stdout line = venv path
#   TGK_CACHE=/dir ...                cache root (default: scripts/lib.sh)
#   TGK_PY312=/path/to/python3.12     interpreter (default: pyenv's 3.12)
#
# Flavor: always maxtext[tpu]. The tpu extra brings libtpu, without which MaxText's
# ahead-of-time compile for a TPU topology cannot run; a CPU-only minimal set
# (maxtext installed with --no-deps and what a CPU run imports, ~1.4 GB) would save 1.4 GB of disk but cannot back
# `preflight --compile`, and two environments would double the pins to keep honest.
#
# Key: MaxText version + interpreter version + sha256 of the constraints file, so a
# changed pin builds a fresh venv next to the old one instead of mutating it.
# Concurrent callers (pytest-xdist workers, two engineers) serialise on a flock.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache
maxtext_version="0.2.5"
constraints="$repo/scripts/maxtext-tiny.constraints.txt"

log() { printf '[setup-maxtext] %s\n' "$*" >&2; }
die() { printf '[setup-maxtext] error: %s\n' "$*" >&2; exit 1; }

find_py312() {
  if [ -n "${TGK_PY312:-}" ]; then echo "$TGK_PY312"; return; fi
  local root="${PYENV_ROOT:-$HOME/.pyenv}" c
  if command -v pyenv >/dev/null 2>&1; then
    c="$(pyenv prefix 3.12 2>/dev/null || true)"
    [ -n "$c" ] && [ -x "$c/bin/python" ] && { echo "$c/bin/python"; return; }
  fi
  # Highest installed 3.12.x under pyenv's root.
  c="$(ls -d "$root"/versions/3.12.* 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$c" ] && [ -x "$c/bin/python" ] && { echo "$c/bin/python"; return; }
  command -v python3.12 2>/dev/null || true
}

# To move the pins (a new MaxText): install "maxtext[tpu]==NEW" into a fresh 3.12 venv and
# write `pip freeze --exclude-editable | grep -v '^maxtext=='` over this file.
[ -f "$constraints" ] || die "missing $constraints (the pins of maxtext[tpu]==$maxtext_version; see the comment above this check)"
py312="$(find_py312)"
[ -n "$py312" ] && [ -x "$py312" ] || die "no Python 3.12 found: install it (pyenv install 3.12.1) or set TGK_PY312"
pyver="$("$py312" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
case "$pyver" in 3.12.*) ;; *) die "$py312 is Python $pyver; MaxText $maxtext_version needs 3.12" ;; esac

key="$( { echo "maxtext[tpu]==$maxtext_version"; echo "python $pyver"; cat "$constraints"; } | sha256sum | cut -c1-12)"
venv="$cache/maxtext-$maxtext_version-py$pyver-$key"
mkdir -p "$cache"

exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  log "creating $venv (maxtext[tpu]==$maxtext_version, Python $pyver; cold: ~2-4 min, ~2.8 GB)"
  start=$(date +%s)
  rm -rf "$venv"
  "$py312" -m venv "$venv"
  # Constraints pin every transitive version (a freeze of the first good install).
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints" "maxtext[tpu]==$maxtext_version" >&2 \
    || die "pip install maxtext[tpu]==$maxtext_version failed (see above); the venv was not marked complete"
  # Prove the import works before marking the venv usable.
  "$venv/bin/python" -c 'import maxtext.configs.pyconfig' >&2 \
    || die "maxtext installed but does not import; the venv was not marked complete"
  touch "$venv/.complete"
  log "built in $(( $(date +%s) - start )) s"
fi
flock -u 9

echo "$venv"
