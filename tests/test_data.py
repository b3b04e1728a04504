"""Datasets: format recognition, the checks before a run, `data upload` and `data check` — against a real GCS-compatible server.

The format fixtures in tests/data/datasets were written by each format's own library (see
its README); the maxtext tier writes fresh files with those libraries and runs MaxText on them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from infra import access
from infra.datasets import DatasetFormat
from tests.support import REPO, cli, example_doc, spec_from
from tests.support.gcs_emulator import emulator_client
from toolkit.errors import SpecError
from workloads.data import checks, formats, mount, tokenizer
from workloads.local import bucket as local_bucket

FIXTURES = REPO / "tests" / "data" / "datasets"
FILES = {DatasetFormat.ARRAYRECORD: "three.array_record", DatasetFormat.PARQUET: "three.parquet", DatasetFormat.TFRECORD: "three.tfrecord"}


def _bytes(name: str) -> tuple[bytes, bytes, int]:
    data = (FIXTURES / name).read_bytes()
    return data[: formats.HEAD_BYTES], data[-formats.TAIL_BYTES :], len(data)


# ------------------------------------------------------------------ formats (pure)


@pytest.mark.parametrize("fmt", list(DatasetFormat), ids=lambda f: f.value)
def test_each_format_is_recognised_and_the_others_refused(fmt: DatasetFormat) -> None:
    head, tail, size = _bytes(FILES[fmt])
    assert formats.problem(fmt, head, tail, size) is None
    assert formats.detect(head, tail, size) is fmt
    for other in DatasetFormat:
        if other is not fmt:
            found = formats.problem(other, head, tail, size)
            assert found is not None and f"(it looks like {fmt.value})" in found, found


def test_a_cut_tfrecord_an_empty_file_text_and_gzip_are_named() -> None:
    head, tail, size = _bytes(FILES[DatasetFormat.TFRECORD])
    assert "cut short" in formats.problem(DatasetFormat.TFRECORD, head, tail, 40)
    assert formats.problem(DatasetFormat.ARRAYRECORD, b"", b"", 0) == "is empty"
    assert "plain text" in formats.problem(DatasetFormat.ARRAYRECORD, b"The quick brown fox jumps over the dog", b"dog", 39)
    assert "gzip" in formats.problem(DatasetFormat.PARQUET, b"\x1f\x8b\x08\x00" + bytes(60), b"\x00\x00\x00\x00", 200)


def test_a_parquet_file_cut_before_its_footer_is_refused() -> None:
    data = (FIXTURES / FILES[DatasetFormat.PARQUET]).read_bytes()[:-10]
    assert formats.problem(DatasetFormat.PARQUET, data[:64], data[-4:], len(data)) is not None


def test_masked_crc_matches_the_tfrecord_writer() -> None:
    data = (FIXTURES / FILES[DatasetFormat.TFRECORD]).read_bytes()
    assert int.from_bytes(data[8:12], "little") == formats.masked_crc32c(data[:8])


def test_tokenizer_fit_refuses_more_ids_than_the_model_has() -> None:
    assert tokenizer.fit_problem(32000, (1, 450), 32768) is None
    assert "32000 ids" in tokenizer.fit_problem(32000, (1, 450), 256)
    # A tokenizer whose size is unknown is still judged by the ids it made.
    assert "4997 ids" in tokenizer.fit_problem(None, (1, 4996), 4096)


def test_the_runs_volume_options_become_gcsfuse_flags_and_config_as_the_csi_driver_splits_them() -> None:
    from workloads.planning.planner import Overrides, plan_run
    from workloads.render import volumes

    spec = spec_from(_spec_doc(suffix="m"))
    plan = plan_run("maxtext-6b", spec, Overrides(slices=1, name="m", dataset="text"))
    flags, config = mount.gcsfuse_options(volumes.dataset_mount_options(plan).split(","))
    assert "--implicit-dirs" in flags and "--only-dir=text/v1" in flags
    assert config["metadata-cache"]["ttl-secs"] == -1 and config["file-system"]["kernel-list-cache-ttl-secs"] == -1


def test_gcsfuse_is_read_only_and_anonymous_only_against_a_local_server(tmp_path: Path) -> None:
    local = mount.argv("gcsfuse", "b", tmp_path / "m", ["--only-dir=c4/en"], tmp_path / "c.yaml", endpoint="http://127.0.0.1:9", log_file=tmp_path / "l")
    assert local[-2:] == ["b", str(tmp_path / "m")] and local[local.index("-o") + 1] == "ro"
    assert "--only-dir=c4/en" in local and "--custom-endpoint=http://127.0.0.1:9/storage/v1/" in local and "--anonymous-access" in local
    real = mount.argv("gcsfuse", "b", tmp_path / "m", ["--only-dir=c4/en"], tmp_path / "c.yaml", endpoint=None, log_file=tmp_path / "l")
    assert not any(a.startswith("--custom-endpoint") or a == "--anonymous-access" or a.startswith("--enable-hns") for a in real)


def test_a_bucket_holding_a_dataset_is_granted_read_only_and_reads_count() -> None:
    spec = spec_from(_spec_doc(suffix="ro"))
    grants = dict((m, r) for r, m in access.bucket_bindings(spec)["tgk-test-data-ro"])
    assert grants[access.team_member(spec, spec.teams[0])] == "roles/storage.objectViewer" in access.READ_ROLES


def test_bucket_bindings_are_the_stacks_grants() -> None:
    spec = spec_from("teams")
    got = access.bucket_bindings(spec)
    for team in spec.teams:
        for b in spec.team_buckets(team):
            assert (access.bucket_role(spec, b, 1), access.team_member(spec, team)) in got[b.name]
            assert ((access.bucket_role(spec, b, 0), access.node_member(spec)) in got[b.name]) == team.host_network
    other = [m for b, grants in got.items() for _, m in grants if b not in {x.name for x in spec.team_buckets(spec.teams[0])}]
    assert access.team_member(spec, spec.teams[0]) not in other


# ------------------------------------------------------------------ against the server


def _spec_doc(fmt: str = "arrayrecord", *, path: str = "text/v1", tokenizer_: str = "assets/tokenizers/tokenizer.default", suffix: str = "") -> dict:
    doc = example_doc("default")
    data = f"tgk-test-data-{suffix}"
    doc["buckets"] = [{"name": data, "purpose": "data"}, {"name": f"tgk-test-ckpt-{suffix}", "purpose": "checkpoints"}]
    doc["datasets"] = [{"name": "text", "bucket": data, "path": path, "format": fmt, "tokenizer": tokenizer_}]
    return doc


@pytest.fixture(scope="module")
def server():
    with emulator_client() as c:
        import os

        from workloads.observe.storage import EMULATOR_ENV

        yield c, os.environ[EMULATOR_ENV]


def _fresh(server, fmt: str = "arrayrecord", *, grant: bool = True, **kw) -> tuple:
    client, url = server
    suffix = uuid.uuid4().hex[:8]
    doc = _spec_doc(fmt, suffix=suffix, **kw)
    spec = spec_from(doc)
    local_bucket.ensure_buckets(url, spec)
    if grant:
        local_bucket.grant_buckets(url, spec)
    return client, spec, spec.datasets[0], doc


def _put(client, d, name: str, data: bytes) -> None:
    client.bucket(d.bucket).blob(d.object_prefix() + name).upload_from_string(data)


def _member(spec):
    return access.run_member(spec, spec.teams[0], False)


def test_a_dataset_that_is_there_passes_and_says_what_it_found(server) -> None:
    client, spec, d, _ = _fresh(server)
    for i in range(3):
        _put(client, d, f"part.array_record-{i:05d}", (FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    _put(client, d, "README.txt", b"not data")
    facts = checks.check_dataset(client, spec, d, _member(spec))
    assert (facts.files, facts.reader, facts.uri) == (3, _member(spec), f"gs://{d.bucket}/text/v1/")
    assert facts.sampled == tuple(f"text/v1/part.array_record-{i:05d}" for i in (0, 1, 2))


@pytest.mark.parametrize(
    ("setup", "field", "words"),
    [
        ("nothing", "datasets[0].path", "no files match"),
        ("other-files", "datasets[0].path", "the prefix holds"),
        ("empty", "datasets[0].path", "all empty"),
        ("parquet-files", "datasets[0].format", "declare format: parquet"),
        ("nested", "datasets[0].path", "no files match"),
        ("no-grant", "datasets[0].bucket", "may not read"),
        ("no-bucket", "datasets[0].bucket", "does not exist"),
        ("bad-last-shard", "datasets[0].format", "00002"),
    ],
)
def test_what_would_fail_the_run_is_refused_naming_the_field(server, setup: str, field: str, words: str) -> None:
    client, spec, d, _ = _fresh(server, grant=setup != "no-grant")
    good = (FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes()
    if setup == "other-files":
        _put(client, d, "data.jsonl", b'{"text": "x"}\n')
    elif setup == "empty":
        _put(client, d, "a.array_record", b"")
    elif setup == "parquet-files":
        _put(client, d, "a.array_record", (FIXTURES / FILES[DatasetFormat.PARQUET]).read_bytes())
    elif setup == "nested":  # one level down is not what the run's glob of the mount sees
        _put(client, d, "train/a.array_record", good)
    elif setup in ("no-grant",):
        _put(client, d, "a.array_record", good)
    elif setup == "no-bucket":
        client.bucket(d.bucket).delete(force=True)
    elif setup == "bad-last-shard":
        for i in range(3):
            _put(client, d, f"p.array_record-{i:05d}", good if i < 2 else b"\x00" * 100)
    with pytest.raises(SpecError) as e:
        checks.check_dataset(client, spec, d, _member(spec))
    assert e.value.field == field and words in str(e.value), str(e.value)


def test_a_tokenizer_beside_the_data_must_be_there(server) -> None:
    client, spec, d, _ = _fresh(server, tokenizer_="tokenizer.model")
    _put(client, d, "a.array_record", (FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    with pytest.raises(SpecError) as e:
        checks.check_dataset(client, spec, d, _member(spec))
    assert e.value.field == "datasets[0].tokenizer" and "does not exist" in e.value.problem
    _put(client, d, "tokenizer.model", b"x" * 10)
    assert checks.check_dataset(client, spec, d, _member(spec)).tokenizer == f"gs://{d.bucket}/text/v1/tokenizer.model"


def test_preflight_rows_show_a_refusal_as_a_failed_row(server) -> None:
    client, spec, d, _ = _fresh(server)
    rows = checks.preflight_rows(lambda: checks.check_dataset(client, spec, d, _member(spec)))
    assert rows == [("dataset", "fail", rows[0][2], rows[0][3])] and rows[0][2].startswith("datasets[0].path: no files match")


# ------------------------------------------------------------------ the CLI


def _write_spec(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _env(server) -> dict[str, str]:
    return {"STORAGE_EMULATOR_HOST": server[1], "KUBECONFIG": "", "HOME": "/nonexistent-home"}


def test_upload_puts_the_files_then_refuses_to_replace_them(server, tmp_path: Path) -> None:
    client, spec, d, doc = _fresh(server)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        (src / f"t.array_record-{i}").write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    (src / "notes.txt").write_text("not part of the dataset")
    sp = _write_spec(tmp_path, doc)
    dry = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", sp, "--dry-run", "-o", "json", env=_env(server))
    assert dry.returncode == 0, dry.stderr
    assert [f["object"] for f in json.loads(dry.stdout)["files"]] == ["text/v1/t.array_record-0", "text/v1/t.array_record-1"]
    assert list(client.list_blobs(d.bucket)) == []  # a dry run sends nothing
    done = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", sp, "-o", "json", env=_env(server))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["bytes"] == 2 * (FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).stat().st_size and got["mib_per_s"] > 0
    assert sorted(b.name for b in client.list_blobs(d.bucket)) == ["text/v1.tgk-dataset.json", "text/v1/t.array_record-0", "text/v1/t.array_record-1"]
    record = json.loads(client.bucket(d.bucket).blob("text/v1.tgk-dataset.json").download_as_bytes())
    assert record["complete"] is True and record["files"] == {
        "text/v1/t.array_record-0": got["files"][0]["bytes"],
        "text/v1/t.array_record-1": got["files"][1]["bytes"],
    }
    again = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", sp, env=_env(server))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "never added to" in again.stderr, again.stderr
    # A later upload of one more file into the prefix runs already read: refused.
    (src / "t.array_record-2").write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    more = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", sp, env=_env(server))
    assert more.returncode == 2 and more.stderr.startswith("error: datasets[0].path: gs://") and "a new path" in more.stderr, more.stderr
    assert "text/v1/t.array_record-2" not in [b.name for b in client.list_blobs(d.bucket)]  # nothing uploaded


def test_upload_refuses_a_file_in_another_format_and_sends_nothing(server, tmp_path: Path) -> None:
    client, spec, d, doc = _fresh(server)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.array_record").write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    (src / "b.array_record").write_bytes((FIXTURES / FILES[DatasetFormat.TFRECORD]).read_bytes())
    done = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", _write_spec(tmp_path, doc), env=_env(server))
    assert done.returncode == 2 and done.stderr.startswith("error: datasets[0].format: ") and "looks like tfrecord" in done.stderr, done.stderr
    assert list(client.list_blobs(d.bucket)) == []


@pytest.mark.parametrize("hostile", ["symlink-out", "fifo", "link-to-dev-zero", "device-node", "symlink-to-dir"])
def test_upload_takes_regular_files_inside_the_directory_only(server, tmp_path: Path, hostile: str) -> None:
    """A link out of SRC is refused, never followed; a FIFO or device named like a shard is refused without a read."""
    import os

    client, spec, d, doc = _fresh(server)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.array_record").write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    secret = tmp_path / "id_rsa"
    secret.write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())  # even a valid shard outside SRC is not taken
    bad = src / "b.array_record"
    if hostile == "symlink-out":
        bad.symlink_to(secret)
    elif hostile == "fifo":
        os.mkfifo(bad)
    elif hostile == "link-to-dev-zero":
        bad.symlink_to("/dev/zero")
    elif hostile == "device-node":
        import stat

        try:
            os.mknod(bad, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD (the link to /dev/zero case covers the read)")
    else:
        bad.symlink_to(src)
    done = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", _write_spec(tmp_path, doc), env=_env(server))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: SRC: "), done.stderr
    assert "b.array_record" in done.stderr and done.stdout == ""
    assert list(client.list_blobs(d.bucket)) == []


def test_upload_takes_a_link_that_stays_inside_the_directory(server, tmp_path: Path) -> None:
    client, spec, d, doc = _fresh(server)
    src = tmp_path / "src"
    (src / "shards").mkdir(parents=True)
    (src / "shards" / "real.bin").write_bytes((FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    (src / "a.array_record").symlink_to(src / "shards" / "real.bin")
    done = cli("workloads", "data", "upload", src, "--dataset", "text", "--spec", _write_spec(tmp_path, doc), "-o", "json", env=_env(server))
    assert done.returncode == 0, done.stderr
    # the data, and beside its prefix the upload's record (workloads.data.upload)
    assert [b.name for b in client.list_blobs(d.bucket)] == ["text/v1.tgk-dataset.json", "text/v1/a.array_record"]


def test_a_file_swapped_after_the_check_is_not_uploaded(tmp_path: Path) -> None:
    """The plan's file or nothing: a link put in its place between plan and upload is refused at open."""
    from workloads.data import upload

    src = tmp_path / "src"
    src.mkdir()
    f = src / "a.array_record"
    f.write_bytes(b"x" * 10)
    path, st = upload.regular_inside(src, f)
    item = upload.UploadItem(path, "text/v1/a.array_record", st.st_size, (st.st_dev, st.st_ino))
    f.unlink()
    f.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"y" * 10)
    with pytest.raises(SpecError) as e:
        upload._open_same(item)
    assert e.value.field == "SRC"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--dataset", "nope"], "--dataset"),
        (["--dataset", "text", "--spec-missing"], None),
    ],
)
def test_data_commands_refuse_bad_flags_in_one_line(server, tmp_path: Path, args: list[str], field: str | None) -> None:
    _, _, _, doc = _fresh(server)
    sp = _write_spec(tmp_path, doc)
    done = cli("workloads", "data", "check", *args, "--spec", sp, "--no-load-tokenizer", env=_env(server))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    if field:
        assert done.stderr.startswith(f"error: {field}: ") and "use one of text" in done.stderr


def test_data_check_on_a_dataset_the_team_cannot_read_exits_2(server, tmp_path: Path) -> None:
    client, spec, d, doc = _fresh(server, grant=False)
    _put(client, d, "a.array_record", (FIXTURES / FILES[DatasetFormat.ARRAYRECORD]).read_bytes())
    done = cli("workloads", "data", "check", "--dataset", "text", "--spec", _write_spec(tmp_path, doc), "--no-load-tokenizer", env=_env(server))
    assert done.returncode == 2 and done.stderr.startswith("error: datasets[0].bucket: ") and "may not read" in done.stderr, done.stderr
    local_bucket.grant_buckets(server[1], spec)
    ok = cli("workloads", "data", "check", "--dataset", "text", "--spec", _write_spec(tmp_path, doc), "--no-load-tokenizer", "-o", "json", env=_env(server))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["reader"] == _member(spec)


def test_grant_buckets_keeps_bindings_already_there(server) -> None:
    client, spec, d, _ = _fresh(server, grant=False)
    b = client.bucket(d.bucket)
    policy = b.get_iam_policy(requested_policy_version=3)
    policy.bindings.append({"role": "roles/storage.objectViewer", "members": {"user:someone@example.com"}})
    b.set_iam_policy(policy)
    assert local_bucket.grant_buckets(server[1], spec) == len(spec.buckets)  # the team's grant on each of its buckets
    assert local_bucket.grant_buckets(server[1], spec) == 0  # once is enough
    members = {m for x in b.get_iam_policy().bindings for m in x["members"]}
    assert {"user:someone@example.com", _member(spec)} <= members
