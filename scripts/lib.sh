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

# `key_or_build "${1:-}" <key>` (after build_script): a build script's one argument. `--key`
# prints <key> (where the build is or would be; nothing is built) and exits; no argument goes
# on to build; anything else is refused.
key_or_build() {
  case "$1" in
    --key) echo "$2"; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (use --key)" ;;
  esac
}

# `reuse_or_lock <cache dir> <stamp> <result>` (after build_script): a build script's way in.
# With a complete build in <cache dir> (it holds <stamp>): print <result> and exit 0.
# Otherwise take the key's lock ("<cache dir>.lock"; scripts/test may start the script in
# the background while a test fixture or a developer's command calls it too: the second
# caller waits) and exit the same way if the first caller's build completed meanwhile.
reuse_or_lock() {
  if [ -f "$1/$2" ]; then echo "$3"; exit 0; fi
  mkdir -p "$(dirname "$1")"
  exec 9>"$1.lock"
  flock 9
  if [ -f "$1/$2" ]; then echo "$3"; exit 0; fi
}

# `go_build_pinned <builder name> <go directive> <module> <version> <output file>` (after
# build_script): builds <module>@<version>'s main package in a throwaway builder module
# whose one requirement is it at its tag, so Go's version selection picks exactly the
# versions the module's own go.mod lists, each checksum verified against the checksum
# database as it is added (`go install module@version` would do the same but first asks
# the proxy for the module's version list, which it may refuse). Run in a scratch dir.
go_build_pinned() {
  printf 'module tgk.local/%s\n\ngo %s\n\nrequire %s %s\n' "$1" "$2" "$3" "$4" >go.mod
  GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n "$nice_level" go build -trimpath -ldflags "-s -w" -o "$5" "$3" >&2 \
    || die "building $3@$4 failed (see above)"
}

# `cached_venv <tool> <venv> <requirement>...`: a venv of <tool>'s own in the cache (its
# dependencies must not meet the toolkit's), holding exactly these pinned requirements, made
# once: parallel callers (test workers on a fresh machine) take turns on its lock
# ("$cache/.<tool>.lock") and the later ones find it complete (".complete").
cached_venv() {
  local tool="$1" venv="$2"
  shift 2
  mkdir -p "$cache"
  exec 9>"$cache/.$tool.lock"
  flock 9
  if [ ! -f "$venv/.complete" ]; then
    printf '[setup-%s] creating %s\n' "$tool" "$venv" >&2
    rm -rf "$venv"
    "${TGK_PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$@"
    touch "$venv/.complete"
  fi
}
