# Sourced by the entry scripts: environment shared by every toolkit process.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache
export TGK_CACHE="$cache"
export TGK_CHECKOV="${TGK_CHECKOV:-$cache/checkov-3.3.30/bin/checkov}"
# jsii: keep its package cache with ours, no telemetry call, no Node-version banner.
export JSII_RUNTIME_PACKAGE_CACHE_ROOT="${JSII_RUNTIME_PACKAGE_CACHE_ROOT:-$cache/jsii}"
export CHECKPOINT_DISABLE=1
# jsii runs on the project's Node 22 (scripts/setup.sh), not the machine's Node 20.
export TGK_NODE_BIN="$cache/node-22.22.0-cdktn-0.24.0/node_modules/.bin"
export JSII_NODE="${JSII_NODE:-$TGK_NODE_BIN/node}"
