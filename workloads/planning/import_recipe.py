"""A tpu-recipes ``run_recipe.sh`` (or a bare ``xpk workload create`` line) -> a recipe.

Pure: text in, a validated recipe and a report out; the CLI reads and writes the files.
The published scripts set shell variables (XLA_FLAGS, MAXTEXT_ARGS, ...), then run::

    xpk workload create --device-type=tpu7x-4x8x8 --num-slices=1 ... \\
      --command="set -e && export LIBTPU_INIT_ARGS='<flags>' && export K='v' && \\
                 python3 -m <MaxText train module> <config>.yml key=value ... | tee ... && gsutil cp ..."

Where each piece goes:

| script | recipe |
|---|---|
| ``--device-type`` / ``--tpu-type`` | ``shapes``, ``generations``, ``min_chips_per_slice`` |
| ``--num-slices`` | ``slices`` |
| ``--docker-image`` (a literal, tagged reference) | ``image.ref``; else the toolkit's MaxText image |
| ``export LIBTPU_INIT_ARGS=...`` in the command | ``libtpu_init_args.<generation>``, flag by flag |
| other ``export`` in the command | ``env`` |
| ``model_name`` | ``maxtext.model_name`` + the preset's dimensions (``_maxtext_models.yaml``) |
| ``per_device_batch_size`` | ``maxtext.per_device_batch`` (one rule, any HBM) |
| ``ici_*/dcn_*_parallelism`` | ``maxtext.parallelism`` |
| ``steps`` | ``steps`` |
| every other MaxText key (fp8/quantization and tile keys included) | ``maxtext.args``, value text unchanged |

What the toolkit decides itself (run_name, base_output_directory, the cluster, project,
zone, priority, restarts) and what it cannot carry (keys the pinned MaxText lacks, other
shell commands in ``--command``, unresolved variables) are listed in ``unmapped``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from infra import catalog
from toolkit.errors import CatalogError, FieldError
from workloads.planning import shellwords
from workloads.planning.recipes import (
    FILL,
    MAXTEXT_IMAGE,
    MODEL_KEYS,
    PLANNER_KEYS,
    RECIPES_DIR,
    Recipe,
    check_image,
    maxtext_keys,
    mesh_key,
    suggest,
)

MODELS_FILE = RECIPES_DIR / "_maxtext_models.yaml"
TRAIN_MODULES = ("MaxText.train", "maxtext.train", "maxtext.trainers.pre_train.train", "MaxText.trainers.pre_train.train")
DEFAULT_CONFIG = "src/maxtext/configs/base.yml"
# xpk flags the toolkit takes from the spec, the team or the submit command instead.
_XPK_DECIDED = {
    "cluster": "the spec's cluster",
    "project": "the spec's project",
    "zone": "the spec's pool zone",
    "priority": "the team's priority; pass --priority on submit",
    "max-restarts": "--max-restarts on submit (default by capacity mode)",
    "workload": "the run name (`submit --name`)",
    "enable-debug-logs": "not needed",
}
_IMAGE_REF = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?/[^\s$]+(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[0-9a-f]{64})$")
_FP8 = re.compile(r"fp8", re.I)


class Imported(BaseModel):
    """The recipe (as the YAML mapping written) and what was not carried, one line each."""

    model_config = ConfigDict(frozen=True)

    name: str
    recipe: dict[str, Any]
    unmapped: list[str]
    device_type: str
    slices: int


def _bad(problem: str, fix: str) -> FieldError:
    return FieldError("import-recipe", problem, fix)


@lru_cache(maxsize=1)
def model_presets() -> dict[str, dict[str, Any]]:
    from workloads.render import yamlio

    return dict(yamlio.load(MODELS_FILE.read_text())["models"])


# ------------------------------------------------------------------ the script


def _find_xpk(text: str) -> tuple[list[str], list[str]]:
    """(the xpk workload create words, other top-level command names)."""
    env: dict[str, str] = {}
    xpk: list[list[str]] = []
    others: list[str] = []
    for words, _ in shellwords.commands(text, env):
        if words[0].endswith("xpk") and words[1:3] == ["workload", "create"]:
            xpk.append(words[3:])
        elif not all(shellwords.assignment(w) for w in words[1 if words[0] in ("export",) else 0 :]):
            others.append(words[0])
    if len(xpk) > 1:
        raise _bad(f"the script runs `xpk workload create` {len(xpk)} times", "import a script with one workload")
    if not xpk:
        raise _bad("no `xpk workload create` command (so no --device-type and no MaxText command)", "pass a tpu-recipes run_recipe.sh or an xpk workload create line")
    return xpk[0], others


def xpk_flags(words: list[str]) -> dict[str, str]:
    """--flag=value, --flag value, or a bare --flag ("true"); a flag given twice must agree."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            raise _bad(f"xpk workload create: unexpected argument {word[:60]!r}", "give xpk options as --flag=value")
        key, eq, value = word[2:].partition("=")
        if not eq:
            if i < len(words) and not words[i].startswith("--"):
                value, i = words[i], i + 1
            else:
                value = "true"
        key = "device-type" if key == "tpu-type" else key
        if key in flags and flags[key] != value:
            raise _bad(f"conflicting flags: --{key} is {flags[key]!r} and {value!r}", "keep one")
        flags[key] = value
    return flags


def device_shape(device: str) -> catalog.SliceShape:
    """tpu7x-4x8x8 (generation-topology) or v6e-256 / v5p-128 / v5litepod-16 (a count)."""
    prefix, _, rest = device.strip().lower().partition("-")
    try:
        if "x" in rest:
            gens = [g for g in catalog.GENERATIONS.values() if prefix in g.name_prefixes]
            if not gens:
                raise CatalogError(f"unknown generation {prefix!r}")
            return catalog.shape(gens[0].name, rest)
        return catalog.accelerator_type(device)
    except CatalogError as e:
        raise _bad(f"--device-type={device!r} is not a known TPU device type ({e})", "use one like tpu7x-4x8x8, v6e-256, v5p-128 or v5litepod-16") from None


# -------------------------------------------------------------- the --command


class _Command(BaseModel):
    env: dict[str, str]
    maxtext: list[str]
    unmapped: list[str]


def parse_command(command: str) -> _Command:
    """The container command: its exports, its one MaxText invocation, and the rest."""
    env: dict[str, str] = {}
    exports: dict[str, str] = {}
    maxtext: list[list[str]] = []
    unmapped: list[str] = []
    for words, _ in shellwords.commands(command, env):
        if words[0] == "export" or all(shellwords.assignment(w) for w in words):
            exports.update(a for a in map(shellwords.assignment, words) if a)
        elif _train_args(words) is not None:
            maxtext.append(_train_args(words) or [])
        elif words[0] != "set":
            unmapped.append(f"--command runs `{' '.join(words)[:70]}`: not carried (the toolkit's image and runner replace it)")
    if not maxtext:
        raise _bad("no MaxText training command (python3 -m MaxText.train ... or maxtext.trainers.pre_train.train) in --command", "import a script that trains with MaxText")
    if len(maxtext) > 1:
        raise _bad(f"--command runs MaxText {len(maxtext)} times", "import a script with one training command")
    return _Command(env=exports, maxtext=maxtext[0], unmapped=unmapped)


def _train_args(words: list[str]) -> list[str] | None:
    """The arguments after the MaxText train module (or train.py), None if this is not one."""
    if not re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0]):
        return None
    if len(words) > 2 and words[1] == "-m" and words[2] in TRAIN_MODULES:
        return words[3:]
    if len(words) > 1 and words[1].endswith("/train.py"):
        return words[2:]
    return None
