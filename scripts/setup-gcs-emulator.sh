#!/usr/bin/env bash
# Build (or reuse) a GCS-compatible emulator for the storage tests; print its executable.
#
# The upload code is tested against a real server process on 127.0.0.1, not a mock. The
# emulator gets its own venv in the cache (its dependencies must not leak into the
# toolkit's), keyed by the pinned version, so later runs reuse it in a second.
#
#   scripts/setup-gcs-emulator.sh      last line of stdout: path of the gcp-storage-emulator command
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # $cache, cached_venv
version="2026.7.19"   # PyPI gcp-storage-emulator
venv="$cache/gcs-emulator-$version"

cached_venv gcs-emulator "$venv" "gcp-storage-emulator==$version" "google-crc32c==1.9.0"
echo "$venv/bin/gcp-storage-emulator"
