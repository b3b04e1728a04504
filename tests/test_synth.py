"""Every example environment synthesizes, and the stack says what the spec says.

Expected values come from the spec and the catalog (never typed in here), so a
wrong mapping in infra/stack.py or a module fails. Snapshots of key resources
per example catch unintended drift; regenerate with TGK_UPDATE_SNAPSHOTS=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.catalog import Placement
from infra.spec import EXAMPLES_DIR, BucketPurpose, EnvSpec, FlexStart, Reservation, Spot, load_spec
from tests.support import EXAMPLE_NAMES, REPO

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
SNAPSHOT_TYPES = (
    "google_container_cluster",
    "google_container_node_pool",
    "google_compute_resource_policy",
    "google_storage_bucket",
    "google_service_account_iam_member",
    "google_storage_bucket_iam_member",
)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> dict[str, tuple[EnvSpec, dict[str, Any], Path]]:
    """Each example synthesized once for this module (jsii loads once per process)."""
    from infra.stack import synth

    out = {}
    root = tmp_path_factory.mktemp("synth")
    for name in EXAMPLE_NAMES:
        spec = load_spec(EXAMPLES_DIR / f"{name}.yaml")
        path = synth(spec, root / name)
        out[name] = (spec, json.loads(path.read_text()), path)
    return out


def resources(doc: dict[str, Any], rtype: str) -> list[dict[str, Any]]:
    return list((doc.get("resource") or {}).get(rtype, {}).values())


def pools_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in resources(doc, "google_container_node_pool")}


def ref(rtype: str, doc: dict[str, Any], pred) -> str:
    (logical,) = [k for k, v in doc["resource"][rtype].items() if pred(v)]
    return f"{rtype}.{logical}"


pytestmark = pytest.mark.synth


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_layout_and_backend(stacks, example):
    spec, doc, path = stacks[example]
    assert path.parts[-3:] == ("stacks", spec.cluster.name, "cdk.tf.json")
    assert doc["terraform"]["backend"] == {"gcs": {"bucket": spec.state_bucket, "prefix": spec.state_prefix}}
    assert doc["terraform"]["required_providers"]["google"]["version"] == "7.46.1"
    (provider,) = doc["provider"]["google"]
    assert provider["project"] == spec.project and provider["region"] == spec.region
    assert spec.labels.items() <= provider["default_labels"].items()


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_no_keys_and_no_data_sources(stacks, example):
    _, doc, path = stacks[example]
    assert "data" not in doc, "data sources need the API; offline plan must work"
    assert "google_service_account_key" not in doc["resource"]
    assert "google_service_account_key" not in path.read_text()


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_node_pools(stacks, example):
    spec, doc, _ = stacks[example]
    pools = pools_by_name(doc)
    # A ComputeClass pool declares none: GKE's node auto-provisioning creates its slices.
    assert len(pools) == sum(0 if p.compute_class else p.slices * len(p.capacity_options()) for p in spec.tpu_pools) + 1
    cpu = pools[spec.cpu_pool.name]
    assert cpu["autoscaling"] == {"min_node_count": spec.cpu_pool.min_nodes, "max_node_count": spec.cpu_pool.max_nodes}
    assert cpu["node_config"]["machine_type"] == spec.cpu_pool.machine_type

    for pool in spec.tpu_pools:
        shape = pool.shape
        # a capacity list has node pools per option; they differ only in capacity and scaling
        for option, index, name in [(o, i, n) for o in pool.capacity_options() for i, n in enumerate(pool.option_node_pool_names(o))]:
            np_ = pools[name]
            cfg = np_["node_config"]
            assert np_["node_locations"] == [spec.pool_zone(pool)]
            assert cfg["machine_type"] == shape.machine_type
            assert np_["max_pods_per_node"] == spec.network.tpu_max_pods_per_node
            assert {"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"} in cfg["taint"]
            assert cfg["workload_metadata_config"] == {"mode": "GKE_METADATA"}
            labels = cfg["labels"]
            assert labels["tpu-gke-toolkit.io/pool"] == pool.name
            assert labels["tpu-gke-toolkit.io/slice-group-size"] == str(pool.slices)
            assert labels["tpu-gke-toolkit.io/slice-index"] == str(index)
            assert labels["tpu-gke-toolkit.io/topology"] == shape.topology

            scales = pool.autoscaling or isinstance(option.capacity, FlexStart) or option.index > 0
            if scales:
                auto = np_["autoscaling"]
                assert auto.get("max_node_count", auto.get("total_max_node_count")) == shape.nodes
                assert auto.get("min_node_count", auto.get("total_min_node_count")) == 0
                assert np_["initial_node_count"] == 0 and "node_count" not in np_
            else:
                assert np_["node_count"] == shape.nodes and "autoscaling" not in np_

            placement = np_.get("placement_policy")
            if shape.placement is Placement.COMPACT:
                assert placement == {"type": "COMPACT", "tpu_topology": shape.topology}
            elif shape.placement is Placement.WORKLOAD_POLICY and pool.dynamic_slicing:
                # made outside Terraform (infra.spec.ironwood.provision_only_policy): referenced by name
                assert placement == {"type": "COMPACT", "policy_name": spec.workload_policy_name(pool)}
            elif shape.placement is Placement.WORKLOAD_POLICY:
                policy = ref("google_compute_resource_policy", doc, lambda v, shape=shape: v["workload_policy"]["accelerator_topology"] == shape.topology)
                assert placement == {"type": "COMPACT", "policy_name": f"${{{policy}.name}}"}
            else:
                assert placement is None

            cap = option.capacity
            assert cfg.get("spot") is (True if isinstance(cap, Spot) else None)
            assert cfg.get("flex_start") is (True if isinstance(cap, FlexStart) else None)
            affinity = cfg.get("reservation_affinity")
            if isinstance(cap, Reservation):
                assert affinity["consume_reservation_type"] == "SPECIFIC_RESERVATION"
                assert affinity["key"] == "compute.googleapis.com/reservation-name"
                assert affinity["values"][0].endswith(cap.name)
            elif isinstance(cap, FlexStart):
                assert affinity == {"consume_reservation_type": "NO_RESERVATION"}
                assert np_["autoscaling"]["location_policy"] == "ANY"
                assert np_["management"]["auto_repair"] is False
            else:
                assert affinity is None


def _consumed(doc: dict[str, Any]) -> dict[str, str]:
    """node pool -> the reservation it consumes."""
    out = {}
    for np_ in resources(doc, "google_container_node_pool"):
        affinity = np_["node_config"].get("reservation_affinity") or {}
        if affinity.get("consume_reservation_type") == "SPECIFIC_RESERVATION":
            out[np_["name"]] = affinity["values"][0]
    return out


def test_a_reservation_list_declares_one_reservation_at_a_time(stacks, tmp_path):
    """fallback.yaml lists two reservations: by default only the first feeds node pools; deploy's choice swaps it."""
    from infra.stack import synth

    spec, doc, _ = stacks["fallback"]
    (option,) = [o for o in spec.tpu_pools[0].capacity_options() if o.alternates]
    first, second = (c.name for c in option.choices)
    assert set(_consumed(doc).values()) == {first}
    chosen = json.loads(synth(spec, tmp_path / "second", reservations={spec.tpu_pools[0].name: second}).read_text())
    assert _consumed(chosen) == dict.fromkeys(_consumed(doc), second)  # same node pools, the other reservation
    for name in _consumed(chosen):
        assert pools_by_name(chosen)[name]["node_config"]["labels"]["tpu-gke-toolkit.io/reservation"] == second


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_workload_policies_only_where_needed(stacks, example):
    spec, doc, _ = stacks[example]
    # A dynamically sliced pool's PROVISION_ONLY policy is made outside Terraform (infra.spec.ironwood).
    wanted = {p.shape.topology for p in spec.tpu_pools if p.shape.placement is Placement.WORKLOAD_POLICY and not p.dynamic_slicing}
    policies = resources(doc, "google_compute_resource_policy")
    assert {p["workload_policy"]["accelerator_topology"] for p in policies} == wanted
    assert len(policies) == len(wanted), "one policy per distinct topology"
    assert all(p["workload_policy"]["type"] == "HIGH_THROUGHPUT" for p in policies)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_cluster(stacks, example):
    spec, doc, _ = stacks[example]
    (c,) = resources(doc, "google_container_cluster")
    assert c["name"] == spec.cluster.name and c["location"] == spec.region
    assert c["node_locations"] == spec.zones
    assert c["deletion_protection"] is spec.cluster.deletion_protection
    assert c.get("min_master_version") == spec.min_master_version
    assert c["release_channel"] == {"channel": spec.cluster.release_channel.value}
    assert c["workload_identity_config"] == {"workload_pool": f"{spec.project}.svc.id.goog"}
    assert ("private_cluster_config" in c) is spec.cluster.private_nodes
    assert ("google_compute_router_nat" in doc["resource"]) is spec.cluster.private_nodes
    # The cluster's own subnet (a spec with network.dcn has a second one: tests/test_multinetwork.py).
    (subnet,) = [n for n in resources(doc, "google_compute_subnetwork") if n["name"] == spec.network_name]
    assert len(resources(doc, "google_compute_subnetwork")) == (2 if spec.network.dcn else 1)
    assert c.get("enable_multi_networking") is (True if spec.network.dcn else None)
    assert subnet["ip_cidr_range"] == spec.cidrs.nodes
    assert {r["ip_cidr_range"] for r in subnet["secondary_ip_range"]} == {spec.cidrs.pods, spec.cidrs.services}


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_workload_identity_per_team(stacks, example):
    spec, doc, _ = stacks[example]
    wi = [m for m in resources(doc, "google_service_account_iam_member") if m["role"] == "roles/iam.workloadIdentityUser"]
    assert {m["member"] for m in wi} == {f"serviceAccount:{spec.project}.svc.id.goog[{t.ns}/{t.ksa}]" for t in spec.teams}
    # one Google SA per team, each bound to exactly one KSA (tests/test_isolation.py checks the whole property)
    assert len({m["service_account_id"] for m in wi}) == len(wi) == len(spec.teams)
    team_sas = {t.name: ref("google_service_account", doc, lambda v, n=t.name: v["account_id"].endswith(f"-t-{n}")) for t in spec.teams}
    assert {m["service_account_id"] for m in wi} == {f"${{{sa}.name}}" for sa in team_sas.values()}
    cluster = ref("google_container_cluster", doc, lambda v: True)
    for m in resources(doc, "google_service_account_iam_member"):
        assert cluster in m["depends_on"], "the identity pool exists only after the cluster"


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_buckets_and_their_grants(stacks, example):
    spec, doc, _ = stacks[example]
    buckets = {b["name"]: b for b in resources(doc, "google_storage_bucket")}
    assert set(buckets) == {b.name for b in spec.buckets}
    node_sa = ref("google_service_account", doc, lambda v: v["account_id"].endswith("-nodes"))
    for b in spec.buckets:
        got = buckets[b.name]
        assert got["uniform_bucket_level_access"] is True
        assert got["public_access_prevention"] == "enforced"
        assert got["versioning"] == {"enabled": b.versioned}
        assert got["soft_delete_policy"] == {"retention_duration_seconds": b.soft_delete_days * 86400}
        assert got["location"] == spec.region.upper()
        bucket_ref = ref("google_storage_bucket", doc, lambda v, n=b.name: v["name"] == n)
        grants = [m for m in resources(doc, "google_storage_bucket_iam_member") if m["bucket"] == f"${{{bucket_ref}.name}}"]
        owner = spec.bucket_owner(b)
        team_sa = ref("google_service_account", doc, lambda v, owner=owner: v["account_id"].endswith(f"-t-{owner.name}"))
        # the owning team's SA writes it; hostNetwork pods act as the node SA, which gets
        # the bucket only when its team opted in (and then only reads training data)
        # (a data bucket that holds a dataset of the spec is read-only to both: training only reads it)
        holds_dataset = any(d.bucket == b.name for d in spec.datasets)
        expected = {f"${{{team_sa}.member}}": "roles/storage.objectViewer" if holds_dataset else "roles/storage.objectAdmin"}
        if owner.host_network:
            expected[f"${{{node_sa}.member}}"] = "roles/storage.objectViewer" if b.purpose is BucketPurpose.DATA else "roles/storage.objectAdmin"
        # a multi-tier checkpointing backup bucket: GKE's checkpoint replicator writes it too (modules/checkpointing.py)
        backups = {spec.mtc_bucket(p.multi_tier_checkpointing) for p in spec.tpu_pools if p.multi_tier_checkpointing is not None}
        replicator = [m for m in grants if m["member"].startswith("principal://")]
        if b.name in backups:
            (r,) = replicator
            assert r["role"] == "roles/storage.objectUser" and r["member"].endswith("/subject/ns/gke-managed-checkpointing/sa/gke-checkpointing-multitier-node")
            # GKE backs RAM disks up only to a bucket with hierarchical namespace
            assert got["hierarchical_namespace"] == {"enabled": True}
        else:
            assert replicator == [] and "hierarchical_namespace" not in got
        grants = [m for m in grants if m not in replicator]
        assert {m["member"]: m["role"] for m in grants} == expected and len(grants) == len(expected)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_outputs(stacks, example):
    spec, doc, _ = stacks[example]
    outputs = doc["output"]
    for key in ("cluster_name", "cluster_endpoint", "cluster_location", "node_service_account", "team_service_accounts", "buckets", "tpu_node_pools"):
        assert key in outputs
    assert set(outputs["team_service_accounts"]["value"]) == {t.name for t in spec.teams}
    assert outputs["buckets"]["value"] == {t.name: {b.name: b.purpose.value for b in spec.team_buckets(t)} for t in spec.teams}
    assert set(outputs["tpu_node_pools"]["value"]) == {p.name for p in spec.tpu_pools}
    assert ("registry_url" in outputs) is spec.artifact_registry.enabled
    assert ("tensorboard_id" in outputs) is spec.tensorboard.enabled


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_tensorboard_in_a_vertex_ai_region(stacks, example):
    """Every example deploys its TensorBoard where Vertex AI is offered (us-central2, v4's region, has none)."""
    from infra import vertex_ai

    spec, doc, _ = stacks[example]
    boards = resources(doc, "google_vertex_ai_tensorboard")
    assert len(boards) == int(spec.tensorboard.enabled)
    for b in boards:
        assert b["region"] == spec.tensorboard_region and vertex_ai.offered(b["region"])
        assert b["region"] == (spec.region if vertex_ai.offered(spec.region) else vertex_ai.nearest(spec.region))
    if example == "v4":
        assert spec.region == "us-central2" and [b["region"] for b in boards] == ["us-central1"]


def test_resynth_is_identical(stacks, tmp_path):
    """Stable logical ids: synthesizing the same spec again gives the same JSON."""
    from infra.stack import synth

    spec, doc, _ = stacks["default"]
    again = json.loads(synth(spec, tmp_path).read_text())
    assert again == doc


def _synth_cli(spec: str, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    full.pop("NODE_OPTIONS", None)  # what a user's shell has: infra.stack adds the preload itself
    return subprocess.run(
        [sys.executable, "-m", "infra", "synth", "--spec", spec, "--out", str(out)], cwd=REPO, env=full, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def lazy_synth(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`python -m infra synth` from a user's shell, with the on-demand provider index (the default)."""
    out = tmp_path_factory.mktemp("lazy")
    proc = _synth_cli("examples/v6e-reservation.yaml", out, TGK_LAZY_PROVIDER_DEBUG="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, out


def test_provider_namespaces_load_on_demand(lazy_synth):
    """modules/_lazy_provider.cjs: a synth loads the ~15 resource namespaces it uses, not all ~1,800."""
    proc, _ = lazy_synth
    (line,) = [x for x in proc.stderr.splitlines() if "tgk-lazy-provider: loaded" in x]
    loaded, total = map(int, re.search(r"loaded (\d+) of (\d+) namespaces", line).groups())
    assert total > 1000 and 0 < loaded <= 30, line


def test_lazy_provider_synthesizes_the_same_json(lazy_synth, tmp_path):
    """The on-demand provider index and the provider's own eager one give byte-identical stacks."""
    lazy_proc, lazy = lazy_synth
    assert "tgk-lazy-provider: loaded" in lazy_proc.stderr
    eager = tmp_path / "eager"
    proc = _synth_cli("examples/v6e-reservation.yaml", eager, TGK_LAZY_PROVIDER="0", TGK_LAZY_PROVIDER_DEBUG="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tgk-lazy-provider: loaded" not in proc.stderr
    (a,), (b,) = lazy.glob("stacks/*/cdk.tf.json"), eager.glob("stacks/*/cdk.tf.json")
    assert a.read_bytes() == b.read_bytes()


def test_stack_id_override(stacks, tmp_path):
    from infra.stack import synth

    spec, doc, _ = stacks["v4"]
    path = synth(spec, tmp_path, stack_id="other")
    assert path == tmp_path / "stacks" / "other" / "cdk.tf.json"
    assert json.loads(path.read_text())["resource"].keys() == doc["resource"].keys()


def _snapshot_of(doc: dict[str, Any]) -> dict[str, Any]:
    res = doc.get("resource") or {}
    return {"resource": {t: res[t] for t in SNAPSHOT_TYPES if t in res}, "output": doc.get("output", {})}


@pytest.mark.golden
@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_snapshot(stacks, example):
    _, doc, _ = stacks[example]
    got = _snapshot_of(doc)
    path = SNAPSHOTS / f"{example}.json"
    if os.environ.get("TGK_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.exists(), f"no snapshot {path.name}; run once with TGK_UPDATE_SNAPSHOTS=1 and review it"
    assert got == json.loads(path.read_text()), f"{example}: key resources differ from {path.name} (TGK_UPDATE_SNAPSHOTS=1 to accept)"


def test_app_entry_writes_the_cli_layout(tmp_path):
    """`python -m infra.app` (what cdktf.json runs) writes <outdir>/stacks/<stack>/cdk.tf.json."""
    env = {**os.environ, "TGK_SPEC": str(EXAMPLES_DIR / "v4.yaml"), "CDKTF_OUTDIR": str(tmp_path / "out")}
    proc = subprocess.run([sys.executable, "-m", "infra.app"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = tmp_path / "out" / "stacks" / "v4-train" / "cdk.tf.json"
    assert path.is_file()
    assert (tmp_path / "out" / "manifest.json").is_file()
    cfg = json.loads((REPO / "cdktf.json").read_text())
    assert cfg["app"] == "python -m infra.app" and cfg["language"] == "python"


@pytest.mark.tools
def test_cdktn_cli_synth_and_list(tmp_path):
    """The real `cdktn` CLI (npm cdktn-cli, Node 22, both from scripts/setup.sh) drives the app.

    cdktn-cli 0.24 still reads its project config from cdktf.json.
    """
    node_bin = os.environ.get("TGK_NODE_BIN", "")
    cdktn = Path(node_bin) / "cdktn"
    assert cdktn.exists(), "cdktn CLI missing: run scripts/setup.sh (it installs node 22 + cdktn-cli from npm)"
    work = tmp_path / "app"
    work.mkdir()
    for name in ("cdktf.json", "infra", "modules", "examples"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    env = {
        **os.environ,
        # `python -m infra.app` must resolve to this interpreter; node first for the CLI itself.
        "PATH": os.pathsep.join([node_bin, str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "TGK_SPEC": str(EXAMPLES_DIR / "flex-start.yaml"),
        "CI": "1",
    }
    proc = subprocess.run([str(cdktn), "synth"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    doc = json.loads((work / "cdktn.out" / "stacks" / "flex" / "cdk.tf.json").read_text())
    pools = doc["resource"]["google_container_node_pool"]
    flex = load_spec(EXAMPLES_DIR / "flex-start.yaml")
    want = sum(p.slices for p in flex.tpu_pools if p.capacity.mode == "flex-start")  # one node pool per slice
    assert want >= 4 and sum(1 for p in pools.values() if p["node_config"].get("flex_start")) == want
    listed = subprocess.run([str(cdktn), "list"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0 and "flex" in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_multi_tier_checkpointing_add_on_is_deployed_by_the_stack(stacks, example):
    """GKE's HighScaleCheckpointing add-on is on exactly when a pool declares multi-tier checkpointing: `infra deploy` turns it on itself."""
    spec, doc, _ = stacks[example]
    (cluster,) = resources(doc, "google_container_cluster")
    wanted = any(p.multi_tier_checkpointing is not None for p in spec.tpu_pools)
    got = cluster["addons_config"].get("high_scale_checkpointing_config")
    assert got == ({"enabled": True} if wanted else None)
