"""The dataset access check finds a read grant wherever IAM holds one, and refuses only one proven absent.

Each kind of grant a run's identity can read a dataset through: a bucket binding, a project
binding, a folder binding, a custom role, the project's viewers through the bucket's legacy
roles; and the ones the check cannot prove (a group, a domain, a conditional binding, a policy
it may not read), which pass with a warning. Against the real GCS-compatible server (the
buckets, their policies and the dataset's files) behind a loopback Resource Manager and IAM
(tests/support/google_iam_server.py), through ``checks.check_dataset`` and the ``data check`` CLI.
The weighing itself (``workloads.data.grants``) is pure and tested on its own first.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import yaml

from infra import access
from tests.support import REPO, cli, spec_from
from tests.support.gcs_emulator import running_emulator
from tests.support.google_iam_server import Hierarchy, serve
from tests.support.recording_cluster import RecordingCluster
from tests.support.specs import example_doc
from toolkit.errors import SpecError
from workloads.data import checks, grants
from workloads.data import iam as iam_reads
from workloads.local import bucket as local_bucket
from workloads.observe import storage

ARRAYRECORD = (REPO / "tests" / "data" / "datasets" / "three.array_record").read_bytes()
VIEWER = "roles/storage.objectViewer"
READ = sorted(grants.READ_PERMISSIONS)

# ------------------------------------------------------------------ the weighing (pure)

SA = "serviceAccount:team-a@p.iam.gserviceaccount.com"


def _perms(role: str) -> frozenset[str] | grants.Unreadable:
    table = {
        VIEWER: frozenset(READ),
        "roles/storage.legacyObjectReader": frozenset({"storage.objects.get"}),
        "roles/storage.legacyBucketReader": frozenset({"storage.buckets.get", "storage.objects.list"}),
        "roles/viewer": frozenset({"resourcemanager.projects.get"}),
        "roles/logging.viewer": frozenset({"logging.logEntries.list"}),
    }
    return table.get(role) or grants.Unreadable(role, "403")


def _level(resource: str, *bindings: tuple[str, tuple[str, ...]], project_id: str = "", condition: str = "") -> grants.Policy:
    return grants.Policy(resource, tuple(grants.Binding(r, m, condition) for r, m in bindings), project_id)


@pytest.mark.parametrize(
    ("levels", "state"),
    [
        ([_level("gs://b", (VIEWER, (SA,)))], "granted"),
        ([_level("gs://b", (VIEWER, ("allUsers",)))], "granted"),
        ([_level("gs://b"), _level("projects/p", (VIEWER, (SA.upper().replace("SERVICEACCOUNT", "serviceAccount"),)))], "granted"),
        ([_level("gs://b", ("roles/storage.legacyObjectReader", (SA,)), ("roles/storage.legacyBucketReader", (SA,)))], "granted"),
        ([_level("gs://b", (VIEWER, ("group:ml@example.com",)))], "unproven"),
        ([_level("gs://b", (VIEWER, ("domain:example.com",)))], "unproven"),
        ([_level("gs://b", (VIEWER, ("principalSet://iam.googleapis.com/x",)))], "unproven"),
        ([_level("gs://b", (VIEWER, (SA,)), condition="expires")], "unproven"),
        ([_level("gs://b", ("projects/p/roles/secret", (SA,)))], "unproven"),
        ([_level("gs://b"), grants.Unreadable("projects/p", "403")], "unproven"),
        ([_level("gs://b", ("roles/logging.viewer", (SA,)), (VIEWER, ("user:me@example.com", "serviceAccount:other@p.iam.gserviceaccount.com")))], "absent"),
        ([_level("gs://b", (VIEWER, ("deleted:" + SA + "?uid=1",)))], "absent"),
        # objects.list proven absent though objects.get might come from a group: the run cannot list the prefix
        ([_level("gs://b", ("roles/storage.legacyObjectReader", ("group:ml@example.com",)))], "absent"),
        # the project's viewers, through the bucket's legacy roles, and the account is one of them
        (
            [
                _level("gs://b", ("roles/storage.legacyObjectReader", ("projectViewer:p",)), ("roles/storage.legacyBucketReader", ("projectViewer:p",))),
                _level("projects/p", ("roles/viewer", (SA,)), project_id="p"),
            ],
            "granted",
        ),
        (
            [
                _level("gs://b", ("roles/storage.legacyObjectReader", ("projectViewer:p",)), ("roles/storage.legacyBucketReader", ("projectViewer:p",))),
                _level("projects/p", ("roles/viewer", ("user:me@example.com",)), project_id="p"),
            ],
            "absent",
        ),
        (
            [
                _level("gs://b", ("roles/storage.legacyObjectReader", ("projectViewer:p",)), ("roles/storage.legacyBucketReader", ("projectViewer:p",))),
                _level("projects/p", ("roles/viewer", ("group:all@example.com",)), project_id="p"),
            ],
            "unproven",
        ),
    ],
    ids=[
        "bucket-binding",
        "public",
        "project-binding-email-case",
        "two-legacy-roles",
        "group",
        "domain",
        "principal-set",
        "conditional",
        "unreadable-custom-role",
        "unreadable-project",
        "others-and-other-roles",
        "deleted-account",
        "list-absent-get-maybe",
        "project-viewers-incl-the-account",
        "project-viewers-without-it",
        "project-viewers-through-a-group",
    ],
)
def test_each_kind_of_binding_is_weighed(levels: list[grants.Level], state: str) -> None:
    v = grants.evaluate(SA, levels, _perms)
    assert v.state == state, v
    line = v.line()
    if state == "absent":
        assert v.missing and line.startswith("team-a@p.iam.gserviceaccount.com holds no storage.objects.")
    elif state == "unproven":
        assert v.doubts and line.startswith("cannot prove that team-a@p.iam.gserviceaccount.com may read it: ")
    else:
        assert v.grants and " may read it (" in line


# ------------------------------------------------------------------ against the server, through the check and the CLI


@pytest.fixture(scope="module")
def emulator() -> str:
    with running_emulator() as url:
        yield url


@pytest.fixture()
def google(emulator: str, monkeypatch: pytest.MonkeyPatch):
    h = Hierarchy()
    with serve(h, upstream=emulator) as url:
        monkeypatch.setenv(storage.EMULATOR_ENV, url)
        monkeypatch.setenv("TGK_GOOGLE_API_ENDPOINT", url)
        yield h, url, emulator


def _dataset(emulator: str, *, bucket_grant: bool) -> tuple[dict, object, object, str]:
    suffix = uuid.uuid4().hex[:8]
    doc = example_doc("default")
    data = f"tgk-acc-data-{suffix}"
    doc["buckets"] = [{"name": data, "purpose": "data"}, {"name": f"tgk-acc-ckpt-{suffix}", "purpose": "checkpoints"}]
    doc["datasets"] = [{"name": "text", "bucket": data, "path": "text/v1", "format": "arrayrecord", "tokenizer": "assets/tokenizers/tokenizer.default"}]
    spec = spec_from(doc)
    local_bucket.ensure_buckets(emulator, spec)
    if bucket_grant:
        local_bucket.grant_buckets(emulator, spec)
    d = spec.datasets[0]
    storage.make_client("p", endpoint=emulator).bucket(d.bucket).blob(d.object_prefix() + "a.array_record").upload_from_string(ARRAYRECORD)
    return doc, spec, d, access.run_member(spec, spec.teams[0], False)


def _bind(h: Hierarchy, resource: str, role: str, *members: str, condition: dict | None = None) -> None:
    h.policies.setdefault(h.canonical(resource), []).append({"role": role, "members": list(members), **({"condition": condition} if condition else {})})


# kind -> (what the hierarchy holds, the verdict)
KINDS = {
    "bucket-binding": ("bucket", "granted"),
    "project-binding": ("project", "granted"),
    "folder-binding": ("folder", "granted"),
    "organization-binding": ("organization", "granted"),
    "custom-role": ("custom", "granted"),
    "custom-role-without-list": ("custom-get-only", "absent"),
    "group": ("group", "unproven"),
    "domain": ("domain", "unproven"),
    "conditional": ("conditional", "unproven"),
    "project-policy-unreadable": ("forbidden", "unproven"),
    "absent": ("nothing", "absent"),
}


def _arrange(h: Hierarchy, what: str, member: str) -> None:
    h.parents = {"projects/1234": "folders/77", "folders/77": "organizations/9"}
    project = f"projects/{h.project_id}"
    _bind(h, project, "roles/logging.logWriter", member)  # a project role that reads no data
    h.roles["roles/logging.logWriter"] = ["logging.logEntries.create"]
    if what == "project":
        _bind(h, project, VIEWER, member)
    elif what == "folder":
        _bind(h, "folders/77", "roles/storage.objectUser", member)
    elif what == "organization":
        _bind(h, "organizations/9", VIEWER, member)
    elif what in ("custom", "custom-get-only"):
        role = f"projects/{h.project_id}/roles/datasetReader"
        h.roles[role] = READ if what == "custom" else ["storage.objects.get"]
        _bind(h, project, role, member)
    elif what == "group":
        _bind(h, project, VIEWER, "group:ml-team@example.com")
    elif what == "domain":
        _bind(h, "folders/77", VIEWER, "domain:example.com")
    elif what == "conditional":
        _bind(h, project, VIEWER, member, condition={"title": "only-text", "expression": 'resource.name.startsWith("projects/_/buckets/x")'})
    elif what == "forbidden":
        h.forbidden.add("projects/1234")


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_grant_through_the_check(google, kind: str) -> None:
    h, _, emulator = google
    what, verdict = KINDS[kind]
    _, spec, d, member = _dataset(emulator, bucket_grant=what == "bucket")
    _arrange(h, what, member)
    client = storage.make_client("p")
    assert isinstance(iam_reads.reader_for(client), iam_reads.GoogleIam)
    if verdict == "absent":
        with pytest.raises(SpecError) as refused:
            checks.check_dataset(client, spec, d, member)
        e = refused.value
        assert e.field == "datasets[0].bucket" and e.exit_code == 2
        assert f"may not read gs://{d.bucket}: no storage.objects." in e.problem
        assert f"on gs://{d.bucket}, projects/{h.project_id}, folders/77, organizations/9" in e.problem  # every level read
        return
    facts = checks.check_dataset(client, spec, d, member)
    assert facts.files == 1
    if verdict == "granted":
        assert facts.reader == member and facts.access_note == ""
    else:
        assert facts.reader == "" and facts.access_note.startswith(f"cannot prove that {member.removeprefix('serviceAccount:')} may read it: ")
    if what == "bucket":  # proven by the bucket's own policy: nothing above is read
        assert not any(r.startswith(("GET /v3/", "POST /v3/")) for r in h.requests), h.requests


def test_the_words_of_each_doubt(google) -> None:
    h, _, emulator = google
    _, spec, d, member = _dataset(emulator, bucket_grant=False)
    _arrange(h, "group", member)
    _bind(h, "folders/77", VIEWER, "domain:example.com")
    h.forbidden.add("organizations/9")
    note = checks.check_dataset(storage.make_client("p"), spec, d, member).access_note
    assert f"{VIEWER} on projects/{h.project_id}: group:ml-team@example.com (its members cannot be listed here)" in note
    assert f"{VIEWER} on folders/77: domain:example.com (its members cannot be listed here)" in note
    assert "organizations/9: its IAM policy: permission denied" in note


def _spec_file(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


@pytest.mark.parametrize("kind", ["project-binding", "group", "absent"])
def test_data_check_says_each_verdict(google, tmp_path: Path, kind: str) -> None:
    h, url, emulator = google
    what, verdict = KINDS[kind]
    doc, _, d, member = _dataset(emulator, bucket_grant=False)
    _arrange(h, what, member)
    env = {"STORAGE_EMULATOR_HOST": url, "TGK_GOOGLE_API_ENDPOINT": url, "KUBECONFIG": "", "HOME": "/nonexistent-home"}
    done = cli("workloads", "data", "check", "--dataset", "text", "--spec", _spec_file(tmp_path, doc), "--no-load-tokenizer", env=env)
    who = member.removeprefix("serviceAccount:")
    if verdict == "absent":
        assert done.returncode == 2 and done.stdout == "", done
        assert (
            done.stderr.startswith(f"error: datasets[0].bucket: {who} may not read gs://{d.bucket}: no storage.objects.") and len(done.stderr.splitlines()) == 1
        )
        assert "grant it roles/storage.objectViewer" in done.stderr
    elif verdict == "granted":
        assert done.returncode == 0, done.stderr
        assert f"  read access: {who} may read it" in done.stdout
    else:
        assert done.returncode == 0, done.stderr
        assert f"  read access: warning: cannot prove that {who} may read it: {VIEWER} on projects/{h.project_id}: group:ml-team@example.com" in done.stdout


def test_a_bucket_server_that_is_not_googles_has_no_hierarchy(emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local cluster's bucket server (or an emulator): the bucket's own policy decides, nothing above is asked."""
    monkeypatch.delenv("TGK_GOOGLE_API_ENDPOINT", raising=False)
    monkeypatch.setenv(storage.EMULATOR_ENV, emulator)
    reader = iam_reads.reader_for(storage.make_client("p"))
    assert isinstance(reader, iam_reads.NoHierarchy) and reader.hierarchy("1234") == ()
    assert isinstance(iam_reads.reader_for(storage.make_client("p", endpoint=emulator)), iam_reads.NoHierarchy)
    _, spec, d, member = _dataset(emulator, bucket_grant=False)
    with pytest.raises(SpecError, match="may not read"):
        checks.check_dataset(storage.make_client("p"), spec, d, member)
    assert os.environ[storage.EMULATOR_ENV] == emulator


@pytest.mark.parametrize("kind", ["group", "absent"])
def test_submit_goes_ahead_with_a_warning_and_refuses_only_what_is_proven_absent(google, memory_buckets, kind: str) -> None:
    from workloads import runs
    from workloads.planning.overrides import Overrides

    h, _, emulator = google
    _, spec, d, member = _dataset(emulator, bucket_grant=False)
    _arrange(h, KINDS[kind][0], member)
    plan = runs.plan("maxtext-6b", spec, Overrides(name=f"acc-{kind}", dataset=d.name))
    cluster = RecordingCluster()
    if kind == "absent":
        with pytest.raises(SpecError, match="may not read"):
            runs.apply(cluster, plan, spec=spec)
        assert cluster.applied == [] and memory_buckets == {}  # nothing applied, no identity written
        return
    sub = runs.apply(cluster, plan, spec=spec)
    assert cluster.applied and sub.dataset_access.startswith(f"cannot prove that {member.removeprefix('serviceAccount:')} may read it: ")
