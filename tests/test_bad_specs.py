"""The bad-input corpus: each file in tests/bad_specs is a full spec with exactly one
mistake, announced by its first line ``# expect: <field path>``.

``python -m infra synth`` must refuse every one with exit code 2, a single stderr line
``error: <field>: <problem> — <fix>``, no traceback, and nothing written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infra.spec import load_spec
from tests.support import REPO, cli
from toolkit.errors import SpecError

BAD = REPO / "tests" / "bad_specs"
FILES = sorted(BAD.glob("*.yaml"))
DOCUMENT = "<document>"  # the whole file is wrong (not YAML, not a mapping): the message names the file


def expected_field(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    m = re.fullmatch(r"# expect: (\S+)", first.strip())
    assert m, f"{path.name}: first line must be '# expect: <field path>', got {first!r}"
    return m.group(1)


def test_corpus_is_large_enough():
    assert len(FILES) >= 22


def test_every_file_declares_a_field():
    for f in FILES:
        expected_field(f)


def _prefix(path: Path, field: str) -> str:
    return f"error: {path.relative_to(REPO)}: " if field == DOCUMENT else f"error: {field}: "


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_synth_refuses(path: Path, tmp_path: Path):
    field = expected_field(path)
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", str(path.relative_to(REPO)), "--out", str(out))
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout={proc.stdout}\nstderr={proc.stderr}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"stderr must be exactly one line, got {len(lines)}:\n{proc.stderr}"
    line = lines[0]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert line.startswith(_prefix(path, field)), f"expected the message to name {field!r}: {line}"
    # '<problem> — <fix>': both halves present and non-trivial
    problem, sep, fix = line.removeprefix(_prefix(path, field)).partition(" — ")
    assert sep, f"no ' — <fix>' part: {line}"
    assert len(problem.strip()) >= 8 and len(fix.strip()) >= 8, line
    assert "Input should" not in line and "Extra inputs" not in line, f"raw pydantic wording leaked: {line}"
    assert not out.exists() or not any(out.iterdir()), f"synth wrote into {out}: {list(out.rglob('*'))}"
    # and nothing beside it either (synth stages into a scratch dir next to --out)
    assert [p.name for p in tmp_path.iterdir() if p.name != "out"] == []


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_loader_agrees(path: Path):
    """The library raises the same field the CLI prints (the CLI adds no logic of its own)."""
    field = expected_field(path)
    with pytest.raises(SpecError) as ei:
        load_spec(path)
    if field == DOCUMENT:
        assert ei.value.field == "" and str(path) in ei.value.problem
    else:
        assert ei.value.field == field


def _base_is_valid():
    """The corpus is written against one valid spec; guard that it is valid, so each file's
    single mistake is the only reason it fails."""
    base = {
        "project": "my-tpu-project",
        "region": "us-west4",
        "zones": ["us-west4-a"],
        "cluster": {"name": "tpu-dev"},
        "tpu_pools": [{"name": "v5e-16", "type": "v5litepod-16", "slices": 2, "capacity": "spot"}],
    }
    from infra.spec import parse_spec

    return parse_spec(base)


def test_corpus_base_spec_is_valid():
    spec = _base_is_valid()
    assert spec.tpu_pools[0].shape.nodes == 4


# Repairs of a few corpus files: undoing the one mistake yields a valid spec, which shows
# the file had exactly that one mistake.
REPAIRS = {
    "zero_slices": lambda d: d["tpu_pools"][0].update(slices=1),
    "unknown_top_level_key": lambda d: d.pop("tpu_pool"),
    "unknown_nested_key": lambda d: d["cluster"].pop("relase_channel"),
    "pods_cidr_too_small": lambda d: d["network"].update(pods_cidr="10.64.0.0/22"),
    "nodes_cidr_too_small": lambda d: d["network"].update(nodes_cidr="10.0.0.0/28"),
    "overlapping_cidrs": lambda d: d["network"].update(pods_cidr="10.64.0.0/16"),
    "quota_shares_over_one": lambda d: d["teams"][1].update(quota_share=0.4),
    "duplicate_team_namespace": lambda d: d["teams"][1].update(namespace="ml2"),
    "multislice_single_host": lambda d: d["tpu_pools"][0].update(slices=1),
    "min_version_below_tpu7x_floor": lambda d: d["cluster"].update(min_version="1.34.0-gke.2201000"),
    "reservation_other_zone": lambda d: d["tpu_pools"][0]["capacity"].update(zone="us-west4-a"),
    "odd_core_count_v4": lambda d: d["tpu_pools"][0].update(type="v4-16"),
    "mixed_host_kinds_same_topology": lambda d: d["tpu_pools"][1].update(topology="4x4"),
    "type_contradicts_generation": lambda d: d["tpu_pools"][0].update(generation="v5e"),
    "empty_teams": lambda d: d.update(teams=[{"name": "research"}]),
    "namespace_too_long_for_queue": lambda d: d["teams"][0].update(local_queue="research-queue"),
    "network_name_too_long_for_router": lambda d: d["network"].update(name="tpu-dev-net"),
    "cluster_name_too_short_for_ci_account": lambda d: d["cluster"].update(name="abc"),
    "spot_key_under_flex_start": lambda d: d["tpu_pools"][0]["capacity"].pop("spot"),
    "state_bucket_invalid": lambda d: d["state"].update(bucket="my-state"),
    "too_many_flavors": lambda d: d["tpu_pools"].pop(),
}


@pytest.mark.parametrize("name", sorted(REPAIRS))
def test_repaired_file_is_valid(name: str):
    from infra.spec import parse_spec

    data = yaml.safe_load((BAD / f"{name}.yaml").read_text())
    REPAIRS[name](data)
    parse_spec(data)


def test_duplicate_key_file_is_valid_without_the_second_key():
    from infra.spec import load_yaml, parse_spec

    text = (BAD / "duplicate_key.yaml").read_text().replace("    capacity: on-demand\n", "")
    assert parse_spec(load_yaml(text)).tpu_pools[0].capacity.mode == "spot"


# ------------------------------------------------- files that are not UTF-8 text
# Generated here rather than kept as binary files: each is the corpus base spec, encoded wrongly.


def _base_text() -> str:
    return (BAD / "zero_slices.yaml").read_text().replace("slices: 0", "slices: 2")


ENCODINGS = {
    "gzip": (lambda t: __import__("gzip").compress(t.encode()), "gzip-compressed"),
    "utf16-bom": (lambda t: t.encode("utf-16"), "UTF-16"),
    "utf16-no-bom": (lambda t: t.encode("utf-16-le"), "UTF-16"),
    "utf32-bom": (lambda t: t.encode("utf-32"), "UTF-32"),
    "latin1": (lambda t: t.replace("# mistake", "# café").encode("latin-1"), "not UTF-8"),
    "binary": (lambda t: bytes(range(256)) * 4, "binary"),
    "control-char": (lambda t: t.replace("tpu-dev", "tpu\x07dev").encode(), "#x0007"),
}


@pytest.mark.parametrize("kind", sorted(ENCODINGS))
def test_not_utf8_text_is_refused(kind: str, tmp_path: Path):
    encode, needle = ENCODINGS[kind]
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(encode(_base_text()))
    out = tmp_path / "out"
    proc = cli("infra", "synth", "--spec", str(spec), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"error: {spec}: ") and needle in lines[0] and " — " in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    with pytest.raises(SpecError) as ei:
        load_spec(spec)
    assert ei.value.field == "" and needle in ei.value.problem


def test_utf8_with_byte_order_mark_is_accepted(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"\xef\xbb\xbf" + _base_text().encode())
    assert load_spec(spec).tpu_pools[0].slices == 2
