"""Values only GCP refuses, caught at spec load, before a single cloud call: every name, label and display name
in the synthesized Terraform, held against GCP's documented rules.

``violations`` is the rule table: for each resource type the stack creates, the fields a
user's string reaches and the rule GCP applies to them (each rule's source is cited in
infra/gcp_names.py, infra/naming.py or infra/machine_types.py). A resource type the table
does not know fails the audit, so a new module's names are checked the day it lands.

Three layers: the rule functions themselves; every example synthesized; and a property
test over generated specs with names at and past their limits — whatever the spec loader
accepts must synthesize to JSON GCP would take.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from infra import gcp_names, machine_types
from infra.catalog import TPU_VM_SIZES
from infra.naming import BUCKET_NAME, GCE_NAME_MAX, GCP_ID, GKE_CLUSTER_NAME_MAX, GKE_NODE_POOL_NAME_MAX
from infra.spec import EXAMPLES_DIR, EnvSpec, load_spec, parse_spec
from toolkit.errors import SpecError
from toolkit.names import DNS1035_LABEL

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
GCE_NAME = re.compile(rf"^[a-z]([-a-z0-9]{{0,{GCE_NAME_MAX - 2}}}[a-z0-9])?$")
TRIGGER_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,62}[A-Za-z0-9])?$")  # Cloud Build: 1-64 alphanumerics and '-', alphanumeric at both ends
K8S_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
K8S_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _dns(name: str, limit: int) -> bool:
    return len(name) <= limit and re.match(DNS1035_LABEL, name) is not None


def _labels(where: str, labels: dict[str, str], defaults: dict[str, str]) -> list[str]:
    out = []
    merged = {**defaults, **labels}
    if len(merged) > gcp_names.LABELS_MAX:
        out.append(f"{where}: {len(merged)} labels (GCP allows {gcp_names.LABELS_MAX})")
    for k, v in merged.items():
        if not re.match(gcp_names.LABEL_KEY, k) or not re.match(gcp_names.LABEL_VALUE, str(v)):
            out.append(f"{where}: label {k}={v}")
    return out


def _bucket(where: str, name: str) -> list[str]:
    found = gcp_names.bucket_name_problem(name)
    return [f"{where}: bucket {name!r}"] if not re.match(BUCKET_NAME, name) or found else []


# Resource types whose fields take no user-derived name or label (roles, members, ids, references).
NO_NAMES = {
    "google_project_service",
    "google_project_iam_member",
    "google_service_account_iam_member",
    "google_storage_bucket_iam_member",
    "google_artifact_registry_repository_iam_member",
    "google_service_networking_connection",
}


def violations(tf: dict[str, Any]) -> list[str]:
    """Every value in a synthesized stack that GCP (or Terraform's gcs backend) would refuse."""
    out: list[str] = []
    provider = tf["provider"]["google"][0]
    defaults = provider.get("default_labels") or {}
    out += _labels("provider.default_labels", {}, defaults)
    backend = tf["terraform"]["backend"]["gcs"]
    out += _bucket("backend.bucket", backend["bucket"])
    if gcp_names.state_prefix_problem(backend["prefix"]):
        out.append(f"backend.prefix {backend['prefix']!r}")
    for rtype, resources in tf["resource"].items():
        for rid, r in resources.items():
            where = f"{rtype}.{rid}"
            if rtype in NO_NAMES:
                continue
            if rtype == "google_storage_bucket":
                out += _bucket(where, r["name"]) + _labels(where, r.get("labels") or {}, defaults)
            elif rtype == "google_service_account":
                if not re.match(GCP_ID, r["account_id"]):
                    out.append(f"{where}: account_id {r['account_id']!r}")
                if len((r.get("display_name") or "").encode()) > gcp_names.SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES:
                    out.append(f"{where}: display_name of {len(r['display_name'].encode())} bytes")
            elif rtype == "google_container_cluster":
                if not _dns(r["name"], GKE_CLUSTER_NAME_MAX):
                    out.append(f"{where}: name {r['name']!r}")
                out += _labels(where, r.get("resource_labels") or {}, defaults)
            elif rtype == "google_container_node_pool":
                if not _dns(r["name"], GKE_NODE_POOL_NAME_MAX):
                    out.append(f"{where}: name {r['name']!r}")
                cfg = r["node_config"]
                mt = cfg["machine_type"]
                if mt not in TPU_VM_SIZES and machine_types.problem(mt):
                    out.append(f"{where}: machine_type {mt!r}")
                out += _labels(where, cfg.get("resource_labels") or {}, defaults)
                for k, v in (cfg.get("labels") or {}).items():
                    if not K8S_LABEL_KEY.match(k) or not K8S_LABEL_VALUE.match(str(v)):
                        out.append(f"{where}: node label {k}={v}")
            elif rtype in (
                "google_compute_network",
                "google_compute_subnetwork",
                "google_compute_router",
                "google_compute_router_nat",
                "google_compute_firewall",
                "google_compute_global_address",
            ):
                if not GCE_NAME.match(r["name"]):
                    out.append(f"{where}: name {r['name']!r}")
            elif rtype == "google_lustre_instance":
                if not _dns(r["instance_id"], GCE_NAME_MAX):
                    out.append(f"{where}: instance_id {r['instance_id']!r}")
                if not re.match(r"^[A-Za-z0-9]{1,8}$", r["filesystem"]):
                    out.append(f"{where}: filesystem {r['filesystem']!r}")
            elif rtype == "google_compute_resource_policy":
                if not GCE_NAME.match(r["name"]):
                    out.append(f"{where}: name {r['name']!r}")
            elif rtype == "google_artifact_registry_repository":
                if not _dns(r["repository_id"], GCE_NAME_MAX):
                    out.append(f"{where}: repository_id {r['repository_id']!r}")
                out += _labels(where, r.get("labels") or {}, defaults)
            elif rtype == "google_vertex_ai_tensorboard":
                if gcp_names.tensorboard_display_name_problem(r["display_name"]):
                    out.append(f"{where}: display_name {r['display_name']!r}")
                out += _labels(where, r.get("labels") or {}, defaults)
            elif rtype == "google_cloudbuild_trigger":
                if not TRIGGER_NAME.match(r["name"]):
                    out.append(f"{where}: name {r['name']!r}")
                if gcp_names.re2_problem(r["github"]["push"]["branch"]):
                    out.append(f"{where}: branch {r['github']['push']['branch']!r}")
                if gcp_names.build_config_path_problem(r["filename"]):
                    out.append(f"{where}: filename {r['filename']!r}")
            else:
                out.append(f"{where}: resource type {rtype} is not in the audit's rule table")
    return out


def synth_json(spec: EnvSpec, out: Path) -> dict[str, Any]:
    from infra.stack import synth

    return json.loads(synth(spec, out).read_text())


# ------------------------------------------------------------------ the rules themselves


@pytest.mark.parametrize(
    "name",
    ["goog-data", "g00g-data", "my-google-bucket", "my-g00gle-bucket", "goog1e-ckpt", "x-goo-gle", "192.168.5.4", "a..b", "a." + "b" * 64 + ".c"],
)
def test_bucket_names_gcs_refuses(name):
    assert gcp_names.bucket_name_problem(name) is not None


@pytest.mark.parametrize("name", ["my-tpu-project-ckpt", "data.example.com", "googly-eyes"[1:], "ego-data", "1-2-3", "192.168.5.4x"])
def test_bucket_names_gcs_takes(name):
    assert gcp_names.bucket_name_problem(name) is None


@pytest.mark.parametrize(
    "mt", ["n2-standard-8", "e2-standard-4", "c3-standard-22", "c4a-highmem-72-lssd", "n1-standard-1", "e2-medium", "n2-custom-8-32768", "custom-4-16384"]
)
def test_machine_types_the_table_knows(mt):
    assert machine_types.problem(mt) is None


@pytest.mark.parametrize(
    "mt,close",
    [
        ("n2-standrad-8", "n2-standard-8"),
        ("n2-standard-6", "n2-standard-4"),
        ("e2-standard-64", "e2-standard-32"),
        ("ct5lp-hightpu-4t", ""),
        ("n2-custom-8-1000", ""),
    ],
)
def test_machine_types_it_refuses_name_close_ones(mt, close):
    found = machine_types.problem(mt)
    assert found is not None and close in found[1] and found[1].startswith("use ")


def test_machine_type_table_covers_the_defaults_and_examples():
    from infra.spec import CpuPoolSpec

    assert machine_types.problem(CpuPoolSpec().machine_type) is None
    for path in EXAMPLES:
        assert machine_types.problem(load_spec(path).cpu_pool.machine_type) is None, path


@pytest.mark.parametrize("pattern", ["^main$", "^release/.*$", r"\pL+", "(?P<v>v[0-9]+)", "(?i)^main$", ".*"])
def test_re2_takes(pattern):
    assert gcp_names.re2_problem(pattern) is None


@pytest.mark.parametrize("pattern", ["^(?!wip).*$", "(?<=a)b", r"(a)\1", "a{1001}", r"\Z", "[", "(?>a)"])
def test_re2_refuses(pattern):
    found = gcp_names.re2_problem(pattern)
    assert found is not None and "RE2" in found[0]


def test_re2_refusal_writes_nothing_to_stderr(capfd):
    gcp_names.re2_problem("(?=x)")
    assert capfd.readouterr().err == ""


def test_long_team_identity_display_names_are_shortened_to_fit(tmp_path):
    data = yaml.safe_load((EXAMPLES_DIR / "default.yaml").read_text())
    data["cluster"]["name"] = "c" * 40
    data["teams"] = [{"name": "t" * 30, "namespace": "n" * 63, "local_queue": "q", "service_account": "k" * 63}]
    tf = synth_json(parse_spec(data), tmp_path)
    names = [r["display_name"] for r in tf["resource"]["google_service_account"].values()]
    assert f"{'c' * 40}: team {'t' * 30}" in names
    assert violations(tf) == []


# ------------------------------------------------------------------ every example


@pytest.mark.synth
def test_every_example_synthesizes_to_names_gcp_takes(tmp_path):
    bad = {p.stem: violations(synth_json(load_spec(p), tmp_path / p.stem)) for p in EXAMPLES}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_audit_sees_a_violation():
    """The rule table is not vacuous: a stack with a bad value in each checked field is caught field by field."""
    tf = {
        "provider": {"google": [{"default_labels": {"Bad": "x"}}]},
        "terraform": {"backend": {"gcs": {"bucket": "goog-state", "prefix": "/p"}}},
        "resource": {
            "google_storage_bucket": {"b": {"name": "my-google-b"}},
            "google_service_account": {"s": {"account_id": "x", "display_name": "d" * 101}},
            "google_container_node_pool": {"p": {"name": "p" * 41, "node_config": {"machine_type": "n2-standard-6"}}},
            "google_vertex_ai_tensorboard": {"t": {"display_name": "t" * 129}},
            "google_cloudbuild_trigger": {"c": {"name": "-ci", "github": {"push": {"branch": "(?=x)"}}, "filename": "/ci.yaml"}},
            "google_new_thing": {"n": {}},
        },
    }
    found = " | ".join(violations(tf))
    for needle in (
        "label Bad",
        "backend.bucket",
        "backend.prefix",
        "bucket 'my-google-b'",
        "account_id",
        "display_name of 101",
        "name 'ppp",
        "n2-standard-6",
        "ttt",
        "name '-ci'",
        "branch",
        "filename",
        "not in the audit",
    ):
        assert needle in found, needle


# ------------------------------------------------------------------ generated specs near the limits


def _name(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """DNS-1035 labels, biased to their length limits."""
    body = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=max(min_size - 2, 0), max_size=max(max_size - 2, 0))
    return st.builds(lambda a, b, c: (a + b + c)[:max_size], st.sampled_from("abcxyz"), body, st.sampled_from("a9z"))


def _mostly(valid: list[Any], invalid: list[Any]) -> st.SearchStrategy[Any]:
    """Three valid values for each invalid one, so most generated specs get as far as synthesis."""
    return st.sampled_from(valid * 3 + invalid)


near_limits = st.fixed_dictionaries(
    {
        "cluster": _name(1, 41),
        "teams": st.lists(st.tuples(_name(1, 31), st.one_of(st.none(), _name(1, 58)), st.one_of(st.none(), _name(1, 64))), min_size=1, max_size=2),
        "pool": _name(1, 37),
        "network": st.one_of(st.none(), _name(1, 64)),
        "dcn": st.one_of(st.none(), _name(1, 64)),
        "tensorboard": st.one_of(st.none(), st.text(min_size=0, max_size=130)),
        "bucket": _mostly(["ok-bucket-1", "a" * 63, "a.b.example.com", "googly"[1:] + "-x"], [None, "goog-x", "x-g00gle-y", "a" * 64, "10.0.0.1"]),
        "machine": _mostly(
            ["n2-standard-8", "e2-medium", "c3-standard-22", "n4-highcpu-80", "m3-ultramem-32", "n2-custom-8-32768"], ["n2-standard-6", "zz-standard-8"]
        ),
        "labels": st.integers(min_value=0, max_value=61),
        "branch": _mostly(["^main$", "^rel-[0-9]+$", r"^\pL+$"], ["^(?!x).*$", "a{2000}"]),
        "ci": st.booleans(),
    }
)


DEFAULT_DOC = yaml.safe_load((EXAMPLES_DIR / "default.yaml").read_text())


def _doc(g: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(DEFAULT_DOC)
    d["cluster"]["name"] = g["cluster"]
    d["tpu_pools"][0]["name"] = g["pool"]
    teams = []
    for name, ns, ksa in g["teams"]:
        t: dict[str, Any] = {"name": name, "quota_share": 1.0 if len(g["teams"]) == 1 else 0.5}
        if ns:
            t["namespace"] = ns
        if ksa:
            t["service_account"] = ksa
        teams.append(t)
    d["teams"] = teams
    d["buckets"] = [{"name": g["bucket"], "purpose": "data", "team": teams[0]["name"]}] if g["bucket"] else []
    if g["network"]:
        d.setdefault("network", {})["name"] = g["network"]
    if g["dcn"]:
        d.setdefault("network", {})["dcn"] = {"name": g["dcn"]}
    if g["tensorboard"] is not None:
        d["tensorboard"] = {"display_name": g["tensorboard"]}
    d["cpu_pool"] = {"machine_type": g["machine"]}
    d["labels"] = {f"k{i}": "v" for i in range(g["labels"])}
    if g["ci"]:
        d["cloud_build"] = {"enabled": True, "github_owner": "my-org", "github_repo": "tpu", "branch": g["branch"]}
    return d


@pytest.mark.synth
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(g=near_limits)
def test_whatever_the_loader_accepts_synthesizes_to_names_gcp_takes(g, tmp_path_factory):
    try:
        spec = parse_spec(_doc(g))
    except SpecError as e:
        assert e.field and e.problem and e.fix  # refused as one field, one problem, one fix
        event(f"refused: {e.field}")
        return
    event("accepted and synthesized")
    assert violations(synth_json(spec, tmp_path_factory.mktemp("gen"))) == []


def test_a_machine_type_the_table_lacks_has_an_explicit_way_through():
    """The table is compiled by hand: a type Compute Engine added later is refused with a fix that
    names the opt-out, and accepted with it (typos stay caught by default)."""
    raw = yaml.safe_load((EXAMPLES_DIR / "default.yaml").read_text())
    raw["cpu_pool"] = {**raw.get("cpu_pool", {}), "machine_type": "n9-standard-8"}
    with pytest.raises(SpecError) as ei:
        parse_spec(copy.deepcopy(raw))
    assert str(ei.value).startswith("cpu_pool.machine_type: 'n9-standard-8' is not a Compute Engine machine type")
    assert "cpu_pool.machine_type_unlisted: true" in str(ei.value)
    raw["cpu_pool"]["machine_type_unlisted"] = True
    assert parse_spec(raw).cpu_pool.machine_type == "n9-standard-8"


@pytest.mark.synth
def test_label_keys_reach_the_provider_as_written(tmp_path):
    """cdktn snake-cases a typed map's keys ("cost-center" -> "cost_center"): every resource would
    carry both spellings, and a spec at the label limit would give resources 65 (found by the fuzz above)."""
    g = {"cluster": "cluster-a", "teams": [("team-a", None, None)], "pool": "pool-a", "network": None, "dcn": None, "tensorboard": None}
    g |= {"bucket": "ok-bucket-1", "machine": "n2-standard-8", "labels": 58, "branch": "^main$", "ci": False}
    doc = _doc(g)
    doc["labels"] |= {"cost-center": "a-b", "team_x": "y"}
    tf = synth_json(parse_spec(doc), tmp_path)
    defaults = tf["provider"]["google"][0]["default_labels"]
    assert defaults["cost-center"] == "a-b" and defaults["managed-by"] == "tpu-gke-toolkit" and defaults["tgk-cluster"] == "cluster-a"
    assert not {"cost_center", "managed_by", "tgk_cluster"} & set(defaults)
    assert violations(tf) == []
