"""Benchmark the data path on this machine: `data upload` throughput to the local bucket server, and
the tiny MaxText run's steps/s reading a real dataset through gcsfuse vs synthetic data of the same size.

    .venv/bin/python scripts/bench_data.py [--repeats 3] [--upload-mib 64] [--steps 30] [--skip-runs]

Prints one JSON object. Everything is real: the GCS-compatible server (the one `local up`
runs), gcsfuse (scripts/build-gcsfuse.sh), MaxText 0.2.5 on CPU. "Same size" means the same
tiny model with the tokenizer's vocabulary (32,768 ids for MaxText's tokenizer.default) on
both sides: only the input pipeline differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra import access  # noqa: E402
from infra.spec import parse_spec  # noqa: E402
from tests.support import example_doc  # noqa: E402
from tests.support.gcs_emulator import running_emulator  # noqa: E402
from workloads.data import local_read  # noqa: E402
from workloads.data import upload as up  # noqa: E402
from workloads.local import bucket as local_bucket  # noqa: E402
from workloads.maxtext import env as mx  # noqa: E402
from workloads.maxtext import run_local as rl  # noqa: E402
from workloads.observe import metrics as m  # noqa: E402
from workloads.planning.planner import Overrides, plan_run  # noqa: E402


def _spec(suffix: str):
    doc = example_doc("default")
    doc["buckets"] = [{"name": f"tgk-bench-data-{suffix}", "purpose": "data"}, {"name": f"tgk-bench-ckpt-{suffix}", "purpose": "checkpoints"}]
    doc["datasets"] = [
        {"name": "text", "bucket": f"tgk-bench-data-{suffix}", "path": "text/v1", "format": "arrayrecord", "tokenizer": "assets/tokenizers/tokenizer.default"}
    ]
    return parse_spec(doc)


def _make(venv: Path, out: Path, records: int, shards: int) -> None:
    cmd = [str(mx.python(venv)), str(REPO / "scripts" / "make_text_dataset.py"), str(out), "--records", str(records), "--shards", str(shards)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)


def bench_upload(url: str, venv: Path, mib: int, repeats: int) -> dict:
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        # ~170 bytes a record in ArrayRecord: records for `mib` MiB over 4 files.
        _make(venv, src, records=mib * 2**20 // 170, shards=4)
        size = sum(p.stat().st_size for p in src.iterdir())
        for _ in range(repeats):
            spec = _spec(uuid.uuid4().hex[:8])
            local_bucket.ensure_buckets(url, spec)
            client = local_bucket.SERVICE.client(url)
            d = spec.datasets[0]
            plan = up.plan_upload(spec, d, src)
            decision = up.decide(client, spec, d, plan)
            rates.append(up.upload(client, d, plan, decision).mib_per_s)
    return {"bytes": size, "files": 4, "mib_per_s_median": round(statistics.median(rates), 1), "mib_per_s": [round(r, 1) for r in rates]}


def _steps_per_s(run: rl.LocalRun) -> float:
    log = m.load(run.log_path.read_text(errors="replace"), run.metrics_path.read_text())
    times = [s.seconds for s in log.steps if s.step >= 2 and s.seconds]
    return 1.0 / statistics.median(times)


def bench_runs(url: str, venv: Path, steps: int, repeats: int) -> dict:
    spec = _spec(uuid.uuid4().hex[:8])
    local_bucket.ensure_buckets(url, spec)
    local_bucket.grant_buckets(url, spec)
    client = local_bucket.SERVICE.client(url)
    d = spec.datasets[0]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        _make(venv, src, records=3000, shards=2)
        plan_up = up.plan_upload(spec, d, src)
        up.upload(client, d, plan_up)
        real, synthetic, vocab = [], [], None
        for i in range(repeats):
            plain = Overrides(slices=1, steps=steps, name=f"bench-data-{i}", sets=("enable_checkpointing=false",))
            plan = plan_run("maxtext-6b", spec, plain, rand="loc")
            reads = plan_run("maxtext-6b", spec, dataclasses.replace(plain, dataset=d.name), rand="loc")
            root = Path(tmp) / f"mnt-{i}" / "data"
            with local_read.reading(spec, reads, client, url, root, venv) as data:
                vocab = data.vocab_size
                out = Path(tmp) / f"real-{i}"
                real.append(_steps_per_s(rl.run_tiny(reads, venv, out, data=data)))
            out = Path(tmp) / f"synthetic-{i}"
            synthetic.append(_steps_per_s(rl.run_tiny(plan, venv, out, data=rl.LocalData({}, vocab))))
            shutil.rmtree(Path(tmp) / f"real-{i}", ignore_errors=True)
    return {
        "steps": steps,
        "vocab_size": vocab,
        "reader": access.team_member(spec, spec.teams[0]),
        "real_steps_per_s_median": round(statistics.median(real), 2),
        "synthetic_steps_per_s_median": round(statistics.median(synthetic), 2),
        "real_steps_per_s": [round(x, 2) for x in real],
        "synthetic_steps_per_s": [round(x, 2) for x in synthetic],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--upload-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip-runs", action="store_true")
    a = ap.parse_args()
    venv = mx.locate()
    start = time.monotonic()
    with running_emulator() as url:
        out = {"upload": bench_upload(url, venv, a.upload_mib, a.repeats)}
        if not a.skip_runs:
            out["tiny_run"] = bench_runs(url, venv, a.steps, a.repeats)
    out["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
