"""toolkit/dirops.py: the directory operations a run's directory is read and written with, on this machine and on Lustre.

The same source is the whole program of the Lustre helper pod (workloads/render/volume_helper.py),
so the pod's own command line is run here as a process — exactly the argv the pod gets — as
well as the module in-process. Each rule is attacked: a symlink where a directory belongs
(another team's, on a shared Lustre), a record that changed since it was read, a file that
appeared since it was looked for.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit import dirops
from workloads.render import volume_helper


def _one(base: Path, **op) -> dict:
    (got,) = dirops.handle({"base": str(base), "ops": [op]})
    return got


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_create_is_once_and_replace_only_at_the_digest_read(tmp_path: Path) -> None:
    assert _one(tmp_path, op="read", path="ns/run/tgk-run.json") == {"data": None}
    assert _one(tmp_path, op="create", path="ns/run/tgk-run.json", data=_b64(b"one")) == {"written": True}
    assert _one(tmp_path, op="create", path="ns/run/tgk-run.json", data=_b64(b"two")) == {"written": False}  # never an existing file
    assert (tmp_path / "ns/run/tgk-run.json").read_bytes() == b"one"
    stale = hashlib.sha256(b"zero").hexdigest()
    assert _one(tmp_path, op="replace", path="ns/run/tgk-run.json", data=_b64(b"two"), expect=stale) == {"written": False}
    read = hashlib.sha256(b"one").hexdigest()
    assert _one(tmp_path, op="replace", path="ns/run/tgk-run.json", data=_b64(b"two"), expect=read) == {"written": True}
    assert (tmp_path / "ns/run/tgk-run.json").read_bytes() == b"two"
    assert sorted(p.name for p in (tmp_path / "ns/run").iterdir()) == ["tgk-run.json"]  # no temporary file left
    assert "error" in _one(tmp_path, op="replace", path="ns/run/tgk-run.json", data=_b64(b"x"))  # no digest: no replace


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "ns/../../x", "a/./b"])
def test_paths_outside_the_base_are_refused(tmp_path: Path, path: str) -> None:
    assert "error" in _one(tmp_path, op="read", path=path)
    assert "error" in _one(tmp_path, op="create", path=path, data=_b64(b"x"))


def test_a_symlink_below_the_base_is_never_crossed(tmp_path: Path) -> None:
    """On a shared Lustre another team could plant a link where a run's directory goes."""
    other = tmp_path / "other-team"
    (other / "exp1" / "checkpoints" / "5").mkdir(parents=True)
    (other / "exp1" / "tgk-run.json").write_bytes(b"theirs")
    base = tmp_path / "mount"
    (base / "llm").mkdir(parents=True)
    os.symlink(other / "exp1", base / "llm" / "exp1")
    assert "link" in _one(base, op="read", path="llm/exp1/tgk-run.json")["error"]
    assert "link" in _one(base, op="create", path="llm/exp1/new.json", data=_b64(b"x"))["error"]
    assert "error" in _one(base, op="delete", path="llm/exp1/", record="tgk-run.json", expect=hashlib.sha256(b"theirs").hexdigest(), parts=["checkpoints/"])
    assert (other / "exp1" / "checkpoints" / "5").is_dir() and not (other / "exp1" / "new.json").exists()
    os.symlink(other / "exp1" / "tgk-run.json", base / "llm" / "tgk-run.json")
    assert "link" in _one(base, op="read", path="llm/tgk-run.json")["error"]


def test_survey_and_delete_by_the_records_digest(tmp_path: Path) -> None:
    run = tmp_path / "llm" / "exp1"
    (run / "checkpoints" / "10" / "items").mkdir(parents=True)
    (run / "checkpoints" / "10" / "items" / "state").write_bytes(b"w" * 10)
    (run / "metrics").mkdir()
    (run / "metrics" / "m.txt").write_bytes(b"{}")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events").write_bytes(b"e")
    (run / "tgk-run.json").write_bytes(b"record")
    (tmp_path / "llm" / "stray.txt").write_bytes(b"not a run")
    got = _one(tmp_path, op="survey", path="llm/", record="tgk-run.json", parts=["checkpoints/", "metrics/"])
    (d,) = got["dirs"]
    assert d["name"] == "exp1" and base64.b64decode(d["record"]) == b"record"
    assert d["parts"]["checkpoints/"]["files"] == 1 and d["parts"]["checkpoints/"]["bytes"] == 10 and d["parts"]["metrics/"]["files"] == 1
    wrong = _one(tmp_path, op="delete", path="llm/exp1/", record="tgk-run.json", expect=hashlib.sha256(b"other").hexdigest(), parts=["checkpoints/"])
    assert wrong["deleted"] == 0 and "changed" in wrong["why"] and (run / "checkpoints").is_dir()
    assert "error" in _one(tmp_path, op="delete", path="llm/exp1/", record="tgk-run.json", expect="", parts=["checkpoints/"])  # no permit's digest
    assert "error" in _one(tmp_path, op="delete", path="llm/exp1/", record="tgk-run.json", expect=hashlib.sha256(b"record").hexdigest(), parts=["../x"])
    done = _one(
        tmp_path, op="delete", path="llm/exp1/", record="tgk-run.json", expect=hashlib.sha256(b"record").hexdigest(), parts=["checkpoints/", "metrics/"]
    )
    assert done == {"deleted": 2}
    assert sorted(p.name for p in run.iterdir()) == ["tensorboard", "tgk-run.json"]  # the traces and the record stay


def test_a_link_inside_a_deleted_part_is_removed_not_followed(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_bytes(b"p")
    run = tmp_path / "base" / "r"
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(keep, run / "checkpoints" / "link")
    (run / "tgk-run.json").write_bytes(b"rec")
    done = _one(tmp_path / "base", op="delete", path="r/", record="tgk-run.json", expect=hashlib.sha256(b"rec").hexdigest(), parts=["checkpoints/"])
    assert done == {"deleted": 1} and (keep / "precious").read_bytes() == b"p"


def test_the_pods_own_command_runs_the_request(tmp_path: Path) -> None:
    """The helper pod's container command and argument, run as a process here (the pod's python3 is this one)."""
    request = {"base": str(tmp_path), "ops": [{"op": "create", "path": "ns/r/tgk-run.json", "data": _b64(b"id")}, {"op": "list", "path": "ns/r/", "limit": 5}]}
    pod = volume_helper.helper_pod(name="h", namespace="ns", claim="c", mount_dir="/checkpoints", request=request, run_as_user=None)
    (c,) = pod["spec"]["containers"]
    assert c["command"][:2] == ["python3", "-c"] and volume_helper.request_of(pod) == request
    out = subprocess.run([sys.executable, *c["command"][1:], *c["args"]], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith(dirops.RESULT_MARK)]
    assert json.loads(line[len(dirops.RESULT_MARK) :]) == [{"written": True}, {"names": ["tgk-run.json"]}]
    bad = subprocess.run([sys.executable, "-c", c["command"][2], "not json"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 0 and "unreadable request" in bad.stdout


def test_the_local_cluster_plays_only_this_checkouts_program() -> None:
    pod = volume_helper.helper_pod(name="h", namespace="ns", claim="c", mount_dir="/checkpoints", request={"base": "/checkpoints", "ops": []}, run_as_user=1000)
    assert volume_helper.request_of(pod) is not None
    pod["spec"]["containers"][0]["command"][2] = "import os; os.system('rm -rf /')"
    assert volume_helper.request_of(pod) is None
    sec = pod["spec"]["securityContext"]
    assert sec["runAsUser"] == 1000 and pod["spec"]["automountServiceAccountToken"] is False  # the team's runs' user, no token


def test_the_mount_path_maps_to_the_directory_playing_it(tmp_path: Path) -> None:
    (got,) = dirops.handle({"base": "/checkpoints", "ops": [{"op": "create", "path": "llm/r/x", "data": _b64(b"1")}]}, {"/checkpoints": str(tmp_path)})
    assert got == {"written": True} and (tmp_path / "llm/r/x").read_bytes() == b"1"
    (got,) = dirops.handle({"base": "relative", "ops": [{"op": "read", "path": "x"}]})
    assert "absolute" in got["error"]
