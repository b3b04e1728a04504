"""A MaxText run's ``--set key=value`` pairs: parsed and checked once, into the values the planner reads.

``parse_sets`` reads the syntax (``key=value``, a key MaxText could have, each key once,
a value a program argument can carry). ``read_sets`` then checks every pair against the
MaxText the run uses and returns ``MaxTextSets``:

- on the pinned image (``images.runs_pinned_maxtext``) a key must be one of its keys
  (``maxtext_keys``); on another image an unknown key passes as written, with a warning;
- a key the planner owns (``PLANNER_KEYS``) is refused with the flag that sets it;
- a model dimension of a preset model needs ``override_model_config=true`` (MaxText's rule);
- a value the planner reads must be in its domain: sizes are positive int32s (MaxText's
  configs and JAX shapes hold them as int32, which also keeps the HBM estimate finite), a
  mesh degree is >= 1 or -1, the batch a positive finite number, the output a ``gs://``
  path; a number for any other numeric key must be one MaxText can hold.

The integers and the batch are read here, once; the later stages use ``MaxTextSets.ints``
and ``per_device_batch`` and never parse the text again. ``arg_text`` is a recipe's
argument value as the text MaxText is given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloads.planning import program_text
from workloads.planning.defaults import INT32_MAX
from workloads.planning.errors import PlanError, suggest
from workloads.planning.images import MAXTEXT_VERSION, runs_pinned_maxtext
from workloads.planning.maxtext_keys import ESTIMATE_KEYS, FILL, MODEL_KEYS, PLANNER_KEYS, STRUCTURE_KEYS, maxtext_keys, mesh_key, numeric_keys
from workloads.planning.maxtext_numbers import PLAIN_INT, number_problem
from workloads.planning.recipe_model import MaxTextSpec, Recipe

_SET_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
# The --set keys the planner reads as positive integers (the others go to MaxText as written).
POSITIVE_INT_KEYS = MODEL_KEYS | ESTIMATE_KEYS | {"max_target_length"}
_GCS_PATH = re.compile(r"^gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9](/\S*)?$", re.ASCII)


@dataclass(frozen=True)
class MaxTextSets:
    """The checked --set pairs, in the order given.

    ``text`` is what MaxText is given; ``ints`` holds the model dimensions, the sequence
    length and the mesh degrees among them, read as integers; ``per_device_batch`` the
    batch, if set; ``warnings`` the keys passed as written to an image the toolkit has not read.
    """

    text: Mapping[str, str]
    ints: Mapping[str, int]
    per_device_batch: float | None
    warnings: tuple[str, ...] = ()


def arg_text(value: Any) -> str:
    """A recipe's argument value as MaxText's command line gets it (true/false, whole floats without ``.0``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_sets(sets: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--set key=value`` items, in order; syntax and duplicates are errors."""
    out: dict[str, str] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise PlanError("--set", f"{item!r} is not key=value", "write it like --set per_device_batch_size=2")
        if not _SET_KEY.fullmatch(key):
            raise PlanError("--set", f"{key!r} is not a MaxText key (lowercase letters, digits and _)", "write it like --set remat_policy=full")
        secret = program_text.secret_key_problem(key)
        if secret:
            raise PlanError("--set", *secret)  # never the value: the message is printed
        if key in out:
            raise PlanError("--set", f"{key} is given twice ({out[key]!r} and {value!r})", "give each key once")
        bad = program_text.problem(value)
        if bad:
            raise PlanError("--set", f"the value of {key} {bad}", f"give {key} a value without it")
        out[key] = value
    return out


def read_int(key: str, value: str, where: str) -> int:
    """``value`` as an integer MaxText reads; ``where`` is the flag or recipe field it came from."""
    # Plain ASCII digits only: int() also takes ' 4', '4_0' and '٤', which reach MaxText as written.
    if not PLAIN_INT.fullmatch(value):
        raise PlanError(where, f"{key}={value!r} is not a plain integer", f"write it like {key}=4 (digits only)")
    if len(value.lstrip("-")) > len(str(INT32_MAX)):  # and int() refuses strings of 4300+ digits
        raise PlanError(where, f"{key}={value[:12]}... has {len(value)} digits, beyond any size MaxText can use", f"use a {key} of at most {INT32_MAX}")
    return int(value)


def read_sets(recipe: Recipe, mt: MaxTextSpec, sets: dict[str, str], image: str) -> MaxTextSets:
    """Refuses a bad --set; returns the pairs with the numbers the planner reads, and the warnings."""
    known = maxtext_keys()
    pinned = runs_pinned_maxtext(image)
    if pinned and recipe.image.ref and recipe.unknown_keys():
        # A recipe kept these keys for its own image; the pinned MaxText would stop at them.
        raise PlanError(
            "--image",
            f"recipe {recipe.name} sets {', '.join(recipe.unknown_keys())}, which MaxText {MAXTEXT_VERSION} ({image.rsplit('/', 1)[-1]}) does not have",
            f"run it with its own image ({recipe.image.ref}), or drop those keys from the recipe",
        )
    unknown = [k for k in sets if k not in known]
    ints: dict[str, int] = {}
    batch: float | None = None
    for key, value in sets.items():
        if key not in known and pinned:
            raise PlanError(
                "--set",
                f"{key} is not a MaxText {MAXTEXT_VERSION} key{suggest(key, known)}",
                "check the spelling against MaxText's base.yml (another MaxText: pass --image)",
            )
        if key in PLANNER_KEYS:
            fix = {"run_name": "use --name", "steps": "use --steps", "num_slices": "use --slices"}.get(key, "the planner sets it from the target pool")
            raise PlanError("--set", f"{key} is set by the planner", fix)
        if (key in MODEL_KEYS or key in STRUCTURE_KEYS) and mt.model_name != "default" and sets.get("override_model_config", "").lower() != "true":
            raise PlanError(
                "--set",
                f"{key} changes preset model {mt.model_name}, which MaxText refuses without override_model_config=true",
                "add --set override_model_config=true, or use a model_name=default recipe",
            )
        number = _in_domain(key, value)
        if key == "per_device_batch_size":
            batch = number
        elif number is not None:
            ints[key] = int(number)
    warnings = ()
    if unknown:
        warnings = (f"--set {', '.join(unknown)}: not MaxText {MAXTEXT_VERSION} keys, passed as written to {image} (checked by that MaxText, not here)",)
    return MaxTextSets(text=sets, ints=ints, per_device_batch=batch, warnings=warnings)


def _in_domain(key: str, value: str) -> float | None:
    """A --set value in its domain: the number for a key the planner reads (None for the others); one PlanError naming the key otherwise."""
    if key in POSITIVE_INT_KEYS:
        n = read_int(key, value, "--set")
        if n < 1:
            raise PlanError("--set", f"{key}={value} must be a positive integer", f"use a {key} of at least 1")
        if n > INT32_MAX:
            raise PlanError("--set", f"{key}={value} is beyond any size MaxText can use", f"use a {key} of at most {INT32_MAX}")
        return n
    if key in STRUCTURE_KEYS:
        least = STRUCTURE_KEYS[key][1]
        n = read_int(key, value, "--set")
        if n < least or n > INT32_MAX:
            raise PlanError(
                "--set",
                f"{key}={value} must be an integer from {least} to {INT32_MAX} (the estimates size the model by it)",
                f"use a {key} of at least {least}",
            )
        return n
    if key == "per_device_batch_size":
        try:
            pdb = float(value)
        except ValueError:
            raise PlanError("--set", f"per_device_batch_size={value!r} is not a number", "write it like per_device_batch_size=4") from None
        if not (math.isfinite(pdb) and pdb > 0):
            raise PlanError("--set", f"per_device_batch_size={value!r} must be a positive finite number", "use e.g. per_device_batch_size=1")
        if pdb > INT32_MAX:
            raise PlanError("--set", f"per_device_batch_size={value!r} is beyond any batch MaxText can use", f"use at most {INT32_MAX}")
        return pdb
    if key in ("override_model_config", "allow_split_physical_axes"):  # the planner reads them: true or false, nothing it could misread
        if value.lower() not in ("true", "false"):
            raise PlanError("--set", f"{key}={value!r} is neither true nor false", f"write {key}=true")
    elif key == "base_output_directory":
        if not _GCS_PATH.fullmatch(value):
            raise PlanError("--set", f"base_output_directory={value!r} is not a gs:// path", "use gs://BUCKET/PATH")
    elif mesh_key(key) is not None:
        degree = read_int(key, value, "--set")
        if degree != FILL and degree < 1:
            raise PlanError("--set", f"{key}={degree} must be >= 1 or -1", "use a positive degree, or -1 for the rest")
        if degree > INT32_MAX:
            raise PlanError("--set", f"{key}={degree} is beyond any size MaxText can use", f"use a degree of at most {INT32_MAX}")
        return degree
    elif key in numeric_keys():
        bad = number_problem(value)  # a numeric key the planner does not read goes to MaxText: as a number it can hold
        if bad:
            raise PlanError("--set", f"{key}={value[:20]} {bad}", f"give {key} a value MaxText can hold")
    return None
