"""Datasets on the local cluster: `data upload`, `data check` and `preflight --dataset` go to the cluster's own
Cloud Storage server (its kubeconfig context's hook), whose bucket policies `local up` wrote as the stack grants
them; the tokenizer is loaded by real MaxText's loader. `submit` refusing a dataset without files is in
test_training_storage_live.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import yaml

from infra import access
from infra.spec import parse_spec
from tests.integration.test_rehearsal import wl
from tests.support import EXAMPLES, REPO

FIXTURE = REPO / "tests" / "data" / "datasets" / "three.array_record"


def _spec_file(tmp_path: Path, version: str) -> tuple[Path, object]:
    doc = yaml.safe_load((EXAMPLES / "default.yaml").read_text())
    data = next(b["name"] for b in doc["buckets"] if b["purpose"] == "data")
    doc["datasets"] = [
        {"name": "text", "bucket": data, "path": version, "format": "arrayrecord", "tokenizer": "assets/tokenizers/tokenizer.llama2"},
        # llama3's tiktoken vocabulary (128,256 ids) does not fit maxtext-6b's 32,768-entry embedding.
        {
            "name": "text-llama3",
            "bucket": data,
            "path": version,
            "format": "arrayrecord",
            "tokenizer": "assets/tokenizers/tokenizer_llama3.tiktoken",
            "tokenizer_type": "tiktoken",
        },
    ]
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p, parse_spec(doc)


def test_upload_check_and_preflight_use_the_clusters_buckets(kubeconfig, cluster, tmp_path) -> None:
    from workloads.local import bucket

    version = f"text/{secrets.token_hex(3)}"
    sp, spec = _spec_file(tmp_path, version)
    kc = ("--kubeconfig", str(kubeconfig), "--spec", str(sp))
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURE, src / "train.array_record-00000-of-00001")

    up = wl("data", "upload", str(src), "--dataset", "text", *kc, "-o", "json")
    assert up.returncode == 0, up.stderr
    gcs = bucket.SERVICE.client_of(cluster)
    d = spec.datasets[0]
    assert [b.name for b in gcs.list_blobs(d.bucket, prefix=d.object_prefix())] == [f"{version}/train.array_record-00000-of-00001"]

    check = wl("data", "check", "--dataset", "text", *kc, "--no-load-tokenizer", "-o", "json")
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["reader"] == access.team_member(spec, spec.teams[0])  # the grant local up wrote

    pre = wl("preflight", "maxtext-6b", "--dataset", "text", *kc, "-o", "json", timeout=600)
    rows = {c["name"]: c for c in json.loads(pre.stdout)["checks"]}
    assert rows["dataset files"]["result"] == "pass" and rows["dataset access"]["result"] == "pass", rows
    assert rows["tokenizer"]["result"] == "pass" and "32000 ids" in rows["tokenizer"]["detail"], rows["tokenizer"]

    big = wl("preflight", "maxtext-6b", "--dataset", "text-llama3", *kc, "-o", "json", timeout=600)
    assert big.returncode == 1, big.stderr
    tok = next(c for c in json.loads(big.stdout)["checks"] if c["name"] == "tokenizer")
    assert tok["result"] == "fail" and "128256 ids" in tok["detail"] and "vocab_size is 32768" in tok["detail"], tok
