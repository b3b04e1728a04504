"""One way to write a pattern (toolkit/patterns.py): held over the code, and over every pattern-checked field.

Two halves:

- the code is read (``ast``) and every regular expression it hands to ``re`` or to pydantic
  is found, with its text where it can be worked out from the module (a literal, an f-string
  or ``+`` of module constants, an imported constant, a compiled pattern's text and flags).
  The rules: no ``re.match``/``re.search`` (function or method) with a ``$`` outside
  ``re.MULTILINE`` (``$`` takes a trailing newline: use a full match); no ``\\d \\w \\s \\b``
  (or their capitals) without ``re.ASCII`` (they take Unicode digits and letters); a pydantic
  ``pattern=`` is ``^...$`` with written-out classes and no lookaround (pydantic's Rust engine
  searches, and falls back to Python's ``re`` for what it cannot compile). A pattern whose
  text cannot be worked out is listed in ``DYNAMIC`` with the reason it is safe, so a new one
  is read by someone before it passes;
- every pattern-checked field of every pydantic model of the toolkit (the spec, the recipes,
  the price table, the fleet file...) is fed a value its pattern accepts, then that value
  with a trailing newline, a leading newline, a Unicode digit and a Unicode letter in place
  of an ASCII one: each of those is refused (hypothesis draws the values from the pattern).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import REPO
from toolkit import patterns

PACKAGES = ("toolkit", "infra", "workloads", "modules")
SOURCES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
RE_FUNCS = {"match", "search", "fullmatch", "compile", "sub", "subn", "findall", "finditer", "split"}
SEARCHING = {"match", "search"}  # where a `$` lets a trailing newline through
# The positional index of `flags` for each re function.
FLAGS_AT = {"match": 2, "search": 2, "fullmatch": 2, "compile": 1, "sub": 4, "subn": 4, "findall": 2, "finditer": 2, "split": 3}
PYDANTIC_CALLS = {"Field", "StringConstraints", "constr"}

# Calls whose pattern is built at run time, each with why it is safe (file:line is not used:
# lines move; the enclosing function names the place).
DYNAMIC: dict[tuple[str, str], str] = {
    ("infra/reservation_fallback.py", "_names_node_pool"): "a node-pool name the spec validated (a DNS label), re.escape'd, searched for in terraform's output",
    ("infra/reservation_fallback.py", "node_pool_of"): "a node-pool name the spec validated (a DNS label), re.escape'd, searched for with re.ASCII",
    ("infra/price_refresh.py", "_generation"): "the module's own table of literal patterns (_GENERATIONS), searched for in a SKU description",
    ("toolkit/patterns.py", "_compiled"): "the one place that compiles a caller's pattern, always with re.ASCII, always used with fullmatch",
    ("toolkit/credentials.py", "<module>"): "built from the module's list of credential words, compiled with re.ASCII; redaction and fullmatch only",
}


@dataclass(frozen=True)
class Regex:
    text: str
    flags: int = 0


@dataclass(frozen=True)
class Unknown:
    why: str


# ------------------------------------------------------------------ reading the code


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_path(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@cache
def _bindings(path: Path) -> dict[str, Any]:
    """A module's top-level names: an expression to evaluate, or ('import', module, name)."""
    out: dict[str, Any] = {}
    pkg = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    tree = _tree(path)
    # Imports inside functions too (a lazy import binds the name where it is used); module level wins.
    nested = [s for s in ast.walk(tree) if isinstance(s, (ast.Import, ast.ImportFrom)) and s not in tree.body]
    for stmt in [*nested, *tree.body]:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            out[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple) and isinstance(stmt.value, ast.Tuple):
            for t, v in zip(stmt.targets[0].elts, stmt.value.elts, strict=False):
                if isinstance(t, ast.Name):
                    out[t.id] = v
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.ImportFrom):
            mod = stmt.module or ""
            if stmt.level:
                base = pkg.split(".")
                base = base[: len(base) - (stmt.level - 1)]
                mod = ".".join([*base, mod] if mod else base)
            for a in stmt.names:
                out[a.asname or a.name] = ("import", mod, a.name)
        elif isinstance(stmt, ast.Import):
            for a in stmt.names:
                out[a.asname or a.name.split(".")[0]] = ("module", a.name if a.asname else a.name.split(".")[0])
    return out


def _flag_value(node: ast.expr) -> int | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        a, b = _flag_value(node.left), _flag_value(node.right)
        return None if a is None or b is None else a | b
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    return None


def _value(path: Path, node: ast.expr, depth: int = 0) -> Any:
    """What ``node`` is in module ``path``: a str, a Regex, ('module', name), or Unknown."""
    if depth > 20:
        return Unknown("too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            got = v.value if isinstance(v, ast.Constant) else _value(path, v.value, depth + 1) if isinstance(v, ast.FormattedValue) else None
            if isinstance(v, ast.FormattedValue) and v.format_spec is not None:
                got = str(ast.literal_eval(ast.unparse(v.value))) if isinstance(v.value, ast.Constant) else Unknown("format spec")
            if isinstance(got, int) and not isinstance(got, bool):
                got = str(got)
            if not isinstance(got, str):
                return got if isinstance(got, Unknown) else Unknown(f"f-string part {ast.unparse(v)}")
            parts.append(got)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        a, b = _value(path, node.left, depth + 1), _value(path, node.right, depth + 1)
        if isinstance(node.op, ast.Add) and isinstance(a, str) and isinstance(b, str):
            return a + b
        if isinstance(a, int) and isinstance(b, int):
            return a + b if isinstance(node.op, ast.Add) else a - b
        return Unknown(ast.unparse(node))
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return _name(path, node.id, depth + 1)
    if isinstance(node, ast.Attribute):
        base = _value(path, node.value, depth + 1)
        if isinstance(base, tuple) and base[0] == "module":
            target = _module_path(base[1])
            return _name(target, node.attr, depth + 1) if target else Unknown(f"{base[1]}.{node.attr}")
        return Unknown(ast.unparse(node))
    if isinstance(node, ast.Call) and _re_func(node) == "compile":
        text = _value(path, node.args[0], depth + 1) if node.args else Unknown("no pattern")
        flags = _flags(node, "compile")
        if isinstance(text, str) and flags is not None:
            return Regex(text, flags)
        return text if isinstance(text, Unknown) else Unknown("flags")
    return Unknown(ast.unparse(node)[:60])


def _name(path: Path, name: str, depth: int) -> Any:
    bound = _bindings(path).get(name)
    if bound is None:
        return Unknown(f"{name} is not a module-level name")
    if isinstance(bound, tuple) and bound[0] == "import":
        target = _module_path(f"{bound[1]}.{bound[2]}")
        if target is not None:
            return ("module", f"{bound[1]}.{bound[2]}")
        src = _module_path(bound[1])
        return _name(src, bound[2], depth + 1) if src else Unknown(f"{bound[1]}.{bound[2]}")
    if isinstance(bound, tuple):
        return bound
    return _value(path, bound, depth + 1)


def _re_func(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re" and f.attr in RE_FUNCS:
        return f.attr
    return None


def _flags(call: ast.Call, func: str) -> int | None:
    at = FLAGS_AT[func]
    node = call.args[at] if len(call.args) > at else next((k.value for k in call.keywords if k.arg == "flags"), None)
    return 0 if node is None else _flag_value(node)


def _enclosing(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the name of the function (or class) it stands in."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else where
            out[id(child)] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return out


@dataclass(frozen=True)
class Use:
    """One regular expression the code hands to ``re`` or pydantic."""

    path: str  # relative to the repository
    line: int
    where: str  # the enclosing function
    how: str  # "re.match", ".search", "pydantic"
    pattern: Regex | Unknown


def uses() -> Iterator[Use]:
    for path in SOURCES:
        tree = _tree(path)
        where = _enclosing(tree)
        rel = str(path.relative_to(REPO))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = _re_func(node)
            if func is not None:
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pattern"), None)
                got = _value(path, arg) if arg is not None else Unknown("no pattern")
                flags = _flags(node, func)
                if isinstance(got, str):
                    got = Regex(got, flags) if flags is not None else Unknown("flags")
                yield Use(rel, node.lineno, where.get(id(node), "<module>"), f"re.{func}", got if isinstance(got, (Regex, Unknown)) else Unknown("not text"))
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in RE_FUNCS - {"compile"}:
                got = _value(path, f.value)
                if isinstance(got, Regex):
                    yield Use(rel, node.lineno, where.get(id(node), "<module>"), f".{f.attr}", got)
                continue
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in PYDANTIC_CALLS:
                for k in node.keywords:
                    if k.arg == "pattern":
                        got = _value(path, k.value)
                        yield Use(rel, node.lineno, where.get(id(node), "<module>"), "pydantic", Regex(got) if isinstance(got, str) else Unknown(str(got)))


# ------------------------------------------------------------------ the rules


def _metachars(text: str) -> Iterator[tuple[int, str]]:
    """(index, token) of the pattern's escapes (``\\d``) and unescaped ``$``/``^``, outside and inside classes."""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            yield i, text[i : i + 2]
            i += 2
            continue
        if c in "$^":
            yield i, c
        i += 1


UNICODE_CLASSES = {"\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b", "\\B"}


def unicode_classes(r: Regex) -> list[str]:
    if r.flags & re.ASCII or r.text.startswith("(?a"):
        return []
    return sorted({tok for _, tok in _metachars(r.text) if tok in UNICODE_CLASSES})


def has_dollar(r: Regex) -> bool:
    return not (r.flags & re.MULTILINE) and any(tok == "$" for _, tok in _metachars(r.text))


def problems(u: Use) -> list[str]:
    if isinstance(u.pattern, Unknown):
        if (u.path, u.where) in DYNAMIC:
            return []
        return [f"pattern not worked out from the code ({u.pattern.why}): make it a module constant, or list it in DYNAMIC with why it is safe"]
    out = []
    r = u.pattern
    if u.how == "pydantic":
        if not (r.text.startswith("^") and r.text.endswith("$")):
            out.append("a pydantic pattern must be ^...$ (pydantic searches)")
        if any(tok in UNICODE_CLASSES for _, tok in _metachars(r.text)):
            out.append("a pydantic pattern must write its classes out ([0-9], not \\d): Rust's \\d is Unicode")
        if "(?=" in r.text or "(?!" in r.text or "(?<" in r.text and "(?<P" not in r.text:
            out.append("no lookaround in a pydantic pattern (pydantic would fall back to Python's re, where $ takes a newline)")
        return out
    if u.how.rsplit(".", 1)[-1] in SEARCHING and has_dollar(r):
        out.append("$ with match/search takes a trailing newline: use re.fullmatch (toolkit.patterns.fullmatch)")
    bad = unicode_classes(r)
    if bad:
        out.append(f"{', '.join(bad)} without re.ASCII takes Unicode: write [0-9] / [A-Za-z0-9_], or pass re.ASCII")
    return out


def test_every_regex_in_the_code_keeps_the_rules() -> None:
    found = list(uses())
    assert len(found) > 100, "the scan found too few regular expressions to be reading the code"
    bad = [f"{u.path}:{u.line} ({u.where}) {u.how} {getattr(u.pattern, 'text', '')!r}: {p}" for u in found for p in problems(u)]
    assert not bad, "\n".join(bad)


def test_every_dynamic_pattern_listed_still_exists() -> None:
    seen = {(u.path, u.where) for u in uses() if isinstance(u.pattern, Unknown)}
    assert set(DYNAMIC) <= seen, set(DYNAMIC) - seen


@pytest.mark.parametrize(
    ("how", "regex", "expect"),
    [
        ("re.match", Regex(r"^[a-z]+$"), "$ with match/search"),
        (".search", Regex(r"[a-z]+$"), "$ with match/search"),
        ("re.fullmatch", Regex(r"^[a-z]+$"), None),
        ("re.search", Regex(r"^x$", re.M), None),
        ("re.search", Regex(r"(\d+)"), "without re.ASCII"),
        ("re.search", Regex(r"(\d+)", re.ASCII), None),
        ("re.search", Regex(r"\\d"), None),  # an escaped backslash, then a d
        ("pydantic", Regex(r"^[a-z]+"), "^...$"),
        ("pydantic", Regex(r"^\d+$"), "write its classes out"),
        ("pydantic", Regex(r"^(?=a)[a-z]+$"), "lookaround"),
    ],
)
def test_the_rules_catch_what_they_name(how: str, regex: Regex, expect: str | None) -> None:
    got = problems(Use("x.py", 1, "f", how, regex))
    assert (expect is None and not got) or (expect is not None and any(expect in p for p in got)), got


def test_python_dollar_takes_a_newline_and_a_full_match_does_not() -> None:
    """The fact the rules rest on, on this Python."""
    assert re.match(r"^[a-z]+$", "run\n") and not re.fullmatch(r"^[a-z]+$", "run\n")
    assert re.fullmatch(r"\d+", "٣") and not re.fullmatch(r"\d+", "٣", re.ASCII)
    assert patterns.fullmatch(r"^[a-z]+$", "run") and not patterns.fullmatch(r"^[a-z]+$", "run\n") and not patterns.fullmatch(r"\d", "٣")


# ------------------------------------------------------------------ every pattern-checked field


def _models() -> list[type[pydantic.BaseModel]]:
    for pkg in ("infra", "workloads", "toolkit"):
        root = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(root.__path__, f"{pkg}."):
            if info.name.endswith("__main__") or info.name.startswith(("workloads.ray.", "workloads.local.", "workloads.maxtext.driver")):
                continue  # container-side entry points and the local cluster's daemons
            importlib.import_module(info.name)
    seen: set[type] = set()
    todo = list(pydantic.BaseModel.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
    return sorted((c for c in seen if c.__module__.split(".")[0] in ("infra", "workloads", "toolkit")), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _pattern_of(metadata: list[Any]) -> str | None:
    for m in metadata:
        p = getattr(m, "pattern", None)
        if isinstance(p, str):
            return p
        if isinstance(m, pydantic.fields.FieldInfo):  # Annotated[str, Field(pattern=...)] inside a list
            inner = _pattern_of(list(m.metadata))
            if inner is not None:
                return inner
    return None


def _string_slots(annotation: Any, metadata: list[Any]) -> Iterator[tuple[str, Any]]:
    """(pattern, the annotation to validate one value with) for the field and the items it holds."""
    p = _pattern_of(metadata)
    if p is not None:
        yield p, Annotated[str, *metadata]
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        yield from _string_slots(base, list(meta))
        return
    for arg in get_args(annotation):
        yield from _string_slots(arg, [])


@cache
def pattern_fields() -> list[tuple[str, str, Any]]:
    out = []
    for model in _models():
        for name, field in model.model_fields.items():
            for pattern, slot in _string_slots(field.annotation, list(field.metadata)):
                out.append((f"{model.__module__}.{model.__qualname__}.{name}", pattern, slot))
    return out


def test_the_models_hold_pattern_checked_fields() -> None:
    fields = {f for f, _, _ in pattern_fields()}
    for name in ("infra.spec.envspec.EnvSpec.region", "infra.spec.envspec.EnvSpec.zones", "infra.spec.teams.TeamSpec.name", "infra.datasets.DatasetSpec.name"):
        assert name in fields, sorted(fields)


UNICODE_DIGIT = "٣"  # ARABIC-INDIC DIGIT THREE: \d, str.isdigit and int() take it
UNICODE_LETTER = "ａ"  # FULLWIDTH LATIN SMALL LETTER A: \w and str.isalpha take it


def _variants(v: str) -> list[str]:
    out = [v + "\n", "\n" + v, v + "\r\n"]
    for i, c in enumerate(v):
        if c.isdigit():
            out.append(v[:i] + UNICODE_DIGIT + v[i + 1 :])
            break
    for i, c in enumerate(v):
        if c.isalpha():
            out.append(v[:i] + UNICODE_LETTER + v[i + 1 :])
            break
    return out


@pytest.mark.parametrize(("field", "pattern", "slot"), pattern_fields(), ids=[f for f, _, _ in pattern_fields()])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_pattern_field_refuses_newlines_and_unicode_digits_and_letters(field: str, pattern: str, slot: Any, data: st.DataObject) -> None:
    adapter = pydantic.TypeAdapter(slot)
    longest = min((m.max_length for m in typing.get_args(slot)[1:] if getattr(m, "max_length", None) is not None), default=None)
    strategy = st.from_regex(pattern, fullmatch=True, alphabet=st.characters(codec="ascii", exclude_categories=("Cc",)))
    value = data.draw(strategy if longest is None else strategy.filter(lambda v: len(v) <= longest))  # the field's length is its own check
    adapter.validate_python(value)  # what the pattern takes, the field takes
    for bad in _variants(value):
        with pytest.raises(pydantic.ValidationError):
            adapter.validate_python(bad)


# ------------------------------------------------------------------ the values that reach a manifest, end to end


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--name", "tour\n"], "--name"),
        (["--name", "tour٣"], "--name"),
        (["--set", "base_output_directory=gs://my-tpu-project-tpu-dev-ckpt/x\n"], "--set"),
        (["--set", "steps=1\n"], "--set"),
    ],
    ids=["run-name-newline", "run-name-unicode-digit", "gcs-path-newline", "number-newline"],
)
def test_a_newline_or_unicode_digit_in_a_run_value_is_one_line_exit_2(argv: list[str], field: str) -> None:
    from tests.support import cli

    proc = cli("workloads", "submit", "maxtext-6b", *argv, "--dry-run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(f"error: {field}"), proc.stderr
