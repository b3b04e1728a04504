"""Every parser of input the toolkit did not write is bounded at its entry (docs/security.md, "Bounded input").

The inventory (each row: the parser, its entry point, what bounds it) is ``PARSERS``; each is
fed deep, long and repeated input by hypothesis and must answer or refuse in one line of its
own error type, never a traceback (RecursionError, MemoryError, a raw ValueError). The code
keeps to it: a JSON, YAML, Python-source or pickle parser called anywhere but in the bounded
readers (``toolkit.jsontext``, ``toolkit.yamlfile``, ``benchmark_configs``) must be listed in
``OWN_INPUT`` with why its input is the toolkit's own.
"""

from __future__ import annotations

import ast
import base64
import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import REPO, cli
from toolkit.errors import ClusterError
from toolkit.jsontext import JsonTextError, load_json
from toolkit.yamlfile import MAX_YAML_DEPTH, YamlFileError, load_yaml

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------ the code calls only the bounded readers

PARSE_CALLS = {
    "json.loads",
    "json.load",
    "yaml.load",
    "yaml.safe_load",
    "yaml.safe_load_all",
    "yaml.load_all",
    "yaml.unsafe_load",
    "yaml.full_load",
    "ast.parse",
    "pickle.load",
    "pickle.loads",
    "marshal.loads",
    "tomllib.load",
    "tomllib.loads",
    "eval",
    "exec",
}
BOUNDED_READERS = {
    "toolkit/jsontext.py": "the one JSON reader: size, UTF-8, depth, numbers",
    "toolkit/yamlfile.py": "the one YAML reader: size, UTF-8, duplicate keys, values after aliases, depth",
    "workloads/planning/benchmark_configs.py": "a MaxText checkout's benchmarks/: files, bytes, parse errors, depth and value sizes",
}
# Where the input is the toolkit's own (or a parser of Google's answers held by its own client).
OWN_INPUT = {
    "infra/cli.py": "the Terraform JSON synth just wrote",
    "infra/service.py": "the Terraform JSON synth just wrote",
    "workloads/maxtext/env.py": "the JSON lines of the toolkit's own driver (workloads/maxtext/driver.py) in the MaxText venv",
    "workloads/maxtext/driver.py": "the cases file the toolkit wrote for it",
    "workloads/ray/entrypoint.py": "the entrypoint word the toolkit encoded, at most workloads.ray.entrypoint.MAX_BYTES",
    "toolkit/google_answers.py": "it is the bounded decoder of Google's answers (UTF-8, depth, the number domain) both Google clients use",
    "workloads/observe/google_http.py": "the request body the toolkit's own client sends (at most 64 KiB), to count a listing's pages",
    "workloads/cli/journal.py": "the repository's own pyproject.toml (the toolkit's version)",
    "toolkit/dirops.py": "the request the toolkit wrote into the helper pod's arguments (its whole program runs in that pod)",
    "workloads/local/": "the local cluster's own daemons: their state files, annotations and requests, all the toolkit's",
}


@cache
def _parse_calls() -> list[tuple[str, int, str]]:
    return list(_scan())


def _scan():
    for pkg in ("toolkit", "infra", "workloads", "modules"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    name = ast.unparse(node.func)
                    if name in PARSE_CALLS:
                        yield rel, node.lineno, name


def test_every_parser_call_is_a_bounded_reader_or_reads_the_toolkit_s_own_input() -> None:
    calls = list(_parse_calls())
    assert calls, "the scan found no parser call at all"
    bad = [f"{rel}:{line} {name}" for rel, line, name in calls if rel not in BOUNDED_READERS and not rel.startswith(tuple(OWN_INPUT))]
    assert not bad, "parse untrusted input through toolkit.jsontext / toolkit.yamlfile (or list the file in OWN_INPUT with why):\n" + "\n".join(bad)


def test_every_listed_place_still_parses_something() -> None:
    places = {rel for rel, _, _ in _parse_calls()}
    for listed in OWN_INPUT:
        assert any(p == listed or p.startswith(listed) for p in places), listed


# ------------------------------------------------------------------ deep, long and repeated input, per parser

DEPTHS = st.integers(1, 5000)


def _nested(kind: str, depth: int) -> str:
    return {"list": "[" * depth + "]" * depth, "map": '{"a":' * depth + "1" + "}" * depth}[kind]


@FAST
@given(DEPTHS, st.sampled_from(["list", "map"]), st.integers(0, 3))
def test_json_deep_long_repeated(depth: int, kind: str, repeat: int) -> None:
    text = "[" + ",".join([_nested(kind, depth)] * (repeat + 1)) + "]"
    try:
        load_json(text, max_bytes=1 << 20)
        assert depth + 1 <= 100
    except JsonTextError as e:
        assert depth + 1 > 100 or "over" in e.problem, e.problem


@FAST
@given(st.sampled_from(["1e400", "-1e999", "NaN", "Infinity", "9" * 5000, '"' + "x" * 2_000_000 + '"']))
def test_json_numbers_and_sizes(text: str) -> None:
    with pytest.raises(JsonTextError):
        load_json(text, max_bytes=1 << 20)


@FAST
@given(DEPTHS, st.sampled_from(["flow", "block"]))
def test_yaml_deep(depth: int, style: str) -> None:
    text = (
        ("a: " + "[" * depth + "]" * depth)
        if style == "flow"
        else "".join(f"{'  ' * i}k{i}:\n" for i in range(min(depth, 2000))) + "  " * min(depth, 2000) + "x: 1\n"
    )
    try:
        load_yaml(text)
        assert min(depth, 2000) <= MAX_YAML_DEPTH + 1
    except YamlFileError as e:
        assert "deep" in e.problem or "nested" in e.problem, e.problem


@FAST
@given(st.integers(1, 60), st.integers(1, 3000), st.sampled_from(["plus", "paren", "double", "dict", "call"]))
def test_benchmark_configs_deep_long_repeated(n: int, width: int, form: str) -> None:
    """What a crafted benchmarks/*.py can hold: a 30 KB chain, nested parentheses, names that double, merged dicts, calls."""
    from workloads.planning.benchmark_configs import Opaque, parse_models

    body = {
        "plus": 'X = "a"' + ' + "a"' * (width * 3),
        "paren": "X = " + "(" * min(width, 5000) + '"a"' + ")" * min(width, 5000),
        "double": 'X0 = "ab"\n' + "\n".join(f"X{i} = X{i - 1} + X{i - 1}" for i in range(1, n + 1)) + f"\nX = X{n}",
        "dict": "D0 = {'k': 'v'}\n" + "\n".join(f"D{i} = {{**D{i - 1}, **D{i - 1}, 'k{i}': 'v'}}" for i in range(1, n + 1)) + f"\nX = D{n}",
        "call": "X = " + "f(" * min(width, 500) + ")" * min(width, 500),
    }[form]
    files = {"benchmarks.evil": body + '\nm = MaxTextModel(model_name="evil", model_type="t", tuning_params={"k": X}, xla_flags="")\n'}
    models = parse_models(files)
    if "evil" in models:
        v = models["evil"].tuning.get("k")
        assert v is None or isinstance(v, Opaque) or len(v) <= 64 * 1024


def test_a_crafted_benchmark_config_is_one_line_through_the_cli(tmp_path: Path) -> None:
    """The reported case: a 30 KB config under --maxtext-repo was a RecursionError traceback."""
    repo = tmp_path / "maxtext"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "benchmark_runner.py").write_text("")
    (repo / "benchmarks" / "evil.py").write_text(
        'X = "a"' + ' + "a"' * 5000 + '\nm = MaxTextModel(model_name="evil", model_type="t", tuning_params={"k": X}, xla_flags="")\n'
    )
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m benchmarks.benchmark_runner xpk --project=p --zone=z --cluster_name=c --device_type=v6e-256 "
        "--num_slices=1 --model_name=evil --base_output_directory=gs://b/x --num_steps=10\n"
    )
    r = cli("workloads", "import-recipe", str(script), "--maxtext-repo", str(repo), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_a_checkout_with_many_files_is_walked_within_its_bound(tmp_path: Path) -> None:
    from workloads.planning import benchmark_configs as bc

    root = tmp_path / "maxtext" / "benchmarks"
    root.mkdir(parents=True)
    (root / "benchmark_runner.py").write_text("")
    for i in range(bc.MAX_FILES + 50):
        (root / f"m{i:04d}.py").write_text("X = 1\n")
    (root / "loop").symlink_to(root)  # a link back into the tree is not followed
    files = bc.read_checkout(tmp_path / "maxtext")
    assert len(files) == bc.MAX_FILES


@FAST
@given(
    st.one_of(
        st.none(),
        st.text(max_size=50),
        st.dictionaries(st.sampled_from(["token", "ca.crt", "x"]), st.one_of(st.text(max_size=40), st.integers(), st.none(), st.lists(st.text()))),
    )
)
def test_a_secret_s_data_decodes_or_is_one_cluster_error(data) -> None:
    from workloads.cluster import secret_data

    obj = {"data": data}
    d = secret_data.data_of(obj)
    if d is None:
        return
    for key, text in (("token", True), ("ca.crt", False)):
        try:
            got = secret_data.value(d, key, "kueue-system/x", text=text)
            assert isinstance(got, str if text else bytes)
        except ClusterError as e:
            assert e.exit_code == 3 and "\n" not in str(e)


def test_a_secret_value_past_its_cap_is_refused() -> None:
    from workloads.cluster import secret_data

    huge = base64.b64encode(b"x" * (secret_data.MAX_VALUE_BYTES + 1)).decode()
    with pytest.raises(ClusterError):
        secret_data.value({"token": huge}, "token", "ns/s", text=True)


def test_a_fleet_of_thousands_of_aliased_workers_is_one_line_before_any_spec_is_read(tmp_path: Path) -> None:
    lines = ["name: big", "manager: {cluster: big-mgr, region: us-central1}", "workers:", "  - &w {name: west, spec: nowhere.yaml}"] + ["  - *w"] * 30_000
    f = tmp_path / "fleet.yaml"
    f.write_text("\n".join(lines) + "\n")
    r = cli("workloads", "queues", "apply", "--fleet", str(f), "--dry-run")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "at most 20" in r.stderr, r.stderr
    assert "does not exist" not in r.stderr and "no such" not in r.stderr.lower()  # refused on the count, before a worker's spec was looked for


@FAST
@given(st.integers(1, 3000), st.sampled_from(["[", "{"]))
def test_an_api_server_answer_nested_deep_is_one_rejected_line(depth: int, opener: str) -> None:
    from toolkit.errors import Rejected
    from workloads.cluster.response import Response

    body = (opener * depth + ("]" if opener == "[" else "") * depth).encode() if opener == "[" else ('{"a":' * depth + "1" + "}" * depth).encode()
    try:
        obj = Response(200, body).json()
        assert isinstance(obj, dict)
    except Rejected as e:
        assert "\n" not in str(e)


@FAST
@given(st.integers(1, 3000))
def test_a_credential_plugin_answer_nested_deep_is_one_line(depth: int) -> None:
    from workloads.cluster import credentials

    with pytest.raises(ClusterError):
        credentials._credential('{"kind": "ExecCredential", "status": ' + "[" * depth + "]" * depth + "}", "", Path("kc"), "plugin")


@FAST
@given(st.integers(1, 400), st.integers(1, 200))
def test_a_readme_of_long_and_repeated_lines_is_read_without_a_traceback(repeat: int, width: int) -> None:
    from workloads.planning import step_figures

    row = "| " + " | ".join(["x" * width] * 5) + " |\n"
    text = "| model | chips | step |\n|---|---|---|\n" + row * repeat + "completed step: 1, seconds: 2.0, TFLOP/s/device: 3.0, " * repeat + "\n"
    readme = step_figures.Readme("README.md", text[: step_figures.MAX_README_CHARS], True)
    facts = step_figures.RecipeFacts("llama3-8b", ("training", "v6e"), 256, 8192, "", None)
    figure = step_figures.published_figure([readme], facts, date="2026-11-27")
    assert figure is None or figure["step_seconds"] > 0


def test_a_huge_readme_is_read_only_to_its_cap(tmp_path: Path) -> None:
    from workloads.planning import step_figures
    from workloads.planning.import_recipe import readmes_near

    d = tmp_path / "training" / "v6e" / "llama"
    d.mkdir(parents=True)
    (d / "README.md").write_bytes(b"x" * (6 * step_figures.MAX_README_CHARS))
    (d / "run.sh").write_text("")
    (readme,) = readmes_near(d / "run.sh")
    assert len(readme.text) == step_figures.MAX_README_CHARS


@FAST
@given(st.lists(st.sampled_from(['{"step": 1, "perf/step_time_seconds": 1.0}', "[" * 2000 + "]" * 2000, '{"step": ' + "9" * 5000 + "}", "NaN"]), max_size=20))
def test_a_metrics_file_line_deep_or_long_is_skipped_or_one_line(lines: list[str]) -> None:
    from workloads.observe.metrics import MetricsError, parse_metrics_file

    try:
        parse_metrics_file("\n".join(lines))
    except MetricsError as e:
        assert "\n" not in str(e)


def test_an_owned_manifest_nested_deep_is_one_line(tmp_path: Path) -> None:
    from toolkit import owned
    from toolkit.errors import FieldError

    (tmp_path / owned.MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FieldError) as e:
        owned.check_root(tmp_path, "--out")
        owned.check_update(tmp_path, {"x": b""}, "--out")
    assert "\n" not in str(e.value)


def test_json_stays_json_for_the_readers_of_well_formed_answers() -> None:
    doc = {"items": [{"metadata": {"name": "x"}, "n": 1, "f": 1.5, "s": "é"}]}
    assert load_json(json.dumps(doc).encode(), max_bytes=1 << 20) == doc
