"""Spec documents for tests: an example's YAML as a dict to change, or parsed with a few keys set."""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml

from tests.support.paths import EXAMPLES

# The least a spec needs: one project, region, zone, cluster and checkpoint bucket; add tpu_pools (``spec_from(MINIMAL, tpu_pools=...)``).
MINIMAL: dict[str, Any] = {
    "project": "my-tpu-project",
    "region": "us-central1",
    "zones": ["us-central1-a"],
    "cluster": {"name": "t"},
    "buckets": [{"name": "my-ckpt-bucket", "purpose": "checkpoints"}],
}


def one_pool(generation: str, topology: str, slices: int = 1) -> Any:
    """``MINIMAL`` with one pool ``p`` of ``slices`` slices of this shape, parsed."""
    return spec_from(MINIMAL, tpu_pools=[{"name": "p", "generation": generation, "topology": topology, "slices": slices}])


@functools.cache
def _example_doc(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name.removesuffix('.yaml')}.yaml").read_text())


def example_doc(name: str = "default") -> dict[str, Any]:
    """A fresh copy of ``examples/<name>.yaml`` as a dict, to change (or write out)."""
    return copy.deepcopy(_example_doc(name))


def spec_from(base: str | dict[str, Any] = "default", **top: Any) -> Any:
    """The spec parsed from ``base`` (an example's name, or a document) with top-level keys set from ``top``.

    Works on a deep copy: neither ``base`` nor ``top`` is changed by the caller's later edits or by parsing.
    """
    from infra.spec import parse_spec

    doc = example_doc(base) if isinstance(base, str) else base
    return parse_spec(copy.deepcopy({**doc, **top}))
