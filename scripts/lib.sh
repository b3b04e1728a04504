# Sourced by the scripts: what they all spell the same way, defined once.
#
# The cache of everything built once (venvs, Node, the local-cluster binaries, the
# MaxText environment, kustomize): outside the repository, keyed by version inside.
# $TGK_CACHE moves it; toolkit/paths.py cache_dir() is the same rule for Python.
cache="${TGK_CACHE:-$HOME/.cache/tpu-gke-toolkit}"
