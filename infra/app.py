"""CDK Terrain app entry: ``python -m infra.app`` (what cdktn.json / cdktf.json run).

Synthesizes the spec named by $TGK_SPEC (default examples/default.yaml) into
the directory the CLI asks for ($CDKTF_OUTDIR), else ./cdktn.out, in the
layout the cdktn/cdktf CLIs read: <outdir>/stacks/<stack>/cdk.tf.json.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from toolkit.errors import ToolkitError


def main() -> int:
    from infra.spec import load_spec

    try:
        spec = load_spec()
        from infra.stack import synth

        path = synth(spec, Path(os.environ.get("CDKTF_OUTDIR") or "cdktn.out"))
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
