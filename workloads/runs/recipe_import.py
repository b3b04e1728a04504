"""``import-recipe`` below the CLI: a tpu-recipes run script in, a recipe file ``submit`` runs out.

    import_recipe(text, script=..., name=..., out=..., force=...) -> ImportedFile

The script's text (read by the CLI, a regular file of at most 1 MiB) is converted by the pure
importer (``workloads.planning.import_recipe``), with the READMEs beside the script (the
publisher's step time); a name the toolkit ships is refused (the
shipped recipe would always win over the file); the file goes to ``--out`` (a ``<name>.yaml``
or a directory) or the user's recipe directory, written exactly as reported
(``workloads.runs.recipefile``: read back and validated before a byte is written). Nothing
here prints: the CLI reports the path and what was not carried.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.errors import FieldError

if TYPE_CHECKING:
    from workloads.planning.import_recipe import Imported


@dataclass(frozen=True)
class ImportedFile:
    """The recipe imported and where it was written."""

    path: Path
    imported: Imported


def import_recipe(
    text: str, *, script: Path, name: str | None = None, out: Path | None = None, force: bool = False, maxtext_repo: Path | None = None
) -> ImportedFile:
    """Convert ``text`` (the run script at ``script``) and write the recipe file; one line and nothing written on bad input."""
    from workloads.planning.import_recipe import import_recipe as convert
    from workloads.planning.import_recipe import readmes_near, source_path
    from workloads.planning.recipes import is_shipped
    from workloads.runs import recipefile

    source = source_path(script)
    imported = convert(text, name=name, source=source, maxtext_repo=maxtext_repo, readmes=readmes_near(script))
    if is_shipped(imported.name):
        raise FieldError("--name", f"{imported.name!r} is a recipe the toolkit ships (it would always win over this file)", "pass another --name")
    path = recipe_path(out, imported.name)
    # Exactly the recipe reported, read back and validated before it is written (workloads.runs.recipefile).
    recipefile.write(path, imported.recipe, source=source, unmapped=imported.unmapped, force=force)
    return ImportedFile(path, imported)


def recipe_path(out: Path | None, name: str) -> Path:
    """The file: ``--out`` as a file named ``<name>.yaml``, or a directory to put it in (default: the user's recipe directory)."""
    from toolkit.paths import user_recipes_dir

    if out is None:
        return user_recipes_dir() / f"{name}.yaml"
    if out.suffix in (".yaml", ".yml") and not out.is_dir():
        if out.stem != name or out.suffix != ".yaml":
            raise FieldError(
                "--out", f"{out.name} must be named {name}.yaml (recipes are found by file name)", f"pass --out {out.parent / (name + '.yaml')} or a directory"
            )
        return out
    if out.exists() and not out.is_dir():
        raise FieldError("--out", f"{out} is a file that is not a recipe YAML", "pass a directory or NAME.yaml")
    return out / f"{name}.yaml"
