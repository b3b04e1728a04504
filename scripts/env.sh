# Sourced by the entry scripts: environment shared by every toolkit process.
#
# Optional for users: the toolkit sets the same defaults itself (toolkit/paths.py
# tool_environ), so `python -m infra synth` from a plain shell with the checkout's
# .venv on PATH runs jsii on the cached Node 22 with the cached package cache too.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"  # $cache and the tool pins
export TGK_CACHE="$cache"
export TGK_CHECKOV="${TGK_CHECKOV:-$cache/checkov-$checkov_version/bin/checkov}"
# jsii: keep its package cache with ours, no telemetry call, no Node-version banner.
export JSII_RUNTIME_PACKAGE_CACHE_ROOT="${JSII_RUNTIME_PACKAGE_CACHE_ROOT:-$cache/jsii}"
export CHECKPOINT_DISABLE=1
# jsii runs on the project's Node 22 (scripts/setup.sh), not the machine's Node 20.
export TGK_NODE_BIN="$cache/node-$node_version-cdktn-$cdktn_cli_version/node_modules/.bin"
export JSII_NODE="${JSII_NODE:-$TGK_NODE_BIN/node}"
