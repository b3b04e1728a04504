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
    for kind in ("google_artifact_registry_repository", "google_vertex_ai_tensorboard", "google_cloudbuild_trigger", "google_lustre_instance"):
        assert kind not in mgr, f"the manager's stack must not own a {kind}"
    # Its only buckets are the fleet file's own (no worker's).
    assert {b["name"] for b in mgr["google_storage_bucket"].values()} == {"my-tpu-project-tpu-fleet-ckpt"}

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


# ------------------------------------------------------------------ every name a stack owns is one the fleet checks

# Resource types that name nothing GCP holds one of: bindings (IAM members), project APIs (enabled by every stack in a
# project on purpose and never disabled on destroy: modules/services.py), node pools (named inside their own cluster).
NOT_NAMED = {"google_project_service", "google_container_node_pool", "google_service_networking_connection"}
BINDING = ("_iam_member", "_iam_binding")
NAME_KEYS = ("name", "account_id", "repository_id", "display_name", "instance_id")


@pytest.fixture(scope="module")
def every_stack(tmp_path_factory) -> dict[str, tuple[object, dict]]:
    """Every example spec's stack and the fleet example's manager, synthesized in one app: {id: (model, JSON)}."""
    from infra.fleet import load_fleet
    from infra.spec import load_spec
    from infra.stack import App, build_manager_stack, build_stack
    from tests.support import EXAMPLE_FILES

    out = tmp_path_factory.mktemp("owned")
    app = App(outdir=str(out), stack_traces=False)
    models: dict[str, object] = {}
    for path in EXAMPLE_FILES:
        models[path.stem] = load_spec(path)
        build_stack(app, models[path.stem], stack_id=path.stem)
    models["fleet-manager"] = load_fleet(FLEET).manager
    build_manager_stack(app, models["fleet-manager"])
    app.synth()
    ids = {"fleet-manager": models["fleet-manager"].name}  # type: ignore[attr-defined]
    return {k: (m, json.loads((out / "stacks" / ids.get(k, k) / "cdk.tf.json").read_text())) for k, m in models.items()}


def test_every_named_resource_of_a_stack_is_one_the_fleet_check_knows(every_stack):
    """infra.owned_names lists what each stack creates under a GCP-unique name; a new named resource must join it."""
    from infra.owned_names import STATE, owned_names

    for stack, (model, doc) in every_stack.items():
        listed = {(o.tf_type, o.name) for o in owned_names(model)}  # type: ignore[arg-type]
        found = set()
        for typ, items in resources(doc).items():
            if typ in NOT_NAMED or typ.endswith(BINDING):
                continue
            for res in items.values():
                name = next((res[k] for k in NAME_KEYS if isinstance(res.get(k), str)), None)
                assert name is not None, f"{stack}: {typ} has no name the check knows how to read"
                found.add((typ, name))
        gcs = doc["terraform"]["backend"]["gcs"]
        found.add((STATE, f"gs://{gcs['bucket']}/{gcs['prefix']}"))
        assert found <= listed, f"{stack}: named in the stack but not in infra.owned_names: {sorted(found - listed)}"
        assert listed <= found, f"{stack}: in infra.owned_names but not in the stack: {sorted(listed - found)}"


def test_the_manager_grants_the_fleet_s_buckets_to_every_worker(tmp_path: Path):
    """A run through the manager may land on either worker: both workers' team identities may write its checkpoints."""
    from infra.fleet import load_fleet

    f = load_fleet(FLEET)
    proc = cli("infra", "synth", "--fleet", str(FLEET), "--out", str(tmp_path / "out"), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    mgr = json.loads((tmp_path / "out" / "stacks" / "tpu-fleet-mgr" / "cdk.tf.json").read_text())
    (bucket,) = resources(mgr)["google_storage_bucket"].values()
    assert (bucket["name"], bucket["location"]) == ("my-tpu-project-tpu-fleet-ckpt", "US")
    grants = {(g["role"], g["member"]) for g in resources(mgr)["google_storage_bucket_iam_member"].values()}
    assert grants == {("roles/storage.objectAdmin", f"serviceAccount:tpu-{w}-t-research@my-tpu-project.iam.gserviceaccount.com") for w in ("west", "east")}
    assert grants == {(r, m) for r, m in f.bucket_bindings()["my-tpu-project-tpu-fleet-ckpt"]}
    # Each worker's own stack creates exactly that member's account.
    for w in f.workers:
        doc = json.loads((tmp_path / "out" / "stacks" / w.spec.cluster.name / "cdk.tf.json").read_text())
        ids = {a["account_id"] for a in resources(doc)["google_service_account"].values()}
        assert f"{w.spec.cluster.name}-t-research" in ids


def test_synth_fleet_starts_jsii_as_one_stack_does(tmp_path: Path):
    """The cached Node and the on-demand provider index (modules/_jsii_env.py) reach the jsii runtime of `synth --fleet` too."""
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "TGK_LAZY_PROVIDER_DEBUG": "1"}
    env.pop("NODE_OPTIONS", None)  # what a user's shell has
    proc = subprocess.run(
        [sys.executable, "-m", "infra", "synth", "--fleet", str(FLEET), "--out", str(tmp_path / "out")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if "tgk-lazy-provider: loaded" in x]
    loaded, total = map(int, re.search(r"loaded (\d+) of (\d+) namespaces", line).groups())
    assert total > 1000 and 0 < loaded <= 30, line


JSII_PACKAGES = ("cdktn", "cdktn_provider_google", "constructs", "jsii")


def _runtime_imports(path: Path) -> list[str]:
    """The jsii packages ``path`` imports at run time (anywhere but under ``if TYPE_CHECKING:``)."""
    import ast

    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for b in node.body for n in ast.walk(b)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [n for n in names if n.split(".")[0] in JSII_PACKAGES]
    return found


def test_the_jsii_runtime_is_started_only_through_infra_stack_or_modules():
    """modules/_jsii_env.configure must run before the first import of cdktn (it sets the cached Node and the lazy
    provider index): infra.stack calls it first, and importing the modules package does. Any other module that imported
    cdktn first started jsii on the machine's Node with every provider namespace (synth --fleet did: 4.9 s, ~700 MB)."""
    allowed = {REPO / "infra" / "stack.py"}
    offenders = {}
    for path in [*sorted((REPO / "infra").rglob("*.py")), *sorted((REPO / "scripts").glob("*.py")), *sorted((REPO / "workloads").rglob("*.py"))]:
        if path not in allowed and (found := _runtime_imports(path)):
            offenders[str(path.relative_to(REPO))] = found
    assert offenders == {}, f"import cdktn through infra.stack (or a modules/ construct) instead: {offenders}"
    assert _runtime_imports(REPO / "infra" / "stack.py"), "the scan reads imports (infra/stack.py imports cdktn)"
