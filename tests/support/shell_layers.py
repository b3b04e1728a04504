"""What stands between a rendered object and the program's argv, run for real where it can be.

- ``kubelet_expand``: the kubelet's ``$(NAME)`` / ``$$`` expansion of a container's command,
  args and env values (Kubernetes v1.34 ``third_party/forked/golang/expansion/expand.go``).
  A model: tests/integration/test_injection_real.py checks it against that Go code.
- ``kuberay_submitter``: the K8sJobMode submitter container KubeRay v1.6.0 builds from a
  RayJob (``ray-operator/controllers/ray/common/job.go`` ``BuildJobSubmitCommand`` lines
  109-198, ``utils/util.go`` ``GetContainerCommand`` lines 917-925,
  ``rayjob_controller.go`` ``configureSubmitterContainer`` lines 627-652). A model too, checked
  against KubeRay's own function by the same integration test.
- ``Shims``: on PATH in place of the programs: ``python3`` writes the argv it was given (and,
  for the JaxTrainer entrypoint, the MaxText command line its real ``parse_args`` decodes);
  ``ray`` plays the two lines of ``ray job submit`` and Ray's job supervisor that touch the
  entrypoint: ``subprocess.list2cmdline`` of the words after ``--``
  (``ray/dashboard/modules/job/cli.py`` ``submit``) and ``subprocess.Popen(entrypoint,
  shell=True)`` (``ray/dashboard/modules/job/job_supervisor.py`` ``_exec_entrypoint``), with
  the real standard-library functions. The real ``ray`` replaces it in the integration test.

The shells themselves are always real: ``/bin/sh`` runs the exit guard, ``/bin/bash`` the
submitter's script, ``/bin/sh`` (via ``shell=True``) the entrypoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """``$$`` -> ``$``; ``$(NAME)`` -> env[NAME] when NAME is set, else left as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "$" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def started(container: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of a container as the kubelet starts it (valueFrom entries left out)."""
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = kubelet_expand(e["value"], env) if e["value"] else ""
    argv = [kubelet_expand(s, env) for s in (*container.get("command", []), *container.get("args", []))]
    return argv, env


def kuberay_submitter(rayjob: dict[str, Any]) -> dict[str, Any]:
    """The submitter container (command, args, env) KubeRay builds for a RayJob in K8sJobMode."""
    spec, status = rayjob["spec"], rayjob["status"]
    # The RayJob sets none of what would add words (runtimeEnvYAML, metadata, entrypoint resources).
    for absent in ("runtimeEnvYAML", "metadata", "entrypointNumCpus", "entrypointNumGpus", "entrypointResources"):
        assert absent not in spec, absent
    address = status["dashboardURL"] if status["dashboardURL"].startswith("http://") else "http://" + status["dashboardURL"]
    job_id = status["jobId"]
    words = ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then"]
    words += ["ray", "job", "submit", "--address", address, "--no-wait", "--submission-id", job_id]
    words += ["--", spec["entrypoint"].strip(" \t\n\r\v\f"), ";", "fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return {
        "command": ["/bin/bash", "-ce", "--"],
        "args": [" ".join(words)],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "RAY_DASHBOARD_ADDRESS", "value": status["dashboardURL"]},
            {"name": "RAY_JOB_SUBMISSION_ID", "value": job_id},
        ],
    }


_PYTHON3 = """\
#!{python}
# The program's stand-in: what argv did it get?
import json, os, sys
sys.path.insert(0, {repo!r})
argv = sys.argv[1:]
record = {{"argv": argv}}
if argv[:2] == ["-m", "workloads.ray.jax_trainer"]:
    from workloads.ray import jax_trainer
    try:
        record["maxtext_args"] = jax_trainer.parse_args(argv[2:]).maxtext_args
    except jax_trainer.UsageError as e:
        record["usage_error"] = str(e)
path = os.path.join({out!r}, "argv-%d.json" % os.getpid())
with open(path, "w", encoding="utf-8") as f:
    json.dump(record, f)
"""

_RAY = """\
#!{python}
# `ray job ...` as far as the entrypoint goes: the CLI's list2cmdline, the supervisor's shell=True.
import subprocess, sys
args = sys.argv[1:]
if args[:2] == ["job", "status"]:
    sys.exit(1)  # not submitted under this id yet: the submitter goes on to submit
if args[:2] == ["job", "logs"]:
    sys.exit(0)
if args[:2] == ["job", "submit"] and "--" in args:
    entrypoint = subprocess.list2cmdline(args[args.index("--") + 1 :])
    sys.exit(subprocess.Popen(entrypoint, shell=True, start_new_session=True).wait())
sys.exit(2)
"""


@dataclass(frozen=True)
class Shims:
    bin: Path  # goes first on PATH
    out: Path  # where the python3 stand-in writes what it got

    @classmethod
    def make(cls, root: Path, *, ray: bool = True) -> Shims:
        bin_dir, out = root / "bin", root / "out"
        bin_dir.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        scripts = {"python3": _PYTHON3.format(python=sys.executable, repo=str(REPO), out=str(out))}
        if ray:
            scripts["ray"] = _RAY.format(python=sys.executable)
        for name, text in scripts.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        return cls(bin_dir, out)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"PATH": f"{self.bin}:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(self.out.parent), **(extra or {})}

    def records(self) -> list[dict[str, Any]]:
        """What every python3 started since the last call got; the files are taken away."""
        out = []
        for p in sorted(self.out.glob("argv-*.json")):
            out.append(json.loads(p.read_text(encoding="utf-8")))
            p.unlink()
        return out

    def run(self, argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env(env), cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def only_record(shims: Shims, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    records = shims.records()
    assert len(records) == 1, f"expected the program to start once, got {len(records)}: rc={done.returncode} stderr={done.stderr[-1500:]}"
    return records[0]


def clean_env() -> dict[str, str]:
    """A pod's worth of environment: nothing of the test runner's."""
    return {k: v for k, v in os.environ.items() if k in ("TMPDIR",)}
