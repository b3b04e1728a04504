"""How a RayJob's ``spec.entrypoint`` carries the run's arguments to the program, inert.

The entrypoint is one string, and four parsers stand between it and the program's argv
(KubeRay v1.6.0, Ray 2.54.0):

1. the kubelet expands ``$(VAR)`` and ``$$`` in the submitter container's args, where
   KubeRay puts the string (``rayjob_controller.go`` ``configureSubmitterContainer``);
2. KubeRay's submitter runs ``/bin/bash -ce -- "<...> ray job submit ... -- ENTRYPOINT ; ..."``:
   the entrypoint is pasted unquoted into a bash script (``common/job.go``
   ``BuildJobSubmitCommand``, ``utils/util.go`` ``GetContainerCommand``), so bash splits
   it into words and expands whatever it finds;
3. ``ray job submit`` joins those words back with ``subprocess.list2cmdline``, which
   quotes for Windows, not for a POSIX shell (``dashboard/modules/job/cli.py``);
4. Ray's job supervisor runs that string with ``subprocess.Popen(..., shell=True)``,
   i.e. ``/bin/sh -c`` (``dashboard/modules/job/job_supervisor.py`` ``_exec_entrypoint``).

Quoting for all four at once is fragile, so the entrypoint holds only *inert* words:
characters none of the four treats specially (``INERT``: letters, digits and
``_ . / : = , + @ % -``, the set ``shlex.quote`` leaves bare). Each word then
reaches the program unchanged, whatever runs it. The toolkit's own flags are inert by
construction (numbers, a DNS-1035 run name, catalog names). MaxText's ``key=value``
arguments usually are too, and then they follow ``--`` as written, so the RayJob reads
like the JobSet's container. When any is not (a quote, ``$``, ``;``, a space, a newline,
non-ASCII, an empty word), they all travel as one word instead: ``ARGS_FLAG=`` and the
base64url of their JSON list, which the entrypoint module decodes.

Only the standard library: this module runs in the Ray image (``workloads.ray.jax_trainer``
decodes with it) and in the toolkit (the renderer and the planner encode with it).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence

INERT = re.compile(r"[A-Za-z0-9_./:=,+@%-]+")
ARGS_FLAG = "--maxtext-args-b64"
# KubeRay pastes the entrypoint into the one argument of `bash -c`, with ~1 KiB of
# `ray job submit` around it, and Ray hands it to `sh -c` alone: Linux caps a single
# argument at 128 KiB (MAX_ARG_STRLEN), so an entrypoint past this could never start.
MAX_BYTES = 120 * 1024


def is_inert(word: str) -> bool:
    return INERT.fullmatch(word) is not None


def encode_args(args: Sequence[str]) -> str:
    """The arguments as one inert word: base64url of their JSON list (UTF-8)."""
    raw = json.dumps(list(args), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_args(word: str) -> list[str]:
    """``encode_args`` undone; ValueError (one line) for anything it did not write."""
    if not is_inert(word):
        raise ValueError(f"{ARGS_FLAG} takes base64url text; got characters outside it")
    try:
        value = json.loads(base64.urlsafe_b64decode(word.encode("ascii")).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError(f"{ARGS_FLAG} is not the base64url of a JSON list of strings") from None
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValueError(f"{ARGS_FLAG} is not the base64url of a JSON list of strings")
    return value


def entrypoint(head: Sequence[str], args: Sequence[str]) -> str:
    """``head`` (the program and its own flags, all inert), then the run's arguments, inert either way."""
    bad = [w for w in head if not is_inert(w)]
    if bad:
        # The head is the toolkit's own text: a non-inert word there is a bug, never input.
        raise ValueError(f"entrypoint words must be inert, not {bad[0]!r}")
    if all(is_inert(a) for a in args):
        return " ".join([*head, "--", *args])
    return " ".join([*head, f"{ARGS_FLAG}={encode_args(args)}"])
