"""A run's output directory belongs to that run: its identity, written beside its checkpoints.

MaxText resumes from ``<base_output_directory>/<run name>/checkpoints/``, whatever wrote it, and
writes its metrics and TensorBoard traces beside them: a later, different run under a reused
``--name`` would restore the first one's weights and write into its files. So before a MaxText
run is applied, the toolkit reads ``<output dir>/tgk-run.json`` (``IDENTITY``) and:

- none there, and nothing else either: a new run; the identity is written (only if still
  absent: a precondition the storage checks), then the run applied. This is the ledger's
  record (``toolkit.ledger``) that the toolkit made the directory: written when it creates the
  directory, never when it merely uses one;
- the same submission (the digest of ``workloads.render.submission``, what ``--name`` reuse
  is judged by on the cluster too): the same run again (resubmitted after it was deleted or
  failed); it resumes, as a restarted JobSet would;
- anything else — another recipe, model, step count, image or ``--set`` — is another run:
  refused with one line naming the run that owns the directory, unless ``--resume`` asks
  for its checkpoints on purpose. Even then the model's shape must be the same
  (``model_key``): other weights cannot be restored into it. The identity is then this
  run's (replaced only at the version read: a precondition again);
- files there but no identity (written before the toolkit kept identities, or laid there by
  hand, e.g. a converted checkpoint): refused, unless ``--resume`` asks for the checkpoints
  there. Then the run reads them **without adopting them** (``foreign``): no identity is
  written, so the directory stays not the toolkit's and ``cleanup`` never deletes it.

``--resume`` where there is nothing to resume is refused too: the user expected state.
Pure decisions (``decide``) over a ``Store``: the bucket (``GcsStore``: ``gcs`` and ``gcsfuse``
checkpoint storage, the same objects), a local directory (``DirStore``: ``run-local``), or the
team's Lustre, reached through a short-lived pod on the cluster
(``workloads.runs.volume_store.VolumeStore``). The last two run the same directory operations
(``toolkit.dirops``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from toolkit import dirops, ledger
from toolkit.errors import FieldError, ToolkitError
from toolkit.jsontext import load_json

if TYPE_CHECKING:
    from workloads.planning.model import RunPlan

IDENTITY = "tgk-run.json"
CHECKPOINTS = "checkpoints/"
WRITER = "tpu-gke-toolkit"
FORMAT = ledger.RECORD_FORMAT  # 2: written only into an empty directory (format 1 was also written when adopting one)


class Store(Protocol):
    """Where a run's directory lives, addressed by paths relative to it (``tgk-run.json``, ``checkpoints/``)."""

    where: str  # the directory, as the user knows it (gs://bucket/run/, lustre:instance/ns/run/ or a local path)

    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, data: bytes, *, create: bool) -> bool:
        """``create``: only if absent; else only if it is still what ``read`` returned (the storage checks both).

        False: that precondition failed (another writer got there first)."""
        ...

    def has_any(self, prefix: str) -> bool: ...

    def entries(self) -> list[str]:
        """A few names directly in the directory (directories end in ``/``); [] when it is empty or absent."""
        ...


@dataclass(frozen=True)
class Identity:
    run: str
    recipe: str
    model: dict[str, str]
    submission: str
    created: str
    updated: str = ""
    format: int = FORMAT

    def document(self) -> dict[str, Any]:
        return {
            "written_by": WRITER,
            "format": self.format,
            "about": "the toolkit made this directory for the run named here (its checkpoints/ and metrics/ are the run's); "
            "another run under its name is refused unless it asks to --resume",
            "run": self.run,
            "recipe": self.recipe,
            "model": self.model,
            "submission": self.submission,
            "created": self.created,
            **({"updated": self.updated} if self.updated else {}),
        }

    def encode(self) -> bytes:
        return (json.dumps(self.document(), indent=1) + "\n").encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> Identity:
        try:
            d = load_json(raw, max_bytes=1024 * 1024)
            if not isinstance(d, dict) or d.get("written_by") != WRITER:
                raise ValueError("not written by the toolkit")
            model = d["model"]
            if not isinstance(model, dict):
                raise ValueError("model is not a mapping")
            return cls(
                str(d["run"]),
                str(d["recipe"]),
                {str(k): str(v) for k, v in model.items()},
                str(d["submission"]),
                str(d["created"]),
                str(d.get("updated") or ""),
                int(d.get("format") or 1),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ToolkitError(f"{where}{IDENTITY} is not a run identity the toolkit wrote ({e}) — move it away, or pick another --name") from None

    def model_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.model.items())


def model_key(plan: RunPlan) -> dict[str, str]:
    """What fixes the shape of the weights: MaxText's model name, the model dimensions the
    run sets, and the parameter count the planner sized it by."""
    from workloads.planning.maxtext_keys import MODEL_KEYS

    args = dict(a.split("=", 1) for a in plan.program.args if "=" in a)
    out = {"model_name": args.get("model_name", "default")}
    out.update({k: args[k] for k in sorted(MODEL_KEYS) if k in args})
    sizing = plan.program.sizing
    if sizing is not None:
        out["params"] = str(sizing.params)
    return out


def submission_digest(plan: RunPlan) -> str:
    """The digest of what the run applies, as rendered for any cluster (before a cluster's decoration)."""
    from workloads.render import submission
    from workloads.render.kustomize import run_objects

    return submission.digest(run_objects(plan))


def identity_of(plan: RunPlan, now: datetime | None = None, submission: str | None = None) -> Identity:
    """``submission``: the run's digest as rendered, when the caller rendered it (``submission_digest`` otherwise)."""
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Identity(plan.name, plan.program.recipe, model_key(plan), submission or submission_digest(plan), when)


def guarded(plan: RunPlan) -> bool:
    """Whether the run writes a directory of its own a later run could restore or write into: a MaxText run with an output."""
    return plan.program.is_maxtext and (bool(plan.program.output_dir) or lustre_dir(plan) is not None)


def resumable(plan: RunPlan) -> bool:
    """Whether ``--resume`` means anything for the run: it saves checkpoints."""
    return guarded(plan) and plan.policy.checkpoint is not None


def lustre_dir(plan: RunPlan) -> str | None:
    """The run's directory on the team's Lustre, relative to the claim's mount (``<namespace>/<run>/``); None on a bucket."""
    st = plan.policy.checkpoint_storage
    if st is None or st.kind != "lustre":
        return None
    rel = st.base_output.removeprefix(st.mount_dir).strip("/")
    return f"{rel}/{plan.name}/" if rel else f"{plan.name}/"


@dataclass(frozen=True)
class Verdict:
    """What ``claim`` found and did: ``state`` is new | same | resumed | foreign."""

    state: str
    where: str
    owner: Identity | None = None  # the identity found (None: there was none)
    checkpoints: bool = False  # checkpoints were there to restore

    def line(self) -> str:
        """One line for the user."""
        if self.state == "new":
            return f"checkpoints: {self.where}{CHECKPOINTS} is this run's (identity written to {self.where}{IDENTITY})"
        what = "its latest checkpoint" if self.checkpoints else "no checkpoint yet: it starts at step 0"
        if self.state == "same":
            return f"checkpoints: the same run as submitted before; it resumes from {what} in {self.where}{CHECKPOINTS}"
        if self.state == "foreign":
            return (
                f"checkpoints: --resume: continues from the latest checkpoint in {self.where}{CHECKPOINTS}, which no toolkit run recorded; "
                "read, not adopted: no identity is written there, and cleanup never deletes it"
            )
        who = f"run {self.owner.run} ({self.owner.recipe}, {self.owner.created})" if self.owner else "checkpoints no toolkit run recorded"
        return f"checkpoints: --resume: continues from {what} of {who} in {self.where}{CHECKPOINTS}"


def decide(mine: Identity, found: Identity | None, checkpoints: bool, *, resume: bool, where: str, others: Sequence[str] = ()) -> str:
    """new | same | resumed | foreign, or a FieldError saying why the directory is not this run's. Pure.

    ``others``: what else is in the directory besides the identity (a few names); ``checkpoints``:
    whether ``checkpoints/`` holds anything.
    """
    ckpt = f"{where}{CHECKPOINTS}"
    if found is None:
        if checkpoints and not resume:
            raise FieldError(
                "--name",
                f"{ckpt} holds checkpoints no toolkit run recorded ({IDENTITY} is missing); MaxText would restore them into {mine.run}",
                "pick another --name, or pass --resume to continue from them on purpose",
            )
        if resume and not checkpoints:
            raise FieldError("--resume", f"nothing to resume: no run has written {ckpt}", "drop --resume to start the run fresh")
        if resume:
            return "foreign"  # read, never adopted: the toolkit did not make this directory
        if others:
            raise FieldError(
                "--name",
                f"{where} holds files no toolkit run recorded (e.g. {others[0]}; {IDENTITY} is missing); {mine.run} would write among them",
                "pick another --name",
            )
        return "new"
    if found.submission == mine.submission:
        return "same"
    if found.model != mine.model:
        differs = ", ".join(
            f"{k} {found.model.get(k, '-')} vs {mine.model.get(k, '-')}"
            for k in sorted(set(found.model) | set(mine.model))
            if found.model.get(k) != mine.model.get(k)
        )
        raise FieldError(
            "--resume" if resume else "--name",
            f"{ckpt} belongs to run {found.run} ({found.recipe}, created {found.created}), a model of another shape ({differs}); its checkpoints cannot be restored into {mine.recipe}",
            "pick another --name",
        )
    if not resume:
        what = "another recipe" if found.recipe != mine.recipe else "other options"
        raise FieldError(
            "--name",
            f"{ckpt} belongs to run {found.run} ({found.recipe}, created {found.created}), submitted with {what}; this run would restore its latest checkpoint",
            "pick another --name, or pass --resume to continue from its checkpoints on purpose",
        )
    return "resumed"


def claim(store: Store, plan: RunPlan, *, resume: bool, now: datetime | None = None, submission: str | None = None) -> Verdict:
    """Check the run's directory is this run's (``decide``) and record it; before anything is applied.

    Written only when the toolkit makes the directory (``new``) or continues a run of its own
    (``resumed``); a ``foreign`` directory is read, never written. ``submission``: the run's
    digest as rendered, when the caller has it (``identity_of``).
    """
    mine = identity_of(plan, now, submission)
    raw = store.read(IDENTITY)
    found = None if raw is None else Identity.decode(raw, store.where)
    checkpoints = store.has_any(CHECKPOINTS)
    others = [] if found is not None else [e for e in store.entries() if e != IDENTITY]
    state = decide(mine, found, checkpoints, resume=resume, where=store.where, others=others)
    if state == "new":
        if not store.write(IDENTITY, mine.encode(), create=True):
            # Another submit raced this one to the directory: what is there now must be ours.
            back = store.read(IDENTITY)
            if back is None or Identity.decode(back, store.where).submission != mine.submission:
                raise FieldError("--name", f"{store.where} was claimed by another run just now", "pick another --name")
    elif state == "resumed":
        assert found is not None
        # The format says how the directory came to be: a resume never makes an older record a proof of creation.
        kept = Identity(mine.run, mine.recipe, mine.model, mine.submission, found.created, mine.created, found.format)
        if not store.write(IDENTITY, kept.encode(), create=False):
            raise FieldError("--name", f"{store.where}{IDENTITY} changed while this submit read it", "submit again, once the other submit is done")
    return Verdict(state, store.where, found, checkpoints)


# ------------------------------------------------------------------ stores


def split_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b/`` -> (bucket, ``a/b/``)."""
    rest = uri.removeprefix("gs://")
    bucket, _, prefix = rest.partition("/")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


class GcsStore:
    """The run's directory in its bucket (``gcs`` and ``gcsfuse`` storage), through ``workloads.observe.owned_objects``.

    A record is created only where there is none, and replaced only at the generation read.
    """

    def __init__(self, client: Any, output_dir: str) -> None:
        self.client = client
        self.bucket, self.prefix = split_gs(output_dir)
        self.where = f"gs://{self.bucket}/{self.prefix}"
        self._generations: dict[str, int] = {}

    def read(self, name: str) -> bytes | None:
        from workloads.observe import owned_objects

        got = owned_objects.read(self.client, self.bucket, self.prefix + name, f"{self.where}{name}")
        if got is None:
            self._generations.pop(name, None)
            return None
        self._generations[name] = got[1]
        return got[0]

    def write(self, name: str, data: bytes, *, create: bool) -> bool:
        from workloads.observe import owned_objects

        what = f"{self.where}{name}"
        if create:
            return owned_objects.create(self.client, self.bucket, self.prefix + name, data, content_type="application/json", what=what)
        generation = self._generations.get(name)
        if generation is None:
            raise ToolkitError(f"{what} is replaced only after it was read")
        return owned_objects.replace(self.client, self.bucket, self.prefix + name, data, generation=generation, content_type="application/json", what=what)

    def has_any(self, prefix: str) -> bool:
        from workloads.observe import owned_objects

        return bool(owned_objects.listing(self.client, self.bucket, self.prefix + prefix, f"{self.where}{prefix}", limit=1))

    def entries(self) -> list[str]:
        from workloads.observe import owned_objects

        names: list[str] = []
        for o in owned_objects.listing(self.client, self.bucket, self.prefix, self.where, limit=50):
            head, sep, _ = o.name[len(self.prefix) :].partition("/")
            entry = head + sep
            if entry and entry not in names:
                names.append(entry)
        return names[:5]


class OpsStore:
    """A directory reached through ``toolkit.dirops`` (``ops``: run a request, return its results); a base for the two below."""

    where: str
    flag = "--checkpoint-dir"

    def __init__(self, rel: str) -> None:
        self.rel = rel.strip("/") + "/"  # the run's directory, relative to the base the ops run in
        self._digests: dict[str, str] = {}
        self._seen: dict[str, Any] | None = None  # what one look found (read, entries, checkpoints), until a write

    def ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def fail(self, problem: str) -> ToolkitError:
        return FieldError(self.flag, f"{self.where}: {problem}", f"pass a {self.flag} you can read and write")

    def _run(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results = self.ops(ops)
        for r in results:
            if "error" in r:
                raise self.fail(str(r["error"]))
        return results

    def _look(self) -> dict[str, Any]:
        """The record, the directory's first names and whether checkpoints/ holds anything: one request."""
        if self._seen is None:
            got = self._run(
                [
                    {"op": "read", "path": self.rel + IDENTITY},
                    {"op": "list", "path": self.rel, "limit": 5},
                    {"op": "list", "path": self.rel + CHECKPOINTS, "limit": 1},
                ]
            )
            record = got[0]["data"]
            self._seen = {
                "record": None if record is None else base64.b64decode(record),
                "entries": got[1]["names"] or [],
                "checkpoints": bool(got[2]["names"]),
            }
        return self._seen

    def read(self, name: str) -> bytes | None:
        if name == IDENTITY:
            data = self._look()["record"]
        else:
            got = self._run([{"op": "read", "path": self.rel + name}])[0]["data"]
            data = None if got is None else base64.b64decode(got)
        if data is None:
            self._digests.pop(name, None)
        else:
            self._digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def write(self, name: str, data: bytes, *, create: bool) -> bool:
        op: dict[str, Any] = {"op": "create" if create else "replace", "path": self.rel + name, "data": base64.b64encode(data).decode()}
        if not create:
            expect = self._digests.get(name)
            if expect is None:
                raise ToolkitError(f"{self.where}{name} is replaced only after it was read")
            op["expect"] = expect
        self._seen = None
        return bool(self._run([op])[0]["written"])

    def has_any(self, prefix: str) -> bool:
        if prefix == CHECKPOINTS:
            return bool(self._look()["checkpoints"])
        return bool(self._run([{"op": "list", "path": self.rel + prefix, "limit": 1}])[0]["names"])

    def entries(self) -> list[str]:
        return list(self._look()["entries"])


class DirStore(OpsStore):
    """The run's directory on this machine (``run-local``: ``<checkpoint dir>/<run>/``), through ``toolkit.dirops`` in-process."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        super().__init__(path.name)
        self.path = path
        self.base = path.parent
        self.where = f"{path}/"

    def ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any(op["op"] in ("create", "replace") for op in ops):
            self.base.mkdir(parents=True, exist_ok=True)
        return dirops.handle({"base": str(self.base.absolute()), "ops": ops})
