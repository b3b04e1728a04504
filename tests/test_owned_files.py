"""The toolkit never deletes or replaces what it did not write: a user's file beside its output, or in the way of it.

Every directory the toolkit writes into holds a manifest of its own files with their digests
(toolkit/owned.py). These tests attack each writer as a careless user would: a file of the
user's beside the toolkit's, one of the toolkit's edited, a file or a symlink where a
directory belongs, a directory from an older toolkit without a manifest, two writers at
once. Each must keep the user's files, or refuse in one line (exit 2) with nothing changed.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.spec import load_spec
from tests.support import REPO
from toolkit import owned
from toolkit.clikit import run
from toolkit.errors import FieldError
from workloads.planning.planner import Overrides, plan_run
from workloads.render.kustomize import build_overlay, render, run_objects, write_tree

EXAMPLES = REPO / "examples"


def _cli(app_name: str, *argv: str) -> tuple[int, str, str]:
    if app_name == "infra":
        from infra.cli import app
    else:
        from workloads.cli import _register, app

        _register()
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(app, list(argv))
    return rc, out.getvalue(), err.getvalue()


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry below ``root`` (links not followed): kind and content, to prove nothing changed."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            p = Path(top) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", p.read_bytes())
    return out


def _refused(rc: int, out: str, err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: --out: "), (rc, err)
    assert "Traceback" not in err and out == ""
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope="module")
def plans():
    spec = load_spec(EXAMPLES / "default.yaml")
    return {
        "a": plan_run("maxtext-6b", spec, Overrides(name="run-a")),
        "a2": plan_run("maxtext-6b", spec, Overrides(name="run-a", steps=50)),
        "b": plan_run("hello-tpu", spec, Overrides(name="run-b")),
    }


# ------------------------------------------------------------------ render --out


def test_rerender_keeps_the_users_files_and_replaces_the_toolkits(tmp_path: Path, plans) -> None:
    write_tree(tmp_path, render(plans["a"]))
    overlay = tmp_path / "overlays" / "run-a"
    (overlay / "secrets.env").write_text("TOKEN=hunter2\n")
    (overlay / "extra").mkdir()
    (overlay / "extra" / "configmap.yaml").write_text("kind: ConfigMap\n")
    (tmp_path / "base" / "jobset" / "notes.txt").write_text("mine\n")
    write_tree(tmp_path, render(plans["a2"]))  # the same run, re-rendered with other options
    assert (overlay / "secrets.env").read_text() == "TOKEN=hunter2\n"
    assert (overlay / "extra" / "configmap.yaml").read_text() == "kind: ConfigMap\n"
    assert (tmp_path / "base" / "jobset" / "notes.txt").read_text() == "mine\n"
    files = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.yaml") if "extra" not in p.parts}
    assert build_overlay(files, "run-a") == run_objects(plans["a2"])
    manifest = json.loads((overlay / owned.MANIFEST).read_text())
    assert set(manifest["files"]) == {"kustomization.yaml", "patch-jobset.yaml"}  # the user's are not claimed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(owned.SCRATCH_PREFIX)]


@pytest.mark.parametrize(
    "attack, needle",
    [
        ("edit-kustomization", "was changed since the toolkit wrote it"),
        ("delete-manifest", "holds files the toolkit did not write"),
        ("user-file-at-toolkit-path", "is in the way"),
        ("overlay-is-symlink", "is a symlink"),
        ("overlays-is-symlink", "is a symlink"),
        ("overlay-is-file", "is a file where the toolkit writes a directory"),
        ("base-is-file", "is a file where the toolkit writes a directory"),
        ("toolkit-file-is-symlink", "was replaced by a link or directory"),
        ("manifest-climbs-out", "which is not a file inside the directory"),
        ("manifest-garbage", "cannot be read"),
        ("lock-is-symlink", "is a symlink"),
    ],
)
def test_render_refuses_in_one_line_and_changes_nothing(tmp_path: Path, plans, attack: str, needle: str) -> None:
    out = tmp_path / "k"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("do not touch")
    write_tree(out, render(plans["a"]))
    overlay, base = out / "overlays" / "run-a", out / "base" / "jobset"
    if attack == "edit-kustomization":
        with open(overlay / "kustomization.yaml", "a") as f:
            f.write("# secretGenerator: secrets.env\n")
    elif attack == "delete-manifest":
        (overlay / owned.MANIFEST).unlink()
    elif attack == "user-file-at-toolkit-path":
        shutil.rmtree(out / "overlays")
        overlay.mkdir(parents=True)
        (overlay / "kustomization.yaml").write_text("hand-written\n")
        (overlay / owned.MANIFEST).write_text(json.dumps({"files": {}}))
    elif attack == "overlay-is-symlink":
        shutil.rmtree(overlay)
        overlay.symlink_to(victim)
    elif attack == "overlays-is-symlink":
        shutil.rmtree(out / "overlays")
        (out / "overlays").symlink_to(victim)
    elif attack == "overlay-is-file":
        shutil.rmtree(overlay)
        overlay.write_text("a file")
    elif attack == "base-is-file":
        shutil.rmtree(out / "base")
        (out / "base").write_text("a file")
    elif attack == "toolkit-file-is-symlink":
        (overlay / "patch-jobset.yaml").unlink()
        (overlay / "patch-jobset.yaml").symlink_to(victim / "precious")
    elif attack == "manifest-climbs-out":
        doc = json.loads((base / owned.MANIFEST).read_text())
        doc["files"]["../../../victim/precious"] = "sha256:0"
        (base / owned.MANIFEST).write_text(json.dumps(doc))
    elif attack == "manifest-garbage":
        (overlay / owned.MANIFEST).write_text("{not json")
    elif attack == "lock-is-symlink":
        (out / owned.LOCK).unlink()
        (out / owned.LOCK).symlink_to(victim / "precious")
    before, victim_before = snapshot(out), snapshot(victim)
    rc, so, se = _cli("workloads", "render", "maxtext-6b", "--name", "run-a", "--steps", "50", "--out", str(out))
    _refused(rc, so, se, needle)
    assert snapshot(out) == before and snapshot(victim) == victim_before


def test_an_empty_directory_where_an_overlay_goes_is_used(tmp_path: Path, plans) -> None:
    (tmp_path / "overlays" / "run-a").mkdir(parents=True)
    write_tree(tmp_path, render(plans["a"]))
    assert (tmp_path / "overlays" / "run-a" / owned.MANIFEST).is_file()


def test_out_may_itself_be_a_symlink_to_a_directory(tmp_path: Path, plans) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    write_tree(tmp_path / "link", render(plans["b"]))  # the user chose the link: followed, nothing below it is
    assert (real / "overlays" / "run-b" / "kustomization.yaml").is_file()


def test_base_is_not_rewritten_when_unchanged(tmp_path: Path, plans) -> None:
    write_tree(tmp_path, render(plans["a"]))
    base = tmp_path / "base" / "jobset" / "jobset.yaml"
    ino = base.stat().st_ino
    write_tree(tmp_path, render(plans["a2"]))
    assert base.stat().st_ino == ino  # same bytes: the unit is left as it is (no churn for readers)


# ------------------------------------------------------------------ two renders into one --out at once


RENDER = """
import sys
from workloads.cli import _register, app
from toolkit.clikit import run
_register()
sys.exit(run(app, ["render", sys.argv[1], "--name", sys.argv[2], "--steps", sys.argv[3], "--out", sys.argv[4]]))
"""


def test_concurrent_renders_into_one_out_each_land_whole(tmp_path: Path) -> None:
    """Real processes at once: different runs, and the same run twice; none fails, none is lost."""
    out = tmp_path / "k"
    jobs = [("maxtext-6b", f"r{i}", str(10 + i)) for i in range(4)] + [("hello-tpu", "same", "5"), ("hello-tpu", "same", "5")]
    procs = [
        subprocess.Popen([sys.executable, "-c", RENDER, recipe, name, steps, str(out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for recipe, name, steps in jobs
    ]
    errors = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in errors), errors
    assert all("Traceback" not in e for _, e in errors)
    spec = load_spec(EXAMPLES / "default.yaml")
    files = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.yaml")}
    for recipe, name, steps in jobs:
        plan = plan_run(recipe, spec, Overrides(name=name, steps=int(steps)))
        assert build_overlay(files, name) == run_objects(plan), name
    assert not [p for p in out.iterdir() if p.name.startswith(owned.SCRATCH_PREFIX)]


def _render_at_barrier(tree: dict, out: str, barrier, errors) -> None:
    barrier.wait()
    try:
        write_tree(Path(out), tree)
    except BaseException as e:  # noqa: BLE001 - any failure is what the test counts
        errors.put(f"{type(e).__name__}: {e}")


def test_renders_released_at_once_never_fail_or_lose_a_unit(tmp_path: Path, plans) -> None:
    """Forked processes released by one barrier (the old code failed 19 rounds of 20 this way: a
    FileNotFoundError from two rmtrees of base/jobset, or a lost overlay)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    trees = [render(plans[k]) for k in ("a", "b")] + [render(plans["a2"])] * 2
    for rnd in range(8):
        out = tmp_path / f"round{rnd}"
        barrier, errors = ctx.Barrier(len(trees)), ctx.Queue()
        procs = [ctx.Process(target=_render_at_barrier, args=(t, str(out), barrier, errors)) for t in trees]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert all(p.exitcode == 0 for p in procs)
        assert errors.empty(), errors.get()
        files = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.yaml")}
        assert build_overlay(files, "run-a") in (run_objects(plans["a"]), run_objects(plans["a2"]))  # one of the same run's renders, whole
        assert build_overlay(files, "run-b") == run_objects(plans["b"])


def test_a_render_that_surveys_while_another_swaps_the_unit_in_lands(tmp_path: Path, plans, monkeypatch) -> None:
    """The CI failure, made certain: the early survey reads run-a's manifest, another writer swaps
    run-a in (its lock file is there), then the survey reads the new files. Refused before."""
    out = tmp_path / "k"
    write_tree(out, render(plans["a"]))
    real, swapped = owned._read_manifest, []

    def read_then_swap(unit: Path, flag: str):
        manifest = real(unit, flag)
        if unit.name == "run-a" and not swapped:
            swapped.append(1)  # the other writer, between this manifest and its files
            tree = render(plans["a2"])
            owned.replace_unit(
                out, "overlays/run-a", {k.removeprefix("overlays/run-a/"): v for k, v in tree.items() if k.startswith("overlays/run-a/")}, "--out"
            )
        return manifest

    monkeypatch.setattr(owned, "_read_manifest", read_then_swap)
    write_tree(out, render(plans["a"]))
    assert swapped
    files = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.yaml")}
    assert build_overlay(files, "run-a") == run_objects(plans["a"])


# ------------------------------------------------------------------ property: random pre-existing trees

NAMES = st.sampled_from(["kustomization.yaml", "patch-jobset.yaml", "jobset.yaml", "secrets.env", "cm.yaml", "sub", "x"])
ENTRY = st.tuples(
    st.sampled_from(["overlays/run-a", "base/jobset", "overlays", "base", "overlays/run-a/sub"]),
    NAMES,
    st.sampled_from(["file", "dir", "link-out", "link-in"]),
    st.binary(max_size=20),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(prerender=st.booleans(), entries=st.lists(ENTRY, max_size=6), edit=st.booleans())
def test_replace_never_removes_a_file_it_did_not_write(plans, prerender: bool, entries, edit: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        root, victim = Path(d) / "k", Path(d) / "victim"
        victim.mkdir()
        (victim / "v").write_text("outside")
        root.mkdir()
        if prerender:
            write_tree(root, render(plans["a"]))
            if edit:
                (root / "overlays" / "run-a" / "patch-jobset.yaml").write_text("edited")
        toolkit_paths = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
        for parent, name, kind, data in entries:
            p = root / parent / name
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                if os.path.lexists(p):
                    continue
                if kind == "file":
                    p.write_bytes(data)
                elif kind == "dir":
                    p.mkdir()
                elif kind == "link-out":
                    p.symlink_to(victim / "v")
                else:
                    p.symlink_to(root)
            except OSError:
                continue  # a parent is a file or a link: the tree stays as far as it got
        before = snapshot(root)
        user = {rel: v for rel, v in before.items() if rel not in toolkit_paths and not rel.endswith(owned.MANIFEST) and rel != owned.LOCK}
        try:
            write_tree(root, render(plans["a2"]))
        except FieldError:
            assert snapshot(root) == before  # refused: nothing changed
        else:
            after = snapshot(root)
            for rel, v in user.items():
                if v[0] != "dir":
                    assert after.get(rel) == v, rel  # every entry of the user's is still there, unchanged
            files = {str(p.relative_to(root)): p.read_text() for unit in ("base/jobset", "overlays/run-a") for p in owned.owned_files(root / unit)}
            assert build_overlay(files, "run-a") == run_objects(plans["a2"])  # the toolkit's files, as its manifests list them
        assert (victim / "v").read_text() == "outside" and [p.name for p in victim.iterdir()] == ["v"]


FILE_NAMES = st.sampled_from(["cdk.tf.json", "mine.tf", "terraform.tfstate", ".terraform", "tfplan", "report.md", "summary.json"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.dictionaries(FILE_NAMES, st.binary(max_size=10), max_size=4),
    user=st.dictionaries(FILE_NAMES, st.binary(max_size=10), max_size=4),
    second=st.dictionaries(FILE_NAMES, st.binary(max_size=10), max_size=4),
    prune=st.booleans(),
)
def test_update_never_removes_or_replaces_a_file_it_did_not_write(first, user, second, prune: bool) -> None:
    """synth's and report's way: the toolkit's files replaced in place, everything else left alone."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        with owned.locked(root, "--out"):
            owned.update_files(root, "stack", first, "--out")
        unit = root / "stack"
        for name, data in user.items():
            if name not in first:
                (unit / name).write_bytes(data)
        before = snapshot(root)
        try:
            with owned.locked(root, "--out"):
                owned.update_files(root, "stack", second, "--out", prune=prune)
        except FieldError:
            assert snapshot(root) == before
            assert any(n in user and n not in first for n in second)  # refused only for a file in the way
            return
        for name, data in user.items():
            if name not in first:
                assert (unit / name).read_bytes() == data  # the user's: kept
        for name, data in second.items():
            assert (unit / name).read_bytes() == data
        for name in set(first) - set(second):
            assert (unit / name).exists() != prune  # the toolkit's own, dropped only with prune


# ------------------------------------------------------------------ infra synth --out


@pytest.mark.synth
def test_synth_keeps_terraform_state_and_hand_written_tf(tmp_path: Path) -> None:
    out = tmp_path / "s"
    rc, so, se = _cli("infra", "synth", "--out", str(out))
    assert rc == 0, se
    stack = Path(so.strip()).parent
    (stack / "terraform.tfstate").write_text('{"version": 4}')
    (stack / "extra.tf").write_text('variable "x" {}\n')
    (stack / ".terraform").mkdir()
    (stack / ".terraform" / "providers").write_text("cache")
    first = (stack / "cdk.tf.json").read_bytes()
    rc, so, se = _cli("infra", "synth", "--out", str(out), "--spec", str(EXAMPLES / "fallback.yaml"))
    assert rc == 0, se
    rc, so, se = _cli("infra", "synth", "--out", str(out))  # the first spec again: its stack re-synthesized in place
    assert rc == 0, se
    assert (stack / "terraform.tfstate").read_text() == '{"version": 4}'
    assert (stack / "extra.tf").read_text() == 'variable "x" {}\n'
    assert (stack / ".terraform" / "providers").read_text() == "cache"
    assert (stack / "cdk.tf.json").read_bytes() == first

    (stack / "cdk.tf.json").write_text("{}")  # edited by hand
    before = snapshot(out)
    _refused(*_cli("infra", "synth", "--out", str(out)), "cdk.tf.json was changed since the toolkit wrote it")
    assert snapshot(out) == before


@pytest.mark.synth
@pytest.mark.parametrize("attack", ["legacy-stack", "user-manifest-json", "stack-is-symlink", "stacks-is-file"])
def test_synth_refuses_what_it_cannot_prove_is_its_own(tmp_path: Path, attack: str) -> None:
    out = tmp_path / "s"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "cdk.tf.json").write_text("theirs")
    stack = out / "stacks" / "tpu-dev"
    if attack == "legacy-stack":  # written before the toolkit kept manifests, or by hand
        stack.mkdir(parents=True)
        (stack / "cdk.tf.json").write_text('{"hand": "written"}')
    elif attack == "user-manifest-json":
        out.mkdir()
        (out / "manifest.json").write_text("my notes")
    elif attack == "stack-is-symlink":
        stack.parent.mkdir(parents=True)
        stack.symlink_to(victim)
    else:
        out.mkdir()
        (out / "stacks").write_text("a file")
    before = snapshot(out)
    _refused(*_cli("infra", "synth", "--out", str(out)))
    assert snapshot(out) == before and (victim / "cdk.tf.json").read_text() == "theirs"


# ------------------------------------------------------------------ report --out


def _report(out: Path) -> tuple[int, str, str]:
    return _cli("workloads", "report", str(REPO / "tests" / "data" / "maxtext" / "tiny_cpu.log"), "--out", str(out))


def test_report_keeps_the_users_files_and_refuses_one_in_the_way(tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    rc, so, se = _report(out)
    assert rc == 0, se
    rc, so, se = _report(out)  # again: its own files replaced
    assert rc == 0, se
    assert (out / "notes.md").read_text() == "mine"
    (out / "report.md").write_text("my edit")
    before = snapshot(out)
    _refused(*_report(out), "report.md was changed since the toolkit wrote it")
    assert snapshot(out) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "summary.json").write_text('{"mine": true}')
    _refused(*_report(other), "summary.json is in the way")
    assert (other / "summary.json").read_text() == '{"mine": true}'


def test_report_upload_sends_only_the_reports_files(tmp_path: Path) -> None:
    from workloads.observe import report as rp
    from workloads.observe import storage

    out = tmp_path / "r"
    out.mkdir()
    (out / "private.key").write_text("secret")
    assert _report(out)[0] == 0
    sent: list[str] = []

    class Bucket:
        def blob(self, name):
            class B:
                def upload_from_filename(self, f, content_type, if_generation_match=None):
                    sent.append(name)

            return B()

    class Client:
        def bucket(self, name):
            return Bucket()

    files = [out / rp.MARKDOWN_NAME, out / rp.PLOT_NAME, out / rp.JSON_NAME]
    storage.upload(out, "b", "reports/x", files=files, client=Client())
    assert sorted(sent) == ["reports/x/metrics.png", "reports/x/report.md", "reports/x/summary.json"]
    sent.clear()
    storage.upload(out, "b", "reports/x", client=Client())  # without files: every file, but never the toolkit's bookkeeping
    assert owned.MANIFEST not in " ".join(sent) and owned.LOCK not in " ".join(sent)


# ------------------------------------------------------------------ run-local --out, local state dirs


def test_run_local_refuses_a_users_file_before_maxtext_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_MAXTEXT_VENV", "/nonexistent-maxtext-venv")
    out = tmp_path / "o"
    out.mkdir()
    (out / "maxtext.log").write_text("my log")
    rc, so, se = _cli("workloads", "run-local", "maxtext-6b", "--tiny", "--out", str(out))
    _refused(rc, so, se, "maxtext.log is in the way")
    assert (out / "maxtext.log").read_text() == "my log"


def test_local_up_never_cleans_a_directory_that_is_not_a_state_dir(tmp_path: Path) -> None:
    from workloads.local import LocalClusterError, state
    from workloads.local.controlplane import LocalCluster

    mine = tmp_path / "mine"
    (mine / "etcd").mkdir(parents=True)
    (mine / "etcd" / "data").write_text("precious")
    (mine / "run").mkdir()
    lc = LocalCluster(mine)
    with pytest.raises(LocalClusterError, match="holds files the local cluster did not write"):
        state.claim(mine)
    lc.down()  # stops nothing, wipes nothing
    assert (mine / "etcd" / "data").read_text() == "precious"
    state.claim(tmp_path / "fresh")  # a new directory becomes a state dir
    assert (tmp_path / "fresh" / ".tgk-local-state").is_file()


# ------------------------------------------------------------------ the one atomic write


def test_write_atomic_sets_the_mode_first_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    secret = tmp_path / "kubeconfig"
    owned.write_atomic(secret, "key: 1\n", mode=0o600)
    assert secret.read_text() == "key: 1\n" and secret.stat().st_mode & 0o777 == 0o600
    owned.write_atomic(secret, b"key: 2\n", mode=0o600)  # replaced in place
    assert secret.read_bytes() == b"key: 2\n"
    plain = tmp_path / "plain.json"
    mask = os.umask(0o027)
    try:
        owned.write_atomic(plain, "{}", mode=None)  # the umask's mode, as open() gives
    finally:
        os.umask(mask)
    assert plain.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubeconfig", "plain.json"]


def test_write_atomic_create_never_replaces_a_file(tmp_path: Path) -> None:
    path = tmp_path / "tgk-run.json"
    owned.write_atomic(path, "first", create=True)
    with pytest.raises(FileExistsError):
        owned.write_atomic(path, "second", create=True)
    assert path.read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["tgk-run.json"]


# What may still write a temporary file and rename it by hand, and why.
HAND_WRITTEN_RENAMES = {
    "toolkit/owned.py": "the one atomic write, and the swap of a whole unit (two renames)",
    "workloads/ray/standin_head.py": "runs in the Ray venv, which has the standard library and Ray, never the toolkit",
    "toolkit/dirops.py": "runs alone in the Lustre helper pod (python3 -c, the standard library only): its replace renames relative to a directory descriptor",
}


def hand_written_renames(source: str) -> list[int]:
    """Lines that rename a file into place or make a temporary file for it: os.replace/rename, shutil.move,
    tempfile.mkstemp/NamedTemporaryFile, and a one-argument ``.replace(target)``/``.rename(target)`` (Path's)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, base = node.func.attr, node.func.value
        module = base.id if isinstance(base, ast.Name) else None
        if (module, name) in {("os", "replace"), ("os", "rename"), ("shutil", "move"), ("tempfile", "mkstemp"), ("tempfile", "NamedTemporaryFile")}:
            out.append(node.lineno)
        elif name in ("replace", "rename") and len(node.args) == 1 and not node.keywords:
            out.append(node.lineno)
    return out


def test_every_atomic_write_goes_through_write_atomic() -> None:
    found = []
    for top in ("toolkit", "infra", "modules", "workloads", "scripts"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel not in HAND_WRITTEN_RENAMES:
                found += [f"{rel}:{line}" for line in hand_written_renames(path.read_text(encoding="utf-8"))]
    assert found == [], f"write through toolkit.owned.write_atomic instead: {found}"


def test_a_hand_written_atomic_write_is_seen() -> None:
    source = "import os\ntmp.write_text(x)\nos.replace(tmp, path)\ntmp.replace(path)\ntext.replace('a', 'b')\n"
    assert hand_written_renames(source) == [3, 4]


# ------------------------------------------------------------------ one way to write a root: check_then_write


def _flaky_check(fails: int):
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] <= fails:
            raise FieldError("--out", "saw half of another writer's swap", "nothing")

    return check, calls


def test_an_early_refusal_where_no_writer_ever_was_is_final_and_leaves_no_lock(tmp_path: Path) -> None:
    check, calls = _flaky_check(1)
    written = []
    with pytest.raises(FieldError):
        owned.check_then_write(tmp_path, "--out", check, lambda: written.append(1))
    assert (written, calls["n"]) == ([], 1)
    assert not (tmp_path / owned.LOCK).exists()


def test_an_early_refusal_beside_another_writers_lock_is_decided_under_the_lock(tmp_path: Path) -> None:
    """What a survey sees while another writer swaps a unit is half of each: the check under the lock decides."""
    (tmp_path / owned.LOCK).touch()
    check, calls = _flaky_check(1)
    assert owned.check_then_write(tmp_path, "--out", check, lambda: "written") == "written"
    assert calls["n"] == 2
    check, calls = _flaky_check(2)  # refused under the lock too: refused, nothing written
    written = []
    with pytest.raises(FieldError):
        owned.check_then_write(tmp_path, "--out", check, lambda: written.append(1))
    assert written == []


def test_every_writer_of_a_root_goes_through_check_then_write() -> None:
    """A write under the root's lock whose early check is trusted without it refuses on another writer's half-swap."""
    found = []
    for top in ("toolkit", "infra", "modules", "workloads", "scripts"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel != "toolkit/owned.py" and "owned.locked(" in path.read_text(encoding="utf-8"):
                found.append(rel)
    assert found == [], f"write through toolkit.owned.check_then_write instead: {found}"
