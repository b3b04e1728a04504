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

And what a run must not carry as text, because the text is written into its manifest, the
render and the dry-run output (``toolkit.credentials``): a URL with a password
(``user:password@host``), a MaxText key that holds a credential (``hf_access_token``:
``maxtext_keys.secret_keys``), an environment variable named as one (``HF_TOKEN``). Each goes
in a Kubernetes Secret and reaches the pod through a ``secretKeyRef``
(``workloads.planning.secret_env``: ``--secret-env NAME=SECRET/KEY``, a recipe's ``secret_env``).
"""

from __future__ import annotations

from collections.abc import Iterable

from toolkit import credentials
from workloads.planning.maxtext_keys import secret_env_name, secret_keys
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
    info = credentials.url_credentials(text)
    if info is not None and info.partition(":")[2]:
        return (
            "holds a URL with a password (user:password@host), which would be written into the run's manifest and output: "
            "put the credential in a Kubernetes Secret and pass it with --secret-env NAME=SECRET/KEY"
        )
    return None


SECRET_FIX = "put it in a Kubernetes Secret in the team's namespace (kubectl create secret generic) and pass --secret-env {name}=SECRET/KEY"


def secret_key_problem(key: str) -> tuple[str, str] | None:
    """(problem, fix) for a MaxText key that holds a credential given a plain value, or None."""
    if key not in secret_keys():
        return None
    env = secret_env_name(key)
    return (
        f"{key} holds a credential, which would be written in plain text into the run's manifest, the render and the dry-run output",
        SECRET_FIX.format(name=env) + f" (MaxText reads {key} from {env})",
    )


def secret_env_problem(name: str) -> tuple[str, str] | None:
    """(problem, fix) for an environment variable named as a credential (``HF_TOKEN``) given a plain value, or None."""
    if not credentials.is_secret_name(name):
        return None
    return (
        f"{name} is named as a credential, and its value would be written in plain text into the run's manifest and output",
        SECRET_FIX.format(name=name) + f", or in the recipe secret_env: {{{name}: SECRET/KEY}}",
    )


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
