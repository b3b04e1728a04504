#!/usr/bin/env bash
# Build (or reuse) fake-gcs-server, a GCS-compatible server that honours generation
# preconditions, and print the binary's path last.
#
# The toolkit's "never replace what it did not write" rests on Cloud Storage's
# preconditions: objects created with ifGenerationMatch=0, a record replaced only at the
# generation read, a checkpoint object deleted only at the generation listed
# (toolkit/ledger.py). gcp-storage-emulator (scripts/setup-gcs-emulator.sh, the server
# the other storage tests and the local cluster use) ignores ifGenerationMatch, so tests of
# those guarantees run against this server (tests/support/gcs_emulator.py precondition_client).
# fake-gcs-server v1.56.1 checks ifGenerationMatch on every upload path and deletes a named
# generation only while it is the live one; ~1-2 min cold on 2 cores.
#
#   scripts/build-fake-gcs-server.sh          build what is missing; the binary's path on the last line
#   scripts/build-fake-gcs-server.sh --key    print only the binary's path (no build)
#   TGK_BUILD_NICE=10                         niceness of the compile (default 10: the machine is shared)
set -euo pipefail

FAKE_GCS_VERSION="v1.56.1"
FAKE_GCS_MODULE="github.com/fsouza/fake-gcs-server"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache, build_script, require_go, key_or_build, reuse_or_lock, go_build_pinned
build_script build-fake-gcs-server
require_go "fake-gcs-server $FAKE_GCS_VERSION"
root="$cache/fake-gcs-server/fake-gcs-server-${FAKE_GCS_VERSION#v}_${go_version}"
stamp=".complete-1"

key_or_build "${1:-}" "$root/bin/fake-gcs-server"
reuse_or_lock "$root" "$stamp" "$root/bin/fake-gcs-server"
mkdir -p "$root/bin"
log "building fake-gcs-server $FAKE_GCS_VERSION into $root (cold: ~1-2 min on 2 cores; warm: instant)"

tmp="$(mktemp -d "$root/.build-XXXXXX")"
(cd "$tmp" && go_build_pinned fake-gcs-builder 1.26.0 "$FAKE_GCS_MODULE" "$FAKE_GCS_VERSION" "$tmp/fake-gcs-server")
mv "$tmp/fake-gcs-server" "$root/bin/fake-gcs-server"
rm -rf "$tmp"
"$root/bin/fake-gcs-server" -help >/dev/null 2>&1 || true
printf 'fake-gcs-server=%s go=%s\n' "$FAKE_GCS_VERSION" "$go_version" >"$root/versions.txt"
touch "$root/$stamp"
echo "$root/bin/fake-gcs-server"
