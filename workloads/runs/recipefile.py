"""Writing an imported recipe: the file on disk is exactly the recipe that was validated and reported.

``import-recipe`` reports what it did not carry; those notes go into the file's comment
header, where a line break inside a note would end the comment and turn the rest into
YAML keys (``runtimes``, ``env``, ...) that ``-o json`` never showed. So:

- every comment line is escaped (anything ``str.isprintable`` refuses, YAML's line breaks
  ``\\x85``, ``\\u2028``, ``\\u2029`` included, is written as its Python escape);
- the text is loaded back with the reader ``submit`` uses and must equal the recipe
  reported, and validate, before a byte is written (else an internal error, nothing written);
- it is written to a temporary file in the directory and moved into place in one rename;
- the header carries the body's digest (``MARKER``): ``--force`` replaces only a file
  ``import-recipe`` wrote and nobody changed since; a hand-written recipe, an edited one,
  or a symlink in its place is refused with one line.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from toolkit.errors import FieldError, ToolkitError
from toolkit.owned import write_atomic

MARKER = "# tgk-import: "  # + the digest of the YAML body below the header


def comment_text(text: str) -> str:
    """``text`` as one comment line's content: nothing in it can end the line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def file_text(recipe: dict[str, Any], source: str, unmapped: list[str]) -> str:
    """The recipe file: an escaped comment header, the digest line, then the recipe as YAML."""
    from workloads.render import yamlio

    body = yamlio.dump(recipe)
    head = [f"# Imported by `python -m workloads import-recipe` from {comment_text(source)}."]
    head += [f"# not carried: {comment_text(u)}" for u in unmapped]
    head.append(f"{MARKER}{_digest(body)} (import-recipe --force replaces this file only while the text below is unchanged)")
    return "\n".join(head) + "\n" + body


def split(text: str) -> tuple[list[str], str]:
    """(the leading comment lines, the rest)."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return [ln.rstrip("\n") for ln in lines[:n]], "".join(lines[n:])


def check_round_trip(text: str, recipe: dict[str, Any]) -> None:
    """What ``submit`` would read from ``text`` is ``recipe``, and it validates; an internal error otherwise."""
    from workloads.planning.recipe_model import Recipe
    from workloads.render import yamlio

    try:
        loaded = yamlio.load(text.encode("utf-8"))
        Recipe.model_validate(loaded)
    except Exception as e:  # a YAML or validation error: the writer, not the user, is wrong
        raise ToolkitError(f"internal: the imported recipe does not read back ({str(e).splitlines()[0][:200]}); nothing written — please report this") from None
    if loaded != recipe:
        extra = sorted(set(loaded) ^ set(recipe)) if isinstance(loaded, dict) else []
        raise ToolkitError(
            f"internal: the recipe file would read back differently ({', '.join(map(str, extra)) or 'values differ'}); nothing written — please report this"
        )


def written_by_import(path: Path) -> str | None:
    """Why ``path`` may not be replaced by ``--force`` (None: import-recipe wrote it and it is unchanged)."""
    if path.is_symlink():
        return "is a symlink"
    if not path.is_file():
        return "is not a regular file"
    try:
        text = path.read_bytes()[: 8 * 1024 * 1024].decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return f"cannot be read ({getattr(e, 'strerror', None) or e.__class__.__name__})"
    head, body = split(text)
    marks = [ln[len(MARKER) :].split()[0] for ln in head if ln.startswith(MARKER) and len(ln) > len(MARKER)]
    if not marks:
        return "was not written by import-recipe"
    if marks[-1] != _digest(body):
        return "was changed since import-recipe wrote it"
    return None


def write(path: Path, recipe: dict[str, Any], *, source: str, unmapped: list[str], force: bool) -> Path:
    """Write the recipe file (see the module docstring); one line and nothing written when it may not be."""
    text = file_text(recipe, source, unmapped)
    check_round_trip(text, recipe)
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise FieldError("--out", f"{parent} is a file, not a directory", "pass a directory for recipes (or point $TGK_RECIPES at one)")
    exists = os.path.lexists(path)
    if exists and not force:
        raise FieldError("--out", f"{path} exists", "pass --force to replace it, or another --name/--out")
    if exists:
        why = written_by_import(path)
        if why is not None:
            raise FieldError("--force", f"{path} {why}, so it is not replaced", "move it away, or pass another --name/--out")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text, create=not exists)  # a new file is never put over one that appeared meanwhile
    except FileExistsError:
        raise FieldError("--out", f"{path} exists", "pass --force to replace it, or another --name/--out") from None
    except OSError as e:
        raise FieldError("--out", f"cannot write into {parent}: {e.strerror or e}", "pass a directory you can write to") from None
    return path
