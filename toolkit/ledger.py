"""What the toolkit may delete or replace: one ledger of what it created, its rules, and the one gate.

The toolkit deletes and replaces things in places other people use too: a run's checkpoints
and metrics in a bucket or on Lustre, a dataset's prefix, cluster objects in a team's
namespace, files in a directory the user names. It does so only where it can prove that it
created the thing. The proof is recorded when the toolkit *creates* the thing — never when it
merely reads or uses it — and is kept beside the thing, so it moves and goes with it:

=====================================  ===========================================  ======================================
thing                                  the record                                   written by
=====================================  ===========================================  ======================================
a run's output directory               ``<run>/tgk-run.json`` (format 2), written   ``workloads.runs.identity.claim``
(``<run>/`` in a bucket, on Lustre,    only into an empty directory, before the
or run-local's directory)              run writes there
a dataset prefix                       ``<prefix>.tgk-dataset.json`` beside it,     ``workloads.data.upload``
                                       written before the first object
a run's top-level object, its          the toolkit's labels (``managed-by`` and     the renderers; Kueue copies them
Workload                               ``tpu-gke-toolkit/run``) on the object;      (``queues manager-config``)
                                       Kueue copies the run label onto the
                                       Workload it makes
the Lustre helper pod                  its labels, and the uid of the pod this      ``workloads.runs.volume_store``
                                       very call created
files in a user's directory            the unit's ``.tgk-files.json`` digests       ``toolkit.owned``
=====================================  ===========================================  ======================================

Uploads that only add (report uploads, dataset objects, the records themselves) never
replace: every object is created with a generation precondition (``ifGenerationMatch=0``),
and a record the toolkit rewrites (a resumed run's identity) is replaced only at the
generation it read.

The rules are the pure functions below; each returns a ``Permit`` or a ``Kept`` saying why
not. A ``Permit`` names exactly what may go and can be made only here; every function in the
code base that deletes takes one and checks it covers what it deletes (``require``).
``tests/test_ledger.py`` keeps it so: it scans every module for a call that deletes (a
Cloud Storage delete, a Kubernetes delete, a file or tree removal) or replaces (an upload
without a generation precondition) outside a function that takes a ``Permit`` — the few
that remove only what the same process made a moment before (its scratch directories, the
local cluster's own state) are listed there, each with its reason — and it tests the rules
as properties.

What the rules hold, in words:

- a run's output directory (``run_output``): its ``checkpoints/`` and ``metrics/`` go only when
  ``tgk-run.json`` names that run and says the toolkit made the directory — format 2, or an
  older identity the storage shows was written before anything else there (an older toolkit
  also wrote one when a run resumed from checkpoints it did not write: a converted base
  checkpoint) — when its run is gone from the cluster, and when it was last written longer
  ago than the retention;
- a run's object (``run_object``): only a kind of run the toolkit submits, carrying both
  labels with the run's name;
- a Kueue Workload whose run is gone (``orphan_workload``): only when every owner was a kind of
  run the toolkit submits and the Workload carries the run label naming it;
- a file (``owned_file``): only while its digest is the one the toolkit recorded;
- a dataset prefix (``prefix_upload``): created once; an upload goes only into a prefix with
  nothing in it, or finishes the very upload its record describes.

Pure: no I/O. Imports only ``toolkit.names``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toolkit import names


class Kind(StrEnum):
    OUTPUT = "run output"  # <run>/checkpoints/ and <run>/metrics/ under a run's output directory
    RUN_OBJECT = "run object"  # a JobSet, Job (+ its Service) or RayJob the toolkit submitted
    WORKLOAD = "Kueue Workload"  # a finished Workload whose run is gone
    HELPER_POD = "helper pod"  # the short-lived pod that reaches a team's Lustre
    FILE = "file"  # a file the toolkit wrote into a user's directory
    TOOLKIT_OBJECT = "toolkit object"  # a cluster object the toolkit made that is no run (a conversion Job, a token Secret)


_MINT = object()  # only this module makes permits


@dataclass(frozen=True)
class Permit:
    """What may be deleted: ``where`` (an address: a URI, ``namespace/name``, a path) and, for a
    directory, the parts of it (``parts``: relative prefixes; empty: the thing itself)."""

    kind: Kind
    where: str
    parts: tuple[str, ...] = ()
    why: str = ""
    _mint: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._mint is not _MINT:
            raise TypeError("a Permit is made only by the ledger's rules (toolkit.ledger)")

    def covers(self, kind: Kind, where: str, part: str = "") -> bool:
        if kind is not self.kind or where != self.where:
            return False
        if not self.parts:
            return part == ""
        return any(part == p or (p.endswith("/") and part.startswith(p)) for p in self.parts)


class NotPermitted(Exception):
    """A delete was attempted with a permit that does not cover it: a bug, never user input."""


def require(permit: Permit, kind: Kind, where: str, part: str = "") -> None:
    """Raise unless ``permit`` covers deleting ``part`` of ``where`` (called by every function that deletes)."""
    if not isinstance(permit, Permit) or not permit.covers(kind, where, part):
        raise NotPermitted(f"no permit to delete {kind} {where}{part}")


def _permit(kind: Kind, where: str, parts: Iterable[str] = (), why: str = "") -> Permit:
    return Permit(kind, where, tuple(parts), why, _MINT)


@dataclass(frozen=True)
class Kept:
    """Why something stays: ``what`` as the user knows it."""

    what: str
    why: str


Verdict = Permit | Kept


# ------------------------------------------------------------------ a run's output directory

OUTPUT_PARTS = ("checkpoints/", "metrics/")  # what cleanup --checkpoints deletes under <run>/; tensorboard/ traces stay
RECORD_FORMAT = 2  # tgk-run.json written only into an empty directory


@dataclass(frozen=True)
class OutputDir:
    """One ``<run>/`` directory as listed: its record and what is under the deletable parts."""

    where: str  # gs://bucket/run/ or lustre:instance/ns/run/ or a local path, ending in /
    run: str  # the directory's name: the run MaxText writes it for
    owner: str | None  # the run its tgk-run.json names; None: no readable identity the toolkit wrote
    record_format: int = 0
    record_time: float | None = None  # when the storage says the identity was created (epoch s)
    first_write: float | None = None  # the oldest object under the parts (epoch s); None: nothing
    last_write: float = 0.0  # the newest
    objects: int = 0
    size: int = 0
    record_token: str = ""  # the record as read (its generation, or its digest): a delete first checks it is still that


def run_output(d: OutputDir, *, live: Iterable[str], now: float, retention: float) -> Verdict:
    """May ``cleanup --checkpoints`` delete ``d``'s checkpoints and metrics?"""
    if d.owner is None:
        return Kept(d.where, "no tgk-run.json beside it: not written by a run this toolkit submitted (delete it yourself if it is garbage)")
    if d.owner != d.run:
        return Kept(d.where, f"its tgk-run.json names run {d.owner}: not this directory's run (delete it yourself if it is garbage)")
    if d.record_format < RECORD_FORMAT and (d.record_time is None or (d.first_write is not None and d.first_write < d.record_time)):
        return Kept(
            d.where,
            "its tgk-run.json (from an earlier toolkit) was written after its checkpoints, as when a run resumed from checkpoints "
            "the toolkit did not write (a converted base checkpoint): not provably the toolkit's (delete it yourself if it is garbage)",
        )
    if d.run in set(live):
        return Kept(d.where, "its run is still on the cluster")
    if now - d.last_write < retention:
        return Kept(d.where, f"last written {human(now - d.last_write)} ago, within retention")
    return _permit(Kind.OUTPUT, d.where, OUTPUT_PARTS, f"written by run {d.run}, last {human(now - d.last_write)} ago")


# ------------------------------------------------------------------ cluster objects

# The run kinds the toolkit submits: (apiVersion group, kind). A Job's headless Service goes with it.
RUN_KINDS = frozenset({(names.JOBSET_GROUP, "JobSet"), ("batch", "Job"), ("ray.io", "RayJob")})


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def run_object(obj: Mapping[str, Any], *, name: str | None = None, namespace: str | None = None) -> Verdict:
    """May this top-level run object (and what it owns) be deleted? ``name``: the run asked for; ``namespace``: where it was read."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    ns = namespace if namespace is not None else str(meta.get("namespace") or "")
    what = f"{kind} {ns}/{meta.get('name') or ''}"
    labels = meta.get("labels") or {}
    run = meta.get("name")
    if name is not None and run != name:
        return Kept(what, f"not the run {name} asked for")
    if (_group(str(obj.get("apiVersion") or "")), kind) not in RUN_KINDS and not (kind == "Service" and labels.get(names.TGK_RUN_LABEL)):
        return Kept(what, "not a kind of run the toolkit submits")
    if labels.get(names.K8S_MANAGED_BY_LABEL) != names.TGK or labels.get(names.TGK_RUN_LABEL) != run:
        return Kept(
            what,
            f"carries no {names.K8S_MANAGED_BY_LABEL}={names.TGK} and {names.TGK_RUN_LABEL}={run} labels: not submitted by this toolkit "
            "(delete it with kubectl, or the tool that made it, if you mean to)",
        )
    return _permit(Kind.RUN_OBJECT, f"{ns}/{run}", (), f"{kind} submitted by the toolkit")


def toolkit_object(obj: Mapping[str, Any] | None, *, kind: str, name: str, namespace: str) -> Verdict:
    """May this object (not a run: a conversion Job, a fleet's token Secret) be deleted? Only with the toolkit's managed-by label."""
    what = f"{kind} {namespace}/{name}"
    if obj is None:
        return Kept(what, "not there")
    meta = obj.get("metadata") or {}
    if str(obj.get("kind") or "") != kind or meta.get("name") != name:
        return Kept(what, "not the object asked for")
    if (meta.get("labels") or {}).get(names.K8S_MANAGED_BY_LABEL) != names.TGK:
        return Kept(what, f"carries no {names.K8S_MANAGED_BY_LABEL}={names.TGK} label: not made by this toolkit (delete it with kubectl if you mean to)")
    return _permit(Kind.TOOLKIT_OBJECT, f"{kind} {namespace}/{name}", (), f"{kind} made by the toolkit")


def orphan_workload(wl: Mapping[str, Any], live_uids: set[str]) -> Verdict | None:
    """A finished Workload whose owner is gone: Permit (the toolkit's run made it) or Kept; None: not an orphan."""
    meta = wl.get("metadata") or {}
    owners = list(meta.get("ownerReferences") or [])
    if {str(r.get("uid") or "") for r in owners} & live_uids:
        return None
    fin = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == "Finished"), None)
    if not fin or str(fin.get("status", "")).lower() != "true":
        return None
    what = f"Workload {meta.get('namespace') or ''}/{meta.get('name') or ''}"
    if not owners:
        return Kept(what, "has no owner: not made by Kueue for a run (delete it with kubectl if you mean to)")
    foreign = sorted({str(r.get("kind")) for r in owners if (_group(str(r.get("apiVersion") or "")), r.get("kind")) not in RUN_KINDS})
    if foreign:
        return Kept(what, f"its owner was a {', '.join(foreign)}, not a kind of run the toolkit submits")
    run = (meta.get("labels") or {}).get(names.TGK_RUN_LABEL)
    if not run or any(r.get("name") != run for r in owners):
        return Kept(
            what,
            f"carries no {names.TGK_RUN_LABEL} label naming its owner (Kueue copies it from the toolkit's runs): not provably a run of the toolkit's",
        )
    return _permit(Kind.WORKLOAD, f"{meta.get('namespace') or ''}/{meta.get('name') or ''}", (), f"the Workload of run {run}, which is gone")


def helper_pod(obj: Mapping[str, Any], *, created_uid: str) -> Verdict:
    """The toolkit's helper pod, the very one this call created (its uid), labelled as the toolkit's."""
    meta = obj.get("metadata") or {}
    what = f"Pod {meta.get('namespace') or ''}/{meta.get('name') or ''}"
    labels = meta.get("labels") or {}
    if obj.get("kind") != "Pod" or not created_uid or meta.get("uid") != created_uid or labels.get(names.K8S_MANAGED_BY_LABEL) != names.TGK:
        return Kept(what, "not the helper pod this command created")
    return _permit(Kind.HELPER_POD, f"{meta.get('namespace') or ''}/{meta.get('name') or ''}", (), "created by this command a moment ago")


# ------------------------------------------------------------------ files


def owned_file(path: str, *, recorded: str | None, current: str | None) -> Verdict:
    """A file the toolkit wrote (its manifest's digest) and nobody changed since."""
    if recorded is None:
        return Kept(path, "not listed in the directory's manifest: the user's")
    if current is not None and current != recorded:
        return Kept(path, "changed since the toolkit wrote it")
    return _permit(Kind.FILE, path, (), "written by the toolkit, unchanged")


# ------------------------------------------------------------------ a dataset prefix


@dataclass(frozen=True)
class PrefixRecord:
    """What an upload recorded before its first object: the files it would write, and whether it finished."""

    dataset: str
    files: Mapping[str, int]  # object name -> size
    complete: bool


@dataclass(frozen=True)
class PrefixUpload:
    """What an upload into a prefix may do: create these objects (never another), and record or finish."""

    create: tuple[str, ...]
    new_record: bool  # no record yet: write one (create-only) before the first object


def prefix_upload(prefix: str, wanted: Mapping[str, int], existing: Mapping[str, int], record: PrefixRecord | None) -> PrefixUpload | Kept:
    """A dataset prefix is created once: into an empty prefix, or to finish the same upload.

    ``wanted``/``existing``: object name -> size (what the upload writes / what the prefix holds).
    """
    if record is None:
        if existing:
            first = sorted(existing)[0]
            return Kept(prefix, f"already holds {len(existing)} object(s) the toolkit did not upload (e.g. {first}); a dataset prefix is written once")
        return PrefixUpload(tuple(sorted(wanted)), True)
    if record.complete:
        return Kept(prefix, f"holds dataset {record.dataset}, uploaded completely; runs may read it, so it is never added to")
    if dict(record.files) != dict(wanted):
        return Kept(prefix, f"holds an unfinished upload of other files (dataset {record.dataset}); only that same upload may finish it")
    foreign = sorted(n for n in existing if n not in record.files)
    if foreign:
        return Kept(prefix, f"holds {foreign[0]}, which the unfinished upload did not write")
    torn = sorted(n for n, size in existing.items() if size != record.files[n])
    if torn:
        return Kept(prefix, f"{torn[0]} there has another size than the file to upload")
    return PrefixUpload(tuple(sorted(n for n in wanted if n not in existing)), False)


# ------------------------------------------------------------------ text


def human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
