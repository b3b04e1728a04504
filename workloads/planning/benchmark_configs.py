"""MaxText's benchmark model configs (``benchmarks/*.py`` of a MaxText checkout), read as data.

The Trillium and v5p tpu-recipes scripts launch ``python3 -m benchmarks.benchmark_runner xpk
--model_name=NAME ...``: the model's MaxText flags and XLA flags are not in the script but
in a ``MaxTextModel(model_name=..., model_type=..., tuning_params={...}, xla_flags=...)``
call in MaxText's ``benchmarks/`` package. That code is never imported or run here (a
checkout is untrusted input, and importing it would need MaxText's dependencies): each file
is parsed with ``ast`` and a small evaluator resolves the few expression forms the configs
use — literals, ``-1``, module-level names, ``other_module.NAME``, string ``+`` and
f-strings, ``os.path.join`` of strings, and ``"...{x}...".format`` called with literals.
Anything else is kept as ``Opaque`` (the source text), which the importer reports instead
of carrying.

The runner's own lookup key is the model_name with ``-`` replaced by ``_``
(benchmark_utils._add_to_model_dictionary); both spellings are accepted here.

A checkout is input nobody here wrote, so every step is bounded (``tests/test_parsers.py``
feeds each deep, long and repeated input):

- the walk: at most ``MAX_FILES`` files among ``MAX_ENTRIES`` directory entries, no symlink
  followed, ``MAX_FILE_BYTES`` a file and ``MAX_TOTAL_BYTES`` in all;
- the parse: a file Python's own parser cannot build (nested too deeply: CPython stops with
  a RecursionError on a 30 KB chain of ``+``) holds no model, instead of a traceback;
- the evaluation: ``MAX_DEPTH`` nested expressions or name lookups, each module-level name
  worked out once (``a = b + b; b = c + c; ...`` doubles, it does not branch), and a string
  longer than ``MAX_VALUE_CHARS`` is ``Opaque``: the importer reports it, as it reports a call.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import FieldError
from toolkit.inputfile import InputKind, NotReadable, read_bounded

# A checkout's benchmarks/ holds a few dozen files of at most a few hundred KB; the bounds keep a hostile tree cheap.
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
MAX_FILES = 400
MAX_ENTRIES = 20_000  # directory entries looked at while finding the files
MAX_DEPTH = 64  # nested expressions and name lookups while working out one value
MAX_VALUE_CHARS = 64 * 1024  # a flag string or tokenizer path is a few hundred characters
MAX_SOURCE_CHARS = 200  # of an Opaque value's source text, for the report


def _source(node: ast.AST) -> str:
    """The source text of ``node`` for a report, cut short; a node too deep to print is said to be."""
    try:
        text = ast.unparse(node)
    except RecursionError:
        return "<an expression nested too deeply>"
    return text if len(text) <= MAX_SOURCE_CHARS else text[: MAX_SOURCE_CHARS - 1] + "…"


@dataclass(frozen=True)
class Opaque:
    """A value the evaluator does not compute (a call, a comprehension, ...): its source text."""

    source: str


@dataclass(frozen=True)
class _Module:
    name: str


@dataclass(frozen=True)
class _Format:
    template: str


@dataclass(frozen=True)
class BenchmarkModel:
    """One MaxTextModel of the checkout, as the runner would pass it to MaxText."""

    name: str
    model_type: str
    # key -> the value's text as the runner writes it (f"{key}={value}"), or Opaque.
    tuning: dict[str, str | Opaque]
    xla_flags: str | Opaque
    source: str  # benchmarks/<file>.py, for the report


Value = object


class _Evaluator:
    """Module-level names of the benchmarks/ package files, resolved on demand."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = files  # module name (benchmarks.x) -> source text
        self.trees: dict[str, ast.Module] = {}
        self.scopes: dict[str, dict[str, ast.expr | Value]] = {}
        self.busy: set[tuple[str, str]] = set()
        self.known: dict[tuple[str, str], Value] = {}  # each module-level name worked out once
        self.depth = 0

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.trees:
            text = self.files.get(module)
            try:
                self.trees[module] = ast.parse(text) if text is not None else ast.Module(body=[], type_ignores=[])
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # not Python, or nested past what CPython builds
                self.trees[module] = ast.Module(body=[], type_ignores=[])
        return self.trees[module]

    def scope(self, module: str) -> dict[str, ast.expr | Value]:
        """name -> its last module-level binding (an expression still to evaluate, or a module)."""
        if module not in self.scopes:
            names: dict[str, ast.expr | Value] = {}
            for stmt in self.tree(module).body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    names[stmt.targets[0].id] = stmt.value
                elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                    for alias in stmt.names:
                        sub = f"{stmt.module}.{alias.name}"
                        names[alias.asname or alias.name] = _Module(sub) if sub in self.files else ("from", stmt.module, alias.name)
                elif isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        names[alias.asname or alias.name.split(".")[0]] = _Module(alias.name if alias.asname else alias.name.split(".")[0])
            self.scopes[module] = names
        return self.scopes[module]

    def name(self, module: str, name: str) -> Value:
        key = (module, name)
        if key in self.known:
            return self.known[key]
        bound = self.scope(module).get(name)
        if bound is None or key in self.busy:
            return Opaque(name)
        if isinstance(bound, tuple):  # from X import NAME
            got = self.name(bound[1], bound[2])
        elif not isinstance(bound, ast.expr):
            got = bound
        else:
            self.busy.add(key)
            try:
                got = self.value(module, bound)
            finally:
                self.busy.discard(key)
        self.known[key] = got
        return got

    def value(self, module: str, node: ast.expr) -> Value:
        """``node``'s value, within ``MAX_DEPTH`` and ``MAX_VALUE_CHARS`` (else ``Opaque``)."""
        if self.depth >= MAX_DEPTH:
            return Opaque("<nested too deeply>")
        self.depth += 1
        try:
            got = self._value(module, node)
        finally:
            self.depth -= 1
        if isinstance(got, str) and len(got) > MAX_VALUE_CHARS:
            return Opaque(f"<a string of {len(got):,} characters>")
        return got

    def _value(self, module: str, node: ast.expr) -> Value:  # noqa: PLR0911 - one branch per expression form
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(module, node.operand)
            return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else Opaque(_source(node))
        if isinstance(node, ast.Name):
            return self.name(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self.value(module, node.value)
            if isinstance(base, _Module):
                return self.name(base.name, node.attr)
            if isinstance(base, str) and node.attr == "format":
                return _Format(base)
            return Opaque(_source(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(module, node.left), self.value(module, node.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return Opaque(_source(node))
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                v = self.value(module, part.value) if isinstance(part, ast.FormattedValue) else self.value(module, part)
                if isinstance(part, ast.FormattedValue) and (part.format_spec is not None or part.conversion != -1):
                    return Opaque(_source(node))
                if isinstance(v, (Opaque, _Module, _Format, dict, list)):
                    return Opaque(_source(node))
                parts.append(str(v))
            return "".join(parts)
        if isinstance(node, ast.Dict):
            out: dict[str, Value] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:  # {**OTHER, ...}
                    other = self.value(module, v)
                    if not isinstance(other, dict):
                        out[f"**{_source(v)}"] = Opaque(_source(v))
                        continue
                    out.update(other)
                    continue
                key = self.value(module, k)
                if isinstance(key, str):
                    out[key] = self.value(module, v)
            return out
        if isinstance(node, ast.Call):
            return self.call(module, node)
        return Opaque(_source(node))

    def call(self, module: str, node: ast.Call) -> Value:
        func = node.func
        args = [self.value(module, a) for a in node.args]
        kwargs = {k.arg: self.value(module, k.value) for k in node.keywords if k.arg}
        if len(kwargs) != len(node.keywords):
            return Opaque(_source(node))
        # os.path.join of strings: the tokenizer paths of several configs.
        if _source(func) == "os.path.join" and args and not kwargs and all(isinstance(a, str) for a in args):
            return os.path.join(*args)  # noqa: PTH118 - the same join MaxText's config performs
        target = self.value(module, func)
        if isinstance(target, _Format) and not args and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in kwargs.values()):
            return _fill(target.template, kwargs) or Opaque(_source(node))
        return Opaque(_source(node))


_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _fill(template: str, values: Mapping[str, object]) -> str | None:
    """``template.format(**values)`` for plain ``{name}`` fields only (no attribute or index lookups)."""
    if re.sub(_FIELD, "", template).count("{") or re.sub(_FIELD, "", template).count("}"):
        return None
    if any(m.group(1) not in values for m in _FIELD.finditer(template)):
        return None
    return _FIELD.sub(lambda m: str(values[m.group(1)]), template)


def _text(value: Value) -> str | Opaque:
    """The value as the runner prints it into ``key=value`` (Python's str())."""
    if isinstance(value, Opaque):
        return value
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    return Opaque(repr(value)[:80])


def parse_models(files: Mapping[str, str]) -> dict[str, BenchmarkModel]:
    """Every literal ``MaxTextModel(...)`` of the files (module name -> text), by the runner's key."""
    ev = _Evaluator(files)
    models: dict[str, BenchmarkModel] = {}
    for module in sorted(files):
        for node in ast.walk(ev.tree(module)):
            if not (isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "MaxTextModel"):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name, model_type = (ev.value(module, kw[k]) if k in kw else None for k in ("model_name", "model_type"))
            if not (isinstance(name, str) and isinstance(model_type, str)):
                continue  # built at run time (a loop or a function argument): not a name a script can give
            params = ev.value(module, kw["tuning_params"]) if "tuning_params" in kw else {}
            tuning = {k: _text(v) for k, v in params.items()} if isinstance(params, dict) else {"tuning_params": Opaque(_source(kw["tuning_params"]))}
            flags = ev.value(module, kw["xla_flags"]) if "xla_flags" in kw else ""
            model = BenchmarkModel(
                name=name,
                model_type=model_type,
                tuning=tuning,
                xla_flags=flags if isinstance(flags, str) else Opaque(_source(kw["xla_flags"])),
                source=module.replace(".", "/") + ".py",
            )
            # The first definition wins, as in the runner's `a.get(n) or b.get(n)` over its dicts.
            models.setdefault(name.replace("-", "_"), model)
    return models


def read_checkout(repo: Path) -> dict[str, str]:
    """module name -> text of every ``benchmarks/**/*.py`` of a MaxText checkout (read, never imported)."""
    root = repo / "benchmarks"
    if not (root / "benchmark_runner.py").is_file():
        raise FieldError(
            "--maxtext-repo",
            f"{repo} is not a MaxText checkout (no benchmarks/benchmark_runner.py)",
            "pass the MaxText directory the script runs from, e.g. --maxtext-repo ~/maxtext",
        )
    files: dict[str, str] = {}
    total = 0
    for path in _python_files(root)[:MAX_FILES]:
        rel = path.relative_to(repo).with_suffix("")
        try:
            raw = read_bounded(path, _CONFIG._replace(limit=min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - total)))
            files[".".join(rel.parts)] = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, NotReadable):
            continue
        total += len(raw)
    return files


_CONFIG = InputKind("MaxText benchmark config", MAX_FILE_BYTES)


def _python_files(root: Path) -> list[Path]:
    """``*.py`` under ``root`` in name order, looking at no more than ``MAX_ENTRIES`` entries, following no symlink."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        seen += len(dirnames) + len(filenames)
        if seen > MAX_ENTRIES:
            break
        dirnames.sort()
        found += (Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py") and not os.path.islink(os.path.join(dirpath, f)))
    return sorted(found)


def lookup(models: Mapping[str, BenchmarkModel], name: str) -> BenchmarkModel | None:
    return models.get(name.replace("-", "_"))
