"""Writing into directories a user also uses, without ever losing what the user put there.

The toolkit writes its output into directories the user names (``render --out``, ``infra
synth --out``, ``report --out``, ``run-local --out``). It replaces or deletes a file only
when it can prove it wrote that very file: each directory it writes into (a *unit*) gets
a manifest, ``.tgk-files.json``, listing the files it wrote with their SHA-256. Before a
write, the unit is surveyed:

- a file listed in the manifest whose digest still matches is the toolkit's: it may be
  replaced (or, with ``prune``, removed when the new output no longer has it);
- a listed file whose digest differs was edited by someone: refused, nothing changed;
- a file not listed is the user's: kept as it is; if the toolkit would write a file at
  its path, refused;
- a symlink, or a file where the tree needs a directory, anywhere in the path from the
  root the user named down to a file the toolkit writes: refused. The root itself may
  be a symlink (the user chose it); nothing below it is followed.

Two ways to write a unit: ``replace_unit`` builds the unit's new contents beside it (the
toolkit's files, the user's hard-linked in) and swaps it in with two renames, so a
reader sees the old unit or the new one, never a mix (``render``'s overlays, which
``kustomize`` reads as a whole); ``update_files`` replaces file by file with an atomic
rename each (``synth``'s stack directory, where terraform keeps ``.terraform/`` and may
be running). Writers of one root take turns on an ``fcntl`` lock (``.tgk.lock`` in the
root), so two commands writing the same ``--out`` at once both land whole; each goes through
``check_then_write``, whose early refusal (before the lock) stands only where no other
writer could be halfway through a swap.

Every refusal is a ``FieldError`` naming the flag, the path and the fix (exit 2), raised
before anything was changed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypeVar

from toolkit import ledger
from toolkit.errors import FieldError
from toolkit.inputfile import InputKind, read_bounded
from toolkit.jsontext import load_json

MANIFEST = ".tgk-files.json"
_MANIFEST_KIND = InputKind("file manifest of the toolkit", 16 * 1024 * 1024)  # a digest per file: far below this
LOCK = ".tgk.lock"
SCRATCH_PREFIX = ".tgk-tmp-"
WRITER = "tpu-gke-toolkit"
_RESERVED = {MANIFEST, LOCK}
UNIT_SKIP = frozenset({MANIFEST})  # what a survey of a unit below the root passes over
ROOT_SKIP = frozenset({MANIFEST, LOCK, SCRATCH_PREFIX})  # ... of the root: its lock and the scratch dirs too
T = TypeVar("T")


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def safe_rel(rel: str) -> PurePosixPath | None:
    """``rel`` as a relative path inside a unit, or None when it is absolute, empty or climbs out."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        return None
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("", ".", "..") for part in p.parts) or p.parts[0] in _RESERVED:
        return None
    return p


# ------------------------------------------------------------------ surveying a unit


@dataclass
class Survey:
    """What a unit holds: the toolkit's files (as its manifest lists them, verified) and everything else."""

    unit: Path
    exists: bool
    owned: dict[str, str] = field(default_factory=dict)  # rel -> digest, files present and unchanged
    extra: list[str] = field(default_factory=list)  # rel of every other entry (files, links, dirs), parents first

    def matches(self, files: Mapping[str, bytes]) -> bool:
        """The unit already holds exactly ``files`` as the toolkit's and nothing was dropped."""
        return self.exists and set(self.owned) == set(files) and all(self.owned[r] == digest(b) for r, b in files.items())


def _refuse(flag: str, path: Path, problem: str, fix: str) -> FieldError:
    return FieldError(flag, f"{path} {problem}", fix)


def check_dir_path(root: Path, rel_dir: str, flag: str) -> None:
    """Every component of ``root/rel_dir`` below ``root`` is a real directory or missing (then so is the rest)."""
    here = root
    for part in PurePosixPath(rel_dir).parts if rel_dir else ():
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(
                flag,
                here,
                "is a symlink; the toolkit writes only into directories it can see are its own",
                f"replace the link with a directory, or pass another {flag}",
            )
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(flag, here, "is a file where the toolkit writes a directory", f"move it away, or pass another {flag}")


def check_root(root: Path, flag: str) -> Path:
    """``root`` as a directory to write into (created if missing); a symlink to a directory is followed, a file refused."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise _refuse(flag, root, "is a file, not a directory", f"pass a directory as {flag} (it is created if missing)")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FieldError(flag, f"cannot create {root}: {e.strerror or e}", "pass a directory you can write to") from None
    return root


def _read_manifest(unit: Path, flag: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """(files, previous) from the unit's manifest; None without one."""
    path = unit / MANIFEST
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    fix = f"delete {path} if the directory holds only the toolkit's output, or pass another {flag}"
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(flag, path, "is not a regular file", fix)
    try:
        doc = load_json(read_bounded(path, _MANIFEST_KIND), max_bytes=_MANIFEST_KIND.limit)
    except (OSError, ValueError) as e:
        raise _refuse(flag, path, f"cannot be read ({getattr(e, 'strerror', None) or e.__class__.__name__})", fix) from None
    files, previous = (doc.get("files"), doc.get("previous") or {}) if isinstance(doc, dict) else (None, None)
    if not isinstance(files, dict) or not isinstance(previous, dict):
        raise _refuse(flag, path, "is not a manifest the toolkit wrote", fix)
    for rel, value in [*files.items(), *previous.items()]:
        if safe_rel(rel) is None or not isinstance(value, str):
            raise _refuse(flag, path, f"lists {rel!r}, which is not a file inside the directory", fix)
    return files, previous


def survey(unit: Path, flag: str, *, foreign_ok: bool = False, skip: frozenset[str] = UNIT_SKIP) -> Survey:
    """What ``unit`` holds; refused if it is not a real directory, or a file the toolkit wrote was changed since.

    A non-empty unit without a manifest is refused (nothing in it is provably the toolkit's),
    unless ``foreign_ok``: a directory where other programs' files are expected (terraform's
    working directory, a report directory), whose files are then all the user's.
    """
    try:
        st = os.lstat(unit)
    except FileNotFoundError:
        return Survey(unit, exists=False)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(flag, unit, "is a symlink; the toolkit replaces only directories it made", f"replace the link with a directory, or pass another {flag}")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(flag, unit, "is a file where the toolkit writes a directory", f"move it away, or pass another {flag}")
    manifest = _read_manifest(unit, flag)
    entries = _walk(unit, flag, skip)
    if manifest is None:
        if entries and not foreign_ok:
            raise _refuse(
                flag,
                unit,
                f"holds files the toolkit did not write (no {MANIFEST}: e.g. {entries[0]})",
                f"move them away (or delete the directory if it is an old render's output), or pass another {flag}",
            )
        return Survey(unit, True, {}, entries)
    listed, previous = manifest
    owned: dict[str, str] = {}
    for rel, want in listed.items():
        path = unit / rel
        _no_links_between(unit, PurePosixPath(rel).parent, flag)
        try:
            fst = os.lstat(path)
        except FileNotFoundError:
            continue  # removed by the user: nothing to protect
        if not stat.S_ISREG(fst.st_mode):
            raise _refuse(flag, path, "was replaced by a link or directory since the toolkit wrote it", f"move it away, or pass another {flag}")
        have = digest(path.read_bytes())
        if have not in (want, previous.get(rel)):
            raise _refuse(
                flag,
                path,
                "was changed since the toolkit wrote it (its digest differs)",
                f"keep your change in a file of your own (those are kept), move it away, or pass another {flag}",
            )
        owned[rel] = have
    extra = [e for e in entries if e not in owned and not any(o.startswith(e + "/") for o in owned)]
    return Survey(unit, True, owned, extra)


def _no_links_between(unit: Path, rel_dir: PurePosixPath, flag: str) -> None:
    here = unit
    for part in rel_dir.parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):  # lstat: a symlink is not a directory here
            raise _refuse(flag, here, "is a symlink or file where the toolkit's files need a directory", f"move it away, or pass another {flag}")


def _walk(unit: Path, flag: str, skip: frozenset[str]) -> list[str]:
    """Every entry below ``unit`` except the top-level names in ``skip``, parents before children; links are not followed."""
    out: list[str] = []
    for top, dirs, files in os.walk(unit, followlinks=False):
        rel_top = os.path.relpath(top, unit)
        dirs.sort()
        for name in sorted(files) + dirs:
            rel = name if rel_top == "." else f"{rel_top}/{name}"
            if rel in skip or (rel_top == "." and SCRATCH_PREFIX in skip and name.startswith(SCRATCH_PREFIX)):
                continue
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise _refuse(flag, Path(top) / name, "is a device, socket or pipe in a directory the toolkit writes", f"move it away, or pass another {flag}")
            out.append(rel)
    out.sort(key=lambda r: (r.count("/"), r))
    return out


def check_collisions(s: Survey, files: Mapping[str, bytes], flag: str) -> None:
    """No file the toolkit writes lands on (or below) an entry that is not its own."""
    extra = set(s.extra)
    for rel in files:
        p = PurePosixPath(rel)
        for i in range(1, len(p.parts) + 1):
            sub = "/".join(p.parts[:i])
            if sub not in extra:
                continue
            path = s.unit / sub
            is_dir = os.path.isdir(path) and not os.path.islink(path)
            if i < len(p.parts) and is_dir:
                continue  # a directory of the user's that the toolkit's file goes into
            raise _refuse(
                flag,
                path,
                "is in the way of a file the toolkit writes, and the toolkit did not write it",
                f"move it away (an older toolkit's output, written before it kept {MANIFEST}, can simply be deleted), or pass another {flag}",
            )


# ------------------------------------------------------------------ locking


@contextmanager
def locked(root: Path, flag: str) -> Iterator[None]:
    """Exclusive use of ``root`` for one writer (``fcntl.flock`` on ``root/.tgk.lock``, never a followed link)."""
    path = Path(root) / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        why = "is a symlink" if e.errno == errno.ELOOP else f"cannot be opened: {e.strerror or e}"
        raise FieldError(flag, f"{path} {why}", f"remove it, or pass another {flag}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_then_write(root: Path, flag: str, check: Callable[[], None], write: Callable[[], T]) -> T:
    """``write()`` under ``root``'s lock after ``check()`` passed under it; the way every writer of a root goes.

    ``check()`` runs once before the lock too, so a refusal leaves not even the lock file
    behind. That early verdict is trusted only when no writer ever held the lock here (no
    lock file): otherwise another writer may be between the two renames of a unit, or
    between a manifest and its files, and what the survey saw was half of each. The check
    under the lock decides then.
    """
    try:
        check()
    except (FieldError, OSError):
        if not os.path.lexists(Path(root) / LOCK):
            raise
    with locked(root, flag):
        check()
        return write()


# ------------------------------------------------------------------ writing


def _manifest_bytes(files: Mapping[str, str], previous: Mapping[str, str] | None = None) -> bytes:
    doc: dict[str, object] = {
        "written_by": WRITER,
        "about": "the files the toolkit wrote here, with their digests: it replaces only these, and only while unchanged",
        "files": dict(sorted(files.items())),
    }
    if previous:
        doc["previous"] = dict(sorted(previous.items()))
    return (json.dumps(doc, indent=1) + "\n").encode()


def _write_new(path: Path, data: bytes) -> None:
    """A new file (never an existing one, never through a link), with the umask's mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_atomic(path: Path, text: str | bytes, *, mode: int | None = 0o644, create: bool = False) -> None:
    """``path`` replaced by ``text`` in one rename: a reader sees the old file or the new, never part of one.

    The one atomic write (a test keeps hand-made ones out of the tree). ``mode`` is set before
    the first byte, so a secret (``mode=0o600``) is never readable by others in between; None
    gives the umask's mode, as a plain ``open`` does. ``create``: only where there is no file
    yet, linked into place so that one that appeared meanwhile is never replaced
    (``FileExistsError``). The temporary file beside ``path`` never outlives the call.
    """
    _write_via(tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent), path, _bytes(text), mode, create)


def _atomic_write(path: Path, data: bytes) -> None:
    """``write_atomic`` for a unit's files: its temporary file named as a survey of the root passes over it (``SCRATCH_PREFIX``)."""
    _write_via(tempfile.mkstemp(prefix=SCRATCH_PREFIX, dir=path.parent), path, data, None, False)


def _write_via(temp: tuple[int, str], path: Path, data: bytes, mode: int | None, create: bool) -> None:
    fd, tmp = temp
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if create:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _carry(src: Path, dst: Path, extra: list[str]) -> None:
    """The user's entries of the old unit into the new one: directories made, files hard-linked, links copied as links."""
    for rel in extra:
        s, d = src / rel, dst / rel
        st = os.lstat(s)
        d.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISDIR(st.st_mode):
            d.mkdir(exist_ok=True)
            os.chmod(d, stat.S_IMODE(st.st_mode))
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
        else:
            try:
                os.link(s, d, follow_symlinks=False)
            except OSError:  # a file system without hard links, or protected_hardlinks
                shutil.copy2(s, d, follow_symlinks=False)


def _checked_files(files: Mapping[str, str | bytes]) -> dict[str, bytes]:
    data = {rel: _bytes(c) for rel, c in files.items()}
    for rel in data:
        if safe_rel(rel) is None:
            raise ValueError(f"not a relative path inside the unit: {rel!r}")
    return data


def replace_unit(root: Path, unit_rel: str, files: Mapping[str, str | bytes], flag: str) -> bool:
    """Make ``root/unit_rel`` hold ``files`` (relative to the unit) as the toolkit's, the user's entries kept.

    Built beside the unit (the user's files hard-linked in) and swapped in with two renames.
    Call under ``locked(root)``. False when the unit already held exactly these files.
    """
    data = _checked_files(files)
    check_dir_path(root, str(PurePosixPath(unit_rel).parent), flag)
    unit = root / unit_rel
    s = survey(unit, flag)
    check_collisions(s, data, flag)
    if s.matches(data):
        return False
    unit.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=root))
    new, old = scratch / "new", scratch / "old"
    try:
        new.mkdir()
        if s.exists:
            os.chmod(new, stat.S_IMODE(os.lstat(unit).st_mode))
            _carry(unit, new, s.extra)
        for rel, b in sorted(data.items()):
            p = new / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            _write_new(p, b)
        _write_new(new / MANIFEST, _manifest_bytes({rel: digest(b) for rel, b in data.items()}))
        if s.exists:
            os.rename(unit, old)
        try:
            os.rename(new, unit)
        except OSError:
            if s.exists:
                os.rename(old, unit)  # put the old unit back before the scratch goes
            raise
    except BaseException:
        if s.exists and not unit.exists() and old.exists():
            # Neither rename back worked: keep everything, and say where the old unit is.
            raise FieldError(flag, f"could not swap {unit} into place; its earlier contents are in {old}", f"move {old} back to {unit}") from None
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    # The old unit: the toolkit's files (verified unchanged) and second links to the user's.
    shutil.rmtree(scratch, ignore_errors=True)
    return True


def check_update(root: Path, files: Mapping[str, str | bytes], flag: str, unit_rel: str = "") -> None:
    """Raise what ``update_files`` would refuse, writing nothing (to refuse before the lock, or before a long run)."""
    data = _checked_files(files)
    check_dir_path(root, unit_rel, flag)
    unit = root / unit_rel if unit_rel else root
    s = survey(unit, flag, foreign_ok=True, skip=ROOT_SKIP if not unit_rel else UNIT_SKIP)
    check_collisions(s, data, flag)
    for rel in data:
        _no_links_between(unit, PurePosixPath(rel).parent, flag)


def update_files(root: Path, unit_rel: str, files: Mapping[str, str | bytes], flag: str, *, prune: bool = False) -> list[Path]:
    """Write ``files`` into ``root/unit_rel`` one atomic rename at a time, other files left alone.

    ``prune``: also remove the toolkit's files of an earlier write that ``files`` no longer
    has (a re-synth that dropped a file). Call under ``locked(root)``. Returns the paths of
    the files. A crash midway leaves each file old or new, and the manifest accepts both
    until the next write.
    """
    data = _checked_files(files)
    check_dir_path(root, unit_rel, flag)
    unit = root / unit_rel if unit_rel else root
    skip = ROOT_SKIP if not unit_rel else UNIT_SKIP
    s = survey(unit, flag, foreign_ok=True, skip=skip)
    check_collisions(s, data, flag)
    for rel in data:
        _no_links_between(unit, PurePosixPath(rel).parent, flag)
    new = {rel: digest(b) for rel, b in data.items()}
    changed = sorted(rel for rel in data if s.owned.get(rel) != new[rel])
    pruned = sorted(set(s.owned) - set(data)) if prune else []
    final = {**{rel: d for rel, d in s.owned.items() if rel not in pruned}, **new}
    unit.mkdir(parents=True, exist_ok=True)
    if changed or pruned:
        # First a manifest that accepts the old and the new digest, then the files, then one that accepts only the new.
        previous = {rel: s.owned[rel] for rel in changed if rel in s.owned}
        _atomic_write(unit / MANIFEST, _manifest_bytes({**s.owned, **new}, previous))
        for rel in changed:
            p = unit / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(p, data[rel])
        for rel in pruned:
            path = unit / rel
            verdict = ledger.owned_file(str(path), recorded=s.owned[rel], current=_digest_of(path))
            if isinstance(verdict, ledger.Permit):
                _remove_owned(verdict, path)
    if changed or pruned or _read_manifest(unit, flag) != (final, {}):
        _atomic_write(unit / MANIFEST, _manifest_bytes(final))
    return [unit / rel for rel in data]


def write_files(root: Path, files: Mapping[str, str | bytes], flag: str) -> list[Path]:
    """``update_files`` at the top of ``root`` through ``check_then_write``: a report, a local run's
    outputs, an AOT compile's kept logs (files beside the user's, never over them)."""
    return check_then_write(root, flag, lambda: check_update(root, files, flag), lambda: update_files(root, "", files, flag))


def _digest_of(path: Path) -> str | None:
    try:
        return digest(path.read_bytes())
    except FileNotFoundError:
        return None


def _remove_owned(permit: ledger.Permit, path: Path) -> None:
    """Remove a file the ledger permitted (the toolkit wrote it, unchanged since): the one way a unit's file goes."""
    ledger.require(permit, ledger.Kind.FILE, str(path))
    path.unlink(missing_ok=True)


def owned_files(unit: Path) -> list[Path]:
    """The files the toolkit wrote in ``unit`` (its manifest), unchecked: for reading, never for deleting."""
    got = _read_manifest(Path(unit), "")
    return [Path(unit) / rel for rel in sorted(got[0])] if got else []
