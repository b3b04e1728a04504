"""The exit guard, run by the real /bin/sh with real child processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workloads.render import exitguard

# A stand-in for MaxText's SIGTERM handling: on SIGTERM it "saves" (writes a file) and
# exits 0, which is what maxtext 0.2.5's train.main does after StopTraining.
TRAPS_TERM_AND_EXITS_0 = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    out.write_text("saved")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
out.with_suffix(".ready").write_text("1")
time.sleep(60)
"""

DIES_OF_TERM = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).with_suffix(".ready").write_text("1")
time.sleep(60)
"""


def _guarded(*argv: str) -> list[str]:
    command, args = exitguard.wrap([sys.executable], list(argv))
    return [*command, *args]


def _start_and_term(tmp_path: Path, program: str) -> subprocess.CompletedProcess:
    marker = tmp_path / "saved"
    proc = subprocess.Popen(_guarded("-c", program, str(marker)), stderr=subprocess.PIPE, text=True)
    ready = marker.with_suffix(".ready")
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "child never became ready"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def test_a_run_stopped_by_sigterm_that_exits_0_exits_143(tmp_path: Path) -> None:
    res = _start_and_term(tmp_path, TRAPS_TERM_AND_EXITS_0)
    assert (tmp_path / "saved").read_text() == "saved"  # the child got the signal and ran its handler
    assert res.returncode == exitguard.SIGTERM_EXIT_CODE
    assert "stopped by SIGTERM" in res.stderr


def test_a_child_killed_by_sigterm_reports_143(tmp_path: Path) -> None:
    assert _start_and_term(tmp_path, DIES_OF_TERM).returncode == 143


@pytest.mark.parametrize("code", [0, 1, 2, 3, 42])
def test_exit_codes_pass_through_when_no_signal_came(code: int) -> None:
    res = subprocess.run(_guarded("-c", f"import sys; sys.exit({code})"), capture_output=True, text=True, timeout=120)
    assert res.returncode == code
    # A failure names its VM for ``badhost``; a success says nothing.
    assert res.stderr == "" if code == 0 else res.stderr.endswith(f"tgk-exit-guard: exit {code} on node unknown\n")


def test_arguments_reach_the_child_intact() -> None:
    tricky = ["a b", "", "$HOME", "'q'", 'x"y', "line\nbreak", "*", "--flag=1 2"]
    res = subprocess.run(_guarded("-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *tricky), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    import json

    assert json.loads(res.stdout) == tricky


def test_stdout_and_stderr_of_the_child_are_the_containers() -> None:
    res = subprocess.run(_guarded("-c", "import sys; print('out'); print('err', file=sys.stderr)"), capture_output=True, text=True, timeout=120)
    assert (res.stdout, res.stderr) == ("out\n", "err\n")


def test_wrap_keeps_the_program_as_args() -> None:
    command, args = exitguard.wrap(["python3", "-m", "m"], ["base.yml", "steps=3"])
    assert command == ["/bin/sh", "-c", exitguard.SCRIPT, exitguard.NAME]
    assert args == ["python3", "-m", "m", "base.yml", "steps=3"]


WRITES_PID_AND_SLEEPS = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def test_a_sigterm_while_the_child_starts_never_leaves_it_running(tmp_path: Path) -> None:
    """GKE may stop a pod at any moment, also while the guard is starting its child: the child
    must still get the signal (or never start), never run on unsignalled until SIGKILL.

    The guard exits only once its child is gone, so a signal the child never got shows as a
    guard still waiting on a child that sleeps ten minutes: the generous wait below is a hang
    guard, not a measure of speed (a loaded machine passes in seconds)."""
    left, hung = [], []
    for i in range(25):
        pidfile = tmp_path / f"pid-{i}"
        proc = subprocess.Popen(_guarded("-c", WRITES_PID_AND_SLEEPS, str(pidfile)), stderr=subprocess.DEVNULL)
        time.sleep(0.002 * (i % 10))  # land the signal at different points of the start
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            hung.append(i)
            proc.kill()
            proc.wait()
        if pidfile.exists() and pidfile.read_text() and _alive(int(pidfile.read_text())):
            left.append(int(pidfile.read_text()))
            os.kill(left[-1], signal.SIGKILL)
    assert (hung, left) == ([], [])


def test_the_trap_is_set_before_the_child_starts_and_an_early_signal_is_passed_on() -> None:
    """The windows the test above aims at are microseconds wide (each hit on a loaded machine, as a
    child that never got its SIGTERM): the order that closes them is checked as written."""
    lines = [ln.strip() for ln in exitguard.SCRIPT.splitlines()]
    trap = next(i for i, ln in enumerate(lines) if ln.startswith("trap "))
    start = lines.index('"$@" &')
    assert trap < start
    assert lines[start + 1] == "child=$!" and lines[start + 2] == '[ "$stopped" = 0 ] || pass_on'
    # A TERM passed on while the child is still the forked shell (before its exec) is sent again once it runs the command.
    assert "early=1" in next(ln for ln in lines if ln.startswith("pass_on()"))
    assert 'early=0; kill -TERM "$child" 2>/dev/null' in lines


def test_a_term_lost_before_the_childs_exec_is_sent_again(tmp_path: Path) -> None:
    """The lost-signal window, made wide. Between its fork and its exec the child is a copy of the
    guard's shell whose TERM handler only notes the signal; exec then clears it, and the command
    runs on unsignalled. Here the child re-creates that state for a while (a noting trap, a
    builtin loop, then exec) so the TERM surely lands in it."""
    marker = tmp_path / "pid"
    widened = '{ trap "noted=1" TERM; i=0; while [ "$i" -lt 200000 ]; do i=$((i+1)); done; exec "$@"; } &'
    script = exitguard.SCRIPT.replace('"$@" &', widened)
    assert script != exitguard.SCRIPT
    proc = subprocess.Popen(
        [exitguard.SHELL, "-c", script, exitguard.NAME, sys.executable, "-c", WRITES_PID_AND_SLEEPS, str(marker)], stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=120)  # a hang guard: the child sleeps ten minutes if the TERM is lost
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the guard waited on a child that never got its SIGTERM")
    assert proc.returncode == 143, err
