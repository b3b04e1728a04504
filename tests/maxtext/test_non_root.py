"""Real MaxText trains, checkpoints and resumes as the pods' non-root user (docs/security.md, "Non-root by default").

The UID, GID and file-system group are the rendered JobSet's (``securityContext`` of the worker
pod), ``HOME`` its container's. MaxText runs as that user through ``setpriv`` (util-linux),
with the group as its only supplementary group, into a checkpoint directory prepared the way
the kubelet prepares a volume for ``fsGroup``: owned by root, group the pod's fsGroup, mode
2775. Every file MaxText writes there must be the UID's, and a second run must resume from them.

One allowance, and why it does not weaken the check: the MaxText venv lives under ``/root``
(mode 0700 on this machine), so the process gets ``CAP_DAC_READ_SEARCH`` — it may read and
traverse anything, as a container's user reads its image — but every write is still checked
against its UID and groups. The negative control proves it: the same user cannot write into
a root-owned 0755 directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from infra.spec.teams import DEFAULT_RUN_AS_USER
from workloads.maxtext import env as maxtext_env
from workloads.maxtext import run_local as rl
from workloads.planning.planner import Overrides, plan_run
from workloads.render import jobset

NAME = "non-root"


def _pod(plan) -> tuple[dict, dict]:
    spec = jobset.jobset(plan)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec["securityContext"], {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}


def _as(ctx: dict) -> list[str]:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.fail("this check runs MaxText as another user: it needs root and util-linux's setpriv", pytrace=False)
    return [
        "setpriv",
        f"--reuid={ctx['runAsUser']}",
        f"--regid={ctx['runAsGroup']}",
        f"--groups={ctx['fsGroup']}",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        "--",
    ]


def test_maxtext_writes_and_resumes_its_checkpoints_as_the_pod_s_user(maxtext_venv, default_spec, tmp_path, monkeypatch) -> None:
    plan = plan_run("maxtext-6b", default_spec, Overrides(name=NAME, slices=1))
    ctx, env = _pod(plan)
    uid = ctx["runAsUser"]
    assert ctx["runAsNonRoot"] is True and uid == ctx["runAsGroup"] == ctx["fsGroup"] == DEFAULT_RUN_AS_USER
    prefix = _as(ctx)

    # The volume as the kubelet hands it to a pod with fsGroup: root's, the pod's group, setgid, group-writable.
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    os.chown(ckpt, 0, ctx["fsGroup"])
    ckpt.chmod(0o2775)
    # MaxText's working directory is the pod's (its image's WORKDIR is not the user's to write either): the UID's own.
    real_mkdtemp = rl.tempfile.mkdtemp

    def mkdtemp(*a, **k):
        d = real_mkdtemp(*a, **k)
        os.chown(d, uid, ctx["runAsGroup"])
        return d

    real_run = maxtext_env.run
    monkeypatch.setattr(rl.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(maxtext_env, "run", lambda argv, e, *a, **k: real_run([*prefix, *argv], {**e, "HOME": env["HOME"]}, *a, **k))

    out = tmp_path / "out"
    first = rl.run_tiny(plan, maxtext_venv, out, checkpoint_dir=ckpt, timeout=900)
    steps = rl.saved_steps(ckpt, NAME)
    assert steps, (out / rl.LOG_NAME).read_text()[-3000:]
    written = [p for p in (ckpt / NAME).rglob("*")]
    assert written and {p.lstat().st_uid for p in written} == {uid}, sorted({(str(p), p.lstat().st_uid) for p in written})[:5]

    longer = plan_run("maxtext-6b", default_spec, Overrides(name=NAME, slices=1, steps=plan.program.steps + 3))
    second = rl.run_tiny(longer, maxtext_venv, out, checkpoint_dir=ckpt, timeout=900)
    assert second.restored_step == steps[-1], (out / rl.LOG_NAME).read_text()[-3000:]
    assert rl.saved_steps(ckpt, NAME)[-1] == longer.program.steps - 1
    print(
        f"\n[maxtext tier] non-root: MaxText as UID {uid} saved steps {steps}, resumed from {second.restored_step} ({first.seconds:.0f} s + {second.seconds:.0f} s)"
    )


def test_the_user_really_cannot_write_what_it_does_not_own(default_spec, tmp_path) -> None:
    """The negative control: the capability that lets the process read the venv grants no write."""
    plan = plan_run("maxtext-6b", default_spec, Overrides(name=NAME, slices=1))
    ctx, _ = _pod(plan)
    locked = tmp_path / "root-only"
    locked.mkdir(mode=0o755)
    done = subprocess.run([*_as(ctx), "sh", "-c", f"id -u; id -G; touch {locked}/x"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "Permission denied" in done.stderr, (done.stdout, done.stderr)
    uid_line, groups_line = done.stdout.split("\n")[:2]
    assert int(uid_line) == ctx["runAsUser"] and set(map(int, groups_line.split())) == {ctx["runAsGroup"], ctx["fsGroup"]}
    assert not (locked / "x").exists()
