"""Regenerate workloads/recipes/_maxtext_numbers.yaml from the pinned MaxText wheel.

The MaxText keys whose base.yml default is a number (int or float, not a bool): a
``--set`` or recipe value for one of them must be a number MaxText can hold (finite, an
integer within int64; ``recipes.number_problem``). Other keys (strings, paths, names) go to
MaxText as written, whatever they spell: ``dataset_path=inf`` is a path.

    $V/bin/python scripts/gen_maxtext_numbers.py [SITE_PACKAGES_MAXTEXT_DIR]

Default directory: the project's pinned MaxText venv (scripts/setup-maxtext.sh).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "workloads" / "recipes" / "_maxtext_numbers.yaml"


def _maxtext_dir() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    venv = subprocess.run(["bash", str(REPO / "scripts/setup-maxtext.sh")], check=True, capture_output=True, text=True).stdout.split()[-1]
    return next(Path(venv).glob("lib/python3*/site-packages/maxtext"))


def main() -> None:
    root = _maxtext_dir()
    base = yaml.safe_load((root / "configs" / "base.yml").read_text())
    numeric = sorted(k for k, v in base.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    version = next(root.parent.glob("maxtext-*.dist-info")).name.split("-")[1].removesuffix(".dist")
    head = (
        f"# MaxText {version}'s keys whose base.yml default is a number (scripts/gen_maxtext_numbers.py).\n"
        "# A --set or recipe value of one of them must be a number MaxText can hold: finite, an integer within int64.\n"
    )
    OUT.write_text(head + yaml.safe_dump({"maxtext_version": version, "numeric": numeric}, sort_keys=False))
    print(f"{OUT}: {len(numeric)} numeric keys")


if __name__ == "__main__":
    main()
