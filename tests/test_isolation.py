"""Team A's pods cannot use team B's buckets: checked over what the toolkit emits.

Nothing here trusts the naming rules or the stack's code: the property is read
off the synthesized Terraform (service accounts, Workload Identity bindings,
bucket and project grants, the node pools' service account) and the rendered
Kubernetes objects (each team's Namespace and KSA, each run's pods), as GCP and
GKE would read them:

- a pod on the host network acts as its node's service account (GKE docs,
  workload-identity#restrictions: host-network pods do not use Workload Identity)
  — and only if its namespace admits host-network pods at all (Pod Security);
- any other pod acts as the Google SA its KSA is annotated with, and only if a
  Workload Identity binding lets exactly that namespace/KSA act as that SA;
- an identity can use the buckets it holds a role on; no project-wide storage role
  or authoritative binding may exist (either would make bucket grants moot).

Under the defaults every team's pods reach exactly the team's own buckets. The one
documented exception is opt-in: hostNetwork runs of teams with
``host_network: true`` act as the node SA, which holds the buckets of exactly
those teams.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from infra.derived_names import RESERVED_NAMESPACE
from infra.spec import EXAMPLES_DIR, EnvSpec, load_spec, parse_spec
from tests.support import EXAMPLE_NAMES, example_doc
from workloads.planning.planner import Overrides, PlanError, plan_run
from workloads.render import kueue
from workloads.render.jobset import run_objects

pytestmark = pytest.mark.synth

# A recipe that writes to the team's bucket and fits each example's pools.
RECIPE = {"default": "maxtext-6b", "flex-start": "llama3-8b", "tpu7x": "maxtext-6b", "v4": "maxtext-6b", "v5p": "gpt3-6b", "v6e-reservation": "llama3-8b"}
# Project-wide roles that would make bucket grants moot for a pod's identity: any storage
# role, basic roles, or acting as / minting tokens for another service account.
BROAD_ROLE = re.compile(r"^roles/(storage\.|editor$|owner$|iam\.serviceAccount(User|TokenCreator|Admin)$|iam\.workloadIdentityUser$)")
WRITE_ROLES = {"roles/storage.objectAdmin", "roles/storage.objectCreator", "roles/storage.objectUser"}
REF = re.compile(r"^\$\{(google_[a-z_]+)\.([^.}]+)\.([a-z_]+)\}$")


def three_teams() -> EnvSpec:
    """Three teams on one pool; b and c opt in to hostNetwork runs, a keeps the default."""
    data = example_doc("default")
    data["cluster"]["name"] = "iso"
    data["tpu_pools"][0]["slices"] = 4  # a quarter of the chips is a whole slice (infra.quotas)
    data["teams"] = [
        {"name": "a", "quota_share": 0.5},
        {"name": "b", "quota_share": 0.25, "host_network": True},
        {"name": "c", "quota_share": 0.25, "host_network": True, "service_account": "trainer"},
    ]
    data["buckets"] = [{"name": f"my-tpu-project-iso-{t}-{p}", "purpose": p, "team": t} for t in ("a", "b", "c") for p in ("data", "checkpoints")]
    return parse_spec(data)


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> dict[str, tuple[EnvSpec, dict[str, Any]]]:
    from infra.stack import synth

    root = tmp_path_factory.mktemp("isolation")
    specs = {name: load_spec(EXAMPLES_DIR / f"{name}.yaml") for name in EXAMPLE_NAMES}
    specs["three-teams"] = three_teams()
    return {name: (spec, json.loads(synth(spec, root / name).read_text())) for name, spec in specs.items()}


# --------------------------------------------------- the IAM, as GCP reads it


@dataclass(frozen=True)
class Iam:
    """Who is who in one synthesized stack, by service-account email."""

    emails: dict[str, str]  # SA logical id -> email
    node_sa: str  # the email every node pool runs as
    wi_members: dict[str, set[str]]  # email -> the 'ns/ksa' that may act as it
    buckets_of: dict[str, dict[str, set[str]]]  # email -> bucket name -> roles


def _deref(value: str, rtype: str, attr: str) -> str:
    m = REF.match(value)
    assert m and m.group(1) == rtype and m.group(3) == attr, f"expected a reference to a {rtype}'s {attr}, got {value!r}"
    return m.group(2)


def read_iam(spec: EnvSpec, doc: dict[str, Any]) -> Iam:
    res = doc["resource"]
    assert not {"google_storage_bucket_iam_binding", "google_storage_bucket_iam_policy", "google_project_iam_binding", "google_project_iam_policy"} & set(
        res
    ), "authoritative IAM would replace grants made elsewhere; the stack only adds members"
    emails = {lid: f"{sa['account_id']}@{spec.project}.iam.gserviceaccount.com" for lid, sa in res["google_service_account"].items()}
    node_sas = {emails[_deref(p["node_config"]["service_account"], "google_service_account", "email")] for p in res["google_container_node_pool"].values()}
    (node_sa,) = node_sas  # CPU and TPU pools run as one node SA
    wi: dict[str, set[str]] = {e: set() for e in emails.values()}
    for m in res.get("google_service_account_iam_member", {}).values():
        email = emails[_deref(m["service_account_id"], "google_service_account", "name")]
        assert m["role"] == "roles/iam.workloadIdentityUser", m
        who = re.fullmatch(rf"serviceAccount:{re.escape(spec.project)}\.svc\.id\.goog\[([^/\]]+/[^\]]+)\]", m["member"])
        assert who, f"only Kubernetes SAs of this cluster's pool may act as a GSA: {m['member']}"
        wi[email].add(who.group(1))
    bucket_names = {lid: b["name"] for lid, b in res.get("google_storage_bucket", {}).items()}
    grants: dict[str, dict[str, set[str]]] = {e: {} for e in emails.values()}
    for m in res.get("google_storage_bucket_iam_member", {}).values():
        gke = re.fullmatch(
            r"principal://iam\.googleapis\.com/projects/[^/]+/locations/global/workloadIdentityPools/[^/]+/subject/ns/([^/]+)/sa/([^/]+)", m["member"]
        )
        if gke:
            # GKE's own multi-tier checkpointing replicator (modules/checkpointing.py): a KSA in a namespace the
            # spec refuses to give a team (infra.derived_names.RESERVED_NAMESPACE), so no team pod can be it.
            assert RESERVED_NAMESPACE.match(gke.group(1)) and all(t.ns != gke.group(1) for t in spec.teams), m["member"]
            assert m["role"] == "roles/storage.objectUser", m
            continue
        email = emails[_deref(m["member"], "google_service_account", "member")]
        # a literal name is a bucket the stack does not manage (the CI SA's Terraform state bucket)
        bucket = bucket_names[_deref(m["bucket"], "google_storage_bucket", "name")] if REF.match(m["bucket"]) else m["bucket"]
        grants[email].setdefault(bucket, set()).add(m["role"])
    pod_identities = {node_sa} | {e for e, members in wi.items() if members}
    for m in res.get("google_project_iam_member", {}).values():
        email = emails[_deref(m["member"], "google_service_account", "member")]
        if email in pod_identities:
            assert not BROAD_ROLE.match(m["role"]), f"project-wide {m['role']} on {email}, which pods act as, reaches past its buckets"
    return Iam(emails=emails, node_sa=node_sa, wi_members=wi, buckets_of=grants)


# ------------------------------------------- the pods, as GKE would run them


def namespace_admits_host_network(spec: EnvSpec, ns: str) -> bool:
    (obj,) = [o for o in kueue.queue_objects(spec) if o["kind"] == "Namespace" and o["metadata"]["name"] == ns]
    level = (obj["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce", "privileged")
    return level == "privileged"  # baseline and restricted both forbid host namespaces


def identity_of(spec: EnvSpec, iam: Iam, ns: str, pod: dict[str, Any]) -> str | None:
    """The GSA email a pod acts as, or None when it would not run (refused) or has no GCP identity."""
    if pod.get("hostNetwork"):
        return iam.node_sa if namespace_admits_host_network(spec, ns) else None
    ksa = pod.get("serviceAccountName", "default")
    (obj,) = [o for o in kueue.queue_objects(spec) if o["kind"] == "ServiceAccount" and (o["metadata"]["namespace"], o["metadata"]["name"]) == (ns, ksa)]
    gsa = obj["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    return gsa if f"{ns}/{ksa}" in iam.wi_members.get(gsa, set()) else None


def pods(plan) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in run_objects(plan):
        if obj["kind"] == "JobSet":
            for rj in obj["spec"]["replicatedJobs"]:
                out.append((obj["metadata"]["namespace"], rj["template"]["spec"]["template"]["spec"]))
    return out


def written_bucket(pod: dict[str, Any]) -> str | None:
    for arg in pod["containers"][0].get("args", []):
        m = re.fullmatch(r"base_output_directory=gs://([^/]+)(/.*)?", arg)
        if m:
            return m.group(1)
    return None


def own_buckets(spec: EnvSpec, team) -> set[str]:
    return {b.name for b in spec.team_buckets(team)}


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("name", [*EXAMPLE_NAMES, "three-teams"])
def test_each_team_has_its_own_identity(envs, name):
    spec, doc = envs[name]
    iam = read_iam(spec, doc)
    gsas = {}
    for team in spec.teams:
        (pod_ns, pod) = pods(plan_run(RECIPE.get(name, "maxtext-6b"), spec, Overrides(slices=1, name="iso", team=team.name)))[0]
        gsa = identity_of(spec, iam, pod_ns, pod)
        assert gsa is not None and gsa != iam.node_sa, f"{team.name}: default pods must act as the team's own GSA"
        assert iam.wi_members[gsa] == {f"{team.ns}/{team.ksa}"}, f"{gsa}: only {team.name}'s KSA may act as it"
        gsas[team.name] = gsa
    assert len(set(gsas.values())) == len(spec.teams), f"teams share a GSA: {gsas}"
    assert not iam.wi_members[iam.node_sa], "no KSA may act as the node SA"


@pytest.mark.parametrize("name", [*EXAMPLE_NAMES, "three-teams"])
def test_default_runs_reach_exactly_their_team_s_buckets(envs, name):
    """The property under the defaults: a team's pods use its buckets and nothing else."""
    spec, doc = envs[name]
    iam = read_iam(spec, doc)
    for team in spec.teams:
        plan = plan_run(RECIPE.get(name, "maxtext-6b"), spec, Overrides(slices=1, name="iso", team=team.name))
        for ns, pod in pods(plan):
            assert "hostNetwork" not in pod, "hostNetwork is off by default"
            reach = iam.buckets_of[identity_of(spec, iam, ns, pod)]
            assert set(reach) == own_buckets(spec, team), f"{team.name} reaches {sorted(reach)}"
            out = written_bucket(pod)
            if out is not None:
                assert reach[out] & WRITE_ROLES, f"{team.name} writes gs://{out} but may not"


@pytest.mark.parametrize("name", [*EXAMPLE_NAMES, "three-teams"])
def test_node_sa_holds_only_the_buckets_of_teams_that_opted_in(envs, name):
    spec, doc = envs[name]
    iam = read_iam(spec, doc)
    opted = set().union(*[own_buckets(spec, t) for t in spec.teams if t.host_network])
    assert set(iam.buckets_of[iam.node_sa]) == opted
    for bucket, roles in iam.buckets_of[iam.node_sa].items():
        purpose = next(b.purpose.value for b in spec.buckets if b.name == bucket)
        assert roles == ({"roles/storage.objectViewer"} if purpose == "data" else {"roles/storage.objectAdmin"})


@pytest.mark.parametrize("name", [*EXAMPLE_NAMES, "three-teams"])
def test_host_network_is_opt_in_and_its_reach_is_the_documented_exception(envs, name):
    spec, doc = envs[name]
    iam = read_iam(spec, doc)
    opted = [t for t in spec.teams if t.host_network]
    shared = set().union(*[own_buckets(spec, t) for t in opted])
    for team in spec.teams:
        o = Overrides(slices=1, name="iso", team=team.name, host_network=True)
        if not team.host_network:
            with pytest.raises(PlanError):
                plan_run(RECIPE.get(name, "maxtext-6b"), spec, o)
            # A hand-written hostNetwork pod in the team's namespace is refused (Pod Security baseline).
            assert identity_of(spec, iam, team.ns, {"hostNetwork": True}) is None
            continue
        for ns, pod in pods(plan_run(RECIPE.get(name, "maxtext-6b"), spec, o)):
            assert pod["hostNetwork"] is True and identity_of(spec, iam, ns, pod) == iam.node_sa
            reach = iam.buckets_of[iam.node_sa]
            assert own_buckets(spec, team) <= set(reach) == shared
            assert set(reach) - own_buckets(spec, team) <= shared, "beyond its own: only other opted-in teams' buckets"
            out = written_bucket(pod)
            if out is not None:
                assert reach[out] & WRITE_ROLES


def test_the_three_team_spec_exercises_both_sides():
    spec = three_teams()
    assert [t.host_network for t in spec.teams] == [False, True, True]
    assert {b.team for b in spec.buckets} == {"a", "b", "c"}


def test_a_bucket_belongs_to_one_team():
    data = example_doc("v6e-reservation")
    data["buckets"][0].pop("team")
    from toolkit.errors import SpecError

    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert e.value.field == "buckets[0].team"


def test_single_team_buckets_default_to_that_team():
    spec = load_spec(EXAMPLES_DIR / "default.yaml")
    (team,) = spec.teams
    assert all(b.team is None for b in spec.buckets) and spec.team_buckets(team) == list(spec.buckets)


def test_output_directory_is_the_team_s_own_bucket():
    spec = load_spec(EXAMPLES_DIR / "v6e-reservation.yaml")
    for team in spec.teams:
        (_, pod), *_ = pods(plan_run("llama3-8b", spec, Overrides(slices=1, name="iso", team=team.name)))
        assert written_bucket(pod) in own_buckets(spec, team)


def test_team_account_ids_are_valid_and_distinct():
    from infra.naming import team_service_account_id

    valid = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")
    clusters = ["a", "tpu-dev", "c" * 40, "x-" * 19 + "y"]
    teams = ["t", "research", "r" * 30, "team-" * 5 + "z"]
    ids = {(c, t): team_service_account_id(c, t) for c in clusters for t in teams}
    for key, account in ids.items():
        assert valid.match(account), f"{key}: {account!r}"
    assert len(set(ids.values())) == len(ids)
    assert team_service_account_id("tpu-dev", "research") == "tpu-dev-t-research"


def test_the_reader_sees_a_cross_team_grant(envs):
    """Guard against a vacuous check: one extra grant in the JSON is seen as a cross-team reach."""
    import copy

    spec, doc = envs["v6e-reservation"]
    doc = copy.deepcopy(doc)
    res = doc["resource"]
    research_sa = next(lid for lid, sa in res["google_service_account"].items() if sa["account_id"].endswith("-t-research"))
    pretrain_ckpt = next(lid for lid, b in res["google_storage_bucket"].items() if b["name"] == "my-tpu-project-trillium-ckpt")
    res["google_storage_bucket_iam_member"]["leak"] = {
        "bucket": f"${{google_storage_bucket.{pretrain_ckpt}.name}}",
        "member": f"${{google_service_account.{research_sa}.member}}",
        "role": "roles/storage.objectViewer",
    }
    iam = read_iam(spec, doc)
    research = spec.teams[1]
    (ns, pod), *_ = pods(plan_run("llama3-8b", spec, Overrides(slices=1, name="iso", team=research.name)))
    assert set(iam.buckets_of[identity_of(spec, iam, ns, pod)]) == own_buckets(spec, research) | {"my-tpu-project-trillium-ckpt"}


def test_two_teams_that_would_share_one_service_account_are_refused():
    """A team name too long for ``<cluster>-t-<team>`` is shortened with a digest, and another team can be named onto it (infra.derived_names refuses it)."""
    from infra.naming import team_service_account_id
    from toolkit.errors import SpecError

    doc = example_doc("v6e-reservation")
    cluster = doc["cluster"]["name"]
    long_name = "t-" + "x" * 28
    shortened = team_service_account_id(cluster, long_name)
    twin = shortened.removeprefix(f"{cluster}-t-")
    assert team_service_account_id(cluster, twin) == shortened  # the collision is real, not assumed
    renamed = {doc["teams"][0]["name"]: long_name, doc["teams"][1]["name"]: twin}
    for t in doc["teams"]:
        t["namespace"] = t.get("namespace") or t["name"]  # the namespaces stay as they were
        t["name"] = renamed[t["name"]]
    for b in doc.get("buckets") or []:
        if b.get("team") in renamed:
            b["team"] = renamed[b["team"]]
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert e.value.field == "teams[1].name" and f"already team {long_name}'s" in str(e.value), str(e.value)

    doc["teams"][1]["name"] = "research"
    for b in doc.get("buckets") or []:
        if b.get("team") == twin:
            b["team"] = "research"
    assert {t.name for t in parse_spec(doc).teams} == {long_name, "research"}  # no collision: accepted
