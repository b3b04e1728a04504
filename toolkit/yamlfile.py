"""Reading the YAML files a user hands the toolkit: specs, recipes, kubeconfigs, Kueue configs.

One set of rules for all of them: UTF-8 text only (gzip, UTF-16/32 and binary files are
named as what they are), a size cap, and a key given twice in a mapping is an error
instead of YAML's silent "last one wins". Every failure is a ``YamlFileError`` with a
problem and a fix, which each caller turns into its own one-line error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from toolkit.inputfile import YAML, NotReadable, read_bounded


def key_text(key: Any) -> str:
    """A key as it goes into a field path: quoted when it holds a line break or other unprintable character."""
    text = str(key)
    return text if text.isprintable() and text.strip() else repr(text)


MAX_YAML_BYTES = YAML.limit  # a spec or recipe is a few KiB; more is not one
# Values (scalars, lists, mappings) a document may hold once its aliases are expanded. A
# spec, recipe or kubeconfig holds hundreds to a few thousand; YAML aliases can make a
# few hundred bytes stand for billions ("billion laughs"), which every later reader
# (validation, error messages, JSON output) would walk one by one.
MAX_YAML_NODES = 250_000
# Mappings and lists nested in each other: a spec nests about six deep. Past this the document
# is refused here, before the validators, error messages and JSON output walk it recursively.
MAX_YAML_DEPTH = 100


class YamlFileError(ValueError):
    """A file that is not UTF-8 YAML text, or a key given twice.

    ``key_path`` is the duplicated key's path (``tpu_pools[0].capacity``), else "" (the
    whole file is wrong).
    """

    def __init__(self, problem: str, fix: str, key_path: str = "") -> None:
        self.problem, self.fix, self.key_path = problem, fix, key_path
        super().__init__(f"{key_path + ': ' if key_path else ''}{problem} — {fix}")


def read_capped(path: Path, limit: int | None = None) -> bytes:
    """The file's bytes (``toolkit.inputfile``: a regular file only, never blocking); more than
    ``limit`` (MAX_YAML_BYTES) is refused before it is all read. Open failures stay ``OSError``."""
    kind = YAML._replace(limit=MAX_YAML_BYTES if limit is None else limit)
    try:
        return read_bounded(path, kind)
    except NotReadable as e:
        # The path is named by the caller's message; the problem says what the file is.
        raise YamlFileError(e.problem.removeprefix(f"{path} "), e.fix) from None


_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def decode_text(raw: bytes) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped); anything else is a YamlFileError saying what it is."""
    if raw.startswith(b"\x1f\x8b"):
        raise YamlFileError("is gzip-compressed, not YAML text", "decompress it (gunzip) and pass the .yaml file")
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            raise YamlFileError(f"is {encoding} text, not UTF-8", f"save it as UTF-8 (e.g. iconv -f {encoding} -t UTF-8)")
    if b"\x00" in raw:
        half = len(raw) // 2
        zeros = sorted((raw[0::2].count(0), raw[1::2].count(0)))
        if half >= 4 and zeros[1] >= 0.4 * half and zeros[0] <= 0.05 * half:  # ASCII as UTF-16: every other byte NUL
            raise YamlFileError("looks like UTF-16 text without a byte-order mark, not UTF-8", "save it as UTF-8 (e.g. iconv -f UTF-16LE -t UTF-8)")
        raise YamlFileError("is binary, not YAML text (it holds NUL bytes)", "pass a YAML text file")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise YamlFileError(f"is not UTF-8 text (byte 0x{raw[e.start]:02x} on line {line})", "save it as UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)") from None


_MERGE_TAG = "tag:yaml.org,2002:merge"

# libyaml's parser (when PyYAML was built with it) reads a spec or recipe ~10x faster
# than PyYAML's own. Two differences matter for input we did not write: libyaml nests
# by C recursion, so a document nested some 30,000 deep crashes the process instead of
# raising; and its reader errors count bytes, not characters. Both go to PyYAML's loader.
FAST_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
try:
    from yaml.cyaml import CParser as _CParser
except ImportError:  # PyYAML built without libyaml: FAST_LOADER is PyYAML's own
    _CParser = None
_C_NEST_LIMIT = 10_000  # measured safe to 20,000 levels on an 8 MiB stack, in all three nesting styles


def _could_nest_deep(text: str) -> bool:
    # Every level of nesting needs its own indicator ('[', '{', '- ', '? ', 'key:'), so
    # their count bounds the depth; a spec or recipe has a few hundred.
    return sum(text.count(c) for c in "[{-?:") >= _C_NEST_LIMIT


def _pick(loader: type, text: str) -> type:
    if _CParser is not None and issubclass(loader, _CParser) and _could_nest_deep(text):
        return yaml.SafeLoader
    return loader


def _refuse_duplicate_keys(loader: Any, node: yaml.Node, path: str, seen: set[int]) -> None:
    """Walk the composed document; a mapping key given twice is a YamlFileError at its path."""
    if id(node) in seen:  # an alias: already walked (and it may point at itself)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # '<<: *base': explicit keys may override merged ones
                _refuse_duplicate_keys(loader, value_node, path, seen)
                continue
            child = path
            if isinstance(key_node, yaml.ScalarNode):
                key = loader.construct_object(key_node, deep=True)
                child = f"{path}.{key_text(key)}" if path else key_text(key)
                if key in first:
                    raise YamlFileError(
                        f"is given twice (lines {first[key] + 1} and {key_node.start_mark.line + 1}); YAML would silently keep the last",
                        "keep one of them",
                        key_path=child,
                    )
                first[key] = key_node.start_mark.line
            _refuse_duplicate_keys(loader, value_node, child, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(loader, item, f"{path}[{i}]", seen)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document that holds more than MAX_YAML_NODES values once its aliases are
    expanded, nests more than MAX_YAML_DEPTH deep, or has an alias inside its own anchor (an endless value).

    The composed document is a graph in which an alias is its anchor's node again; each
    node's expanded size (itself and its children's) is computed once, so this is linear
    in the file however far the aliases would expand. Iterative: a deep document must not
    exhaust the stack here.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the current node and its ancestors
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 1)]
    aliased = False
    while stack:
        node, finished, depth = stack.pop()
        key = id(node)
        if depth > MAX_YAML_DEPTH and _children(node):
            raise YamlFileError(
                f"is nested too deeply to be a spec or recipe (more than {MAX_YAML_DEPTH} levels, line {node.start_mark.line + 1})",
                "fix the YAML structure",
            )
        if finished:
            open_nodes.discard(key)
            size = 1 + sum(sizes[id(c)] for c in _children(node))
            if size > MAX_YAML_NODES:
                how = " once its aliases (*name) are expanded" if aliased else ""
                raise YamlFileError(
                    f"holds more than {MAX_YAML_NODES:,} values{how} (a spec or recipe holds a few hundred)",
                    "write the values out instead of repeating large blocks with aliases" if aliased else "pass the spec, recipe or kubeconfig itself",
                )
            sizes[key] = size
            continue
        if key in sizes:
            aliased = True
            continue
        if key in open_nodes:
            raise YamlFileError(
                f"has an alias inside its own anchor (line {node.start_mark.line + 1}): its value would never end", "remove the alias or point it elsewhere"
            )
        open_nodes.add(key)
        stack.append((node, True, depth))
        stack.extend((c, False, depth + 1) for c in _children(node))


def _construct(ld: Any, node: yaml.Node) -> Any:
    try:
        return ld.construct_document(node)
    except ValueError as e:  # int() of a number of more than 4,300 digits
        if "digits" not in str(e):
            raise
        raise YamlFileError("holds a number of more than 4,300 digits", "write a number of a sensible size") from None


def load_yaml(source: bytes | str, loader: type = FAST_LOADER) -> Any:
    """One YAML document, safely, from UTF-8 text; a key given twice in a mapping is an error.

    Every failure is a YamlFileError: not UTF-8 text, not YAML (with the line), a duplicate key.
    """
    text = decode_text(source) if isinstance(source, bytes) else source
    loader = _pick(loader, text)
    ld = None
    try:
        ld = loader(text)
        node = ld.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        _refuse_duplicate_keys(ld, node, "", set())
        return _construct(ld, node)
    except yaml.reader.ReaderError as e:
        if loader is not yaml.SafeLoader:  # libyaml counts bytes: let PyYAML's reader say where, in characters
            return load_yaml(text, yaml.SafeLoader)
        line = text[: e.position].count("\n") + 1 if isinstance(e.position, int) else "?"
        raise YamlFileError(
            f"holds the character #x{e.character:04x} on line {line}, which YAML does not allow in a file", "remove it or save the file as plain UTF-8 text"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or "").split())
        raise YamlFileError(f"not valid YAML{where}" + (f" ({problem})" if problem else ""), "fix the YAML syntax") from None
    except RecursionError:
        raise YamlFileError("is nested too deeply to be a spec or recipe", "fix the YAML structure") from None
    finally:
        if ld is not None:
            ld.dispose()


def load_yaml_all(source: bytes | str, loader: type = FAST_LOADER) -> list[Any]:
    """Every non-empty document of a YAML stream, with ``load_yaml``'s rules for each."""
    text = decode_text(source) if isinstance(source, bytes) else source
    out: list[Any] = []
    ld = _pick(loader, text)(text)
    try:
        while ld.check_node():
            node = ld.get_node()
            if node is None:
                continue
            _check_expansion(node)
            _refuse_duplicate_keys(ld, node, "", set())
            doc = _construct(ld, node)
            if doc is not None:
                out.append(doc)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlFileError(f"not valid YAML{where}", "fix the YAML syntax") from None
    except RecursionError:
        raise YamlFileError("is nested too deeply to be a spec or recipe", "fix the YAML structure") from None
    finally:
        ld.dispose()
    return out
