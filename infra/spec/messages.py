"""How a spec that does not validate is reported: one line naming the field, the problem and the fix.

pydantic reports every problem of a document; the user gets the first, as a ``SpecError``
(``toolkit.errors``) with the field's path as the spec writes it (``tpu_pools[0].capacity.zone``:
the capacity union's tags are not part of it), a problem in plain words, and a fix; the
others are counted (``(+2 more)``). A fix is chosen by the kind of error, and for a string
that must match a pattern, by the pattern (``_PATTERN_FIXES``): "use lowercase letters" is
wrong advice for a version. A model validator's ``FieldValueError`` and a ``SpecError``
raised by a cross-field rule keep their own words.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from infra import catalog
from infra.naming import BUCKET_NAME, GCP_ID, GCP_ID_MAX, GCP_ID_MIN, REGION, ZONE
from infra.spec.section import MACHINE_TYPE, RELEASE, FieldValueError
from infra.spec.storage import IPV4, LUSTRE_FILESYSTEM
from toolkit.errors import SpecError, shown
from toolkit.names import DNS1035_LABEL, CapacityMode
from toolkit.yamlfile import key_text as _key_text

_CAPACITY_MODES = tuple(m.value for m in CapacityMode)
# How pydantic names TpuPoolSpec.capacity's validator in an error's location: its "before" validator
# (``TpuPoolSpec._shorthand``) around the tagged union of the capacity modes' models.
_CAPACITY_WRAPPER = "function-after[_shorthand(), tagged-union[OnDemand,Spot,FlexStart,Reservation]]"


def _capacity_mode(loc: tuple[Any, ...]) -> str | None:
    """The capacity mode a location is inside of (pydantic puts the union tag after 'capacity')."""
    for prev, part in zip(loc, loc[1:], strict=False):
        if prev in ("capacity", _CAPACITY_WRAPPER) and part in _CAPACITY_MODES:
            return str(part)
    return None


def loc_text(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the spec writes the path: ``tpu_pools[0].capacity.zone``."""
    out = ""
    prev: Any = None
    for part in loc:
        after_union, prev = prev in ("capacity", _CAPACITY_WRAPPER), part
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == _CAPACITY_WRAPPER or (after_union and part in _CAPACITY_MODES):
            continue  # discriminated-union tags are not part of the user's path (a key named 'spot' is)
        else:
            out += f".{_key_text(part)}" if out else _key_text(part)
    return out


# Fixes for pattern-checked strings, by pattern: "use lowercase letters" is wrong advice for a version.
_PATTERN_FIXES: dict[str, str] = {
    DNS1035_LABEL: "use lowercase letters, digits and '-', starting with a letter",
    catalog.GKE_VERSION: "write it like 1.31.2-gke.1115000",
    RELEASE: "write it like v0.19.2",
    GCP_ID: f"use a GCP project id: {GCP_ID_MIN}-{GCP_ID_MAX} lowercase letters, digits and '-', starting with a letter",
    REGION: "write it like us-central1",
    ZONE: "write it like us-central1-a",
    BUCKET_NAME: "use 3-63 lowercase letters, digits, '-', '_' and '.'",
    MACHINE_TYPE: "write it like n2-standard-8",
    LUSTRE_FILESYSTEM: "use at most eight letters and digits, like ckpt",
    IPV4: "write the instance's IPv4 address, like 10.96.0.2 (python -m infra outputs: lustre_mount_point)",
}

_BOUND_TYPES = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def split_problem(msg: str, default_fix: str) -> tuple[str, str]:
    """'problem; fix' -> (problem, fix); a message without '; ' gets the default fix."""
    problem, sep, fix = msg.partition("; ")
    return (problem, fix) if sep else (msg, default_fix)


def problem_and_fix(err: dict[str, Any]) -> tuple[str, str]:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        mode = _capacity_mode(tuple(err.get("loc", ())))
        key = err["loc"][-1] if err.get("loc") else ""
        if mode is not None:
            takes = {CapacityMode.RESERVATION: "mode, name, zone and project", CapacityMode.FLEX_START: "mode, queued, max_run_seconds and retry"}.get(
                mode, "only mode"
            )
            also = f"; {key} is a capacity mode of its own, and a pool has one mode" if key in _CAPACITY_MODES else ""
            return f"{shown(key)} is not a key of capacity mode {mode}{also}", f"remove {key}: {mode} capacity takes {takes}"
        return f"unknown key {shown(key)}" if key else "unknown key", "remove it or fix its spelling (compare with examples/default.yaml)"
    if kind == "missing":
        return "is required", "add it (see examples/default.yaml)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return f"{shown(ctx.get('tag', value))} is not a capacity mode", f"use one of {', '.join(CapacityMode)}"
    if kind == "string_pattern_mismatch":
        return f"{shown(value)} is not allowed", _PATTERN_FIXES.get(str(ctx.get("pattern")), f"match {ctx.get('pattern')}")
    if kind == "enum":
        return f"{shown(value)} is not allowed", f"use one of {ctx.get('expected', '')}".replace("'", "")
    if kind == "literal_error":
        return f"{shown(value)} is not allowed", f"use {ctx.get('expected', '')}".replace("'", "")
    if kind in _BOUND_TYPES:
        key, words = _BOUND_TYPES[kind]
        return f"{shown(value)} is out of range", f"use a value {words} {ctx.get(key)}"
    if kind in ("string_too_long", "too_long"):
        return f"{shown(value)} is too long", f"use at most {ctx.get('max_length')} {'characters' if kind == 'string_too_long' else 'items'}"
    if kind == "too_short" and not ctx.get("actual_length"):
        n = ctx.get("min_length", 1)
        return "is an empty list", f"list at least {n} item{'s' if n != 1 else ''} (see examples/default.yaml)"
    if kind in ("string_too_short", "too_short"):
        return "is too short", f"give at least {ctx.get('min_length')} {'characters' if kind == 'string_too_short' else 'items'}"
    if kind in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        return f"{shown(value)} is not a number", "write a plain number"
    if kind in ("bool_parsing", "bool_type"):
        return f"{shown(value)} is not a boolean", "write true or false"
    if kind in ("string_type",):
        return f"{shown(value)} is not a string", "quote it or write text"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expects a mapping, got {type(value).__name__}", "write it as key: value lines (see examples/default.yaml)"
    if kind in ("list_type", "tuple_type"):
        return f"expects a list, got {type(value).__name__}", "write it as a YAML list ([a, b] or - items)"
    return split_problem(msg, "see examples/default.yaml for a valid value")


def format_validation_error(e: ValidationError) -> SpecError:
    """First pydantic error as a SpecError (field path, problem, fix); the rest are counted."""
    errs = e.errors(include_url=False)
    first = errs[0]
    ctx = first.get("ctx") or {}
    inner = ctx.get("error")
    where = loc_text(first["loc"])
    if isinstance(inner, SpecError):
        spec_err = inner
    elif isinstance(inner, FieldValueError):
        field = f"{where}.{inner.field}" if where else inner.field
        spec_err = SpecError(field, inner.problem, inner.fix or "see examples/default.yaml")
    else:
        problem, fix = problem_and_fix(first)
        spec_err = SpecError(where, problem, fix)
    if len(errs) > 1:
        return SpecError(spec_err.field, spec_err.problem, (spec_err.fix + " " if spec_err.fix else "") + f"(+{len(errs) - 1} more)")
    return spec_err
