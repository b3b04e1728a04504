"""Importing the spec and the catalog must stay cheap: no CDK, no jsii runtime."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO

HEAVY = ("cdktn", "cdktn_provider_google", "jsii", "constructs", "modules")


def test_spec_and_catalog_do_not_import_cdk():
    code = f"import sys, infra.spec, infra.catalog\nbad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\nprint(','.join(bad))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"importing infra.spec/infra.catalog pulled in: {proc.stdout.strip()}"


def test_the_check_can_fail():
    """The same probe does see cdktn when something imports it (guards against a vacuous test)."""
    code = "import sys, infra.stack\nprint('cdktn' in sys.modules)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"
