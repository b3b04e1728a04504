#!/usr/bin/env bash
# Build (or reuse) a GCS-compatible emulator for the storage tests; print its executable.
#
# The upload code is tested against a real server process on 127.0.0.1, not a mock. The
# emulator gets its own venv in the cache (its dependencies must not leak into the
# toolkit's), keyed by the pinned version, so later runs reuse it in a second.
#
#   scripts/setup-gcs-emulator.sh      last line of stdout: path of the gcp-storage-emulator command
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # $cache
python="${TGK_PYTHON:-python3}"
version="2026.7.19"   # PyPI gcp-storage-emulator
venv="$cache/gcs-emulator-$version"

mkdir -p "$cache"
# Parallel test workers may all ask at once on a fresh machine: one builds, the others wait.
exec 9>"$cache/.gcs-emulator.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  printf '[setup-gcs-emulator] creating %s\n' "$venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "gcp-storage-emulator==$version" "google-crc32c==1.9.0"
  touch "$venv/.complete"
fi
echo "$venv/bin/gcp-storage-emulator"
