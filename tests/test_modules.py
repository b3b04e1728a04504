"""Each construct alone in a test stack: the Terraform it emits for each option.

No spec here: constructs take plain props, so these tests show the construct
contract independently of how the stack maps a spec onto it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.synth

CLUSTER = "projects/p/locations/us-east5/clusters/c"
SA = "nodes@p.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def synth_one() -> Callable[[Callable[[Any], None]], dict[str, Any]]:
    """Synthesize a stack built by ``fill(stack)`` and return its parsed JSON."""
    import os

    os.environ.setdefault("CDKTN_DISABLE_CREATION_STACK", "1")
    from cdktn import TerraformStack, Testing
    from cdktn_provider_google.provider import GoogleProvider

    counter = iter(range(10_000))

    def run(fill: Callable[[Any], None]) -> dict[str, Any]:
        app = Testing.app(stack_traces=False)
        stack_id = f"test{next(counter)}"
        stack = TerraformStack(app, stack_id)
        GoogleProvider(stack, "google", project="p", region="us-east5")
        fill(stack)
        # full_synth (not synth): synth drops the "//" blocks that carry checkov suppressions.
        outdir = Path(Testing.full_synth(stack))
        return json.loads((outdir / "stacks" / stack_id / "cdk.tf.json").read_text())

    return run


def only(doc: dict[str, Any], rtype: str) -> dict[str, Any]:
    items = list(doc["resource"][rtype].values())
    assert len(items) == 1, f"expected one {rtype}, got {len(items)}"
    return items[0]


def tpu_props(**over: Any) -> Any:
    from modules.tpu_pool import Placement, TpuSliceProps

    base: dict[str, Any] = dict(
        cluster=CLUSTER,
        location="us-east5",
        zone="us-east5-b",
        name="v6e-16-0",
        machine_type="ct6e-standard-4t",
        topology="4x4",
        nodes=4,
        service_account=SA,
        placement=Placement.COMPACT,
    )
    base.update(over)
    return TpuSliceProps(**base)


# ------------------------------------------------------------------ TPU slice


def test_on_demand_compact_slice(synth_one):
    from modules.tpu_pool import TpuSlice

    doc = synth_one(lambda s: TpuSlice(s, "slice", props=tpu_props(node_labels={"a": "b"})))
    pool = only(doc, "google_container_node_pool")
    assert pool["node_count"] == 4 and "autoscaling" not in pool and "initial_node_count" not in pool
    assert pool["node_locations"] == ["us-east5-b"]
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x4"}
    assert pool["max_pods_per_node"] == 15
    cfg = pool["node_config"]
    assert cfg["machine_type"] == "ct6e-standard-4t"
    assert cfg["taint"] == [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert cfg["labels"] == {"a": "b"}
    assert cfg["workload_metadata_config"] == {"mode": "GKE_METADATA"}
    assert cfg["service_account"] == SA
    for flag in ("spot", "flex_start", "reservation_affinity"):
        assert flag not in cfg
    assert pool["management"] == {"auto_repair": True, "auto_upgrade": True}


def test_matcher_sees_the_slice(synth_one):
    """The cdktn matcher agrees with our reading of the JSON (habit 4)."""
    from cdktn import Testing
    from cdktn_provider_google.container_node_pool import ContainerNodePool

    from modules.tpu_pool import TpuSlice

    doc = synth_one(lambda s: TpuSlice(s, "slice", props=tpu_props()))
    text = json.dumps(doc)
    assert Testing.to_have_resource_with_properties(text, ContainerNodePool.TF_RESOURCE_TYPE, {"name": "v6e-16-0", "node_count": 4})
    assert not Testing.to_have_resource_with_properties(text, ContainerNodePool.TF_RESOURCE_TYPE, {"name": "v6e-16-0", "node_count": 16})


def test_spot_slice(synth_one):
    from modules.tpu_pool import TpuSlice
    from toolkit.names import CapacityMode

    doc = synth_one(lambda s: TpuSlice(s, "slice", props=tpu_props(capacity=CapacityMode.SPOT)))
    cfg = only(doc, "google_container_node_pool")["node_config"]
    assert cfg["spot"] is True
    assert "reservation_affinity" not in cfg


@pytest.mark.parametrize(
    "reservation",
    ["trillium-res-1", "projects/owner-project/reservations/trillium-res-1"],
    ids=["same-project", "shared"],
)
def test_reservation_slice(synth_one, reservation):
    from modules.tpu_pool import TpuSlice
    from toolkit.names import CapacityMode

    doc = synth_one(lambda s: TpuSlice(s, "slice", props=tpu_props(capacity=CapacityMode.RESERVATION, reservation=reservation)))
    cfg = only(doc, "google_container_node_pool")["node_config"]
    assert cfg["reservation_affinity"] == {
        "consume_reservation_type": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [reservation],
    }
    assert "spot" not in cfg


def test_flex_start_slice(synth_one):
    from modules._checkov import suppressions
    from modules.tpu_pool import TpuSlice
    from toolkit.names import CapacityMode

    doc = synth_one(lambda s: TpuSlice(s, "slice", props=tpu_props(capacity=CapacityMode.FLEX_START, nodes=8, topology="4x8")))
    pool = only(doc, "google_container_node_pool")
    assert "node_count" not in pool
    assert pool["initial_node_count"] == 0
    assert pool["autoscaling"] == {"total_min_node_count": 0, "total_max_node_count": 8, "location_policy": "ANY"}
    assert pool["management"]["auto_repair"] is False
    cfg = pool["node_config"]
    assert cfg["flex_start"] is True
    assert cfg["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    # auto-repair off is deliberate, so its checkov finding is suppressed on this pool only
    (skips,) = suppressions(doc).values()
    assert set(skips) == {"CKV_GCP_9"} and skips["CKV_GCP_9"].strip()


def test_autoscaling_slice_bounds_are_nodes_per_slice(synth_one):
    """Max is nodes per slice (16 for v5p 4x4x4), never chips per VM (4): the sandbox's bug."""
    from modules.tpu_pool import TpuSlice

    doc = synth_one(
        lambda s: TpuSlice(
            s,
            "slice",
            props=tpu_props(name="v5p-128-0", machine_type="ct5p-hightpu-4t", topology="4x4x4", nodes=16, autoscaling=True),
        )
    )
    pool = only(doc, "google_container_node_pool")
    assert pool["autoscaling"] == {"min_node_count": 0, "max_node_count": 16}
    assert pool["initial_node_count"] == 0
    assert "node_count" not in pool
    assert pool["management"]["auto_repair"] is True


def test_single_host_slice_has_no_placement(synth_one):
    from modules.tpu_pool import Placement, TpuSlice

    doc = synth_one(
        lambda s: TpuSlice(s, "slice", props=tpu_props(name="v5p-8-0", machine_type="ct5p-hightpu-4t", topology="2x2x1", nodes=1, placement=Placement.NONE))
    )
    pool = only(doc, "google_container_node_pool")
    assert "placement_policy" not in pool
    assert pool["node_count"] == 1


def test_workload_policy_slice(synth_one):
    from modules.tpu_pool import Placement, TpuSlice, WorkloadPolicy, WorkloadPolicyProps

    def fill(s):
        policy = WorkloadPolicy(s, "wp", props=WorkloadPolicyProps(project="p", region="us-central1", name="c-tpu7x-4x4x8", topology="4x4x8"))
        TpuSlice(
            s,
            "slice",
            props=tpu_props(
                name="tpu7x-0",
                machine_type="tpu7x-standard-4t",
                topology="4x4x8",
                nodes=32,
                placement=Placement.WORKLOAD_POLICY,
                workload_policy=policy.name,
            ),
        )

    doc = synth_one(fill)
    policy_id, policy = next(iter(doc["resource"]["google_compute_resource_policy"].items()))
    assert policy["workload_policy"] == {"type": "HIGH_THROUGHPUT", "accelerator_topology": "4x4x8"}
    assert policy["region"] == "us-central1"
    pool = only(doc, "google_container_node_pool")
    assert pool["placement_policy"] == {
        "type": "COMPACT",
        "policy_name": f"${{google_compute_resource_policy.{policy_id}.name}}",
    }
    assert "tpu_topology" not in pool["placement_policy"]
    assert pool["node_count"] == 32


@pytest.mark.parametrize(
    "bad",
    [
        dict(nodes=0),
        dict(placement_name="WORKLOAD_POLICY"),  # policy placement without a policy
        dict(workload_policy="x"),  # a policy with COMPACT placement
        dict(capacity_name="RESERVATION"),  # reservation capacity without a name
        dict(nodes=1),  # COMPACT placement of a single host
    ],
)
def test_slice_props_refuse_inconsistent_values(bad):
    from modules.tpu_pool import Placement
    from toolkit.names import CapacityMode

    over = dict(bad)
    if "placement_name" in over:
        over["placement"] = Placement[over.pop("placement_name")]
    if "capacity_name" in over:
        over["capacity"] = CapacityMode[over.pop("capacity_name")]
    with pytest.raises(ValueError):
        tpu_props(**over)


# -------------------------------------------------------------- other modules


def test_network_with_nat(synth_one):
    from modules.network import Network, NetworkProps

    doc = synth_one(
        lambda s: Network(
            s,
            "net",
            props=NetworkProps(name="n", region="us-east5", nodes_cidr="10.0.0.0/22", pods_cidr="10.64.0.0/18", services_cidr="10.128.0.0/20", nat=True),
        )
    )
    assert only(doc, "google_compute_network")["auto_create_subnetworks"] is False
    subnet = only(doc, "google_compute_subnetwork")
    assert subnet["private_ip_google_access"] is True
    assert subnet["ip_cidr_range"] == "10.0.0.0/22"
    assert {r["range_name"]: r["ip_cidr_range"] for r in subnet["secondary_ip_range"]} == {
        "pods": "10.64.0.0/18",
        "services": "10.128.0.0/20",
    }
    assert "log_config" in subnet
    assert only(doc, "google_compute_router_nat")["source_subnetwork_ip_ranges_to_nat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"


def test_network_without_nat(synth_one):
    from modules.network import Network, NetworkProps

    doc = synth_one(
        lambda s: Network(s, "net", props=NetworkProps(name="n", region="r", nodes_cidr="10.0.0.0/22", pods_cidr="10.64.0.0/18", services_cidr="10.128.0.0/20"))
    )
    assert "google_compute_router" not in doc["resource"]
    assert "google_compute_router_nat" not in doc["resource"]


def _cluster_props(**over: Any) -> Any:
    from modules.cluster import ClusterProps, MaintenanceWindowProps

    base: dict[str, Any] = dict(
        project="p",
        name="c",
        region="us-east5",
        zones=("us-east5-b",),
        network="net",
        subnetwork="sub",
        pods_range_name="pods",
        services_range_name="services",
        maintenance_window=MaintenanceWindowProps(start_time="2025-01-01T03:00:00Z", end_time="2025-01-01T11:00:00Z", recurrence="FREQ=WEEKLY;BYDAY=SA,SU"),
    )
    base.update(over)
    return ClusterProps(**base)


def test_cluster_defaults(synth_one):
    from modules._checkov import suppressions
    from modules.cluster import Cluster

    doc = synth_one(lambda s: Cluster(s, "cluster", props=_cluster_props()))
    c = only(doc, "google_container_cluster")
    assert c["location"] == "us-east5" and c["node_locations"] == ["us-east5-b"]
    assert c["remove_default_node_pool"] is True and c["initial_node_count"] == 1
    assert c["workload_identity_config"] == {"workload_pool": "p.svc.id.goog"}
    assert c["datapath_provider"] == "ADVANCED_DATAPATH"
    assert c["logging_config"] == {"enable_components": ["SYSTEM_COMPONENTS", "WORKLOADS"]}
    assert c["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
    assert c["master_auth"] == {"client_certificate_config": {"issue_client_certificate": False}}
    assert c["enable_legacy_abac"] is False and c["enable_shielded_nodes"] is True
    assert "min_master_version" not in c
    assert c["maintenance_policy"]["recurring_window"]["recurrence"] == "FREQ=WEEKLY;BYDAY=SA,SU"
    # Secure by default: private nodes, the IP endpoint closed to the internet, IAM-checked DNS endpoint, no deletion.
    assert c["private_cluster_config"] == {"enable_private_nodes": True, "enable_private_endpoint": False, "master_ipv4_cidr_block": "172.16.0.0/28"}
    assert c["master_authorized_networks_config"] == {"gcp_public_cidrs_access_enabled": False}
    assert c["control_plane_endpoints_config"] == {"dns_endpoint_config": {"allow_external_traffic": True}}
    assert c["deletion_protection"] is True
    skipped = set(next(iter(suppressions(doc).values())))
    assert skipped == {"CKV_GCP_12", "CKV_GCP_65", "CKV_GCP_66"}  # nothing about exposure is accepted any more


def test_public_opt_outs_carry_their_accepted_findings(synth_one):
    from modules._checkov import suppressions
    from modules.cluster import Cluster

    doc = synth_one(
        lambda s: Cluster(
            s,
            "cluster",
            props=_cluster_props(
                private_nodes=False,
                master_authorized_networks=("0.0.0.0/0",),
                dns_endpoint=False,
                deletion_protection=False,
                min_master_version="1.34.0-gke.2201000",
                dataplane_v2=False,
            ),
        )
    )
    c = only(doc, "google_container_cluster")
    assert "private_cluster_config" not in c and "control_plane_endpoints_config" not in c
    assert c["master_authorized_networks_config"]["cidr_blocks"][0]["cidr_block"] == "0.0.0.0/0"
    assert c["deletion_protection"] is False
    assert c["min_master_version"] == "1.34.0-gke.2201000"
    assert c["network_policy"] == {"enabled": True, "provider": "CALICO"}
    skipped = set(next(iter(suppressions(doc).values())))
    assert {"CKV_GCP_25", "CKV_GCP_64", "CKV_GCP_18"} <= skipped and "CKV_GCP_12" not in skipped


def test_identity_and_workload_identity(synth_one):
    from modules.iam import BucketGrant, Identity, IdentityProps, KsaBinding, WorkloadIdentity, WorkloadIdentityProps

    def fill(s):
        ident = Identity(
            s,
            "id",
            props=IdentityProps(
                project="p",
                node_account_id="c-nodes",
                workload_account_id="c-workload",
                node_bucket_grants=(BucketGrant(key="data", bucket="b-data", role="roles/storage.objectViewer"),),
            ),
        )
        WorkloadIdentity(
            s,
            "wi",
            props=WorkloadIdentityProps(project="p", service_account=ident.workload_sa.name, bindings=(KsaBinding(namespace="ns", service_account="ksa"),)),
        )

    doc = synth_one(fill)
    r = doc["resource"]
    assert sorted(sa["account_id"] for sa in r["google_service_account"].values()) == ["c-nodes", "c-workload"]
    roles = sorted(m["role"] for m in r["google_project_iam_member"].values())
    assert "roles/aiplatform.user" in roles and "roles/logging.logWriter" in roles
    assert not any(x in roles for x in ("roles/owner", "roles/editor", "roles/viewer"))
    assert only(doc, "google_storage_bucket_iam_member")["bucket"] == "b-data"
    wi = only(doc, "google_service_account_iam_member")
    assert wi["member"] == "serviceAccount:p.svc.id.goog[ns/ksa]"
    assert wi["role"] == "roles/iam.workloadIdentityUser"
    assert "google_service_account_key" not in r


@pytest.mark.parametrize("versioning", [True, False])
def test_bucket(synth_one, versioning):
    from modules._checkov import suppressions
    from modules.storage import Bucket, BucketProps

    doc = synth_one(lambda s: Bucket(s, "b", props=BucketProps(name="b", location="US-EAST5", versioning=versioning, soft_delete_days=7)))
    b = only(doc, "google_storage_bucket")
    assert b["uniform_bucket_level_access"] is True
    assert b["public_access_prevention"] == "enforced"
    assert b["versioning"] == {"enabled": versioning}
    assert b["soft_delete_policy"] == {"retention_duration_seconds": 7 * 86400}
    assert b["force_destroy"] is False
    assert ("CKV_GCP_78" in next(iter(suppressions(doc).values()))) is (not versioning)


def test_services_never_disable_on_destroy(synth_one):
    from modules.services import DEFAULT_SERVICES, Services, ServicesProps

    doc = synth_one(lambda s: Services(s, "svc", props=ServicesProps(project="p")))
    svcs = doc["resource"]["google_project_service"].values()
    assert sorted(s["service"] for s in svcs) == sorted(DEFAULT_SERVICES)
    assert all(s["disable_on_destroy"] is False for s in svcs)


def test_build_trigger(synth_one):
    from modules.build_trigger import BuildTrigger, BuildTriggerProps

    doc = synth_one(
        lambda s: BuildTrigger(
            s,
            "ci",
            props=BuildTriggerProps(
                project="p",
                name="c-ci",
                github_owner="o",
                github_repo="r",
                branch_regex="^main$",
                filename="cloudbuild/ci.yaml",
                account_id="c-ci",
                state_bucket="p-tf-state",
                image_repository=("us-east5", "tpu-training"),
            ),
        )
    )
    t = only(doc, "google_cloudbuild_trigger")
    assert t["github"] == {"owner": "o", "name": "r", "push": {"branch": "^main$"}}
    assert t["filename"] == "cloudbuild/ci.yaml"
    assert t["service_account"].startswith("${google_service_account.")
    roles = {m["role"] for m in doc["resource"]["google_project_iam_member"].values()}
    assert not roles & {"roles/owner", "roles/editor", "roles/viewer"}, "CI plans; it must not hold basic roles"
    assert only(doc, "google_storage_bucket_iam_member")["bucket"] == "p-tf-state"
    assert only(doc, "google_artifact_registry_repository_iam_member")["role"] == "roles/artifactregistry.writer"


def test_suppress_refuses_missing_reason(synth_one):
    from modules._checkov import suppress
    from modules.storage import Bucket, BucketProps

    def fill(s):
        b = Bucket(s, "b", props=BucketProps(name="b", location="US"))
        with pytest.raises(ValueError):
            suppress(b.bucket, {"CKV_GCP_62": "  "})
        with pytest.raises(ValueError):
            suppress(b.bucket, {"not-a-check": "reason"})

    synth_one(fill)
