"""`python -m workloads` imports only the command module the command line names: the table must match the modules."""

from __future__ import annotations

import subprocess
import sys

import workloads.cli as cli


def _registered() -> dict[str, str]:
    cli._register()  # all of them
    found: dict[str, str] = {}
    for info in cli.app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        found[name] = info.callback.__module__.rsplit(".", 1)[1]
    for group in cli.app.registered_groups:
        modules = {c.callback.__module__ for c in group.typer_instance.registered_commands}
        assert len(modules) == 1, f"group {group.name} spans {modules}"
        found[group.name] = modules.pop().rsplit(".", 1)[1]
    return found


def test_table_names_every_command_and_its_module() -> None:
    assert _registered() == cli.COMMAND_MODULE
    assert set(cli.COMMAND_MODULE.values()) == set(cli.MODULES)


def test_one_command_module_loads_alone_and_stays_a_group() -> None:
    # cleanup registers a single command: the app must still dispatch on its name, and the
    # other command modules must not have been imported.
    code = "import sys, workloads.cli as c; c._register(['cleanup', '--help']);print(sorted(m for m in sys.modules if m.startswith('workloads.cli.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['workloads.cli.cleanup']"
    r = subprocess.run([sys.executable, "-m", "workloads", "cleanup", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Usage: python -m workloads cleanup" in r.stdout


def test_unknown_command_still_suggests_from_all_modules() -> None:
    r = subprocess.run([sys.executable, "-m", "workloads", "metrix"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Did you mean 'metrics'?" in r.stderr
