#!/usr/bin/env bash
# Build (or reuse) the KubeRay operator for the local cluster, with its CRDs, and
# print the cache dir (bin/ray-operator, manifests/kuberay-crds.yaml) last.
#
# Kept apart from scripts/build-local-cluster.sh on purpose: that script's cache
# key covers the whole 30-minute control plane, and adding a pin there would make
# every machine rebuild it. This one has its own key (KubeRay version + Go version)
# and costs ~3 min cold on 2 cores (module download ~20 s, compile the rest).
#
# v1.6.0 is the KubeRay Kueue v0.17.1 required (v0.19.2 builds against v1.6.2: the same ray.io/v1), so the Go module proxy
# and the checksum database both serve it. The binary is built from the module's own
# dependency list (see the builder module below), every dependency verified
# against the checksum database.
#
#   scripts/build-kuberay.sh          build what is missing; cache dir on the last line
#   scripts/build-kuberay.sh --key    print only the cache dir (no build)
#   TGK_CACHE=/some/dir ...           moves the cache (default: scripts/lib.sh)
#   TGK_BUILD_NICE=10                 niceness of the compile (default 10: the machine is shared)
set -euo pipefail

KUBERAY_VERSION="v1.6.0"   # keep in step with workloads/local/kuberay.py KUBERAY_VERSION
KUBERAY_MODULE="github.com/ray-project/kuberay/ray-operator"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache, build_script, require_go, key_or_build, reuse_or_lock, go_build_pinned
build_script build-kuberay     # log, die, $nice_level
require_go "kuberay $KUBERAY_VERSION"  # $go_version
root="$cache/kuberay/kuberay-${KUBERAY_VERSION#v}_${go_version}"
stamp=".complete-1"

key_or_build "${1:-}" "$root"
reuse_or_lock "$root" "$stamp" "$root"
mkdir -p "$root/bin" "$root/manifests"
log "building ray-operator $KUBERAY_VERSION into $root (cold: ~3 min on 2 cores; warm: instant)"
start=$(date +%s)

tmp="$(mktemp -d "$root/.build-XXXXXX")"
(cd "$tmp" && go_build_pinned kuberay-builder 1.25.0 "$KUBERAY_MODULE" "$KUBERAY_VERSION" "$tmp/bin/ray-operator")
mv "$tmp/bin/ray-operator" "$root/bin/ray-operator"

# The CRDs from the same module zip (the one just verified and built).
dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$KUBERAY_MODULE@$KUBERAY_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -n "$dir" ] && [ -d "$dir/config/crd/bases" ] || die "could not locate $KUBERAY_MODULE@$KUBERAY_VERSION's config/crd/bases in the module cache"
{
  first=1
  for f in "$dir"/config/crd/bases/ray.io_*.yaml; do
    [ "$first" = 1 ] || echo "---"
    first=0
    cat "$f"
  done
} >"$tmp/kuberay-crds.yaml"
mv "$tmp/kuberay-crds.yaml" "$root/manifests/kuberay-crds.yaml"
rm -rf "$tmp"

[ -x "$root/bin/ray-operator" ] || die "ray-operator was not built"
grep -q 'name: rayjobs.ray.io' "$root/manifests/kuberay-crds.yaml" || die "the RayJob CRD is missing from $root/manifests/kuberay-crds.yaml"
printf 'kuberay=%s go=%s\n' "$KUBERAY_VERSION" "$go_version" >"$root/versions.txt"
touch "$root/$stamp"
log "built in $(( $(date +%s) - start )) s"
echo "$root"
