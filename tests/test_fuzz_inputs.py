"""Bad input through the CLIs, in-process: property-based fuzzing of the spec loader and of
``--set``, and the output paths that cannot be written.

Every input either works (exit 0) or is refused with exit 2, exactly one stderr line
``error: <field>: <problem> — <fix>``, no traceback, and nothing written. The CLIs run
in this process through ``toolkit.clikit.run`` (a subprocess per example is too slow);
an exception that is not a toolkit error escapes ``run`` and fails the test.
"""

from __future__ import annotations

import copy
import gzip
import io
import os
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import EXAMPLES, REPO, cli_app
from toolkit.clikit import run
from workloads.planning.maxtext_keys import MODEL_KEYS

infra_app, workloads_app = cli_app("infra"), cli_app("workloads")

DEFAULT = EXAMPLES / "default.yaml"
BASE = yaml.safe_load(DEFAULT.read_text())
TINY_LOG = REPO / "tests" / "data" / "maxtext" / "tiny_cpu.log"
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("TGK_DEBUG", raising=False)
    monkeypatch.delenv("TGK_SPEC", raising=False)


def cli(app, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(app, list(argv))
    return rc, out.getvalue(), err.getvalue()


def assert_clean(rc: int, stdout: str, stderr: str) -> None:
    """Exit 0, or exit 2 with one 'error: ... — ...' line and nothing on stdout."""
    assert "Traceback" not in stderr + stdout
    assert rc in (0, 2), (rc, stderr)
    if rc == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("error: ") and " — " in lines[0], lines[0]
        assert stdout == "", stdout


@pytest.fixture(scope="module")
def scratch_root():
    root = Path(tempfile.mkdtemp(prefix="tgk-fuzz-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def scratch(root: Path) -> Path:
    """A fresh directory per example (hypothesis cannot use function-scoped tmp_path)."""
    for old in root.iterdir():
        shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(dir=root))


# ------------------------------------------------------------------ the spec loader


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


PATHS = list(_paths(BASE))[1:]
NEAR_MISSES = [
    "",
    "spot",
    "flex-start",
    "reservation",
    "v6e",
    "v5e",
    "v5litepod-16",
    "v6e-16",
    "4x4",
    "2x2x2",
    "-1",
    "0",
    "1e9",
    "research",
    "x" * 64,
    "n" * 60,
    "10.0.0.0/8",
    "us-east5-b",
    "null",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(NEAR_MISSES),
)
VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=3), max_leaves=5)


def _parent(data, path):
    node = data
    for p in path[:-1]:
        node = node[p]
    return node


@st.composite
def spec_bytes(draw) -> tuple[bytes, bool]:
    """A mutated default spec as bytes, and whether it is certainly bad."""
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(PATHS))
        try:
            parent = _parent(data, path)
            op = draw(st.sampled_from(["set", "set", "delete", "add"]))
            if op == "set":
                parent[path[-1]] = draw(VALUES)
            elif op == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=12))] = draw(VALUES)
            else:
                parent.append(draw(VALUES))
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # an earlier mutation changed the shape under this path
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()), width=10**6)
    lines = text.splitlines(keepends=True)
    raw_op = draw(st.sampled_from(["none", "none", "duplicate", "truncate", "inject", "gzip", "utf16", "binary"]))
    if raw_op == "duplicate" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
        text = "".join(lines)
    elif raw_op == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif raw_op == "inject":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(min_size=1, max_size=8)) + text[at:]
    raw = text.encode("utf-8", errors="surrogatepass")
    if raw_op == "gzip":
        return gzip.compress(raw), True
    if raw_op == "utf16":
        return text.encode("utf-16", errors="surrogatepass"), True
    if raw_op == "binary":
        return draw(st.binary(min_size=1, max_size=200)) + b"\x00", True
    return raw, False


@FUZZ
@given(case=spec_bytes(), recipe=st.sampled_from(["hello-tpu", "maxtext-6b"]))
def test_fuzzed_specs_are_accepted_or_refused_in_one_line(scratch_root, case, recipe) -> None:
    raw, certainly_bad = case
    d = scratch(scratch_root)
    spec = d / "spec.yaml"
    spec.write_bytes(raw)
    rc, out, err = cli(infra_app, "spec", "--spec", str(spec))
    assert_clean(rc, out, err)
    if certainly_bad:
        assert rc == 2, out
    # The same spec through planning and rendering: refused ones write nothing.
    tree = d / "tree"
    rc2, out2, err2 = cli(workloads_app, "render", recipe, "--spec", str(spec), "--out", str(tree), "--name", "fz")
    assert_clean(rc2, out2, err2)
    if rc == 2:
        assert rc2 == 2 and err2 == err, (err, err2)
    if rc2 == 2:
        assert not tree.exists()
    assert sorted(p.name for p in d.iterdir()) == (["spec.yaml", "tree"] if rc2 == 0 else ["spec.yaml"])


# ------------------------------------------------------------------------ --set

READ_BY_PLANNER = sorted(MODEL_KEYS | {"max_target_length", "per_device_batch_size", "override_model_config", "base_output_directory"})
OTHER_KEYS = [
    "ici_fsdp_parallelism",
    "ici_tensor_parallelism",
    "ici_sequence_parallelism",
    "dcn_data_parallelism",
    "remat_policy",
    "dataset_type",
    "steps",
    "run_name",
    "num_slices",
    "ici_bogus_parallelism",
    "base_emb_dims",
]
SET_KEYS = st.one_of(st.sampled_from(READ_BY_PLANNER + OTHER_KEYS), st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True), st.text(max_size=10))
SET_VALUES = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        [
            "-1",
            "0",
            "1",
            "2",
            "16",
            "5000",
            "true",
            "false",
            "maybe",
            "gs://b/x",
            "gs://",
            "/tmp/x",
            "1_0",
            " 4",
            "٤",
            "1e400",
            "nan",
            "inf",
            "4096",
            "0x10",
            "016",
            "",
        ]
    ),
    st.text(max_size=20),
)
SET_ITEMS = st.one_of(st.builds(lambda k, v: f"{k}={v}", SET_KEYS, SET_VALUES), st.text(max_size=20))


@FUZZ
@given(items=st.lists(SET_ITEMS.filter(lambda s: "\x00" not in s), min_size=1, max_size=4), recipe=st.sampled_from(["maxtext-6b", "gpt3-6b", "hello-tpu"]))
def test_fuzzed_sets_are_accepted_or_refused_in_one_line(scratch_root, items, recipe) -> None:
    d = scratch(scratch_root)
    tree = d / "tree"
    rc, out, err = cli(workloads_app, "render", recipe, "--out", str(tree), "--name", "fz", *(f"--set={i}" for i in items))
    assert_clean(rc, out, err)
    if rc == 2:
        assert not tree.exists() and list(d.iterdir()) == []
        # a refused --set names the flag (or the recipe field a sharding check blames)
        assert err.startswith(("error: --set: ", "error: recipe ", "error: --pool: ")), err
    else:
        assert tree.is_dir()


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(READ_BY_PLANNER), value=SET_VALUES)
def test_planner_keys_outside_their_domain_are_refused(key, value) -> None:
    """The keys the planner reads: accepted values give a plan whose sizing is sane."""
    from infra.spec import load_spec
    from workloads.planning.planner import Overrides, PlanError, plan_run

    sets = [f"{key}={value}"]
    if key in MODEL_KEYS and key != "base_emb_dim":
        sets.append("override_model_config=true")
    try:
        plan = plan_run("maxtext-6b", load_spec(DEFAULT), Overrides(sets=tuple(sets)))
    except PlanError as e:
        assert e.field == "--set" or e.field.startswith("recipe "), str(e)
        assert "\n" not in str(e)
        return
    sizing = plan.program.sizing
    assert sizing.per_device_batch_size > 0 and sizing.global_batch_size > 0
    assert min(sizing.hbm.state_bytes, sizing.hbm.activation_bytes, sizing.hbm.logits_bytes) >= 0
    if key in MODEL_KEYS or key == "max_target_length":
        assert int(value) >= 1 and value == str(int(value))


# --------------------------------------------------------- output paths that cannot be written

UNWRITABLE = ["/proc/tgk-fuzz/out", "/etc/hostname/out"]  # /proc refuses new dirs even to root; a file as a parent


def _commands(out: str) -> list[tuple[Any, list[str], str]]:
    return [
        (workloads_app, ["render", "maxtext-6b", "--out", out], "--out"),
        (workloads_app, ["report", str(TINY_LOG), "--out", out], "--out"),
        (workloads_app, ["run-local", "maxtext-6b", "--tiny", "--out", out], "--out"),
        (workloads_app, ["preflight", "maxtext-6b", "--compile", "--keep-logs", out], "--keep-logs"),
        (workloads_app, ["local", "up", "--no-build", "--state-dir", out], "--state-dir"),
        (infra_app, ["synth", "--out", out], "--out"),
        (infra_app, ["plan", "--dry-run", "--out", out], "--out"),
        (infra_app, ["destroy", "--dry-run", "--out", out], "--out"),
    ]


@pytest.mark.parametrize("out", UNWRITABLE)
@pytest.mark.parametrize("index", range(len(_commands("x"))))
def test_unwritable_output_paths_are_refused(out: str, index: int, monkeypatch) -> None:
    top = Path("/", Path(out).parts[1])
    if not top.exists():
        pytest.skip(f"{top} does not exist here")
    monkeypatch.setenv("TGK_MAXTEXT_VENV", "/nonexistent-maxtext-venv")  # a pass would exit 4 here, not 2
    app, argv, flag = _commands(out)[index]
    rc, stdout, stderr = cli(app, *argv)
    assert rc == 2, stderr
    assert_clean(rc, stdout, stderr)
    assert stderr.startswith(f"error: {flag}: "), stderr


@pytest.mark.parametrize("index", range(len(_commands("x"))))
def test_output_path_that_is_a_file_is_refused(index: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_MAXTEXT_VENV", "/nonexistent-maxtext-venv")
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "f"
    f.write_text("x")
    app, argv, flag = _commands(str(f))[index]
    rc, stdout, stderr = cli(app, *argv)
    assert rc == 2 and stderr.startswith(f"error: {flag}: "), stderr
    assert_clean(rc, stdout, stderr)
    assert [p.name for p in tmp_path.iterdir()] == ["f"] and f.read_text() == "x"


def test_out_dir_check_writes_nothing(tmp_path: Path) -> None:
    from workloads.cli import check_out_dir

    check_out_dir(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []
    os.chmod(tmp_path, 0o500)
    try:
        if os.geteuid() != 0:  # root writes anyway
            with pytest.raises(Exception, match="--out"):
                check_out_dir(tmp_path / "a")
    finally:
        os.chmod(tmp_path, 0o700)
