# Sourced by the scripts: what they all spell the same way, defined once.
#
# The cache of everything built once (venvs, Node, the local-cluster binaries, the
# MaxText environment, kustomize): outside the repository, keyed by version inside.
# $TGK_CACHE moves it; toolkit/paths.py cache_dir() is the same rule for Python.
cache="${TGK_CACHE:-$HOME/.cache/tpu-gke-toolkit}"

# Pins of the tools scripts/setup.sh installs beside the Python environment. toolkit/paths.py
# spells the same three (tests/test_toolkit.py holds them equal), so the toolkit finds its own
# Node and checkov without scripts/env.sh.
node_version="22.22.0"
cdktn_cli_version="0.24.0"
checkov_version="3.3.30"

# The rest only defines functions, for the scripts that call them: sourcing this file
# (as scripts/env.sh does, into the caller's shell) adds no log or die of its own.

# `build_script <name>`: the preamble of the Go build scripts (build-local-cluster.sh,
# build-kuberay.sh). Defines `log` ("[<name>] message" on stderr), `die` ("<name>:
# message" on stderr, exit 1) and $nice_level, the niceness of their compiles
# ($TGK_BUILD_NICE, default 10: the machine is shared).
build_script() {
  _script_name="$1"
  log() { printf '[%s] %s\n' "$_script_name" "$*" >&2; }
  die() { printf '%s: %s\n' "$_script_name" "$*" >&2; exit 1; }
  nice_level="${TGK_BUILD_NICE:-10}"
}

# `require_go <what needs it>` (after build_script): dies unless `go` is on PATH, then
# sets $go_version (`go env GOVERSION`, part of the build scripts' cache keys).
require_go() {
  command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go >= 1.25 ($1 needs it)"
  go_version="$(go env GOVERSION)"
}
