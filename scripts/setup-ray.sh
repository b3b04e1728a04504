#!/usr/bin/env bash
# Create (or reuse) the project's pinned Ray environment; print its path last.
#
# Ray Train's JaxTrainer runs MaxText, so Ray must sit next to the pinned MaxText
# 0.2.5 packages. Rather than a second 2.8 GB copy of them, this venv is a thin
# layer over the MaxText venv (scripts/setup-maxtext.sh): same Python 3.12, a .pth
# file that puts the MaxText venv's site-packages on sys.path after its own, and
# only Ray and what Ray adds installed here. The MaxText venv is never modified
# and its key does not change. Every package pip sees in the MaxText venv is held
# at its MaxText pin (the MaxText constraints are passed too), so the layer cannot
# shadow one of them with another version.
#
#   scripts/setup-ray.sh          builds or reuses; last stdout line = venv path
#   TGK_CACHE=/dir ...            cache root (default: scripts/lib.sh)
#
# Key: Ray version + the MaxText venv it layers on (its own key) + sha256 of both
# constraints files. Concurrent callers serialise on a flock.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache
# Keep in step with workloads/ray/__init__.py RAY_VERSION.
ray_version="2.54.0"
ray_spec="ray[default,train]==$ray_version"
ray_constraints="$repo/scripts/ray.constraints.txt"
maxtext_constraints="$repo/scripts/maxtext-tiny.constraints.txt"

log() { printf '[setup-ray] %s\n' "$*" >&2; }
die() { printf '[setup-ray] error: %s\n' "$*" >&2; exit 1; }

[ -f "$ray_constraints" ] || die "missing $ray_constraints (the pins of what $ray_spec adds over the MaxText venv)"
maxtext_venv="$(bash "$repo/scripts/setup-maxtext.sh" | tail -n 1)"
[ -x "$maxtext_venv/bin/python" ] || die "scripts/setup-maxtext.sh gave no venv ($maxtext_venv)"
maxtext_site="$("$maxtext_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
base_py="$("$maxtext_venv/bin/python" -c 'import sys; print(sys._base_executable)')"

key="$( { echo "$ray_spec"; basename "$maxtext_venv"; cat "$ray_constraints" "$maxtext_constraints"; } | sha256sum | cut -c1-12)"
venv="$cache/ray-$ray_version-on-$(basename "$maxtext_venv" | cut -d- -f1-3)-$key"
mkdir -p "$cache"

exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  log "creating $venv ($ray_spec over $(basename "$maxtext_venv"); cold: ~2 min, ~0.25 GB)"
  start=$(date +%s)
  rm -rf "$venv"
  "$base_py" -m venv "$venv"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # .pth lines are appended to sys.path: this venv's own packages come first.
  echo "$maxtext_site" >"$site/zz-tgk-maxtext.pth"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      -c "$maxtext_constraints" -c "$ray_constraints" "$ray_spec" >&2 \
    || die "pip install $ray_spec failed (see above); the venv was not marked complete"
  # Nothing MaxText pins may have been installed again here (it would shadow the pin).
  dup="$(cd "$site" && ls -d *.dist-info 2>/dev/null | sed 's/-[^-]*\.dist-info$//' | tr 'A-Z_.' 'a-z--' | sort \
         | comm -12 - <(sed -n 's/==.*//p' "$maxtext_constraints" | tr 'A-Z_.' 'a-z--' | sort) || true)"
  [ -z "$dup" ] || die "the Ray layer re-installed MaxText-pinned packages: $dup; the venv was not marked complete"
  "$venv/bin/python" -c 'from ray.train.v2.jax import JaxTrainer; import maxtext.configs.pyconfig' >&2 \
    || die "ray $ray_version or maxtext does not import in $venv; the venv was not marked complete"
  touch "$venv/.complete"
  log "built in $(( $(date +%s) - start )) s"
fi
flock -u 9

echo "$venv"
