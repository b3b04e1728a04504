#!/usr/bin/env bash
# Build (or reuse) a pinned kustomize from the Go module proxy and print its path.
#
# kubectl's embedded kustomize varies with the kubectl on each machine; tests and
# `workloads render` users need the same one, so it is built from a pinned tag into
# a cache outside the repository, keyed by version. A second run prints the cached
# path in milliseconds.
#
#   scripts/build-kustomize.sh          prints the binary path on the last line
#   TGK_CACHE=/some/dir ...             moves the cache (default: scripts/lib.sh)
set -euo pipefail

version="v5.5.0"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # $cache
dest="$cache/bin/kustomize-$version"
bin="$dest/kustomize"

built() { [ -x "$bin" ] && [ -f "$dest/.complete" ] && [ "$("$bin" version 2>/dev/null)" = "$version" ]; }
if built; then
  echo "$bin"
  exit 0
fi

# One build at a time: scripts/test starts this in the background while a test fixture
# may call it too; the second caller waits, then finds the finished binary.
mkdir -p "$cache/bin"
exec 9>"$cache/bin/.kustomize-$version.lock"
flock 9
if built; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "build-kustomize: 'go' is not on PATH; install Go >= 1.22" >&2; exit 1; }

printf '[build-kustomize] building kustomize %s into %s (cold: a minute or two)\n' "$version" "$dest" >&2
tmp="$(mktemp -d "$cache/bin/.kustomize-build-XXXXXX" 2>/dev/null || { mkdir -p "$cache/bin"; mktemp -d "$cache/bin/.kustomize-build-XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT
# Build into a scratch dir and move into place, so an interrupted build never
# leaves a half-written binary that the fast path above would trust.
# go install does not stamp the version; without it `kustomize version` says (devel).
GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="-trimpath" go install \
  -ldflags "-X sigs.k8s.io/kustomize/api/provenance.version=$version" \
  "sigs.k8s.io/kustomize/kustomize/v5@$version" >&2
got="$("$tmp/kustomize" version)"
[ "$got" = "$version" ] || { echo "build-kustomize: built binary reports '$got', expected $version" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/kustomize" "$bin"
touch "$dest/.complete"
echo "$bin"
