"""`python -m infra synth --fleet`: one stack per cluster, each worker's exactly its own spec's, a manager with no TPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO, cli

pytestmark = pytest.mark.synth

FLEET = REPO / "examples" / "fleet" / "fleet.yaml"


def resources(doc: dict) -> dict[str, dict]:
    return doc.get("resource", {})


def test_one_stack_per_cluster_and_nothing_shared(tmp_path: Path):
    proc = cli("infra", "synth", "--fleet", str(FLEET), "--out", str(tmp_path / "out"), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    paths = [Path(p) for p in json.loads(proc.stdout)["stacks"]]
    assert [p.parent.name for p in paths] == ["tpu-west", "tpu-east", "tpu-fleet-mgr"]  # deploy order: workers, then the manager
    docs = {p.parent.name: json.loads(p.read_text()) for p in paths}

    # A worker's stack is exactly what its own spec synthesizes.
    alone = cli("infra", "synth", "--spec", str(FLEET.parent / "west.yaml"), "--out", str(tmp_path / "west"))
    assert alone.returncode == 0, alone.stderr
    assert json.loads(Path(alone.stdout.strip()).read_text()) == docs["tpu-west"]

    mgr = resources(docs["tpu-fleet-mgr"])
    pools = mgr.get("google_container_node_pool", {})
    (pool,) = pools.values()  # the manager has only its CPU pool
    assert not pool["node_config"]["machine_type"].startswith("ct"), pool["node_config"]["machine_type"]
    for kind in ("google_storage_bucket", "google_artifact_registry_repository", "google_vertex_ai_tensorboard", "google_cloudbuild_trigger"):
        assert kind not in mgr, f"the manager's stack must not own a {kind}"

    # No two stacks create one GCP resource (same type, name and location) in the project.
    seen: dict[tuple[str, str, str], str] = {}
    for stack, doc in docs.items():
        assert doc["terraform"]["backend"]["gcs"]["prefix"].endswith(stack), "each stack keeps its own state"
        for typ, items in resources(doc).items():
            for res in items.values():
                name = res.get("name") or res.get("account_id") or res.get("repository_id")
                if not isinstance(name, str):
                    continue
                key = (typ, name, str(res.get("location") or res.get("region") or res.get("zone") or ""))
                assert key not in seen, f"{key} is in both {seen[key]} and {stack}"
                seen[key] = stack
