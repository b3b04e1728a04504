# Sourced by the entry scripts: environment shared by every toolkit process.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TGK_CACHE:-$HOME/.cache/tpu-gke-toolkit}"
export TGK_CACHE="$cache"
export TGK_CHECKOV="${TGK_CHECKOV:-$cache/checkov-3.3.30/bin/checkov}"
# jsii: keep its package cache with ours, no telemetry call, no Node-version banner.
export JSII_RUNTIME_PACKAGE_CACHE_ROOT="${JSII_RUNTIME_PACKAGE_CACHE_ROOT:-$cache/jsii}"
export CHECKPOINT_DISABLE=1
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
