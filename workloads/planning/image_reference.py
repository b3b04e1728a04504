"""An image reference as the kubelet parses it (the OCI distribution grammar), pinned by a tag or a digest.

Anything else is refused before a run, not met as ``InvalidImageName`` on a pod that
already holds its TPUs. The grammar is the distribution project's reference grammar
(https://github.com/distribution/reference/blob/main/reference.go): a repository of
lowercase path components under an optional registry host, then ``:tag`` and/or
``@sha256:<digest>``.
"""

from __future__ import annotations

import re

_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
IMAGE_REFERENCE = re.compile(rf"(?P<repo>{_REPOSITORY})(?::{_TAG})?(?:@{_DIGEST})?")
REGISTRY_IMAGE = re.compile(rf"{_PATH_PART}(?:/{_PATH_PART})*:{_TAG}")  # name:tag inside the spec's repository
IMAGE_REPOSITORY_MAX = 255  # the distribution spec's limit on the repository part


def image_problem(ref: str) -> str | None:
    """Why ``ref`` is not a pinned image reference, or None."""
    m = IMAGE_REFERENCE.fullmatch(ref)
    if m is None:
        return "is not an image reference (registry/path:tag or @sha256:<digest>, lowercase path)"
    if len(m.group("repo")) > IMAGE_REPOSITORY_MAX:
        return f"has a repository name over {IMAGE_REPOSITORY_MAX} characters"
    if len(m.group("repo")) == len(ref):
        return "has no tag or digest"
    return None
