#!/usr/bin/env bash
# Start, stop or inspect the local simulated GKE TPU cluster.
#
#   scripts/local-cluster.sh up [--spec env.yaml] [--state-dir DIR]   prints the kubeconfig path
#   scripts/local-cluster.sh down [--state-dir DIR]
#   scripts/local-cluster.sh status [--output json]
#
# A thin wrapper over `python -m workloads local ...` in the toolkit's venv; the
# binaries come from scripts/build-local-cluster.sh (built on first use).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  up|down|status) ;;
  *) echo "usage: $0 up|down|status [options]" >&2; exit 2 ;;
esac
venv="$(bash "$here/setup.sh" | tail -n 1)"
source "$here/env.sh"
cd "$repo"
exec "$venv/bin/python" -m workloads local "$@"
