"""Submitting under a name that already exists: the same run again, or another one?

The rendered overlay (``kustomize.render_run``) stamps the run's top-level object
(JobSet, Job or RayJob) with a digest of everything the run applies. A later ``submit --name`` of the same name compares digests
before applying anything: the same digest is the same run (a no-op that reports it),
a different one — or an object the toolkit did not submit — is refused with one line.
Applying over a live run would otherwise reach the API's immutability checks and end
in a raw HTTP 422, or silently change a run that is training.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Literal

from toolkit.names import TGK_SUBMISSION_ANNOTATION

Verdict = Literal["new", "same", "changed", "foreign"]


def digest(objects: list[dict[str, Any]]) -> str:
    """A stable digest of the objects as they will be applied (without the stamp itself)."""
    bare = copy.deepcopy(objects)
    for obj in bare:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations")
        if annotations and TGK_SUBMISSION_ANNOTATION in annotations:
            del annotations[TGK_SUBMISSION_ANNOTATION]
            if not annotations:
                del meta["annotations"]
    text = json.dumps(bare, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def stamp(objects: list[dict[str, Any]], top_kind: str, value: str | None = None) -> list[dict[str, Any]]:
    """The objects with the digest on the run's top-level object; the input is left as it is.

    ``value``: the objects' digest when the caller has already computed it (``digest(objects)``).
    """
    value = digest(objects) if value is None else value
    out = copy.deepcopy(objects)
    for obj in out:
        if obj.get("kind") == top_kind:
            obj.setdefault("metadata", {}).setdefault("annotations", {})[TGK_SUBMISSION_ANNOTATION] = value
    return out


def verdict(existing: dict[str, Any] | None, objects: list[dict[str, Any]], value: str | None = None) -> Verdict:
    """new, same, changed or foreign: the run already under the name against ``objects`` (whose digest is ``value``, if known)."""
    if existing is None:
        return "new"
    theirs = ((existing.get("metadata") or {}).get("annotations") or {}).get(TGK_SUBMISSION_ANNOTATION)
    if theirs is None:
        return "foreign"
    return "same" if theirs == (digest(objects) if value is None else value) else "changed"
