#!/usr/bin/env bash
# Build (or reuse) Cloud Storage FUSE (gcsfuse), the filesystem GKE's GCS FUSE CSI driver
# runs in a run's sidecar, and print the binary's path last.
#
# `run-local --dataset` mounts the local bucket with it, so MaxText's Grain pipeline reads
# the dataset through the same FUSE filesystem, with the same mount options, as a run's
# pods do (workloads/data/mount.py). Kept apart from the control plane's build (its own
# cache key: gcsfuse version + Go version); ~1 min warm module cache, ~3-5 min cold on 2 cores.
#
# v3.11.4 is the newest gcsfuse whose go.mod accepts the Go this project requires (1.26);
# v3.12+ need Go 1.27.
#
#   scripts/build-gcsfuse.sh          build what is missing; the binary's path on the last line
#   scripts/build-gcsfuse.sh --key    print only the binary's path (no build)
#   TGK_BUILD_NICE=10                 niceness of the compile (default 10: the machine is shared)
set -euo pipefail

GCSFUSE_VERSION="v3.11.4"   # keep in step with workloads/data/mount.py GCSFUSE_VERSION
GCSFUSE_MODULE="github.com/googlecloudplatform/gcsfuse/v3"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache, build_script, require_go, key_or_build, reuse_or_lock, go_build_pinned
build_script build-gcsfuse     # log, die, $nice_level
require_go "gcsfuse $GCSFUSE_VERSION"  # $go_version
root="$cache/gcsfuse/gcsfuse-${GCSFUSE_VERSION#v}_${go_version}"
stamp=".complete-1"

key_or_build "${1:-}" "$root/bin/gcsfuse"
reuse_or_lock "$root" "$stamp" "$root/bin/gcsfuse"
mkdir -p "$root/bin"
log "building gcsfuse $GCSFUSE_VERSION into $root (cold: ~3-5 min on 2 cores; warm: instant)"

tmp="$(mktemp -d "$root/.build-XXXXXX")"
(cd "$tmp" && go_build_pinned gcsfuse-builder 1.26.0 "$GCSFUSE_MODULE" "$GCSFUSE_VERSION" "$tmp/gcsfuse")
mv "$tmp/gcsfuse" "$root/bin/gcsfuse"
rm -rf "$tmp"
"$root/bin/gcsfuse" --help >/dev/null 2>&1 || die "the gcsfuse just built does not run"
printf 'gcsfuse=%s go=%s\n' "$GCSFUSE_VERSION" "$go_version" >"$root/versions.txt"
touch "$root/$stamp"
echo "$root/bin/gcsfuse"
