"""Unbounded work and waits: every input has a size, depth and time bound.

Real hostile inputs: a FIFO nobody writes, /dev/zero, a directory, a file past its cap, YAML
alias bombs (on the libyaml and the PyYAML loader), shell scripts that double a variable or
nest defaults, an API server on loopback that trickles bytes or never stops talking, and a
kubeconfig exec plugin that never answers (a real script). Crossing a bound is one line:
exit 2 for the user's own input, exit 3 for the cluster's side (an API server or credential
plugin that does not answer in time is "cluster unreachable"). In-process through
``toolkit.clikit.run`` except one real process per hostile I/O kind where the process
behaviour is the point (the FIFO, the trickling server, the silent plugin).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import typer
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.cli import app as _infra_app
from tests.support import REPO
from tests.support.hostile_server import serve
from toolkit.clikit import run
from toolkit.errors import ClusterError, FieldError, Rejected, Unreachable
from toolkit.inputfile import LOG, RUN_SCRIPT, NotReadable, read_bounded
from toolkit.yamlfile import MAX_YAML_NODES, YamlFileError, load_yaml, load_yaml_all
from workloads.cli import _register
from workloads.cli import app as _workloads_app
from workloads.cluster import transport as tr
from workloads.cluster.client import Cluster
from workloads.planning import shellwords
from workloads.planning.import_recipe import import_recipe

_register()
INFRA, WORKLOADS = typer.main.get_command(_infra_app), typer.main.get_command(_workloads_app)
DEFAULT = REPO / "examples" / "default.yaml"
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("TGK_DEBUG", "TGK_SPEC", "TGK_REQUEST_TIMEOUT", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)


# How long ``within`` waits before calling it a hang. Never a measure of speed: every deadline
# under test is a second or less, so only a hang (the bug) gets near this on a loaded machine.
# Speed is measured by the benchmarks (scripts/bench_hostile_google.py), not asserted here.
HANG_S = 300


def within(fn, *args):
    """``fn(*args)`` on a thread, and the seconds it took; fails the test if it has not returned after HANG_S (a hang is the bug)."""
    box: dict = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = e

    t = threading.Thread(target=work, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"still running after {HANG_S} s"
    if "error" in box:
        raise box["error"]
    return box["value"], time.monotonic() - start


def cli(command, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(command.main if hasattr(command, "main") else command, list(argv))
    return rc, out.getvalue(), err.getvalue()


def one_line(rc: int, stderr: str, code: int, *needles: str) -> None:
    assert "Traceback" not in stderr
    assert rc == code, (rc, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], stderr
    assert len(lines[0]) <= 1100
    for n in needles:
        assert n in lines[0], lines[0]


# ------------------------------------------------------------ hostile files


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    with open(big, "wb") as f:  # sparse: past every cap without writing 300 MiB
        f.truncate(300 * 1024 * 1024)
    return {"fifo": fifo, "dev-zero": Path("/dev/zero"), "directory": tmp_path, "oversize": big}


# Every command that reads a file the user names, with {} where the file goes.
READERS = [
    ("infra", ["spec", "--spec", "{}"], ""),
    ("infra", ["prices", "refresh", "--from-file", "{}", "--as-of", "2026-01-01", "--dry-run"], "--from-file"),
    ("infra", ["prices", "refresh", "--table", "{}", "--from-file", str(REPO / "tests/data/billing/compute_skus_page1.json"), "--as-of", "2026-01-01"], ""),
    ("workloads", ["import-recipe", "{}", "--out", "{out}"], "FILE"),
    ("workloads", ["metrics", "{}"], "LOGFILE"),
    ("workloads", ["metrics", str(REPO / "tests/data/maxtext/tiny_cpu.log"), "--metrics-file", "{}"], "--metrics-file"),
    ("workloads", ["queues", "manager-config", "--merge", "{}"], "--merge"),
    ("workloads", ["status", "r1", "-n", "research", "--kubeconfig", "{}"], "--kubeconfig"),
]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "oversize"])
@pytest.mark.parametrize("app, argv, field", READERS, ids=[" ".join(a[:2]) for _, a, _ in READERS])
def test_every_reader_refuses_what_is_not_a_file_in_one_line(hostile, tmp_path, app, argv, field, kind) -> None:
    path = hostile[kind]
    args = [a.replace("{}", str(path)).replace("{out}", str(tmp_path / "out")) for a in argv]
    (rc, out, err), _ = within(cli, INFRA if app == "infra" else WORKLOADS, *args)
    one_line(rc, err, 2, field)
    assert not (tmp_path / "out").exists()


def test_a_fifo_with_no_writer_does_not_block_a_real_process(tmp_path: Path) -> None:
    """The FIFO case as a user meets it: the process exits at once instead of waiting for a writer."""
    fifo = tmp_path / "run_recipe.sh"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "workloads", "import-recipe", str(fifo)], cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    one_line(p.returncode, p.stderr, 2, "FILE", "FIFO")


def test_read_bounded_reads_regular_files_and_refuses_the_rest(tmp_path: Path) -> None:
    ok = tmp_path / "ok.sh"
    ok.write_bytes(b"x" * RUN_SCRIPT.limit)
    assert len(read_bounded(ok, RUN_SCRIPT)) == RUN_SCRIPT.limit
    ok.write_bytes(b"x" * (RUN_SCRIPT.limit + 1))
    with pytest.raises(NotReadable, match="over 1 MiB"):
        read_bounded(ok, RUN_SCRIPT)
    with pytest.raises(NotReadable, match="standard input"):
        read_bounded("-", LOG)
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", LOG)
    # /proc files report size 0 but have content: read, within the cap.
    assert b"Name:" in read_bounded("/proc/self/status", LOG)
    # A link is followed to what it names: a device is refused through it too.
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(NotReadable, match="character device"):
        read_bounded(tmp_path / "zero", LOG)


# ------------------------------------------------------------ YAML alias bombs


def _bomb(levels: int, fan: int = 10) -> str:
    text = "a0: &a0 [" + ",".join(["lol"] * fan) + "]\n"
    return text + "".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]\n" for i in range(1, levels + 1))


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)], ids=["pyyaml", "libyaml"])
def test_billion_laughs_is_refused_at_once_on_both_loaders(loader) -> None:
    within(lambda: pytest.raises(YamlFileError, load_yaml, _bomb(9), loader))
    with pytest.raises(YamlFileError, match="aliases"):
        load_yaml(_bomb(9), loader)
    with pytest.raises(YamlFileError, match="its own anchor"):
        load_yaml("a: &x [1, *x]", loader)
    with pytest.raises(YamlFileError, match="4,300 digits"):
        load_yaml("a: " + "9" * 5000, loader)
    with pytest.raises(YamlFileError):
        load_yaml_all("---\n" + _bomb(9), loader)
    # Aliases that stay small are YAML as usual.
    assert load_yaml("x: &x {a: 1}\ny: *x\nz: [*x, *x]", loader) == {"x": {"a": 1}, "y": {"a": 1}, "z": [{"a": 1}, {"a": 1}]}


@pytest.mark.parametrize("where", ["spec zones", "recipe args", "kubeconfig"])
def test_alias_bombs_in_a_spec_a_recipe_and_a_kubeconfig(tmp_path: Path, monkeypatch, where) -> None:
    bomb = _bomb(8).replace("\n", "\n  ")
    if where == "spec zones":
        text = DEFAULT.read_text().replace("zones: [us-west4-a]\nlabels:\n  environment: dev\n", "labels:\n  environment: dev\n  " + bomb + "\nzones: *a8\n")
        p = tmp_path / "spec.yaml"
        p.write_text(text)
        rc, _, err = cli(INFRA, "spec", "--spec", str(p))
        one_line(rc, err, 2, "aliases")
    elif where == "recipe args":
        shipped = yaml.safe_load((REPO / "workloads/recipes/maxtext-6b.yaml").read_text())
        shipped["name"] = "bomb"
        shipped["maxtext"]["args"].pop("dataset_path", None)
        text = yaml.safe_dump(shipped).replace("  args:\n", "  args:\n    dataset_path: *a8\n", 1)
        monkeypatch.setenv("TGK_RECIPES", str(tmp_path))
        (tmp_path / "bomb.yaml").write_text("x:\n  " + bomb + "\n" + text)
        rc, _, err = cli(WORKLOADS, "submit", "bomb", "--dry-run")
        one_line(rc, err, 2, "aliases")
    else:
        p = tmp_path / "kubeconfig"
        p.write_text("x:\n  " + bomb + "\nclusters: *a8\n")
        rc, _, err = cli(WORKLOADS, "status", "r1", "-n", "research", "--kubeconfig", str(p))
        one_line(rc, err, 2, "--kubeconfig", "aliases")


def test_an_error_about_a_huge_value_is_one_short_line(tmp_path: Path) -> None:
    """Under the alias budget a value can still be huge: the message quotes a bounded part of it."""
    text = DEFAULT.read_text().replace(
        "zones: [us-west4-a]\nlabels:\n  environment: dev\n", "labels:\n  environment: dev\n  " + _bomb(4).replace("\n", "\n  ") + "\nzones: *a4\n"
    )
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    rc, _, err = cli(INFRA, "spec", "--spec", str(p))
    one_line(rc, err, 2, "zones[0]", "is not a string")
    long_zone = tmp_path / "long.yaml"
    long_zone.write_text(DEFAULT.read_text().replace("zones: [us-west4-a]", "zones: [" + "a" * 200_000 + "]"))
    rc, _, err = cli(INFRA, "spec", "--spec", str(long_zone))
    one_line(rc, err, 2, "zones[0]")


ANCHORS = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 6)), min_size=1, max_size=12)


@FAST
@given(ANCHORS, st.booleans())
def test_property_any_alias_structure_loads_or_is_refused_quickly(spec, pyyaml) -> None:
    """Anchors of random fan-out, each aliasing random earlier ones: bounded time whatever they expand to."""
    lines = ["n0: &n0 [x]"]
    for i, (fan, back) in enumerate(spec, start=1):
        lines.append(f"n{i}: &n{i} [" + ",".join(f"*n{max(0, i - 1 - (k + back) % i)}" for k in range(fan)) + "]")
    text = "\n".join(lines) + "\n"
    loader = yaml.SafeLoader if pyyaml else getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = load_yaml(text, loader)
    except YamlFileError as e:
        assert "aliases" in e.problem
    else:
        assert _count(doc, limit=MAX_YAML_NODES + 1) <= MAX_YAML_NODES


def _count(node, limit: int) -> int:
    n, stack = 0, [node]
    while stack and n <= limit:
        x = stack.pop()
        n += 1
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return n


# ------------------------------------------------------------ shell expansion


SCRIPTS = {
    "doubling": "X=ab\n" + "X=$X$X\n" * 40 + 'xpk workload create --device-type=v5litepod-16 --command "python3 -m MaxText.train $X"\n',
    "deep ${X:-...} nesting": "echo " + "${A:-" * 5000 + "x" + "}" * 5000 + "\n",
    "wide": "X=" + "a" * 100_000 + "\necho " + "$X " * 100 + "\n",
    "doubling in --command": 'xpk workload create --device-type=v5litepod-16 --command "X=ab; ' + "X=$X$X; " * 40 + 'python3 -m MaxText.train"\n',
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_import_recipe_expansion_is_bounded(tmp_path: Path, name: str) -> None:
    script = tmp_path / "run_recipe.sh"
    script.write_text(SCRIPTS[name])
    (rc, _, err), _ = within(cli, WORKLOADS, "import-recipe", str(script), "--out", str(tmp_path / "out"))
    one_line(rc, err, 2, "import-recipe")
    assert "MiB of text" in err or "deep" in err
    assert not (tmp_path / "out").exists()


PIECES = st.sampled_from(["X=$X$X", "Y=${X:-$Y}$X", "X=${Y:-${X:-z}}$X", "echo $X $Y", "Y=$X", "X=${Z:-${Z:-${Z:-${Z:-w}}}}"])


@FAST
@given(st.lists(PIECES, min_size=1, max_size=60), st.integers(1, 64))
def test_property_shell_expansion_stays_within_its_budget(lines, seed) -> None:
    text = f"X={'q' * seed}\n" + "\n".join(lines) + "\n"
    env: dict[str, str] = {}
    try:
        produced = sum(len(w) for words, _ in shellwords.commands(text, env) for w in words)
    except shellwords.ShellTooBig:
        produced = 0
    assert produced <= shellwords.MAX_EXPANDED_CHARS + len(text)
    assert all(len(v) <= shellwords.MAX_EXPANDED_CHARS + len(text) for v in env.values())


def test_a_well_formed_script_still_imports() -> None:
    text = 'export X="--xla_a=1"\nxpk workload create --device-type=v5litepod-16 --command "LIBTPU_INIT_ARGS=${X:-none} python3 -m MaxText.train MaxText/configs/base.yml steps=5"\n'
    assert import_recipe(text).recipe["steps"] == 5


# ------------------------------------------------------------ the API server


@pytest.mark.parametrize("mode", ["trickle", "trickle-headers"])
@pytest.mark.parametrize("client", ["stdlib", "kubernetes"])
def test_a_trickling_server_meets_the_overall_deadline(tmp_path: Path, monkeypatch, mode: str, client: str) -> None:
    monkeypatch.setenv("TGK_REQUEST_TIMEOUT", "0.5")
    with serve({"/version": mode}, interval=0.05, size=10_000) as h:
        user = {} if client == "stdlib" else {"token": "t"}
        (err, seconds) = within(lambda: pytest.raises(Unreachable, Cluster.connect, h.kubeconfig(tmp_path, user)).value)
    assert "timed out" in str(err) and "TGK_REQUEST_TIMEOUT" in str(err)
    assert seconds >= 0.5  # not before the deadline: the deadline, not a refused connection, ended it


@pytest.mark.parametrize("client", ["stdlib", "kubernetes"])
def test_an_endless_body_is_refused_at_its_cap_not_read_into_memory(tmp_path: Path, client: str) -> None:
    with serve({"/version": "endless"}) as h:
        t = tr.StdlibTransport(h.url, None, 5, deadline=30) if client == "stdlib" else _kube(h, tmp_path)
        (err, _) = within(lambda: pytest.raises(Rejected, t.request, "GET", "/version").value)
    assert "over 64 MiB" in str(err)


def _kube(h, tmp_path: Path):
    from workloads.cluster import kubeconfig as kc

    return kc.kube_client_transport(kc.read_kubeconfig(h.kubeconfig(tmp_path, {"token": "t"}), None), 5)


@pytest.mark.parametrize("client", ["stdlib", "kubernetes"])
def test_streams_bound_lines_and_time(tmp_path: Path, client: str) -> None:
    with serve({"/line": "endless-line", "/flood": "endless", "/drip": "trickle"}, interval=0.1) as h:
        t = tr.StdlibTransport(h.url, None, 5, deadline=30) if client == "stdlib" else _kube(h, tmp_path)
        err, _ = within(lambda: pytest.raises(Rejected, lambda: list(t.stream("/line", timeout=5, deadline=10))).value)
        assert "a line of the API server's answer is over 4 MiB" in str(err)
        # A log read whole must not end silently cut short: a deadline is an error...
        err, _ = within(lambda: pytest.raises(Unreachable, lambda: list(t.stream("/flood", timeout=5, deadline=0.5, ends=False))).value)
        assert "timed out" in str(err)
        # ... while a watch just ends there (the waiting caller polls again).
        lines, seconds = within(lambda: list(t.stream("/drip", timeout=5, deadline=0.5)))
        assert lines == []


def test_status_against_a_trickling_server_exits_3_in_a_real_process(tmp_path: Path) -> None:
    """The reported hang: `status` against a server that sends one byte every few seconds."""
    with serve({"*": "trickle"}, interval=0.5, size=100_000) as h:
        kubeconfig = h.kubeconfig(tmp_path)
        p = subprocess.run(
            [sys.executable, "-m", "workloads", "status", "r1", "-n", "research", "--kubeconfig", str(kubeconfig)],
            cwd=REPO,
            env={**os.environ, "TGK_REQUEST_TIMEOUT": "1"},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
    one_line(p.returncode, p.stderr, 3, "timed out")


def test_answers_that_are_not_json_objects_are_rejected_in_one_line() -> None:
    for body in (b"[" * 100_000 + b"]" * 100_000, b"[1, 2]", b"<html>", b"\xff\xfe"):
        with pytest.raises(Rejected, match="not a JSON object"):
            tr.Response(200, body).json()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e9", "abc", "3601"])
def test_the_request_deadline_variable_is_bounded(monkeypatch, value: str) -> None:
    monkeypatch.setenv("TGK_REQUEST_TIMEOUT", value)
    with pytest.raises(FieldError, match="^TGK_REQUEST_TIMEOUT: "):
        tr.request_deadline()


# ------------------------------------------------------------ the exec credential plugin


def _plugin(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "plugin.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def _exec_user(script: Path) -> dict:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": f"./{script.name}"}}


def test_a_plugin_that_never_answers_is_stopped_at_the_deadline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TGK_REQUEST_TIMEOUT", "0.5")
    pid_file = tmp_path / "pid"
    script = _plugin(tmp_path, f"echo $$ > {pid_file}\nsleep 1000 &\nwait\n")
    with serve({"*": "json"}) as h:
        err, _ = within(lambda: pytest.raises(ClusterError, Cluster.connect, h.kubeconfig(tmp_path, _exec_user(script))).value)
    assert "did not answer within 0.5 s" in str(err)
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # its process group went with it
        os.kill(int(pid_file.read_text()), 0)


def test_a_plugin_that_never_answers_in_a_real_process(tmp_path: Path) -> None:
    script = _plugin(tmp_path, "sleep 1000\n")
    with serve({"*": "json"}) as h:
        kubeconfig = h.kubeconfig(tmp_path, _exec_user(script))
        p = subprocess.run(
            [sys.executable, "-m", "workloads", "status", "r1", "-n", "research", "--kubeconfig", str(kubeconfig)],
            cwd=REPO,
            env={**os.environ, "TGK_REQUEST_TIMEOUT": "1"},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
    one_line(p.returncode, p.stderr, 3, "credential plugin", "did not answer")


def test_a_flooding_plugin_is_stopped_at_its_output_cap(tmp_path: Path) -> None:
    script = _plugin(tmp_path, "yes\n")
    with serve({"*": "json"}) as h:
        err, _ = within(lambda: pytest.raises(ClusterError, Cluster.connect, h.kubeconfig(tmp_path, _exec_user(script))).value)
    assert "printed more than 1024 KiB" in str(err)


def test_a_plugin_token_is_sent_and_renewed_when_it_expires(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    # Each run answers a new token that has already expired: every request renews it.
    script = _plugin(
        tmp_path,
        f'echo x >> {count}\nn=$(wc -l < {count})\necho \'{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        f'"status":{{"token":"tok-\'$n\'","expirationTimestamp":"2000-01-01T00:00:00Z"}}}}\'\n',
    )
    from tests.support.fake_apiserver import serve as serve_api

    with serve_api() as api:
        kubeconfig = tmp_path / "kc"
        doc = yaml.safe_load(api.kubeconfig(tmp_path).read_text())
        doc["users"][0]["user"] = _exec_user(script)
        kubeconfig.write_text(yaml.safe_dump(doc))
        c = Cluster.connect(kubeconfig)
        c.server_version()
    auths = [s["auth"] for s in api.seen]
    assert auths[0].startswith("Bearer tok-") and auths[-1] != auths[0]
    assert len(count.read_text().splitlines()) >= 2


def test_a_plugin_with_a_credential_that_is_no_json_is_one_line(tmp_path: Path) -> None:
    script = _plugin(tmp_path, "echo '[[[[['\n")
    with serve({"*": "json"}) as h:
        with pytest.raises(ClusterError, match="not an ExecCredential"):
            Cluster.connect(h.kubeconfig(tmp_path, _exec_user(script)))


# ------------------------------------------------------------ the price catalog


def test_the_price_fetch_has_a_deadline(monkeypatch) -> None:
    from infra import price_refresh as pr

    monkeypatch.setattr(pr, "PAGE_DEADLINE_S", 0.5)
    with serve({"*": "trickle"}, interval=0.1, size=100_000) as h:
        err, _ = within(lambda: pytest.raises(pr.FetchError, pr.fetch_pages, pr.skus_url(h.url), api_key="k", token=None).value)
    assert "no complete answer within 0.5 s" in str(err)


def test_a_saved_response_with_nan_or_deep_nesting_is_one_line(tmp_path: Path) -> None:
    for i, text in enumerate(['{"skus": [{"x": NaN}]}', "[" * 100_000 + "]" * 100_000]):
        p = tmp_path / f"r{i}.json"
        p.write_text(text)
        rc, _, err = cli(INFRA, "prices", "refresh", "--from-file", str(p), "--as-of", "2026-01-01", "--dry-run")
        one_line(rc, err, 2, "--from-file")


def test_skus_with_impossible_money_are_skipped_not_a_traceback() -> None:
    from infra import price_refresh as pr

    def sku(units, nanos=0):
        return {
            "description": "TPU v5e chip",
            "category": {"resourceGroup": "TPU", "usageType": "OnDemand"},
            "serviceRegions": ["us-west4"],
            "pricingInfo": [{"pricingExpression": {"usageUnit": "h", "tieredRates": [{"startUsageAmount": 0, "unitPrice": {"units": units, "nanos": nanos}}]}}],
        }

    found = pr.tpu_prices([{"skus": [sku("abc"), sku("9" * 5000), sku("1e400"), sku(2000), sku(None, float("nan")), "not a sku", sku("1", 200_000_000)]}])
    assert found.prices == {("v5e", "us-west4", "on-demand"): 1.2}
    assert json.dumps(found.skipped)  # counted, with a reason each
