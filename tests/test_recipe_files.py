"""What is written is what was checked: import-recipe's file, and `recipes` over the user's files.

Before: an unmapped flag value holding a newline went into the recipe's comment header as it
was, so the file on disk gained keys (`runtimes`, `env`, `fatal_exit_codes`) that `-o json`
never showed; and one broken file in the user's recipe directory made `recipes` fail for all.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.clikit import run
from workloads.planning import import_recipe as ir
from workloads.planning import recipes
from workloads.render import yamlio
from workloads.runs import recipefile

LINE = (
    "xpk workload create --cluster c --workload w --tpu-type=v5litepod-16 --num-slices=1 {flag} "
    '--command "python3 MaxText/train.py MaxText/configs/base.yml model_name=default base_emb_dim=4096 base_num_query_heads=16 '
    'base_num_kv_heads=16 head_dim=256 base_num_decoder_layers=32 base_mlp_dim=16384 vocab_size=32768 per_device_batch_size=4 steps=10"'
)
# The attack: a value that closes the comment and adds keys of its own, then comments out the rest of the line.
INJECTED = '--project="p\nruntimes: [ray]\nfatal_exit_codes: [3]\nenv: {EVIL: x}\n#"'


def _cli(*argv: str) -> tuple[int, str, str]:
    from workloads.cli import _register, app

    _register()
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(app, list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture()
def user_recipes(tmp_path: Path, monkeypatch) -> Path:
    d = tmp_path / "recipes"
    monkeypatch.setenv("TGK_RECIPES", str(d))
    recipes.load_recipe.cache_clear()
    yield d
    recipes.load_recipe.cache_clear()


def test_a_newline_in_an_unmapped_value_cannot_add_keys(tmp_path: Path, user_recipes: Path) -> None:
    script = tmp_path / "run_recipe.sh"
    script.write_text(LINE.format(flag=INJECTED))
    rc, out, err = _cli("import-recipe", str(script), "--name", "evil", "-o", "json")
    assert rc == 0, err
    reported = json.loads(out)
    path = Path(reported["path"])
    on_disk = yamlio.load(path.read_bytes())
    assert on_disk == reported["recipe"]  # exactly what -o json showed
    assert "runtimes" not in on_disk and "env" not in on_disk and "fatal_exit_codes" not in on_disk
    r = recipes.load_recipe("evil")
    assert r.runtimes == ["jobset", "job"] and r.env == {} and r.fatal_exit_codes == []
    head, _ = recipefile.split(path.read_text())
    assert any("--project=p\\nruntimes: [ray]" in line for line in head)  # the note is kept, escaped
    assert not list(path.parent.glob(".*.tmp"))  # written through a temporary file, moved into place


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notes=st.lists(st.text(max_size=40), max_size=4), source=st.text(min_size=1, max_size=30))
def test_any_note_text_reads_back_as_exactly_the_recipe(notes: list[str], source: str) -> None:
    """Whatever the comments hold (YAML's own line breaks \\x85, \\u2028, \\u2029 included), the file is the recipe."""
    recipe = ir.import_recipe(LINE.format(flag=""), name="prop").recipe
    text = recipefile.file_text(recipe, source, notes)
    recipefile.check_round_trip(text, recipe)  # raises if it would read back differently
    assert yamlio.load(text.encode()) == recipe
    head, body = recipefile.split(text)
    assert len(head) == 2 + len(notes) and body == yamlio.dump(recipe)


def test_force_replaces_only_an_unchanged_imported_file(tmp_path: Path, user_recipes: Path) -> None:
    script = tmp_path / "run_recipe.sh"
    script.write_text(LINE.format(flag=""))
    assert _cli("import-recipe", str(script), "--name", "mine")[0] == 0
    path = user_recipes / "mine.yaml"
    assert _cli("import-recipe", str(script), "--name", "mine", "--force")[0] == 0  # its own, unchanged: replaced
    path.write_text(path.read_text().replace("steps: 10", "steps: 20"))  # edited by hand
    rc, out, err = _cli("import-recipe", str(script), "--name", "mine", "--force")
    assert rc == 2 and err.startswith("error: --force: ") and "was changed since import-recipe wrote it" in err and err.count("\n") == 1
    assert "steps: 20" in path.read_text()
    path.write_text("name: mine\n")  # hand-written, no marker
    rc, _, err = _cli("import-recipe", str(script), "--name", "mine", "--force")
    assert rc == 2 and "was not written by import-recipe" in err and path.read_text() == "name: mine\n"
    path.unlink()
    target = tmp_path / "elsewhere.yaml"
    target.write_text("keep")
    path.symlink_to(target)
    rc, _, err = _cli("import-recipe", str(script), "--name", "mine", "--force")
    assert rc == 2 and "is a symlink" in err and target.read_text() == "keep" and path.is_symlink()


def test_a_recipes_dir_that_is_a_file_is_one_line(tmp_path: Path, monkeypatch) -> None:
    f = tmp_path / "recipes"
    f.write_text("not a dir")
    monkeypatch.setenv("TGK_RECIPES", str(f))
    script = tmp_path / "run_recipe.sh"
    script.write_text(LINE.format(flag=""))
    rc, out, err = _cli("import-recipe", str(script), "--name", "xx")
    assert rc == 2 and err.startswith("error: --out: ") and "is a file, not a directory" in err and f.read_text() == "not a dir"
    rc, out, err = _cli("recipes")
    assert rc == 0 and "maxtext-6b" in out and err.startswith("warning: recipes: ") and "is not a directory" in err


def test_one_broken_recipe_does_not_hide_the_others(tmp_path: Path, user_recipes: Path) -> None:
    script = tmp_path / "run_recipe.sh"
    script.write_text(LINE.format(flag=""))
    assert _cli("import-recipe", str(script), "--name", "good-one")[0] == 0
    (user_recipes / "broken.yaml").write_text("name: broken\nkind: [\n")
    (user_recipes / "wrong.yaml").write_text("name: wrong\ndescription: x\nkind: maxtext\nbogus: 1\n")
    rc, out, err = _cli("recipes", "-o", "json")
    assert rc == 0, err
    names = [r["name"] for r in json.loads(out)]
    assert "good-one" in names and "maxtext-6b" in names and "broken" not in names
    warnings = err.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: recipe ") for w in warnings)
    assert any("broken" in w and "broken.yaml" in w for w in warnings) and any("wrong" in w and "wrong.yaml" in w for w in warnings)
    rc, out, err = _cli("submit", "broken", "--dry-run")
    assert rc == 2 and err.startswith("error: recipe broken: ") and err.count("\n") == 1
