"""Run values reach every runtime's program intact and inert: a value never runs as a command.

Each runtime's rendered object is taken through what stands between it and the program,
with real shells (tests/support/shell_layers.py): the JobSet's and the Job's container through the
kubelet's ``$(NAME)`` expansion and the exit guard's ``/bin/sh``; the RayJob's entrypoint
through KubeRay's submitter script under ``/bin/bash -ce``, ``ray job submit``'s
``list2cmdline`` and the job supervisor's ``shell=True``. A stand-in ``python3`` records the
argv it gets (for the RayJob, what the JaxTrainer entrypoint's real ``parse_args`` decodes),
and it must equal the plan's arguments, with every ``--set`` value in it as given, while no
injected command leaves its marker file. tests/integration/test_injection_real.py does the
same with KubeRay's and the kubelet's own Go code and a real Ray.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.spec import load_spec
from tests.support import REPO, run_module
from tests.support.shell_layers import Shims, kubelet_expand, kuberay_submitter, only_record, started
from tests.test_kustomize import kustomize_bin  # noqa: F401  (the pinned kustomize, a fixture)
from workloads.planning import program_text
from workloads.planning import recipes as r
from workloads.planning.import_recipe import import_recipe
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.ray import entrypoint as ep
from workloads.ray import jax_trainer
from workloads.render import exitguard, job, jobset, rayjob
from workloads.render.kubelet_escape import k8s_literal
from workloads.render.kustomize import build, render, write_tree
from workloads.render.kustomize import run_objects as stamped  # the runtime's objects + the submission digest

EXAMPLES = REPO / "examples"
# MaxText keys the planner passes on as written (it reads none of them).
FREE_KEYS = ("dataset_path", "tokenizer_path", "hf_path", "hf_data_dir", "eval_dataset_name")
ISSUE_EXAMPLE = "x;touch${IFS}/tmp/p"  # a --set value that once ran on the Ray head (`;` ends the command, ${IFS} is a space); marker /tmp/p
# Inert words that look like flags or like the encoded form: they stay plain in the entrypoint.
INERT_TRICKY = ["-rf", "--", "--maxtext-args-b64=W10=", "a=b=c", "%s@:,+./"]
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def nasty(mark: Path) -> list[str]:
    """Values that break or inject through one shell or another; ``mark`` is created by any that runs."""
    m = str(mark)
    return [
        ISSUE_EXAMPLE,
        f"x;touch${{IFS}}{m}",
        "it's",
        "'",
        '"',
        "\\",
        f"$(touch {m})",
        f"`touch {m}`",
        f"'$(touch {m})'",
        f'"; touch {m}; "',
        f"a' ; touch {m} ; '",
        f"\ntouch {m}\n",
        f"&& touch {m}",
        f"| touch {m}",
        f"$$(touch {m})",
        "$(HOME)",
        "$$",
        "$",
        "${IFS}",
        "-rf",
        "--",
        "--maxtext-args-b64=W10=",
        " leading and trailing spaces ",
        "tab\there",
        "",
        "ünïcødé ✓ 🚀 中文",
        "\r\n",
        "%s %d {} [] * ? ~ ! # &",
        '\\"\\\\"',
        "a" * 5000,
    ]


@pytest.fixture(scope="module")
def mark() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="tgk-inject-"))
    yield d / "p"
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@pytest.fixture(scope="module")
def shims(tmp_path_factory) -> Shims:
    return Shims.make(tmp_path_factory.mktemp("shims"))


class _TmpP:
    """/tmp/p, the issue's marker: absent, or untouched (a `touch` would move its mtime)."""

    def __init__(self) -> None:
        self.path = Path("/tmp/p")
        self.before = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st_ = self.path.stat()
        except FileNotFoundError:
            return None
        return st_.st_ino, st_.st_mtime_ns

    def untouched(self) -> bool:
        return self._stat() == self.before


def _plan(runtime: str, values: list[str], **kw: Any):
    sets = tuple(f"{k}={v}" for k, v in zip(FREE_KEYS, values, strict=False))
    kw.setdefault("name", "inj")
    if runtime == "ray":
        spec, recipe, kw = load_spec(EXAMPLES / "v6e-reservation.yaml"), "llama3-8b", {"team": "research", **kw}
    else:
        spec, recipe = load_spec(EXAMPLES / "default.yaml"), "maxtext-6b"
    return plan_run(recipe, spec, Overrides(runtime=runtime, sets=sets, **kw), rand="abc")


def _worker_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    def find(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if "containers" in node:
                yield from node["containers"]
            for v in node.values():
                yield from find(v)
        elif isinstance(node, list):
            for v in node:
                yield from find(v)

    (container,) = list(find(objects))
    return container


RENDERERS = {"jobset": jobset.run_objects, "job": job.run_objects}


def _through_the_pod(runtime: str, plan, shims: Shims, cwd: Path) -> dict[str, Any]:
    argv, env = started(_worker_container(RENDERERS[runtime](plan)))
    assert argv[: len(exitguard.wrap([], [])[0])] == exitguard.wrap([], [])[0]
    return only_record(shims, shims.run(argv, env, cwd))


def _through_the_submitter(plan, shims: Shims, cwd: Path) -> dict[str, Any]:
    rj = rayjob.rayjob(plan)
    rj["status"] = {"dashboardURL": "inj-abcde-head-svc.team-research.svc.cluster.local:8265", "jobId": "inj-xyz12"}
    argv, env = started(kuberay_submitter(rj))
    return only_record(shims, shims.run(argv, env, cwd))


def _values(draw_list: list[str], mark: Path) -> list[str]:
    return [v.replace("MARK", str(mark)) for v in draw_list]


# Any text the planner takes: no NUL, no lone surrogate (both refused, see below).
TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=60)
PIECES = st.sampled_from(["'", '"', "$", "`", ";", "\n", "\\", "$(", ")", "${IFS}", "$$", " ", "-", "=", "touch MARK", "%", "\t", "é"])
VALUE = st.one_of(TEXT, st.lists(st.one_of(PIECES, TEXT), max_size=8).map("".join))
VALUES = st.lists(VALUE, min_size=1, max_size=len(FREE_KEYS))


# ------------------------------------------------------------------ JobSet and Job: exit guard under /bin/sh


@pytest.mark.parametrize("runtime", ["jobset", "job"])
def test_nasty_values_reach_the_worker_program_as_given(runtime: str, shims: Shims, mark: Path, tmp_path: Path) -> None:
    tmp_p = _TmpP()
    values = nasty(mark)
    for chunk in range(0, len(values), len(FREE_KEYS)):
        plan = _plan(runtime, values[chunk : chunk + len(FREE_KEYS)])
        got = _through_the_pod(runtime, plan, shims, tmp_path)
        assert got["argv"] == [*plan.program.command[1:], *plan.program.args]
        for key, value in zip(FREE_KEYS, values[chunk : chunk + len(FREE_KEYS)], strict=False):
            assert f"{key}={value}" in got["argv"]
    assert not mark.exists() and tmp_p.untouched()


@pytest.mark.parametrize("runtime", ["jobset", "job"])
@PROPERTY
@given(drawn=VALUES)
def test_any_value_reaches_the_worker_program_as_given(runtime: str, drawn: list[str], shims: Shims, mark: Path) -> None:
    values = _values(drawn, mark)
    plan = _plan(runtime, values)
    with tempfile.TemporaryDirectory() as cwd:
        got = _through_the_pod(runtime, plan, shims, Path(cwd))
    assert got["argv"] == [*plan.program.command[1:], *plan.program.args]
    assert [f"{k}={v}" for k, v in zip(FREE_KEYS, values, strict=False)] == [a for a in got["argv"] if a.split("=", 1)[0] in FREE_KEYS]
    assert not mark.exists()


@PROPERTY
@given(env_value=VALUE, command=st.lists(VALUE, min_size=1, max_size=4))
def test_a_plain_commands_words_and_env_reach_it_as_given(env_value: str, command: list[str], shims: Shims, mark: Path) -> None:
    """A `kind: command` recipe: its command words and env values, through the kubelet and the guard."""
    base = plan_run("hello-tpu", load_spec(EXAMPLES / "default.yaml"), Overrides(name="inj"))
    words = ("python3", *_values(command, mark))
    plan = replace(base, program=replace(base.program, command=words, env=(("TGK_PROBE", env_value.replace("MARK", str(mark)) or "x"),)))
    argv, env = started(_worker_container(jobset.run_objects(plan)))
    assert env["TGK_PROBE"] == (env_value.replace("MARK", str(mark)) or "x")
    with tempfile.TemporaryDirectory() as cwd:
        got = only_record(shims, shims.run(argv, env, Path(cwd)))
    assert got["argv"] == list(words[1:])
    assert not mark.exists()


def test_the_exit_guard_script_is_left_alone_by_the_kubelet() -> None:
    # Its `$@`, `$!`, `$?` are no `$(` or `$$`: the kubelet passes the script through unchanged.
    assert kubelet_expand(exitguard.SCRIPT, {"child": "x", "rc": "y"}) == exitguard.SCRIPT
    assert "$(" not in exitguard.SCRIPT and "$$" not in exitguard.SCRIPT


@given(text=st.text(), env=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=4))
def test_doubled_dollars_come_back_as_written(text: str, env: dict[str, str]) -> None:
    assert kubelet_expand(k8s_literal(text), env) == text


def test_the_kubelet_model_expands_what_it_should() -> None:
    # What the escaping is for: unescaped, these change on their way to the program.
    assert kubelet_expand("a$(HOME)b", {"HOME": "/root"}) == "a/rootb"
    assert kubelet_expand("a$$b $(NOPE) $( $x $", {}) == "a$b $(NOPE) $( $x $"


# ------------------------------------------------------------------ Ray: KubeRay's bash, ray job submit, sh


def test_the_issue_example_and_a_quote_reach_the_jaxtrainer_inert(shims: Shims, tmp_path: Path) -> None:
    tmp_p = _TmpP()
    plan = _plan("ray", [ISSUE_EXAMPLE, "it's"])
    entry = rayjob.rayjob(plan)["spec"]["entrypoint"]
    assert all(ep.is_inert(w) for w in entry.split(" "))
    got = _through_the_submitter(plan, shims, tmp_path)
    assert got["maxtext_args"] == list(plan.program.args)
    assert f"dataset_path={ISSUE_EXAMPLE}" in got["maxtext_args"] and "tokenizer_path=it's" in got["maxtext_args"]
    assert tmp_p.untouched()


def test_before_the_fix_the_issue_example_ran_on_the_head(shims: Shims, tmp_path: Path, mark: Path) -> None:
    """The same layers catch the defect: shlex.join's one layer of quoting, as the RayJob had it, injects."""
    plan = _plan("ray", [f"x;touch${{IFS}}{mark}"])
    rj = rayjob.rayjob(plan)
    rj["spec"]["entrypoint"] = shlex.join(rayjob.entrypoint_args(plan))
    rj["status"] = {"dashboardURL": "h:8265", "jobId": "inj-1"}
    argv, env = started(kuberay_submitter(rj))
    shims.run(argv, env, tmp_path)
    shims.records()
    try:
        assert mark.exists()
    finally:
        mark.unlink(missing_ok=True)


def test_nasty_values_reach_the_jaxtrainer_as_given(shims: Shims, mark: Path, tmp_path: Path) -> None:
    tmp_p = _TmpP()
    values = nasty(mark)
    for chunk in range(0, len(values), len(FREE_KEYS)):
        plan = _plan("ray", values[chunk : chunk + len(FREE_KEYS)])
        got = _through_the_submitter(plan, shims, tmp_path)
        assert got.get("maxtext_args") == list(plan.program.args), got
    assert not mark.exists() and tmp_p.untouched()


@PROPERTY
@given(drawn=VALUES)
def test_any_value_reaches_the_jaxtrainer_as_given(drawn: list[str], shims: Shims, mark: Path) -> None:
    values = _values(drawn, mark)
    plan = _plan("ray", values)
    with tempfile.TemporaryDirectory() as cwd:
        got = _through_the_submitter(plan, shims, Path(cwd))
    assert got.get("maxtext_args") == list(plan.program.args), got
    assert not mark.exists()


def test_inert_values_that_look_like_flags_stay_plain_and_reach_the_jaxtrainer(shims: Shims, tmp_path: Path) -> None:
    plan = _plan("ray", INERT_TRICKY)
    assert ep.ARGS_FLAG + "=" not in rayjob.rayjob(plan)["spec"]["entrypoint"].split(" -- ")[0]
    got = _through_the_submitter(plan, shims, tmp_path)
    assert got["maxtext_args"] == list(plan.program.args)


def test_plain_args_stay_readable_in_the_entrypoint() -> None:
    plan = _plan("ray", ["gs://b/data", "x.model"])
    entry = rayjob.rayjob(plan)["spec"]["entrypoint"]
    assert entry == shlex.join(rayjob.entrypoint_args(plan))  # what the goldens hold
    assert ep.ARGS_FLAG not in entry and "dataset_path=gs://b/data" in entry.split(" ")


def test_an_imported_recipe_carries_its_values_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shims: Shims, mark: Path) -> None:
    """A tpu-recipes script whose MaxText values hold shell text: imported, planned on ray, run: inert."""
    script = (
        "xpk workload create --cluster c --device-type=v6e-16 --num-slices=1 --docker-image=us-docker.pkg.dev/p/r/maxtext:1 "
        f"""--command="python3 -m MaxText.train src/MaxText/configs/base.yml model_name=llama3-8b """
        f"""dataset_path='x;touch {mark}' tokenizer_path='\\`touch {mark}\\`' hf_path=\\"it's\\" steps=10" """
    )
    imported = import_recipe(script, name="inj-imported")
    assert imported.recipe["maxtext"]["args"]["dataset_path"] == f"x;touch {mark}"
    assert imported.recipe["maxtext"]["args"]["tokenizer_path"] == f"`touch {mark}`"
    imported.recipe["runtimes"] = ["ray", "jobset"]
    monkeypatch.setenv("TGK_RECIPES", str(tmp_path / "recipes"))
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "inj-imported.yaml").write_text(yaml.safe_dump(imported.recipe, sort_keys=False))
    r.load_recipe.cache_clear()
    try:
        plan = plan_run("inj-imported", load_spec(EXAMPLES / "v6e-reservation.yaml"), Overrides(runtime="ray", team="research", name="inj"))
    finally:
        r.load_recipe.cache_clear()
    got = _through_the_submitter(plan, shims, tmp_path)
    assert got["maxtext_args"] == list(plan.program.args)
    assert "hf_path=it's" in got["maxtext_args"] and not mark.exists()


# ------------------------------------------------------------------ the encoding itself


def test_inert_is_exactly_what_shlex_leaves_bare() -> None:
    for c in map(chr, range(1, 256)):
        assert ep.is_inert(c) == (shlex.quote(c) == c), repr(c)


@given(args=st.lists(st.text(st.characters(blacklist_categories=["Cs"])), max_size=6))
def test_encoded_args_decode_to_themselves_and_are_one_inert_word(args: list[str]) -> None:
    word = ep.encode_args(args)
    assert ep.is_inert(word) and ep.decode_args(word) == args


@pytest.mark.parametrize("word", ["", "W10", "not base64!", ep.encode_args([]).replace("W", "e", 1), "eyJhIjoxfQ=="])
def test_anything_else_is_not_decoded(word: str) -> None:
    with pytest.raises(ValueError):
        ep.decode_args(word)


def test_the_entrypoint_refuses_a_head_word_that_is_not_inert() -> None:
    with pytest.raises(ValueError):
        ep.entrypoint(["python3", "a b"], [])


def test_the_jaxtrainer_takes_one_form_of_the_maxtext_command_line() -> None:
    head = ["--cpu", "--num-workers", "1"]
    assert jax_trainer.parse_args([*head, f"{ep.ARGS_FLAG}={ep.encode_args(['c.yml', 'a=$(x)'])}"]).maxtext_args == ["c.yml", "a=$(x)"]
    with pytest.raises(jax_trainer.UsageError, match="keep one"):
        jax_trainer.parse_args([*head, f"{ep.ARGS_FLAG}={ep.encode_args(['c.yml'])}", "--", "c.yml"])
    with pytest.raises(jax_trainer.UsageError, match="base64url"):
        jax_trainer.parse_args([*head, f"{ep.ARGS_FLAG}=W10;"])
    done = run_module("workloads.ray.jax_trainer", *head, f"{ep.ARGS_FLAG}=%%%")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------------------ what cannot be carried: refused at plan time


@pytest.mark.parametrize("runtime", ["jobset", "job", "ray"])
def test_a_nul_in_a_set_value_is_refused(runtime: str) -> None:
    with pytest.raises(PlanError) as e:
        _plan(runtime, ["a\x00b"])
    assert e.value.field == "--set" and "NUL" in str(e.value) and "dataset_path" in str(e.value)


def test_a_value_past_linuxs_argument_limit_is_refused_and_one_just_under_is_carried(shims: Shims, tmp_path: Path) -> None:
    room = program_text.MAX_WORD_BYTES - len("dataset_path=")
    with pytest.raises(PlanError, match="at most"):
        _plan("jobset", ["x" * (room + 1)])
    plan = _plan("jobset", ["é" * (room // 2)])
    got = _through_the_pod("jobset", plan, shims, tmp_path)
    assert got["argv"] == [*plan.program.command[1:], *plan.program.args]


def test_a_ray_entrypoint_kuberay_cannot_pass_is_refused_where_jobset_carries_it() -> None:
    long = "'" * 95_000  # base64 of its JSON is ~127 KB: past the entrypoint's room, not past one argument's
    with pytest.raises(PlanError) as e:
        _plan("ray", [long])
    assert e.value.field == "--set" and "RayJob entrypoint" in str(e.value) and "--runtime jobset" in str(e.value)
    _plan("jobset", [long])
    _plan("ray", ["'" * 60_000])


def test_text_that_is_not_utf8_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    import subprocess

    args = [sys.executable.encode(), b"-m", b"workloads", b"render", b"maxtext-6b", b"--out", str(tmp_path / "o").encode(), b"--set", b"dataset_path=\xff\xfe"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, timeout=120, check=False)
    err = done.stderr.decode(errors="replace").strip().splitlines()
    assert done.returncode == 2 and len(err) == 1 and "UTF-8" in err[0] and err[0].startswith("error: --set:"), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "where, text",
    [
        ("maxtext.args.dataset_path", 'dataset_path: "a\\0b"'),
        ("env.X", 'env: {X: "a\\0b"}'),
        ("env key", 'env: {"A=B": x}'),
    ],
)
def test_a_recipe_value_no_program_can_get_is_one_line(where: str, text: str, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "workloads" / "recipes" / "maxtext-6b.yaml").read_text())
    extra = yaml.safe_load(text)
    if "dataset_path" in extra:
        data["maxtext"]["args"].update(extra)
    else:
        data.setdefault("env", {}).update(extra["env"])
    data["name"] = "inj-bad"
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "inj-bad.yaml").write_text(yaml.safe_dump(data))
    import os
    import subprocess

    env = {**os.environ, "TGK_RECIPES": str(tmp_path / "recipes")}
    done = subprocess.run(
        [sys.executable, "-m", "workloads", "render", "inj-bad", "--out", str(tmp_path / "o")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1 and where in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "image, ok",
    [
        ("us-docker.pkg.dev/p/r/maxtext:0.2.5", True),
        ("localhost:5000/a/b@sha256:" + "0" * 64, True),
        ("maxtext", False),
        ("x/y:1;touch /tmp/p", False),
        ("x/Y:1", False),
        ("x/y:1 --privileged", False),
        ("x/y:$(id)", False),
        ("x/" + "a" * 300 + ":1", False),
    ],
)
def test_only_pinned_image_references_are_taken(image: str, ok: bool) -> None:
    if ok:
        assert _plan("jobset", [], image=image).program.image == image
        return
    with pytest.raises(PlanError) as e:
        _plan("jobset", [], image=image)
    assert e.value.field == "--image" and "\n" not in str(e.value)


def test_a_recipe_image_that_is_not_a_reference_is_refused() -> None:
    data = yaml.safe_load((REPO / "workloads" / "recipes" / "hello-tpu.yaml").read_text())
    data["image"] = {"ref": "ex.com/a:1'; touch /tmp/p"}
    with pytest.raises(Exception, match="image.ref"):
        r.Recipe.model_validate(data)


def test_planned_values_still_print_as_json() -> None:
    # -o json shows the values as given (not the kubelet's doubled form).
    plan = _plan("jobset", ["a$b"])
    assert "dataset_path=a$b" in json.dumps(list(plan.program.args))
    assert "dataset_path=a$$b" in _worker_container(jobset.run_objects(plan))["args"]


def test_names_are_dns_labels_so_they_cannot_carry_shell_text() -> None:
    for bad in ("a;b", "a b", "$(id)", "A"):
        with pytest.raises(PlanError) as e:
            _plan("jobset", [], **{"name": bad})
        assert e.value.field == "--name"


# ------------------------------------------------------------------ the Kustomize tree keeps them


@pytest.mark.tools
@pytest.mark.parametrize("runtime", ["jobset", "job", "ray"])
def test_kustomize_build_keeps_the_values_byte_for_byte(runtime: str, tmp_path: Path, kustomize_bin: str, mark: Path) -> None:  # noqa: F811
    """`render --out` then `kustomize build` (what a user applies): no $(VAR) substitution, no quoting lost."""
    values = [ISSUE_EXAMPLE, "it's", "$(HOME) a$$b", f'`touch {mark}`\n"', "ünï 🚀"]
    plan = _plan(runtime, values)
    write_tree(tmp_path, render(plan))
    assert build(tmp_path / "overlays" / plan.name, binary=kustomize_bin) == stamped(plan)
