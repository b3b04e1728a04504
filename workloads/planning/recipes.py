"""Recipes by name: where their files are, loading and validating one, listing them all.

A recipe is ``workloads/recipes/<name>.yaml`` (shipped with the toolkit) or a file of the
user's recipe directory (``toolkit.paths.user_recipes_dir``, ``$TGK_RECIPES``); a shipped
name wins. What a file may say is the recipe model (``workloads.planning.recipe_model``);
a file that does not load is one ``RecipeError`` line naming the file, the field and the fix.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolkit.errors import ToolkitError
from toolkit.yamlfile import YamlFileError, load_yaml, read_capped
from workloads.planning.errors import suggest
from workloads.planning.images import MAXTEXT_IMAGE, MAXTEXT_IMAGE_NAME
from workloads.planning.recipe_model import Recipe

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


class RecipeError(ToolkitError):
    """A recipe that does not exist or does not validate."""


def _recipe_files(directory: Path) -> dict[str, Path]:
    return {p.stem: p for p in directory.glob("*.yaml") if not p.name.startswith("_")} if directory.is_dir() else {}


def recipe_files() -> dict[str, Path]:
    """Recipe name -> file: the shipped ones, then the user's (``paths.user_recipes_dir``).
    A shipped name wins, so a user file can never change what a shipped recipe means."""
    from toolkit.paths import user_recipes_dir

    return {**_recipe_files(user_recipes_dir()), **_recipe_files(RECIPES_DIR)}


def recipe_names() -> list[str]:
    return sorted(recipe_files())


def is_shipped(name: str) -> bool:
    """Whether ``name`` is a recipe the toolkit ships (a user file of that name is never read)."""
    return name in _recipe_files(RECIPES_DIR)


def _shown(path: Path) -> str:
    return str(path.relative_to(RECIPES_DIR.parent.parent)) if path.is_relative_to(RECIPES_DIR) else str(path)


def shown_path(name: str) -> str:
    """Recipe ``name``'s file as a fix text names it: ``workloads/recipes/<name>.yaml`` for a shipped
    recipe, the file itself for one of the user's (``$TGK_RECIPES``, where ``import-recipe`` writes)."""
    return _shown(recipe_files().get(name) or RECIPES_DIR / f"{name}.yaml")


def _format(e: ValidationError, name: str, path: Path | None = None) -> str:
    first = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    fix = f" — fix it in {_shown(path or RECIPES_DIR / f'{name}.yaml')}"
    return f"recipe {name}: {where}: {msg}{fix}" if where else f"recipe {name}: {msg}{fix}"


@cache
def load_recipe(name: str) -> Recipe:
    """Load a shipped recipe by name; unknown names list the known ones."""
    files = recipe_files()
    if name not in files:
        names = sorted(files)
        raise RecipeError(f"recipe: no recipe {name!r}{suggest(name, names)} — use one of {', '.join(names)}")
    path = files[name]
    try:
        data = load_yaml(read_capped(path))
    except OSError as e:
        raise RecipeError(f"recipe {name}: cannot read {path}: {e.strerror} — check the file and its permissions") from None
    except YamlFileError as e:
        where = f"{e.key_path}: " if e.key_path else f"{path.name} "
        raise RecipeError(f"recipe {name}: {where}{e.problem} — {e.fix}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {name}: {path.name} is not a YAML mapping — start from workloads/recipes/maxtext-6b.yaml")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(_format(e, name, path)) from None
    if recipe.name != name:
        raise RecipeError(f"recipe {name}: name is {recipe.name!r} but the file is {path.name}; make them agree")
    check_image(recipe)
    return recipe


def check_image(recipe: Recipe) -> None:
    """A recipe that pulls the MaxText image pulls the tag the image pipeline pushes."""
    reg = recipe.image.registry
    if reg is not None and reg.split(":", 1)[0] == MAXTEXT_IMAGE_NAME and reg != MAXTEXT_IMAGE:
        raise RecipeError(
            f"recipe {recipe.name}: image.registry: {reg} is not the image cloudbuild/image-maxtext.yaml pushes"
            f" ({MAXTEXT_IMAGE}) — use {MAXTEXT_IMAGE}, or move MAXTEXT_IMAGE in workloads/planning/images.py"
        )


def all_recipes() -> list[Recipe]:
    return [load_recipe(n) for n in recipe_names()]


def summary(recipe: Recipe) -> dict[str, Any]:
    """What `recipes` lists."""
    out: dict[str, Any] = {
        "name": recipe.name,
        "kind": recipe.kind.value,
        "description": recipe.description,
        "image": recipe.image.ref or f"<registry>/{recipe.image.registry}",
        "steps": recipe.steps,
        "shapes": recipe.shapes,
        "generations": recipe.generations,
        "runtimes": recipe.runtimes,
    }
    if recipe.maxtext:
        m = recipe.maxtext
        out["model_name"] = m.model_name
        out["params_billion"] = round(m.model.params() / 1e9, 2)
        out["per_device_batch"] = {f">={r.min_hbm_gib_per_device:g}GiB": r.per_device_batch_size for r in m.per_device_batch}
        out["parallelism"] = {"ici": m.parallelism.ici, "dcn": m.parallelism.dcn}
    if recipe.published is not None:
        out["published"] = recipe.published.model_dump(exclude_none=True)
    return out


def listable_recipes() -> tuple[list[Recipe], list[str]]:
    """Every recipe that loads, and one line per file that does not (its own error, which names the file and the fix).

    What ``recipes`` lists: one broken file in the user's directory must not hide the others;
    ``submit`` of the broken one still fails with that line (``load_recipe``).
    """
    from toolkit.paths import RECIPES_ENV_VAR, user_recipes_dir

    good: list[Recipe] = []
    broken: list[str] = []
    user = user_recipes_dir()
    if user.exists() and not user.is_dir():
        broken.append(f"recipes: {user} is not a directory, so no recipe of yours is listed — point ${RECIPES_ENV_VAR} at a directory of <name>.yaml files")
    for name in recipe_names():
        try:
            good.append(load_recipe(name))
        except RecipeError as e:
            broken.append(str(e))
    return good, broken
