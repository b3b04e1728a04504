"""Reading a file the user names, within bounds: a regular file, at most a size per kind, never blocking.

A path on the command line can be anything: a FIFO nobody writes (``open`` would wait for a
writer forever), ``/dev/zero`` or ``/dev/urandom`` (a read never ends), a directory, a
dump of many GiB. ``read_bounded`` opens without blocking (``O_NONBLOCK``: a FIFO opens at
once), refuses what is not a regular file, and reads at most its kind's cap plus one byte
(to know it is over), so each of those is one line naming the figure.

Decided: standard input (``-``), FIFOs and devices are refused, not read. No command needs
them, a stream has no size to check first, and a writer that never comes would hang the
command; the message says to save the stream to a file. Open failures (no such file, no
permission) stay ``OSError`` so each caller keeps its own wording for them; ``read_input``
turns everything into one ``FieldError`` for callers without one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

from toolkit.errors import FieldError

__all__ = ["LOG", "PRICE_RESPONSE", "RUN_SCRIPT", "YAML", "InputKind", "NotReadable", "human_bytes", "read_bounded", "read_head", "read_input"]

MIB = 1024 * 1024


class InputKind(NamedTuple):
    """What a file is (named in messages) and the most it may hold."""

    what: str
    limit: int  # bytes


# The caps, each far above any real file of its kind and far below what would hurt.
YAML = InputKind("YAML spec, recipe, kubeconfig or Kueue configuration", 8 * MIB)  # a spec or recipe is a few KiB
RUN_SCRIPT = InputKind("run script", 1 * MIB)  # a tpu-recipes run_recipe.sh is a few KiB
LOG = InputKind("MaxText log or metrics file", 256 * MIB)  # ~1M step lines; read whole, then parsed
PRICE_RESPONSE = InputKind("saved Cloud Billing skus response", 64 * MIB)  # Compute Engine's whole catalog is a few tens of MiB


def human_bytes(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB and n % MIB == 0 else f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"


class NotReadable(ValueError):
    """A path that is not a regular file, or a file over its kind's cap: ``problem`` and ``fix`` make the one line."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem} — {fix}")


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: Path | str, kind: InputKind) -> bytes:
    """The bytes of the regular file ``path``; ``NotReadable`` for anything else or more than ``kind.limit``.

    Open errors (missing, permission) are raised as the ``OSError`` they are.
    """
    if str(path) == "-":
        raise NotReadable(f"'-' (standard input) is not read: pass the {kind.what} as a file", "save the stream to a file first")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(f"{path} is {_file_type(st.st_mode)}, not a regular file", f"pass the {kind.what} as a file (save a stream to a file first)")
        if st.st_size > kind.limit:
            raise NotReadable(_too_large(path, kind), f"pass the {kind.what} itself")
        chunks, total = [], 0
        while total <= kind.limit:  # st_size can lie (/proc, a file still growing)
            chunk = os.read(fd, min(MIB, kind.limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > kind.limit:
            raise NotReadable(_too_large(path, kind), f"pass the {kind.what} itself")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_head(path: Path | str, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the regular file ``path`` (a README: its head is what is read); ``NotReadable``
    for anything but a regular file, never blocking. Open errors stay ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(f"{path} is {_file_type(st.st_mode)}, not a regular file", "pass a regular file")
        chunks, total = [], 0
        while total < limit:
            chunk = os.read(fd, min(MIB, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(path: Path | str, kind: InputKind) -> str:
    return f"{path} is over {human_bytes(kind.limit)}, the most a {kind.what} may be"


def read_input(path: Path | str, kind: InputKind, field: str) -> bytes:
    """``read_bounded`` for a file given by ``field`` (a flag or argument): every failure is one ``FieldError``."""
    fix = f"pass a readable {kind.what}"
    try:
        return read_bounded(path, kind)
    except NotReadable as e:
        raise FieldError(field, e.problem, e.fix) from None
    except FileNotFoundError:
        raise FieldError(field, f"{path} does not exist", fix) from None
    except OSError as e:
        raise FieldError(field, f"cannot read {path}: {e.strerror or e}", fix) from None


def read_input_text(path: Path | str, kind: InputKind, field: str, *, errors: str = "strict") -> str:
    """``read_input`` decoded as UTF-8 (``errors`` as ``bytes.decode`` takes it); undecodable text is one ``FieldError``."""
    raw = read_input(path, kind, field)
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise FieldError(field, f"{path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", f"pass the {kind.what} as UTF-8 text") from None
