"""Golden files: rendered objects compared, as parsed YAML, with the files kept in tests/golden/.

``TGK_UPDATE_GOLDEN=1`` rewrites a golden from what the code renders now (never in CI); review
the diff before committing it.
"""

from __future__ import annotations

import os

from tests.support.paths import REPO
from workloads.render import yamlio

GOLDEN = REPO / "tests" / "golden"


def check_golden(name: str, objects: list[dict]) -> None:
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("TGK_UPDATE_GOLDEN") == "1":
        assert not os.environ.get("CI"), "goldens are never regenerated in CI"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yamlio.dump_all(objects))
    assert path.exists(), f"{path} is missing; create it with TGK_UPDATE_GOLDEN=1 and review the diff"
    assert yamlio.load_all(path.read_text()) == objects, f"{path.name} differs; if intended, regenerate with TGK_UPDATE_GOLDEN=1"
