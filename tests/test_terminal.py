"""Text from the cluster and the cloud reaches a terminal escaped, credentials redacted (toolkit/terminal.py).

- the mechanism: ``safe`` over any text leaves no character a terminal acts on but newline
  and tab, keeps every other character, and ``SafeStream`` gives the same bytes however the
  writes are cut; a credential in a URL or a ``key=value`` never comes out;
- through the CLIs, as a user sees them: an Event whose message erases the line and prints
  "Succeeded" reaches ``status`` as visible escapes; a node pool's statusMessage reaches
  ``pools status`` the same way; an error quoting a URL with a password is redacted; a child
  process's output (what ``capture=False`` used to hand the terminal) is relayed through it;
- the code: nothing writes to the terminal around it (``sys.__stdout__``, a file descriptor,
  a subprocess that inherits the terminal), and both CLIs run through ``clikit.run``.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import REPO, cli
from toolkit import credentials, terminal, tools

ESC = "\x1b"
TERMINAL_ACTS_ON = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))] + [
    "\u061c",
    "\u200e",
    "\u200f",
    *(chr(c) for c in range(0x202A, 0x202F)),
    *(chr(c) for c in range(0x2066, 0x206A)),
    "\u2028",
    "\u2029",
]


def _acts(text: str) -> list[str]:
    return [c for c in text if c in TERMINAL_ACTS_ON]


# ------------------------------------------------------------------ the mechanism


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_safe_text_holds_nothing_a_terminal_acts_on(text: str) -> None:
    out = terminal.safe(text)
    assert not _acts(out), repr(out)
    assert not _acts(terminal.one_line(text)) and "\n" not in terminal.one_line(text)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "é", "\n", "\x1b", "[", "2K", "\r", "\u202e", "x=1", " ", "token=", "https://u:p@h"]), max_size=40).map("".join), st.data()
)
def test_a_stream_gives_the_same_text_however_the_writes_are_cut(text: str, data: st.DataObject) -> None:
    whole, cut = io.StringIO(), io.StringIO()
    a = terminal.SafeStream(whole)
    a.write(text)
    a.flush()
    b = terminal.SafeStream(cut)
    i = 0
    while i < len(text):
        n = data.draw(st.integers(1, 8))
        b.write(text[i : i + n])
        i += n
    b.flush()
    assert whole.getvalue() == cut.getvalue() == terminal.safe(text)


def test_printable_text_passes_unchanged() -> None:
    text = "research/r1: Running — 2/2 pods; 数据 ✓ tab\there\n"
    assert terminal.safe(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("cannot reach https://alice:s3cret@example.com/api", "s3cret"),
        ("clone https://ghp_0123456789abcdef@github.com/o/r", "ghp_0123456789abcdef"),
        ("--set hf_access_token=hf_AbCdEf0123", "hf_AbCdEf0123"),
        ('{"access_token": "ya29.a0AfH6", "expires_in": 3599}', "ya29.a0AfH6"),
        ("HF_TOKEN: hf_secret_value", "hf_secret_value"),
        ("Authorization: Bearer eyJhbGciOi", "eyJhbGciOi"),
        ("password='hunter2'", "hunter2"),
        ("users:\n- name: u\n  user:\n    token: abc.def.ghi\n", "abc.def.ghi"),
    ],
)
def test_credentials_are_redacted(text: str, secret: str) -> None:
    assert secret not in credentials.redact(text) and credentials.REDACTED in credentials.redact(text)
    assert secret not in terminal.safe(text)


@pytest.mark.parametrize(
    "text",
    [
        "automountServiceAccountToken: false",
        "tokenizer_path=assets/tokenizers/tokenizer.llama2",
        "tokenize_train_data: true",
        "pass --secret-env HF_TOKEN=hf-token/token",
        "kind: Secret",
        "GET https://x.googleapis.com/v1/skus?pageSize=5000&pageToken=CiAKGjBpNDd2Nmp2Zml2cXRx",
        '{"nextPageToken": "CiAKGjBpNDd2"}',
        "type: kubernetes.io/service-account-token",
        "the worker's token controller did not fill the Secret",
    ],
)
def test_what_is_no_credential_is_kept(text: str) -> None:
    assert credentials.redact(text) == text


def test_an_error_message_is_redacted_and_one_line() -> None:
    from toolkit.errors import FieldError

    e = FieldError("--endpoint", "cannot reach https://bob:pw123@10.0.0.1/\nsecond line", "check the URL")
    assert "pw123" not in str(e)
    err = io.StringIO()
    saved = sys.stderr
    sys.stderr = err
    try:
        from toolkit.clikit import err_line

        err_line(str(e))
    finally:
        sys.stderr = saved
    assert err.getvalue().count("\n") == 1 and "pw123" not in err.getvalue() and "\\n" in err.getvalue()


# ------------------------------------------------------------------ through the CLIs

JOBSET_FAILED = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "r1", "namespace": "research", "uid": "u1"},
    "spec": {"suspend": False, "replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {"parallelism": 2}}}]},
    "status": {"restarts": 1},
}
# Up a line, erase it, carriage return: on a raw terminal the status line above would read "Succeeded".
HOSTILE = f"{ESC}[1A{ESC}[2K\rresearch/r1: Succeeded — 2/2 pods finished{ESC}]0;owned\x07\u202e"


def test_a_hostile_event_reaches_status_escaped(tmp_path: Path) -> None:
    from tests.support.fake_apiserver import serve

    with serve() as server:
        server.json("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/r1", JOBSET_FAILED)
        server.json("GET", "/apis/kueue.x-k8s.io", {"preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2"}})
        server.json("GET", "/apis/kueue.x-k8s.io/v1beta2", {"resources": [{"name": "workloads", "kind": "Workload", "namespaced": True}]})
        server.json("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads", {"items": []})
        server.json("GET", "/api/v1/namespaces/research/pods", {"items": []})
        event = {"type": "Warning", "reason": "BackoffLimitExceeded", "message": HOSTILE, "lastTimestamp": "2026-11-27T00:00:00Z"}
        server.json("GET", "/api/v1/namespaces/research/events", {"items": [event]})
        kc = str(server.kubeconfig(tmp_path))
        text = cli("workloads", "status", "r1", "--kubeconfig", kc)
        js = cli("workloads", "status", "r1", "--kubeconfig", kc, "-o", "json")
    assert text.returncode == 0, text.stderr
    assert "BackoffLimitExceeded" in text.stdout, text.stdout
    for out in (text.stdout + text.stderr, js.stdout + js.stderr):
        assert not _acts(out.replace("\n", "").replace("\t", "")), repr(out)
    assert "\\x1b[1A\\x1b[2K" in text.stdout and "\\u202e" in text.stdout  # shown, not obeyed
    assert json.loads(js.stdout)  # JSON stays JSON (its own escapes carry the characters)


def test_a_hostile_node_pool_message_reaches_pools_status_escaped(monkeypatch) -> None:
    from infra.spec import load_spec
    from tests import test_cloud_checks as cc

    monkeypatch.setenv(cc.TOKEN_ENV_VAR, "test-token")
    google = cc.FakeGoogle({})
    try:
        names = load_spec("examples/fallback.yaml").tpu_pools[0].node_pool_names()
        answers = dict.fromkeys(names, ("RUNNING", ""))
        answers[names[1]] = ("ERROR", HOSTILE)
        google.routes[f"/v1/projects/{cc.PROJECT}/locations/us-east5/clusters/fallback/nodePools"] = cc.node_pools(answers)
        proc = cli("infra", "pools", "status", "--spec", "examples/fallback.yaml", "--endpoint", google.url)
    finally:
        google.close()
    assert proc.returncode == 1, proc.stderr
    assert not _acts(proc.stdout.replace("\n", "")) and "Succeeded" in proc.stdout  # the text is there, shown, not obeyed


def test_a_child_process_output_is_relayed_through_the_guard(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(f"import sys\nprint({HOSTILE!r})\nprint('https://u:topsecret@h/x', file=sys.stderr)\n")
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        with terminal.guarded():
            done = tools.run([sys.executable, str(script)], capture=False)
    finally:
        sys.stdout, sys.stderr = saved
    assert done.returncode == 0
    assert not _acts(out.getvalue().replace("\n", "")) and "\\x1b[2K" in out.getvalue()
    assert "topsecret" not in err.getvalue() and "https://***@h/x" in err.getvalue()


# ------------------------------------------------------------------ the code keeps to it

PACKAGES = ("toolkit", "infra", "workloads")
SOURCES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
# Programs the toolkit starts that are not its CLIs: a container's entrypoint (its output is the
# pod's log), the local cluster's daemons (their output goes to their log files), the MaxText driver.
NOT_A_CLI = (
    "workloads/ray/",
    "workloads/local/rehearsald.py",
    "workloads/local/agents.py",
    "workloads/local/kuberay.py",
    "workloads/maxtext/driver.py",
    "infra/app.py",
)
# The places that start processes: each hands the child pipes or files, never the terminal.
LAUNCHERS = {"toolkit/tools.py", "workloads/data/mount.py", "workloads/local/procs.py"}


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


def test_nothing_writes_to_the_terminal_around_the_guard() -> None:
    bad = []
    for path in SOURCES:
        rel = str(path.relative_to(REPO))
        if rel.startswith(NOT_A_CLI):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, ast.Attribute) else ""
            if text in ("sys.__stdout__", "sys.__stderr__", "sys.stdout.buffer", "sys.stderr.buffer"):
                bad.append(f"{rel}:{node.lineno} {text}")
        for call, name in _calls(tree):
            if name in ("os.write", "os.fdopen") and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value in (1, 2):
                bad.append(f"{rel}:{call.lineno} {name} to fd {call.args[0].value}")
            if name in ("open", "io.open") and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == "/dev/tty":
                bad.append(f"{rel}:{call.lineno} opens /dev/tty")
            if name.startswith("subprocess.") and name.split(".")[1] in ("Popen", "run", "call", "check_call", "check_output"):
                if rel not in LAUNCHERS:
                    bad.append(f"{rel}:{call.lineno} {name}: start programs through toolkit.tools.run")
                    continue
                kw = {k.arg for k in call.keywords}
                if not ({"stdout", "stderr"} <= kw or "capture_output" in kw):
                    bad.append(f"{rel}:{call.lineno} {name} lets the child inherit the terminal: give it stdout= and stderr=")
            if name in ("os.system", "os.popen") or name.startswith(("os.exec", "os.spawn", "pty.")):
                bad.append(f"{rel}:{call.lineno} {name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", ["infra", "workloads"])
def test_both_clis_run_through_clikit_run(module: str) -> None:
    main = (REPO / module / "cli" / "__init__.py") if (REPO / module / "cli" / "__init__.py").exists() else REPO / module / "cli.py"
    tree = ast.parse(main.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert any(name in ("run", "clikit.run") for _, name in _calls(fn)), ast.unparse(fn)
    entry = (REPO / module / "__main__.py").read_text()
    assert "main()" in entry


def test_run_restores_the_streams_and_prints_a_bug_through_the_guard() -> None:
    from toolkit.clikit import make_app, run

    app = make_app("t", "test")

    @app.command()
    def boom() -> None:
        raise RuntimeError(f"https://u:leak@h {ESC}[2K")

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        rc = run(app, ["boom"])
        assert (sys.stdout, sys.stderr) == (out, err)
    finally:
        sys.stdout, sys.stderr = saved
    assert rc == 1 and "Traceback" in err.getvalue() and "leak" not in err.getvalue() and ESC not in err.getvalue()
