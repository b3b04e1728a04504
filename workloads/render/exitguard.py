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
"""

from __future__ import annotations

from collections.abc import Sequence

SHELL = "/bin/sh"
SIGTERM_EXIT_CODE = 143
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
SCRIPT = """\
stopped=0
child=
early=0
self=`readlink -f /bin/sh 2>/dev/null`
starting() { exe=`readlink /proc/$child/exe 2>/dev/null`; [ -n "$self" ] && [ "$exe" = "$self" ]; }
pass_on() { ! starting || early=1; kill -TERM "$child" 2>/dev/null; }
trap 'stopped=1; [ -z "$child" ] || pass_on' TERM INT
"$@" &
child=$!
[ "$stopped" = 0 ] || pass_on
while :; do
  if [ "$early" = 1 ] && kill -0 "$child" 2>/dev/null; then
    if starting; then sleep 1; continue; fi
    early=0; kill -TERM "$child" 2>/dev/null
  fi
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
if [ "$stopped" = 1 ] && [ "$rc" = 0 ]; then
  echo "tgk-exit-guard: stopped by SIGTERM before the run finished; exiting 143, not 0" >&2
  exit 143
fi
exit "$rc"
"""


def wrap(command: Sequence[str], args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(command, args) of a container that runs ``command + args`` under the guard."""
    return [SHELL, "-c", SCRIPT, NAME], [*command, *args]
