"""Synthesize into ``--out``: an environment's stack, or every stack of a fleet, written only if all of it can be.

CDK Terrain synthesizes into a scratch directory; what it made is then written into
``out``, so a failed synth writes nothing. ``out/stacks/<cluster>/`` is also terraform's
working directory (``.terraform/``, plans, maybe a local state) and may hold the user's own
``.tf`` files: only the files an earlier synth wrote there are replaced (``toolkit.owned``),
the rest is left alone; a synthesized file the user edited, a symlink or a file in the way
is refused. Every stack is surveyed before any is written, so a refusal changes nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from infra.fleet import Fleet
from infra.spec import EnvSpec
from toolkit.clikit import check_out_dir


def synth_into(
    target: EnvSpec | Fleet,
    out: Path,
    *,
    reservations: Mapping[str, str] | None = None,
    fleet_reservations: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Path]:
    """The ``cdk.tf.json`` of every stack ``target`` makes (one for a spec; a fleet's in deploy order), written into ``out``.

    ``reservations``: pool name -> the reservation of its capacity list its node pools
    consume (``infra deploy``'s fallback; a spec). ``fleet_reservations``: the same per
    worker cluster name (a fleet).
    """
    from toolkit import owned

    check_out_dir(out)  # before CDK loads: a bad --out costs nothing
    scratch = Path(tempfile.mkdtemp(prefix="tgk-synth-"))
    try:
        produced = _synth(target, scratch, reservations, fleet_reservations)
        stacks = {
            p.parent.relative_to(scratch).as_posix(): {f.relative_to(p.parent).as_posix(): f.read_bytes() for f in sorted(p.parent.rglob("*")) if f.is_file()}
            for p in produced
        }
        top = {p.name: p.read_bytes() for p in scratch.iterdir() if p.is_file()}  # cdktn's manifest.json
        out = owned.check_root(out, "--out")

        def check() -> None:
            # Every stack and the top files surveyed before any is written: a refusal changes nothing.
            for stack_dir, files in stacks.items():
                owned.check_update(out, files, "--out", stack_dir)
            owned.check_update(out, top, "--out")

        def write() -> None:
            for stack_dir, files in stacks.items():
                owned.update_files(out, stack_dir, files, "--out", prune=True)
            owned.update_files(out, "", top, "--out")

        owned.check_then_write(out, "--out", check, write)
        return [out / p.parent.relative_to(scratch) / p.name for p in produced]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _synth(
    target: EnvSpec | Fleet, scratch: Path, reservations: Mapping[str, str] | None, fleet_reservations: Mapping[str, Mapping[str, str]] | None
) -> list[Path]:
    if isinstance(target, Fleet):
        from infra.fleet_stack import synth_fleet

        return synth_fleet(target, scratch, reservations=fleet_reservations)
    from infra.stack import synth

    return [synth(target, scratch, reservations=reservations)]
