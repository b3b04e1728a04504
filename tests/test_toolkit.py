"""toolkit: the external-program runner, the cache directory, and names defined once."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO
from toolkit import names, paths, tools
from toolkit.errors import ExternalToolError, ToolkitError


def test_run_captures_and_trims_the_failure_line() -> None:
    done = tools.run(["bash", "-c", "echo out; printf '╷\\n│ Error: bad thing\\n╵\\n\\n' >&2; exit 3"])
    assert (done.returncode, done.ok, done.stdout) == (3, False, "out\n")
    err = done.failure("terraform plan")
    assert isinstance(err, ExternalToolError) and str(err) == "`terraform plan` failed with exit code 3: Error: bad thing"


def test_run_to_log_files_measures_the_child(tmp_path: Path) -> None:
    done = tools.run(["python3", "-c", "b = bytearray(64 * 2**20); print('x')"], log_dir=tmp_path, log_name="job")
    assert done.ok and (tmp_path / "job.stdout").read_text() == "x\n" and done.stdout_text() == "x\n"
    assert done.peak_rss_bytes > 64 * 2**20


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    done = tools.run(["bash", "-c", f"(sleep 3; touch {marker}) & sleep 30"], timeout=0.5)
    assert done.timed_out and not done.ok and "timed out" in str(done.failure())
    subprocess.run(["sleep", "3.5"], check=True)
    assert not marker.exists()  # the grandchild went with the group


def test_missing_program_and_check() -> None:
    with pytest.raises(ExternalToolError, match="cannot run 'no-such-tool-xyz'"):
        tools.run(["no-such-tool-xyz"])
    with pytest.raises(ExternalToolError, match="^`false` failed with exit code 1$"):
        tools.run(["false"], check=True, what="false")


def test_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TGK_CACHE", str(tmp_path))
    assert paths.cache_dir() == tmp_path
    monkeypatch.delenv("TGK_CACHE")
    assert paths.cache_dir() == Path.home() / ".cache" / "tpu-gke-toolkit"


def test_cache_default_is_spelled_once_in_python() -> None:
    spelled = [
        str(p.relative_to(REPO))
        for p in REPO.rglob("*.py")
        if "tests" not in p.parts and p.name != "paths.py" and 'tpu-gke-toolkit"' in p.read_text() and ".cache" in p.read_text()
    ]
    assert spelled == []


def test_gke_and_toolkit_names_are_defined_once() -> None:
    """Every label/API string in toolkit.names appears in no other toolkit module as a literal."""
    literals = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and ("/" in v or "." in v)}
    offenders = []
    for p in [*REPO.joinpath("workloads").rglob("*.py"), *REPO.joinpath("infra").rglob("*.py"), *REPO.joinpath("modules").rglob("*.py")]:
        text = p.read_text()
        for lit in literals:
            if re.search(r"[\"']" + re.escape(lit) + r"[\"']", text):
                offenders.append(f"{p.relative_to(REPO)}: {lit}")
    assert offenders == []


def test_yaml_streams_refuse_a_key_given_twice_in_any_document() -> None:
    from toolkit.yamlfile import YamlFileError
    from workloads.render import yamlio

    assert yamlio.load_all("---\na: 1\n---\n---\nb: [1, 2]\n") == [{"a": 1}, {"b": [1, 2]}]
    with pytest.raises(YamlFileError, match=r"given twice \(lines 4 and 5\)"):
        yamlio.load_all("---\na: 1\n---\nkind: Job\nkind: JobSet\n")
    with pytest.raises(YamlFileError):
        yamlio.load_all(b"\xff\xfe a: 1")


# libyaml (toolkit.yamlfile.FAST_LOADER) nests by C recursion and counts bytes in its reader
# errors; these inputs must still end as one YamlFileError, never as a crashed process.
_DEEP = {
    "flow": lambda n: "a: " + "[" * n + "]" * n,
    "sequence": lambda n: "- " * n + "x",
    "mapping": lambda n: "".join(" " * i + "k:\n" for i in range(n)) + " " * n + "v",
}


@pytest.mark.parametrize("style", sorted(_DEEP))
def test_yaml_nested_past_libyaml_recursion_is_an_error_not_a_crash(style: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    # 40,000 levels crash libyaml's composer (measured); the mapping style would need GiBs of
    # indentation at that depth, so it stays at 5,000 (still past Python's recursion limit).
    depth = 5_000 if style == "mapping" else 40_000
    path = tmp_path / "deep.yaml"
    path.write_text(_DEEP[style](depth))
    code = (
        "import sys; from toolkit.yamlfile import load_yaml, load_yaml_all, YamlFileError\n"
        "for f in (load_yaml, load_yaml_all):\n"
        "    try: f(open(sys.argv[1], 'rb').read()); print('accepted')\n"
        "    except YamlFileError as e: print(e.problem)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-500:]}"
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("is nested too deeply to be a spec or recipe") for line in lines), lines


def test_yaml_reader_errors_name_the_line_in_characters() -> None:
    from toolkit.yamlfile import YamlFileError, load_yaml

    text = "note: " + "é" * 400 + "\n" * 3 + "bad: a\x07b\n"  # 800 bytes of 'é' before it, all on line 1
    with pytest.raises(YamlFileError) as ei:
        load_yaml(text.encode())
    assert "#x0007 on line 4" in ei.value.problem


def test_libyaml_and_pyyaml_read_the_shipped_files_alike() -> None:
    import yaml

    from toolkit.yamlfile import FAST_LOADER, load_yaml

    assert FAST_LOADER is not yaml.SafeLoader, "PyYAML without libyaml: every command reads YAML ~10x slower"
    files = [*REPO.joinpath("workloads", "recipes").glob("*.yaml"), REPO / "infra" / "prices.yaml", *REPO.joinpath("examples").glob("*.yaml")]
    assert len(files) > 10
    for f in files:
        raw = f.read_bytes()
        assert load_yaml(raw) == load_yaml(raw, yaml.SafeLoader), f


# ------------------------------------------------------------------ a cache script's path


class _Broken(ToolkitError):
    exit_code = 4


def _script(tmp_path, body: str):
    p = tmp_path / "setup-thing.sh"
    p.write_text(body)
    return p


def test_a_cache_scripts_path_is_its_last_stdout_line(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    s = _script(tmp_path, f'echo "building" >&2; echo "not this"; echo "{venv}"; [ "$1" = --key ] || exit 9\n')
    assert tools.script_path(s, "--key", what="cannot set up the thing", holds="bin/python") == venv


@pytest.mark.parametrize(
    "body, args, terminal, line",
    [
        (
            "echo one >&2; echo two >&2; echo >&2; echo three >&2; echo four >&2; exit 3",
            (),
            False,
            "scripts/setup-thing.sh failed (exit 3): two | three | four",
        ),
        ("echo compiling >&2; exit 3", ("--key",), True, "scripts/setup-thing.sh --key failed (exit 3); see its output above"),
        ("exit 0", (), False, "scripts/setup-thing.sh printed no path"),
        ("echo /nonexistent/venv", (), False, "scripts/setup-thing.sh printed /nonexistent/venv but it holds no bin/python"),
    ],
)
def test_each_way_a_cache_script_fails_is_one_line_naming_it(tmp_path, body, args, terminal, line):
    s = _script(tmp_path, body + "\n")
    with pytest.raises(_Broken) as e:
        tools.script_path(s, *args, what="cannot set up the thing", error=_Broken, stderr_to_terminal=terminal, holds="bin/python")
    assert str(e.value) == f"cannot set up the thing: {line}" and e.value.exit_code == 4


def test_a_cache_script_that_runs_too_long_is_stopped(tmp_path):
    s = _script(tmp_path, "sleep 30\n")
    with pytest.raises(ExternalToolError, match=r"^cannot build the thing: scripts/setup-thing.sh timed out after \d+ s$"):
        tools.script_path(s, what="cannot build the thing", timeout=0.5)
