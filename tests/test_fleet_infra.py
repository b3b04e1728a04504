"""`python -m infra` with a fleet file: every member in the stated order, or a one-line refusal naming what to run instead.

Run as a user runs it (tests/support/cli.py), with real synthesis and a terraform that logs
each call (``TGK_TERRAFORM``): create is every worker then the manager, destroy the reverse,
each member's terraform in its own stack directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, cli

FLEET = REPO / "examples" / "fleet" / "fleet.yaml"
CREATE = ["tpu-west", "tpu-east", "tpu-fleet-mgr"]


def infra(*args: str, env: dict[str, str] | None = None, stdin: str | None = None):
    return cli("infra", *args, env=env, stdin=stdin)


def fake_terraform(tmp_path: Path, *, fail_apply_in: str = "") -> tuple[Path, Path]:
    """A terraform logging "<stack dir> <command>" per call; ``apply`` fails in the stack dir named ``fail_apply_in``."""
    log, fake = tmp_path / "terraform.log", tmp_path / "terraform"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "args = sys.argv[1:]\n"
        "stack = pathlib.Path(args[0].removeprefix('-chdir='))\n"
        f"pathlib.Path({str(log)!r}).open('a').write(stack.name + ' ' + args[1] + '\\n')\n"
        f"if args[1] == 'apply' and stack.name == {fail_apply_in!r}:\n"
        "    sys.stderr.write('Error: creating Cluster: googleapi: Error 403: Permission denied\\n')\n"
        "    sys.exit(1)\n"
        "if args[1] == 'output':\n"
        "    declared = json.loads((stack / 'cdk.tf.json').read_text()).get('output', {})\n"
        "    print(json.dumps({k: {'sensitive': False, 'type': 'string', 'value': stack.name + ':' + k} for k in declared}))\n"
    )
    fake.chmod(0o755)
    return fake, log


def calls(log: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in log.read_text().splitlines()]  # type: ignore[misc]


def unprotected_fleet(tmp_path: Path) -> Path:
    """The example fleet with deletion protection off on every member (the manager's cluster settings are the first worker's)."""
    for name in ("west", "east"):
        doc = yaml.safe_load((FLEET.parent / f"{name}.yaml").read_text())
        doc["cluster"]["deletion_protection"] = False
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "fleet.yaml").write_text(FLEET.read_text())
    return tmp_path / "fleet.yaml"


# ------------------------------------------------------------------ spec, check: no terraform


def test_spec_shows_every_member_in_deploy_order():
    proc = infra("spec", "--spec", str(FLEET), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(m["member"], m["role"], m["cluster"]) for m in doc["members"]] == [
        ("west", "worker", "tpu-west"),
        ("east", "worker", "tpu-east"),
        ("manager", "manager", "tpu-fleet-mgr"),
    ]
    mgr = doc["members"][2]
    assert mgr["state"] == "gs://my-tpu-project-tf-state/tpu-gke-toolkit/tpu-fleet-mgr"
    assert mgr["queue_pools"] == ["west-v5e-16", "east-v5e-16"]
    (bucket,) = mgr["buckets"]
    assert bucket["location"] == "US" and len(bucket["granted_to"]) == 2
    text = infra("spec", "--spec", str(FLEET))
    assert text.returncode == 0, text.stderr
    headers = [ln for ln in text.stdout.splitlines() if ln.startswith("== ")]
    assert headers == ["== worker west (tpu-west)", "== worker east (tpu-east)", "== manager tpu-fleet-mgr"]


def test_check_dry_run_lists_each_worker_s_requests_and_the_manager_has_none():
    proc = infra("check", "--spec", str(FLEET), "--dry-run", "--endpoint", "http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("== ")
    assert [part.splitlines()[0] for part in out[1:]] == ["worker west (tpu-west)", "worker east (tpu-east)", "manager tpu-fleet-mgr"]
    assert "us-west4-a" in out[1] and "us-east5-a" not in out[1] and "us-east5-a" in out[2]
    assert "nothing to check" in out[3] and "GET" not in out[3]


def test_a_member_s_refusal_names_the_member(tmp_path: Path):
    """A check refused on a worker's spec names the worker: workers[0].spec <the spec's field>; nothing of the next worker is asked."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            body = json.dumps({"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = infra("check", "--spec", str(FLEET), "--endpoint", url, env={"TGK_ACCESS_TOKEN": "t"})
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: workers[0].spec zones[0]: ") and "us-west4-a" in line, line
    assert seen and not any("us-east5" in p for p in seen), "the second worker is not checked after the first refused"


@pytest.mark.parametrize(
    "args, command",
    [
        (("pools", "status"), "pools status"),
        (("pools", "scale-to-zero", "--dry-run"), "pools scale-to-zero"),
        (("pools", "delete-tpu", "--dry-run"), "pools delete-tpu"),
        (("prices", "show"), "prices show"),
    ],
)
def test_a_one_cluster_command_refuses_a_fleet_naming_the_worker_specs(args: tuple[str, ...], command: str, tmp_path: Path):
    proc = infra(*args, "--spec", str(FLEET))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: --spec: {FLEET} is a fleet file, and `python -m infra {command}` acts on one cluster — "), line
    assert f"--spec {FLEET.parent / 'west.yaml'} or --spec {FLEET.parent / 'east.yaml'}" in line
    assert proc.stdout == ""


# ------------------------------------------------------------------ synth, plan, deploy, outputs, destroy


@pytest.mark.synth
def test_synth_with_a_fleet_as_spec_is_synth_fleet(tmp_path: Path):
    a = infra("synth", "--spec", str(FLEET), "--out", str(tmp_path / "a"))
    b = infra("synth", "--fleet", str(FLEET), "--out", str(tmp_path / "b"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert [Path(p).parent.name for p in a.stdout.split()] == CREATE
    for name in CREATE:
        assert (tmp_path / "a" / "stacks" / name / "cdk.tf.json").read_bytes() == (tmp_path / "b" / "stacks" / name / "cdk.tf.json").read_bytes()


@pytest.mark.synth
def test_deploy_plans_every_member_then_applies_workers_first_the_manager_last(tmp_path: Path):
    fake, log = fake_terraform(tmp_path)
    proc = infra("deploy", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "--yes", "--no-checks", env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 0, proc.stderr
    planned = [(s, c) for s in CREATE for c in ("init", "plan")]
    assert calls(log) == planned + [(s, "apply") for s in CREATE], "every plan before any apply; workers, then the manager"
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("== applied")] == [
        "== applied worker west (tpu-west)",
        "== applied worker east (tpu-east)",
        "== applied manager tpu-fleet-mgr",
    ]


@pytest.mark.synth
def test_a_failed_member_stops_the_deploy_before_the_next(tmp_path: Path):
    fake, log = fake_terraform(tmp_path, fail_apply_in="tpu-east")
    proc = infra("deploy", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "--yes", "--no-checks", env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode != 0
    applied = [s for s, c in calls(log) if c == "apply"]
    assert applied == ["tpu-west", "tpu-east"], "the manager is never applied after a worker failed"
    assert "== applied worker west (tpu-west)" in proc.stderr and "== applied worker east" not in proc.stderr


@pytest.mark.synth
def test_a_deploy_not_confirmed_applies_nothing(tmp_path: Path):
    fake, log = fake_terraform(tmp_path)
    proc = infra("deploy", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "--no-checks", env={"TGK_TERRAFORM": str(fake)}, stdin="n\n")
    assert proc.returncode != 0
    assert [c for _, c in calls(log)] == ["init", "plan"] * 3
    assert "tpu-west" in proc.stderr and "tpu-fleet-mgr" in proc.stderr  # the question names every member, in order


@pytest.mark.synth
def test_destroy_goes_manager_first_then_the_workers_in_reverse(tmp_path: Path):
    fleet = unprotected_fleet(tmp_path)
    fake, log = fake_terraform(tmp_path)
    proc = infra("destroy", "--spec", str(fleet), "--out", str(tmp_path / "out"), "--yes", env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 0, proc.stderr
    order = list(reversed(CREATE))
    assert calls(log) == [(s, c) for s in order for c in ("init", "plan", "apply")]


@pytest.mark.synth
def test_destroy_of_a_protected_member_touches_no_member(tmp_path: Path):
    fake, log = fake_terraform(tmp_path)
    proc = infra("destroy", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "--yes", env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: workers[0].spec cluster.deletion_protection: is true for worker west (tpu-west)"), line
    assert not log.exists(), "nothing may run when one member cannot be destroyed"
    assert not (tmp_path / "out").exists()


@pytest.mark.synth
def test_outputs_reads_each_member_s_state(tmp_path: Path):
    fake, log = fake_terraform(tmp_path)
    proc = infra("outputs", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "-o", "json", env={"TGK_TERRAFORM": str(fake)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc) == ["west", "east", "manager"]
    assert doc["manager"]["cluster_name"] == "tpu-fleet-mgr:cluster_name" and doc["west"]["cluster_name"] == "tpu-west:cluster_name"
    assert [s for s, c in calls(log) if c == "output"] == CREATE


@pytest.mark.synth
def test_plan_dry_run_prints_each_member_s_calls_in_order(tmp_path: Path):
    proc = infra("plan", "--spec", str(FLEET), "--out", str(tmp_path / "out"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    headers = [ln for ln in lines if ln.startswith("== ")]
    assert [h.split(": ")[0] for h in headers] == ["== worker west (tpu-west)", "== worker east (tpu-east)", "== manager tpu-fleet-mgr"]
    for stack in CREATE:
        assert any(f"-chdir={tmp_path / 'out' / 'stacks' / stack} plan" in ln for ln in lines), stack
