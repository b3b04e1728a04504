"""The pinned Kueue and JobSet: spelled the same everywhere, and every Kueue object rendered for the API version the pin serves.

Kueue v0.20 stops serving kueue.x-k8s.io/v1beta1; the toolkit renders v1beta2 (Kueue's storage
version since v0.16) for every Kueue object it writes, whichever example or fleet it comes from,
so moving the pin on cannot leave an object behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.spec import DEFAULT_JOBSET_VERSION, DEFAULT_KUEUE_VERSION, EXAMPLES_DIR, load_spec
from toolkit.names import KUEUE_API, KUEUE_GROUP

REPO = Path(__file__).resolve().parent.parent
BUILD = (REPO / "scripts" / "build-local-cluster.sh").read_text()


def _pin(name: str) -> str:
    m = re.search(rf'^{name}="(v[^"]+)"', BUILD, re.M)
    assert m, name
    return m.group(1)


def test_the_local_cluster_builds_the_versions_the_spec_pins() -> None:
    assert (_pin("KUEUE_VERSION"), _pin("JOBSET_VERSION")) == (DEFAULT_KUEUE_VERSION, DEFAULT_JOBSET_VERSION)
    # ... and the builder modules require exactly those tags (the script also refuses to build otherwise).
    assert re.search(rf"sigs\.k8s\.io/kueue {re.escape(DEFAULT_KUEUE_VERSION)}\b", (REPO / "tools/local-cluster/kueue/go.mod").read_text())
    assert re.search(rf"sigs\.k8s\.io/jobset {re.escape(DEFAULT_JOBSET_VERSION)}\b", (REPO / "tools/local-cluster/jobset/go.mod").read_text())


def test_docs_name_the_pinned_versions() -> None:
    for page in ("README.md", "docs/testing.md", "docs/local-cluster.md"):
        text = (REPO / page).read_text()
        assert f"Kueue {DEFAULT_KUEUE_VERSION}" in text and f"JobSet {DEFAULT_JOBSET_VERSION}" in text, page


def _kueue_objects(objs: list[dict]) -> list[dict]:
    return [o for o in objs if str(o.get("apiVersion", "")).startswith(f"{KUEUE_GROUP}/")]


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml")))
def test_every_kueue_object_of_every_example_is_v1beta2(example: str) -> None:
    from workloads.render.kueue import cluster_objects

    objs = _kueue_objects(cluster_objects(load_spec(EXAMPLES_DIR / f"{example}.yaml")))
    assert objs, example
    assert {o["apiVersion"] for o in objs} == {KUEUE_API} == {"kueue.x-k8s.io/v1beta2"}


def test_every_kueue_object_of_a_fleet_is_v1beta2() -> None:
    from infra.fleet import load_fleet
    from workloads.render import multikueue

    for path in sorted((EXAMPLES_DIR / "fleet").glob("*.yaml")):
        try:
            fleet = load_fleet(path)
        except Exception:  # a worker's spec of the fleet, not the fleet file
            continue
        objs = _kueue_objects(multikueue.manager_objects(fleet))
        for w in fleet.workers:
            objs += _kueue_objects(multikueue.worker_objects(fleet, w))
        assert objs and {o["apiVersion"] for o in objs} == {"kueue.x-k8s.io/v1beta2"}, path.name
