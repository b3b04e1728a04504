"""Reading a spec: which file (``--spec``, ``$TGK_SPEC``, the default example), its YAML, and the validated ``EnvSpec``.

Every refusal is one ``SpecError`` naming the flag or the field: a file that is missing,
unreadable, too large or not YAML (``read_document``, shared with the fleet file's
reading, ``infra.fleet``), and a document that does not validate (the first problem,
worded by ``infra.spec.messages``). Nothing here writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infra.spec.envspec import EnvSpec
from infra.spec.messages import format_validation_error
from toolkit.errors import SpecError
from toolkit.yamlfile import YamlFileError, load_yaml, read_capped

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES_DIR = REPO_ROOT / "examples"
DEFAULT_SPEC_PATH = EXAMPLES_DIR / "default.yaml"
SPEC_ENV_VAR = "TGK_SPEC"
SPEC_MISSING_FIX = "pass an existing file, e.g. examples/default.yaml"  # the fix of a --spec that names no file


def parse_spec(data: Any, *, source: str = "spec") -> EnvSpec:
    """A spec document (a YAML mapping) as a validated EnvSpec; the first problem as a SpecError (``source`` names the file)."""
    if not isinstance(data, dict):
        raise SpecError("", f"{source}: the spec must be a YAML mapping, got {type(data).__name__}", "start from examples/default.yaml")
    try:
        return EnvSpec.model_validate(data)
    except ValidationError as e:
        err = format_validation_error(e)
        raise SpecError(err.field, err.problem, err.fix) from None
    except SpecError:
        raise


def spec_path(path: str | os.PathLike[str] | None = None) -> Path:
    """--spec, else $TGK_SPEC, else the repository's default example."""
    if path:
        return Path(path)
    env = os.environ.get(SPEC_ENV_VAR)
    return Path(env) if env else DEFAULT_SPEC_PATH


def read_document(p: Path, flag: str, missing_fix: str) -> Any:
    """The YAML document at ``p``; a file that is missing, unreadable or not YAML is one SpecError (``flag`` names it)."""
    try:
        return load_yaml(read_capped(p))
    except FileNotFoundError:
        raise SpecError(flag, f"{p} does not exist", missing_fix) from None
    except OSError as e:
        raise SpecError(flag, f"cannot read {p}: {e.strerror}", "check the path and permissions") from None
    except YamlFileError as e:
        if e.key_path:
            raise SpecError(e.key_path, e.problem, e.fix) from None
        raise SpecError("", f"{p}: {e.problem}", e.fix) from None


def load_spec(path: str | os.PathLike[str] | None = None) -> EnvSpec:
    """The spec ``--spec`` names (``spec_path``), read and validated."""
    p = spec_path(path)
    data = read_document(p, "--spec", SPEC_MISSING_FIX)
    try:
        return parse_spec(data, source=str(p))
    except SpecError as e:
        raise SpecError(e.field, e.problem, e.fix) from None
