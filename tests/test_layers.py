"""The package table of docs/architecture.md, held against the real imports.

``LAYERS`` is the table: for each package, the project packages (or single modules) it may
import and, where the table restricts them, the third-party distributions. The document
shows the same rows; ``test_the_document_shows_this_table`` keeps the two equal, so the
page cannot say one thing while the test checks another.

Every ``import`` statement counts, wherever it stands:
- at module level;
- inside a function (a lazy import still runs, and still ties the two packages together:
  moving it into a function hides a dependency, it does not remove one);
- under ``if TYPE_CHECKING:``: a type-only import never runs, but the name in the signature
  is still a dependency a reader follows and a rename breaks, so it obeys the same table.
The same imports make the module graph, which must have no cycle. Not seen: a module
imported by a computed name (``importlib.import_module(f"workloads.cli.{name}")``, within
its own package).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tests.support import REPO

PROJECT = ("toolkit", "modules", "infra", "workloads")
DOC = REPO / "docs" / "architecture.md"


@dataclass(frozen=True)
class Layer:
    package: str  # dotted: "workloads.render"
    may_import: tuple[str, ...]  # project packages or modules; a package allows all its modules
    third_party: tuple[str, ...] | None = None  # None: any pinned dependency; else the standard library and only these

    @property
    def path(self) -> str:
        return self.package.replace(".", "/") + "/"

    def allows(self, target: str) -> bool:
        return any(target == m or target.startswith(m + ".") for m in (self.package, *self.may_import))


LAYERS: dict[str, Layer] = {
    layer.package: layer
    for layer in (
        Layer("toolkit", (), third_party=("typer", "yaml")),
        Layer("modules", ("toolkit.names", "toolkit.paths"), third_party=("cdktn", "cdktn_provider_google", "constructs")),
        Layer("infra", ("modules", "toolkit")),
        Layer("workloads", ("workloads.cli",)),
        Layer("workloads.planning", ("infra.spec", "infra.catalog", "infra.access", "infra.recovery", "toolkit", "workloads.ray")),
        Layer("workloads.render", ("workloads.planning", "infra", "toolkit", "workloads.ray", "workloads.cluster.runkinds")),
        Layer("workloads.cluster", ("toolkit",)),
        Layer("workloads.maxtext", ("workloads.planning", "infra.catalog", "toolkit")),
        Layer("workloads.observe", ("workloads.planning", "workloads.cluster", "infra", "toolkit")),
        Layer(
            "workloads.local",
            (
                "workloads.cluster",
                "workloads.render",
                "workloads.planning",
                "workloads.observe.storage",
                "workloads.observe.history",
                "workloads.observe.tb_events",
                "infra",
                "toolkit",
            ),
        ),
        Layer(
            "workloads.runs",
            (
                "workloads.planning",
                "workloads.render",
                "workloads.cluster",
                "workloads.observe.storage",
                "workloads.observe.owned_objects",
                "workloads.observe.history",
                "workloads.observe.faults",
                "workloads.data.checks",
                "infra",
                "toolkit",
            ),
        ),
        Layer(
            "workloads.data",
            (
                "workloads.planning",
                "workloads.render.volumes",
                "workloads.maxtext",
                "workloads.observe.storage",
                "workloads.observe.owned_objects",
                "workloads.observe.google_http",
                "infra",
                "toolkit",
            ),
        ),
        Layer("workloads.ray", (), third_party=("ray", "maxtext")),
        Layer("workloads.cli", ("workloads", "infra", "toolkit")),
    )
}


# ------------------------------------------------------------------ reading the imports


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    file: str  # its path in the repository
    line: int
    target: str  # the module imported: the longest name the statement gives that is a module


def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package by its __init__)."""
    out = {}
    for top in PROJECT:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_in(source: str, importer: str, file: str, known: Iterable[str], *, package: bool = False) -> list[Import]:
    """Every import statement of one module, each resolved to the module it names."""
    known = set(known)
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(importer, file, node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = importer.split(".")[: len(importer.split(".")) - node.level + (1 if package else 0)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(Import(importer, file, node.lineno, sub if sub in known else base))
    return sorted(out, key=lambda i: i.line)


@lru_cache(maxsize=1)
def all_imports(root: Path = REPO) -> tuple[Import, ...]:
    mods = project_modules(root)
    out = []
    for name, path in mods.items():
        out += imports_in(path.read_text(encoding="utf-8"), name, str(path.relative_to(root)), mods, package=path.name == "__init__.py")
    return tuple(out)


def layer_of(module: str) -> Layer | None:
    """The table row of a module: the longest package that holds it."""
    rows = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(rows, key=len)] if rows else None


def _third_party(target: str) -> str | None:
    """The distribution's import name, or None for the project and the standard library."""
    top = target.split(".")[0]
    return None if top in PROJECT or top in sys.stdlib_module_names else top


def violations(imports: Iterable[Import]) -> list[str]:
    """Each import the table forbids, as the rule it breaks."""
    out = []
    for imp in imports:
        layer = layer_of(imp.importer)
        assert layer is not None, f"{imp.file}: no row of the package table holds {imp.importer}"
        where = f"{imp.file}:{imp.line} imports {imp.target}"
        if imp.target.split(".")[0] in sys.stdlib_module_names:
            continue
        if (dist := _third_party(imp.target)) is not None:
            if layer.third_party is not None and dist not in layer.third_party:
                allowed = ", ".join(("the standard library", *layer.third_party))
                out.append(f"{where}: {layer.path} may import only {allowed} from outside the project")
        elif not layer.allows(imp.target):
            out.append(f"{where}: {layer.path} may import {', '.join(layer.may_import) or 'nothing else in the project'}")
    return out


def cycles(imports: Iterable[Import]) -> list[list[Import]]:
    """Import cycles between modules: for each strongly connected group, one cycle through it, edge by edge."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if imp.target != imp.importer and imp.target.split(".")[0] in PROJECT:
            edges.setdefault(imp.importer, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_cycle_through(sorted(g)[0], g, edges) for g in groups]


def _cycle_through(start: str, group: set[str], edges: dict[str, dict[str, Import]]) -> list[Import]:
    """The shortest path from ``start`` back to itself inside ``group`` (breadth first)."""
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w, imp in sorted(edges.get(v, {}).items()):
            if w == start:
                return [*paths[v], imp]
            if w in group and w not in paths:
                paths[w] = [*paths[v], imp]
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected group


def _describe(cycle: list[Import]) -> str:
    return " -> ".join([cycle[0].importer, *(f"{i.target} ({i.file}:{i.line})" for i in cycle)])


# ------------------------------------------------------------------ the checks


def test_every_module_has_a_row():
    orphans = [m for m in project_modules() if layer_of(m) is None]
    assert orphans == [], f"add a row for their package to LAYERS and docs/architecture.md: {orphans}"


def test_every_import_keeps_the_package_table():
    found = violations(all_imports())
    assert found == [], "imports that break the package table (docs/architecture.md, Packages):\n" + "\n".join(found)


def test_no_import_cycles_between_modules():
    found = cycles(all_imports())
    assert found == [], "import cycles (lazy and type-only imports count):\n" + "\n".join(_describe(c) for c in found)


def test_lazy_and_type_only_imports_are_read():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from workloads.cluster.client import Cluster\n"
        "def f():\n    from workloads.local import controlplane\n"
        "import yaml\n"
    )
    known = {"workloads.cluster.client", "workloads.local", "workloads.local.controlplane"}
    imps = imports_in(source, "workloads.render.kueue", "workloads/render/kueue.py", known)
    assert [(i.line, i.target) for i in imps] == [(1, "typing"), (3, "workloads.cluster.client"), (5, "workloads.local.controlplane"), (6, "yaml")]
    assert violations(imps) == [
        "workloads/render/kueue.py:3 imports workloads.cluster.client: workloads/render/ may import "
        "workloads.planning, infra, toolkit, workloads.ray, workloads.cluster.runkinds",
        "workloads/render/kueue.py:5 imports workloads.local.controlplane: workloads/render/ may import "
        "workloads.planning, infra, toolkit, workloads.ray, workloads.cluster.runkinds",
    ]


def test_relative_imports_resolve_and_third_party_rules_hold():
    known = {"toolkit.names", "toolkit", "workloads.ray", "workloads.ray.standin_head"}
    imps = imports_in("from . import standin_head\nfrom .. import ray\nimport requests\nimport json\n", "workloads.ray.jax_trainer", "f.py", known)
    assert [i.target for i in imps] == ["workloads.ray.standin_head", "workloads.ray", "requests", "json"]
    assert violations(imps) == ["f.py:3 imports requests: workloads/ray/ may import only the standard library, ray, maxtext from outside the project"]
    pkg = imports_in("from . import names\n", "toolkit", "toolkit/__init__.py", known, package=True)
    assert [i.target for i in pkg] == ["toolkit.names"]


def test_a_package_module_importing_its_own_package_is_a_cycle():
    """A module of infra/spec/ importing ``infra.spec`` (the package, which imports it back) would run against a half-made package."""
    own = Import("infra.spec.rules", "infra/spec/rules.py", 20, "infra.spec")
    back = Import("infra.spec", "infra/spec/__init__.py", 40, "infra.spec.rules")
    assert [_describe(x) for x in cycles([own, back])] == ["infra.spec -> infra.spec.rules (infra/spec/__init__.py:40) -> infra.spec (infra/spec/rules.py:20)"]


def test_a_cycle_is_found_and_named():
    a = Import("infra.pricing", "infra/pricing.py", 28, "infra.spec.env")
    b = Import("infra.spec.env", "infra/spec/env.py", 25, "infra.pricing")
    c = Import("infra.spec.env", "infra/spec/env.py", 24, "infra.catalog")
    assert [_describe(x) for x in cycles([a, b, c])] == ["infra.pricing -> infra.spec.env (infra/pricing.py:28) -> infra.pricing (infra/spec/env.py:25)"]
    assert cycles([a, c]) == []


# ------------------------------------------------------------------ the document mirrors LAYERS

_MODULE_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*")


def document_table(text: str) -> dict[str, Layer]:
    """The rows of the Packages table: the package cell, and the backticked module names of the "may import" cell.

    A cell that names the standard library restricts third-party imports to the
    distributions it names; a cell that does not leaves them free.
    """
    section = text.split("\n## Packages\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        package = cells[0].strip("`").rstrip("/").replace("/", ".")
        names = [n for n in re.findall(r"`([^`]+)`", cells[-1]) if _MODULE_NAME.fullmatch(n)]
        project = tuple(n for n in names if n.split(".")[0] in PROJECT)
        others = tuple(n for n in names if n.split(".")[0] not in PROJECT)
        restricted = "the standard library" in cells[-1]
        assert restricted or not others, f"{package}: names third-party {others} without restricting to them (say 'the standard library')"
        out[package] = Layer(package, project, others if restricted else None)
    return out


def test_the_document_shows_this_table():
    shown = document_table(DOC.read_text(encoding="utf-8"))
    assert list(shown) == list(LAYERS), "the rows of docs/architecture.md's package table differ from LAYERS (same packages, same order)"
    for package, layer in LAYERS.items():
        got = shown[package]
        assert sorted(got.may_import) == sorted(layer.may_import), f"{layer.path}: the document says it may import {got.may_import}, LAYERS {layer.may_import}"
        assert (got.third_party and sorted(got.third_party)) == (layer.third_party and sorted(layer.third_party)), (
            f"{layer.path}: third-party imports {got.third_party} in the document, {layer.third_party} in LAYERS"
        )


def test_the_document_parser_sees_a_difference():
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `workloads/cluster/`"))
    changed = text.replace(row, row.replace("`toolkit`", "`toolkit`, `infra`"))
    assert document_table(changed)["workloads.cluster"].may_import == ("toolkit", "infra")


# ------------------------------------------------------------------ every imported name exists


def defined_names(source: str) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports), read with ``ast``.

    Statements under ``if``/``try`` at the top level count too (``if TYPE_CHECKING:`` blocks,
    optional imports): a name bound on any branch is taken as defined.
    """
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                bind(node.target)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                visit(node.body)
                for extra in (*getattr(node, "orelse", []), *getattr(node, "finalbody", [])):
                    visit([extra])
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(source).body)
    return names


def missing_names(root: Path = REPO) -> list[str]:
    """``from <project module> import name`` statements whose module does not define ``name`` (nor has it as a submodule)."""
    mods = project_modules(root)
    defined = {name: defined_names(path.read_text(encoding="utf-8")) for name, path in mods.items()}
    out = []
    for path in mods.values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module or node.module not in mods:
                continue
            for a in node.names:
                if a.name != "*" and a.name not in defined[node.module] and f"{node.module}.{a.name}" not in mods:
                    out.append(f"{path.relative_to(root)}:{node.lineno} imports {a.name} from {node.module}, which does not define it")
    return out


def test_every_imported_name_exists():
    """A lazy import (inside a function) of a name that moved fails only when that path runs; this finds it at once."""
    found = missing_names()
    assert found == [], "\n".join(found)


def test_a_missing_name_is_found(tmp_path: Path):
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "__init__.py").write_text("")
    (tmp_path / "infra" / "pricing.py").write_text("from typing import Any\nif True:\n    RATE = 1\nclass Cost: ...\n")
    (tmp_path / "infra" / "cli.py").write_text("def f():\n    from infra.pricing import Cost, RATE, Any, parse_table\n")
    assert missing_names(tmp_path) == ["infra/cli.py:2 imports parse_table from infra.pricing, which does not define it"]
