#!/usr/bin/env python3
"""Benchmark: converting a tiny Hugging Face model to MaxText's format, and the tiny fine-tuning run's loss (not a test).

    $venv/bin/python scripts/bench_finetune.py [--repeat 3] [--steps 12] [--skip-sft] [-o json]

The path tests/maxtext/test_sft.py takes (its spec, chat template and conversations), with real
MaxText 0.2.5 on CPU in its pinned venv:

1. a tiny Llama in Hugging Face's layout (tests/maxtext/write_hf_llama.py: 2 layers, width 64,
   the vocabulary of the spec's Hugging Face tokenizer rounded up as ``run-local --tiny`` sizes it);
2. ``python -m workloads convert llama3.1-8b-sft --from HF --local --tiny --out DIR`` in a fresh
   process, ``--repeat`` times, each into a new directory: median wall and CPU (the process and
   its children: MaxText's converter runs in the venv's python), and the checkpoint it wrote;
3. ``python -m workloads run-local llama3.1-8b-sft --tiny --steps N --dataset chat
   --load-parameters CKPT``: MaxText's SFT trainer (train_sft_native) reading 3,000 conversations
   through a gcsfuse mount of the local Cloud Storage server's bucket, starting from the converted
   weights; the loss of every step (``metrics.jsonl``) and the run's wall time.

The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.maxtext.test_sft import CONVERSATIONS, _doc  # noqa: E402
from tests.support.cli import run_module  # noqa: E402
from tests.support.gcs_emulator import running_emulator  # noqa: E402
from tests.support.hf_weights import write_hf  # noqa: E402
from tests.support.specs import spec_from  # noqa: E402
from toolkit.paths import CACHE_ENV_VAR, cache_dir  # noqa: E402
from workloads.data import tokenizer  # noqa: E402
from workloads.local import bucket as local_bucket  # noqa: E402
from workloads.maxtext import env as mx  # noqa: E402
from workloads.maxtext.run_local import tiny_vocab  # noqa: E402


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def timed(*args: str, env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """A fresh ``python -m workloads`` process: its result, wall seconds and CPU seconds (it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = run_module("workloads", *args, env=env, timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"bench: workloads {args[0]} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return done, wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="conversions, each a fresh process into a new directory")
    ap.add_argument("--steps", type=int, default=12, help="steps of the fine-tuning run")
    ap.add_argument("--skip-sft", action="store_true", help="time the conversion only")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = ap.parse_args()

    venv = mx.locate()
    tmp = Path(tempfile.mkdtemp(prefix="tgk-bench-finetune-"))
    doc = _doc(uuid.uuid4().hex[:8])
    sp = tmp / "spec.yaml"
    sp.write_text(yaml.safe_dump(doc))
    spec = spec_from(doc)
    vocab = tiny_vocab(tokenizer.check(None, spec, spec.datasets[0], venv=venv).ids)
    hf = write_hf(venv, tmp / "hf", vocab=vocab, scale=0.5)
    out: dict = {"measured": time.strftime("%Y-%m-%d"), "vocab": vocab, "hf_bytes": sum(f.stat().st_size for f in hf.iterdir())}

    walls, cpus, ckpt = [], [], ""
    for i in range(args.repeat):
        done, wall, cpu = timed(
            "convert", "llama3.1-8b-sft", "--from", str(hf), "--local", "--tiny", "--out", str(tmp / f"base-{i}"),
            "--set", "scan_layers=false", "--set", f"vocab_size={vocab}", "--spec", str(sp), "-o", "json",
        )  # fmt: skip
        ckpt = json.loads(done.stdout)["conversion"]["checkpoint"]
        walls.append(wall)
        cpus.append(cpu)
        log(f"convert {i + 1}: wall {wall:.1f} s, CPU {cpu:.1f} s")
    out["convert"] = {
        "n": len(walls),
        "wall_p50": round(statistics.median(walls), 1),
        "wall_min": round(min(walls), 1),
        "wall_max": round(max(walls), 1),
        "cpu_p50": round(statistics.median(cpus), 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }

    if not args.skip_sft:
        data = tmp / "chat"
        made = subprocess.run([str(mx.python(venv)), "-c", CONVERSATIONS, str(data)], capture_output=True, text=True, timeout=300, check=False)
        if made.returncode != 0:
            raise SystemExit(f"bench: the conversations could not be written: {made.stderr[-1500:]}")
        run_out = tmp / "sft"
        with running_emulator() as url:
            # A HOME of its own (no gcloud credentials of the user's), the shared cache and MaxText venv kept.
            env = {"STORAGE_EMULATOR_HOST": url, "KUBECONFIG": "", "HOME": str(tmp), CACHE_ENV_VAR: str(cache_dir()), "TGK_MAXTEXT_VENV": str(venv)}
            local_bucket.ensure_buckets(url, spec)
            local_bucket.grant_buckets(url, spec)
            timed("data", "upload", str(data), "--dataset", "chat", "--spec", str(sp), "-o", "json", env=env)
            _, wall, cpu = timed(
                "run-local", "llama3.1-8b-sft", "--tiny", "--steps", str(args.steps), "--out", str(run_out), "--spec", str(sp),
                "--dataset", "chat", "--load-parameters", ckpt, "--set", "scan_layers=false", "--set", "learning_rate=0.003", "-o", "json",
                env=env,
            )  # fmt: skip
        losses = [json.loads(line)["learning/loss"] for line in (run_out / "metrics.jsonl").read_text().splitlines()]
        out["sft"] = {
            "steps": len(losses),
            "loss_first": round(losses[0], 3),
            "loss_last": round(losses[-1], 3),
            "losses": [round(x, 3) for x in losses],
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }

    if args.output == "json":
        print(json.dumps(out, indent=2))
        return 0
    c = out["convert"]
    print(f"{out['measured']}: tiny Llama (vocab {vocab}, {out['hf_bytes'] / 1e6:.1f} MB of safetensors)")
    print(
        f"  convert --local --tiny   wall {c['wall_p50']} s [{c['wall_min']}-{c['wall_max']}] n={c['n']}, CPU {c['cpu_p50']} s (load {c['load_average'][0]:.1f})"
    )
    if s := out.get("sft"):
        print(
            f"  SFT run-local --tiny     loss {s['loss_first']} -> {s['loss_last']} over {s['steps']} steps, wall {s['wall_s']} s (load {s['load_average'][0]:.1f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
