#!/usr/bin/env bash
# Build (or reuse) a venv with xpk from PyPI; print its executable.
#
# xpk is Google's CLI for TPU workloads on GKE. The interop test runs the real `xpk
# workload create --dry-run --output-manifest-file` (dry run: no gcloud, no kubectl), then
# applies the JobSet it wrote to the local cluster. Its own venv in the cache, keyed by the
# pinned version (xpk pins kubernetes, google-cloud-* and docker; they must not meet the
# toolkit's). Cold: ~1 min and ~250 MB; warm: instant.
#
#   scripts/setup-xpk.sh      last line of stdout: path of the xpk command
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # $cache, cached_venv
version="1.13.1"   # PyPI xpk; workloads/render/xpk.py XPK_VERSION follows this release's source
venv="$cache/xpk-$version"

cached_venv xpk "$venv" "xpk==$version"
echo "$venv/bin/xpk"
