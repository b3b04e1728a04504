"""A run's checkpoint directory belongs to that run: its identity, written beside its checkpoints.

MaxText resumes from ``<base_output_directory>/<run name>/checkpoints/``, whatever wrote it: a
later, different run under a reused ``--name`` would restore the first one's weights. So
before a run that checkpoints is applied, the toolkit reads ``<output dir>/tgk-run.json``
(``IDENTITY``) and:

- none there, and no checkpoints either: a new run; the identity is written, then the run applied;
- the same submission (the digest of ``workloads.render.submission``, what ``--name`` reuse
  is judged by on the cluster too): the same run again (resubmitted after it was deleted or
  failed); it resumes, as a restarted JobSet would;
- anything else — another recipe, model, step count, image or ``--set`` — is another run:
  refused with one line naming the run that owns the directory, unless ``--resume`` asks
  for its checkpoints on purpose. Even then the model's shape must be the same
  (``model_key``): other weights cannot be restored into it;
- checkpoints there but no identity (written before the toolkit kept identities, or laid
  there by hand, e.g. a converted checkpoint): refused unless ``--resume``.

``--resume`` where there is nothing to resume is refused too: the user expected state.
Pure decisions (``decide``) over a ``Store`` (the bucket: ``GcsStore``, or a local
directory for ``run-local``: ``DirStore``). ``cleanup --checkpoints`` deletes only
directories with an identity: the record that a toolkit run wrote them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from toolkit.errors import FieldError, ToolkitError
from toolkit.jsontext import load_json
from toolkit.owned import write_atomic

if TYPE_CHECKING:
    from workloads.planning.model import RunPlan

IDENTITY = "tgk-run.json"
CHECKPOINTS = "checkpoints/"
WRITER = "tpu-gke-toolkit"
FORMAT = 1


class Store(Protocol):
    """Where a run's directory lives, addressed by paths relative to it (``tgk-run.json``, ``checkpoints/``)."""

    where: str  # the directory, as the user knows it (gs://bucket/run/ or a local path)

    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, data: bytes, *, create: bool) -> None:
        """``create``: only if absent (a precondition the bucket checks, where it can)."""
        ...

    def has_any(self, prefix: str) -> bool: ...


@dataclass(frozen=True)
class Identity:
    run: str
    recipe: str
    model: dict[str, str]
    submission: str
    created: str
    updated: str = ""

    def document(self) -> dict[str, Any]:
        return {
            "written_by": WRITER,
            "format": FORMAT,
            "about": "the run whose checkpoints are in checkpoints/ beside this file; another run under its name is refused unless it asks to --resume",
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
    """Whether the run keeps state a later run could restore: a MaxText run that checkpoints."""
    return plan.program.is_maxtext and plan.policy.checkpoint is not None and bool(plan.program.output_dir)


@dataclass(frozen=True)
class Verdict:
    """What ``claim`` found and did: ``state`` is new | same | resumed."""

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
        who = f"run {self.owner.run} ({self.owner.recipe}, {self.owner.created})" if self.owner else "checkpoints no toolkit run recorded"
        return f"checkpoints: --resume: continues from {what} of {who} in {self.where}{CHECKPOINTS}"


def decide(mine: Identity, found: Identity | None, checkpoints: bool, *, resume: bool, where: str) -> str:
    """new | same | resumed, or a FieldError saying why the directory is not this run's. Pure."""
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
        return "resumed" if resume else "new"
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

    ``submission``: the run's digest as rendered, when the caller has it (``identity_of``).
    """
    mine = identity_of(plan, now, submission)
    raw = store.read(IDENTITY)
    found = None if raw is None else Identity.decode(raw, store.where)
    checkpoints = store.has_any(CHECKPOINTS)
    state = decide(mine, found, checkpoints, resume=resume, where=store.where)
    if found is None:
        store.write(IDENTITY, mine.encode(), create=True)
        # Another submit may have raced this one to the directory: what is there now must be ours.
        back = store.read(IDENTITY)
        if back is not None and Identity.decode(back, store.where).submission != mine.submission:
            raise FieldError("--name", f"{store.where} was claimed by another run just now", "pick another --name")
    elif state == "resumed":
        kept = Identity(mine.run, mine.recipe, mine.model, mine.submission, found.created, mine.created)
        store.write(IDENTITY, kept.encode(), create=False)
    return Verdict(state, store.where, found, checkpoints)


# ------------------------------------------------------------------ stores


def split_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b/`` -> (bucket, ``a/b/``)."""
    rest = uri.removeprefix("gs://")
    bucket, _, prefix = rest.partition("/")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


class GcsStore:
    """The run's directory in its bucket, through google-cloud-storage (``client``: a ``storage.Client``)."""

    def __init__(self, client: Any, output_dir: str) -> None:
        self.client = client
        self.bucket, self.prefix = split_gs(output_dir)
        self.where = f"gs://{self.bucket}/{self.prefix}"

    def _call(self, what: str, fn: Any) -> Any:
        from workloads.observe.storage import storage_call

        return storage_call(f"{what} {self.where}", self.bucket, fn)

    def read(self, name: str) -> bytes | None:
        blob = self._call("read", lambda: self.client.bucket(self.bucket).get_blob(self.prefix + name))
        return None if blob is None else self._call("read", blob.download_as_bytes)

    def write(self, name: str, data: bytes, *, create: bool) -> None:
        blob = self.client.bucket(self.bucket).blob(self.prefix + name)
        kwargs = {"if_generation_match": 0} if create else {}
        self._call("write", lambda: blob.upload_from_string(data, content_type="application/json", **kwargs))

    def has_any(self, prefix: str) -> bool:
        return self._call("list", lambda: any(True for _ in self.client.list_blobs(self.bucket, prefix=self.prefix + prefix, max_results=1)))


class DirStore:
    """The run's directory on this machine (``run-local``: ``<checkpoint dir>/<run>/``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.where = f"{self.path}/"

    def read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise FieldError("--checkpoint-dir", f"cannot read {self.path / name}: {e.strerror or e}", "pass a directory you can read") from None

    def write(self, name: str, data: bytes, *, create: bool) -> None:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_atomic(path, data, mode=None, create=create)  # create: fails if another run got there first
        except FileExistsError:
            pass  # claim() reads it back and sees whose it is

    def has_any(self, prefix: str) -> bool:
        d = self.path / prefix
        return d.is_dir() and any(d.iterdir())
