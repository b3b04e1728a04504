"""The container entrypoint that keeps a stopped MaxText run from looking finished.

MaxText 0.2.5 handles SIGTERM when checkpointing is on: it saves the step it reached,
raises ``StopTraining("Job received termination signal (SIGTERM).")``, catches it in
``train.main`` and exits 0. A pod drained through the Eviction API (``kubectl
drain``, a node-pool upgrade, Kueue preemption) then ends *Succeeded*: the Job's
podFailurePolicy only looks at failed pods, so the DisruptionTarget rule never fires,
the index counts as complete, and once every worker of every slice has done the same
the JobSet is Completed with the model unfinished. (A spot shutdown is different: the
kubelet marks those pods Failed whatever they exit with.)

The guard is a POSIX shell that runs the real command as its child, forwards SIGTERM
to it, and, if SIGTERM arrived, turns an exit 0 into 143, what a container killed by
SIGTERM reports. The pod is then Failed with DisruptionTarget, and the JobSet's
disruption rule restarts the run from the checkpoint just saved. A run whose last
step was already saved restarts, finds nothing left to do, and exits 0.

Two more things every attempt needs and only a process beside the program can see:

- **Which VM failed**: a non-zero exit is said in one line, ``tgk-exit-guard: exit N on node
  NODE`` (``TGK_NODE_NAME``, the pod's ``spec.nodeName`` through the downward API), which
  GKE's logging agent keeps in Cloud Logging after the pod is gone; ``badhost``
  (``workloads.runs.badhost``) reads the attempts' failures from these lines.
- **A hang** (``workloads.planning.hang``): with ``TGK_HANG_AFTER_S`` set, the program's
  stderr (where MaxText's absl logging writes ``completed step:``) passes through a FIFO and a
  reader that copies every line on and notes each step; a watchdog ends a program that logs
  no first step within ``TGK_FIRST_STEP_WITHIN_S`` or no new step within ``TGK_HANG_AFTER_S``
  (SIGTERM, SIGKILL ``TGK_HANG_GRACE_S`` later: a hung collective never reaches the save
  SIGTERM asks for), says so in one absl-stamped line, ``tgk-exit-guard: no new step for N s``,
  and exits ``HANG_EXIT_CODE``. A SIGSTOPped program is ended the same way (SIGKILL reaches
  it). stdout is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.planning.hang import HangWatch

SHELL = "/bin/sh"
SIGTERM_EXIT_CODE = 143
HANG_EXIT_CODE = 124  # workloads.planning.hang.HANG_EXIT_CODE
HANG_GRACE_S = 30  # SIGTERM -> SIGKILL for a hung program
NODE_ENV = "TGK_NODE_NAME"
EXIT_LINE = "tgk-exit-guard: exit {code} on node {node}"  # what the guard prints on a non-zero exit
HANG_LINE = "tgk-exit-guard: no new step for {seconds} s"  # ... and, first, on a hang
# $0 of the guard's shell: what `ps` in the container shows.
NAME = "tgk-exit-guard"

# The trap is set before the child starts: a SIGTERM that arrives while it starts (the
# shell has not yet learned its pid) is remembered and passed on as soon as it has, instead
# of ending the shell with the child left running unsignalled (killed at the grace period's
# end without its save). A TERM sent to the child between its fork and its exec is lost: the
# forked shell still has the trap's handler, which only notes the signal, and exec clears it.
# So a TERM passed on while the child is still this shell's image (``/proc/<pid>/exe`` is
# /bin/sh's) is sent again once the child runs the command. (Backquotes, not ``$(…)``, and no
# ``$$``: the kubelet would expand those in a container's command.) `wait` returns early (>128) when a
# trapped signal arrives, so wait again until the child is really gone. INT is passed on as
# TERM: a non-interactive shell starts background children with SIGINT ignored.
#
# The hang watch (only with TGK_HANG_AFTER_S): fd 3 is the container's stderr; the guard's and
# the child's stderr go through the FIFO to the reader, which copies each line to fd 3 and
# touches "step" on a MaxText step line; the watchdog counts seconds since the last touch
# (no `stat` needed) and, over the bound, touches "hung" and stops the child. At the end the
# guard lets go of the FIFO and gives the reader a few seconds to copy the last lines (a
# traceback), not forever (a grandchild may hold the FIFO open). Arithmetic is `expr`'s:
# the kubelet would read `$((` as the start of a $(VAR) reference.
SCRIPT = """\
stopped=0
child=
early=0
watch=
exec 3>&2
self=`readlink -f /bin/sh 2>/dev/null`
starting() { exe=`readlink /proc/$child/exe 2>/dev/null`; [ -n "$self" ] && [ "$exe" = "$self" ]; }
pass_on() { ! starting || early=1; kill -TERM "$child" 2>/dev/null; }
stamp() { date +%m%d' '%H:%M:%S.000000 2>/dev/null || echo '0101 00:00:00.000000'; }
watchdog() {
  idle=0; bound=${TGK_FIRST_STEP_WITHIN_S:-$TGK_HANG_AFTER_S}
  while kill -0 "$child" 2>/dev/null; do
    sleep 1
    if [ -e "$watch/step" ]; then rm -f "$watch/step"; idle=0; bound=$TGK_HANG_AFTER_S; continue; fi
    idle=`expr "$idle" + 1`
    if [ "$idle" -ge "$bound" ]; then
      echo "$bound" >"$watch/hung"; kill -TERM "$child" 2>/dev/null
      n=0; while kill -0 "$child" 2>/dev/null && [ "$n" -lt "${TGK_HANG_GRACE_S:-30}" ]; do sleep 1; n=`expr "$n" + 1`; done
      kill -KILL "$child" 2>/dev/null; return
    fi
  done
}
trap 'stopped=1; [ -z "$child" ] || pass_on' TERM INT
if [ -n "${TGK_HANG_AFTER_S:-}" ]; then
  watch=`mktemp -d 2>/dev/null` && mkfifo "$watch/err" 2>/dev/null || { echo "tgk-exit-guard: cannot make a FIFO in a temporary directory; no hang watch" >&3; watch=; }
fi
if [ -n "$watch" ]; then
  while IFS= read -r line || [ -n "$line" ]; do printf '%s\\n' "$line"; case $line in *"completed step: "*) : >"$watch/step";; esac; done <"$watch/err" >&3 &
  reader=$!
  exec 2>"$watch/err"
fi
"$@" &
child=$!
[ "$stopped" = 0 ] || pass_on
[ -z "$watch" ] || { watchdog & dog=$!; }
while :; do
  if [ "$early" = 1 ] && kill -0 "$child" 2>/dev/null; then
    if starting; then sleep 1; continue; fi
    early=0; kill -TERM "$child" 2>/dev/null
  fi
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
hung=
if [ -n "$watch" ]; then
  kill "$dog" 2>/dev/null
  [ -e "$watch/hung" ] && hung=`cat "$watch/hung"`
  exec 2>&3
  n=0; while kill -0 "$reader" 2>/dev/null && [ "$n" -lt 5 ]; do sleep 1; n=`expr "$n" + 1`; done
  rm -rf "$watch"
fi
if [ -n "$hung" ]; then
  echo "E`stamp` 0 exitguard.sh:0] tgk-exit-guard: no new step for $hung s; ending the attempt with exit 124 to have it restarted" >&3
  rc=124
elif [ "$stopped" = 1 ] && [ "$rc" = 0 ]; then
  echo "tgk-exit-guard: stopped by SIGTERM before the run finished; exiting 143, not 0" >&3
  rc=143
fi
[ "$rc" = 0 ] || echo "E`stamp` 0 exitguard.sh:0] tgk-exit-guard: exit $rc on node ${TGK_NODE_NAME:-unknown}" >&3
exit "$rc"
"""


def wrap(command: Sequence[str], args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(command, args) of a container that runs ``command + args`` under the guard."""
    return [SHELL, "-c", SCRIPT, NAME], [*command, *args]


def env(watch: HangWatch | None) -> list[dict[str, Any]]:
    """The guard's environment: the node it runs on (downward API) and, when the plan has one, its hang watch."""
    out: list[dict[str, Any]] = [{"name": NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    if watch is not None:
        out += [{"name": k, "value": v} for k, v in watch.env().items()]
    return out
