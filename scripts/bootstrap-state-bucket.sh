#!/usr/bin/env bash
# Create the Terraform state bucket named by the spec, if it is missing.
#   scripts/bootstrap-state-bucket.sh [--spec FILE] [--dry-run] [--output json]
# Uses $TGK_PYTHON_BIN if set (Cloud Build: the toolkit's pip-installed python), else the
# cached venv from scripts/setup.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${TGK_PYTHON_BIN:-}"
if [ -z "$py" ]; then
  py="$(bash "$here/setup.sh" | tail -n 1)/bin/python"
fi
exec "$py" "$here/bootstrap_state_bucket.py" "$@"
