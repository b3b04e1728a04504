"""The text a run's program can be given (argv words, environment values), checked before anything is rendered.

Every runtime hands the program its arguments as argv words and its environment as
strings, never through a shell that could read them (the JobSet/Job exit guard runs
``"$@"``; the RayJob entrypoint keeps to inert words, ``workloads.ray.entrypoint``;
the kubelet's ``$(NAME)`` expansion is escaped, ``workloads.render.kubelet_escape``). So any
text is carried as it is, except what no runtime can carry at all:

- a NUL character: argv words and environment strings are C strings, and end there;
- text that is not Unicode (Python's stand-ins for bytes of a command line that were
  not UTF-8): the Kubernetes API takes UTF-8 only;
- a word longer than ``MAX_WORD_BYTES``: Linux refuses to start a program with an
  argument past 128 KiB (``MAX_ARG_STRLEN``), and the whole command line past
  ``MAX_COMMAND_BYTES`` would crowd the pod template's size limit;
- for ``--runtime ray``, an entrypoint past ``workloads.ray.entrypoint.MAX_BYTES``.

Each is refused as one line at plan time, naming where the text came from, instead of
a pod that never starts after its TPUs were granted.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.ray import entrypoint as ray_entrypoint

MAX_WORD_BYTES = 128 * 1024 - 1  # MAX_ARG_STRLEN counts the terminating NUL
MAX_COMMAND_BYTES = 512 * 1024
# The JaxTrainer's own words before the MaxText arguments (module, worker count, topology,
# accelerator type, chips, a run name of at most 47 characters): well under this.
RAY_HEAD_BYTES = 256


def problem(text: str) -> str | None:
    """Why ``text`` cannot be one argv word or environment value, or None."""
    if "\x00" in text:
        return "holds a NUL character, which no program argument or environment value can carry"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 text (the Kubernetes API takes nothing else)"
    if size > MAX_WORD_BYTES:
        return f"is {size} bytes long; one program argument can hold at most {MAX_WORD_BYTES} (Linux's limit)"
    return None


def env_name_problem(name: str) -> str | None:
    """Kubernetes 1.34 takes any printable ASCII but ``=`` in an environment variable's name."""
    if not name or any(c == "=" or not " " <= c <= "~" for c in name):
        return "is not an environment variable name (printable ASCII, no '=')"
    return None


def _bytes(words: Iterable[str]) -> int:
    return sum(len(w.encode("utf-8")) + 1 for w in words)


def command_problem(command: tuple[str, ...], args: tuple[str, ...], *, ray: bool) -> tuple[str, str] | None:
    """(problem, fix) for a command line too long as a whole (each word already passed ``problem``), or None."""
    size = _bytes((*command, *args))
    if size > MAX_COMMAND_BYTES:
        return f"the program's command line is {size} bytes; a run's may be at most {MAX_COMMAND_BYTES}", "shorten the longest values"
    if ray:
        size = RAY_HEAD_BYTES + len(ray_entrypoint.entrypoint([], args).encode("ascii"))
        if size > ray_entrypoint.MAX_BYTES:
            return (
                f"the RayJob entrypoint would be about {size} bytes; KubeRay's submitter can pass at most {ray_entrypoint.MAX_BYTES}",
                "shorten the longest values, or use --runtime jobset",
            )
    return None
