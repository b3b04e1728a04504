"""Reading and writing a run's directory on a file system the toolkit cannot always reach itself.

A run's output directory may be on this machine (``run-local --checkpoint-dir``) or on a
team's Managed Lustre, which only the cluster's nodes mount. The same operations serve
both: in-process for a local directory (``workloads.runs.identity.DirStore``), and as the
whole program of a short-lived pod that mounts the team's Lustre claim
(``workloads.runs.volume_store``), which runs this file's source with ``python3 -c`` and
prints one result line. So this module imports nothing but the standard library, and its
source is what the pod runs — the local cluster's rehearsal daemon runs this same module
against the directory that plays the claim's volume.

A request is JSON: ``{"base": <absolute directory>, "ops": [<op>, ...]}``; each op names
paths relative to ``base``:

- ``read`` ``path``: the file's bytes (base64), None if absent; at most ``MAX_READ`` bytes;
- ``create`` ``path`` ``data``: a new file, never an existing one (``O_EXCL``); parents made;
- ``replace`` ``path`` ``data`` ``expect``: the file replaced in one rename, only while its
  SHA-256 is still ``expect`` (what the caller read);
- ``list`` ``path``: the first ``limit`` names in the directory (directories end in ``/``);
- ``survey`` ``path`` ``record`` ``parts``: every directory below ``path``, with its record
  file's bytes and, for each part (``checkpoints/``, ``metrics/``), the files, bytes and the
  oldest and newest change time under it;
- ``delete`` ``path`` ``record`` ``expect`` ``parts``: the parts of the directory removed,
  only while its record's SHA-256 is still ``expect``: the digest of the record the
  toolkit's ledger (``toolkit.ledger.run_output``) gave its permit for.

Nothing is followed: every path component is opened relative to its parent with
``O_NOFOLLOW``, so a symlink anywhere below ``base`` — another team's on a shared Lustre —
is refused, never crossed. Every op's failure is its own result (``{"error": ...}``); the
program always prints ``RESULT_MARK`` and the results as one JSON line.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
import sys
from typing import Any

RESULT_MARK = "TGK-RESULT "
MAX_READ = 1024 * 1024  # a record file; nothing bigger is read
MAX_ENTRIES = 20000  # directories a survey reports
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OpError(Exception):
    pass


def _parts(rel: str) -> list[str]:
    if not isinstance(rel, str) or rel.startswith("/") or "\x00" in rel:
        raise OpError(f"not a relative path: {rel!r}")
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise OpError(f"not a plain relative path: {rel!r}")
    return parts


def _open_dir(base: str, parts: list[str], *, make: bool = False) -> int | None:
    """A descriptor of base/parts (None if absent), every component below ``base`` opened without following links.

    ``base`` itself is the mount, or the directory the user named (which may be a link they chose).
    """
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not make:
            return None
        raise
    try:
        for p in parts:
            try:
                nxt = os.open(p, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    return None
                try:
                    os.mkdir(p, 0o775, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(p, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                raise OpError(f"{p} is a link or a file where a directory is expected") from None
            os.close(fd)
            fd = nxt
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)


def _read(base: str, rel: str) -> bytes | None:
    parts = _parts(rel)
    if not parts:
        raise OpError("no file named")
    d = _open_dir(base, parts[:-1])
    if d is None:
        return None
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OpError(f"{rel} is a link") from None
            raise
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OpError(f"{rel} is not a regular file")
            return f.read(MAX_READ)
    finally:
        os.close(d)


def _write(base: str, rel: str, data: bytes, expect: str | None) -> bool:
    """create (``expect`` None): False if a file is there; replace: False unless the file there has digest ``expect``."""
    parts = _parts(rel)
    if not parts:
        raise OpError("no file named")
    d = _open_dir(base, parts[:-1], make=True)
    assert d is not None
    name = parts[-1]
    tmp = f".{name}.tgk-{os.getpid()}.tmp"
    try:
        if expect is not None:
            current = _read(base, rel)
            if current is None or hashlib.sha256(current).hexdigest() != expect:
                return False
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o664, dir_fd=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            if expect is None:
                os.link(tmp, name, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)  # fails if a file appeared
            else:
                os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except FileExistsError:
            return False
        return True
    finally:
        try:
            os.unlink(tmp, dir_fd=d)
        except FileNotFoundError:
            pass
        os.close(d)


def _list(base: str, rel: str, limit: int) -> list[str] | None:
    d = _open_dir(base, _parts(rel))
    if d is None:
        return None
    try:
        out = []
        with os.scandir(d) as it:
            for e in it:
                out.append(e.name + ("/" if e.is_dir(follow_symlinks=False) else ""))
                if len(out) >= limit:
                    break
        return sorted(out)
    finally:
        os.close(d)


def _tree(d: int) -> tuple[int, int, float | None, float | None]:
    """(files, bytes, oldest change, newest change) under the directory descriptor ``d``; links counted, not followed."""
    files, size, first, last = 0, 0, None, None
    with os.scandir(d) as it:
        entries = list(it)
    for e in entries:
        st = e.stat(follow_symlinks=False)
        t = max(st.st_mtime, st.st_ctime)
        first = t if first is None else min(first, t)
        last = t if last is None else max(last, t)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(e.name, _DIR_FLAGS, dir_fd=d)
            try:
                n, b, f0, f1 = _tree(sub)
            finally:
                os.close(sub)
            files, size = files + n, size + b
            first = f0 if f0 is not None and (first is None or f0 < first) else first
            last = f1 if f1 is not None and (last is None or f1 > last) else last
        else:
            files, size = files + 1, size + st.st_size
    return files, size, first, last


def _survey(base: str, rel: str, record: str, parts: list[str]) -> list[dict[str, Any]] | None:
    top = _open_dir(base, _parts(rel))
    if top is None:
        return None
    out: list[dict[str, Any]] = []
    try:
        with os.scandir(top) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        for name in names[:MAX_ENTRIES]:
            entry: dict[str, Any] = {"name": name, "parts": {}}
            run_dir = os.open(name, _DIR_FLAGS, dir_fd=top)
            try:
                try:
                    rfd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run_dir)
                except OSError:
                    rfd = -1
                if rfd >= 0:
                    with os.fdopen(rfd, "rb") as f:
                        st = os.fstat(f.fileno())
                        if stat.S_ISREG(st.st_mode):
                            entry["record"] = base64.b64encode(f.read(MAX_READ)).decode()
                            entry["record_time"] = st.st_ctime
                for part in parts:
                    try:
                        sub = os.open(part.rstrip("/"), _DIR_FLAGS, dir_fd=run_dir)
                    except OSError:
                        continue  # absent, or a link: nothing of the run's there
                    try:
                        n, b, f0, f1 = _tree(sub)
                    finally:
                        os.close(sub)
                    entry["parts"][part] = {"files": n, "bytes": b, "first": f0, "last": f1}
            finally:
                os.close(run_dir)
            out.append(entry)
        return out
    finally:
        os.close(top)


def _remove_tree(d: int) -> int:
    """Remove everything below the directory descriptor ``d`` (links removed, never followed); the count of files removed."""
    n = 0
    with os.scandir(d) as it:
        entries = list(it)
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            sub = os.open(e.name, _DIR_FLAGS, dir_fd=d)
            try:
                n += _remove_tree(sub)
            finally:
                os.close(sub)
            os.rmdir(e.name, dir_fd=d)
        else:
            os.unlink(e.name, dir_fd=d)
            n += 1
    return n


def _delete(base: str, rel: str, record: str, expect: str, parts: list[str]) -> dict[str, Any]:
    """The parts of ``rel`` removed, only while its record's digest is ``expect`` (what the ledger permitted)."""
    if not expect:
        raise OpError("no record digest: nothing is deleted without the ledger's permit")
    current = _read(base, f"{rel.rstrip('/')}/{record}")
    if current is None or hashlib.sha256(current).hexdigest() != expect:
        return {"deleted": 0, "why": f"its {record} changed since it was read"}
    d = _open_dir(base, _parts(rel))
    if d is None:
        return {"deleted": 0, "why": "gone"}
    n = 0
    try:
        for part in parts:
            name = part.rstrip("/")
            if "/" in name or name in ("", ".", ".."):
                raise OpError(f"not a part of a run's directory: {part!r}")
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=d)
            except FileNotFoundError:
                continue
            try:
                n += _remove_tree(sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=d)
    finally:
        os.close(d)
    return {"deleted": n}


def _one(base: str, op: dict[str, Any]) -> dict[str, Any]:
    kind = op.get("op")
    path = str(op.get("path") or "")
    if kind == "read":
        data = _read(base, path)
        return {"data": None if data is None else base64.b64encode(data).decode()}
    if kind in ("create", "replace"):
        data = base64.b64decode(str(op.get("data") or ""))
        expect = str(op.get("expect") or "") if kind == "replace" else None
        if kind == "replace" and not expect:
            raise OpError("replace needs the digest of what was read")
        return {"written": _write(base, path, data, expect)}
    if kind == "list":
        return {"names": _list(base, path, int(op.get("limit") or 10))}
    if kind == "survey":
        return {"dirs": _survey(base, path, str(op["record"]), [str(p) for p in op.get("parts") or []])}
    if kind == "delete":
        return _delete(base, path, str(op["record"]), str(op.get("expect") or ""), [str(p) for p in op.get("parts") or []])
    raise OpError(f"unknown op {kind!r}")


def handle(request: dict[str, Any], mounts: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every op of the request, in order; ``mounts``: in-pod mount path -> the directory playing it (the local cluster)."""
    base = str(request.get("base") or "")
    if not base.startswith("/"):
        return [{"error": f"base {base!r} is not an absolute directory"}]
    for mount, local in sorted((mounts or {}).items(), key=lambda kv: -len(kv[0])):
        if base == mount or base.startswith(mount.rstrip("/") + "/"):
            base = local + base[len(mount.rstrip("/")) :]
            break
    out = []
    for op in request.get("ops") or []:
        try:
            out.append(_one(base, op))
        except FileNotFoundError:
            out.append({"error": f"{request.get('base')} does not exist (is the volume mounted?)"})
        except (OpError, OSError, ValueError, KeyError, TypeError) as e:
            out.append({"error": f"{op.get('op')} {op.get('path')}: {e}"})
    return out


def result_line(results: list[dict[str, Any]]) -> str:
    return RESULT_MARK + json.dumps(results, separators=(",", ":")) + "\n"


def main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[1])
    except (IndexError, ValueError) as e:
        sys.stdout.write(result_line([{"error": f"unreadable request: {e}"}]))
        return 0
    sys.stdout.write(result_line(handle(request)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
