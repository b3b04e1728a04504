#!/usr/bin/env python3
"""Benchmark: how fast a disrupted multislice run is training again on the local control plane, by restart path.

For each restart path (JobSet's Recreate; JobSet's in-place restart with its real agent) and each
disruption, a 2-slice maxtext-6b rehearsal (submitted through `python -m workloads submit
--restart PATH`, long enough to outlast the samples) is disrupted N times, and each sample times:

  running     disruption -> every worker of the run's next attempt running (pods Running on a
              recreate; every agent's barrier down and the program started in place), read from
              the rehearsal daemon's book of the run (the moment the attempt's clock started)
  first step  disruption -> the next attempt's first completed step in worker 0's log (that
              includes the rehearsal's restore and its compile-slow first step, at the time factor)

Disruptions:

  crash       one worker's program exits 137, its VM stays (`local crash`)
  preempt     a slice's node pool preempted, its nodes back at once (`local preempt --replace-after 0`):
              the control plane's own part
  replaced    a slice preempted while its nodes are being replaced (`--replace-after R`, default 20 s):
              the run waits for them in every path

What the local control plane cannot show: GKE's VM provisioning, image pulls, a real program's
start and restore. Those come from published figures in scripts/bench_spot_goodput.py, which
takes these numbers (`--output json` here, `--measured FILE` there).

Runs in its own state dir (default $TGK_CACHE/local-cluster/bench-recovery-state) with a spec
whose runs may restart in place, and takes the cluster down at the end. Usage:

  $venv/bin/python scripts/bench_recovery.py [--samples 5] [--paths recreate in-place]
      [--disruptions crash preempt replaced] [--replace-after 20] [--output json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import DEFAULT_SPEC_PATH, load_spec  # noqa: E402
from toolkit.names import JOBSET_NAME_LABEL  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.cluster.client import Cluster  # noqa: E402
from workloads.local import CONTEXT  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402
from workloads.local.disrupt import crash, preempt  # noqa: E402
from workloads.local.rehearsal import time_factor  # noqa: E402

NS = "research"
_STEP = "completed step: "


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "p50": round(statistics.median(s), 2), "min": round(s[0], 2), "max": round(s[-1], 2)}


def absl_time(line: str) -> float | None:
    """The wall time of a rehearsal log line (CRI record: RFC 3339 first)."""
    try:
        stamp = line.split(" ", 1)[0]
        return datetime.strptime(stamp[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class Run:
    def __init__(self, lc: LocalCluster, kube: Cluster, name: str, path: str, spec_file: Path) -> None:
        self.lc, self.kube, self.name, self.path, self.spec_file = lc, kube, name, path, spec_file

    def submit(self, samples: int) -> None:
        # Every sample is a restart; a crash (exit 137, no disruption) and every in-place restart count
        # against maxRestarts, whose default for a recreate run (3 on spot) would fail it before the samples end.
        sub = subprocess.run(
            [sys.executable, "-m", "workloads", "submit", "maxtext-6b", "--slices", "2", "--name", self.name, "--restart", self.path,
             "--max-restarts", str(2 * samples + 10),
             "--rehearse-seconds", "3600", "--spec", str(self.spec_file), "--kubeconfig", str(self.lc.kubeconfig)],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if sub.returncode != 0:
            raise SystemExit(f"bench: submit failed: {sub.stderr.strip().splitlines()[-1:]}")

    def book(self) -> dict:
        js = self.kube.jobset(NS, self.name) or {}
        uid = (js.get("metadata") or {}).get("uid", "")
        try:
            return json.loads((self.lc.state_dir / "rehearsal" / "runs" / f"{uid}.json").read_text())
        except (OSError, ValueError):
            return {}

    def attempts(self) -> dict[str, dict]:
        return self.book().get("attempts") or {}

    def first_step_after(self, attempt: str, t_after: float) -> float | None:
        """The wall time of the first completed step logged after ``t_after`` by worker 0 (slice 0, index 0) of the attempt."""
        clock = self.attempts().get(attempt) or {}
        if "t0" not in clock:
            return None
        pods = self.kube.list(self.kube.resource("v1", "Pod"), NS, label_selector=f"{JOBSET_NAME_LABEL}={self.name}")
        for p in pods:
            ann = p["metadata"].get("annotations") or {}
            if ann.get("jobset.sigs.k8s.io/job-index") == "0" and ann.get("batch.kubernetes.io/job-completion-index") == "0":
                f = self.lc.state_dir / "pod-logs" / NS / f"{p['metadata']['name']}.log"
                try:
                    lines = f.read_text(errors="replace").splitlines()
                except OSError:
                    continue
                for ln in lines:
                    if _STEP in ln and (t := absl_time(ln)) is not None and t > t_after:
                        return t
        return None


class Stalled(Exception):
    """A sample waited past its timeout: the run did not recover (reported with the samples before it)."""


def wait(check, timeout: float, what: str, interval: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise Stalled(f"timed out after {timeout:.0f} s waiting for {what}")


def sample(run: Run, disruption: str, i: int, replace_after: float) -> tuple[float, float]:
    before = set(run.attempts())
    t_wall = time.time()
    if disruption == "crash":
        crash(run.kube, run.lc.state_dir, NS, run.name, i % 2, 0, exit_code=137)
    else:
        preempt(run.kube, run.lc.state_dir, NS, run.name, i % 2, replace_after=0.0 if disruption == "preempt" else replace_after)

    def new_attempt() -> str | None:
        new = [a for a, c in run.attempts().items() if a not in before and "joined_at" in c]
        return new[0] if new else None

    attempt = wait(new_attempt, 120 + replace_after, "the next attempt's workers all running")
    joined = float(run.attempts()[attempt]["joined_at"])
    first = wait(lambda: run.first_step_after(attempt, joined), 120, "the next attempt's first step")
    return joined - t_wall, first - t_wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=5, help="disruptions per path and kind (at least 5)")
    ap.add_argument("--paths", nargs="+", default=["recreate", "in-place"], choices=["recreate", "in-place"])
    ap.add_argument("--disruptions", nargs="+", default=["crash", "preempt", "replaced"], choices=["crash", "preempt", "replaced"])
    ap.add_argument("--replace-after", type=float, default=20.0, help="seconds the replaced slice's nodes take to come back (replaced)")
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--keep-up", action="store_true", help="leave the cluster up at the end")
    ap.add_argument("--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    if args.samples < 5:
        ap.error("--samples: at least 5 (the figure is a median)")

    doc = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())
    doc = copy.deepcopy(doc)
    doc["recovery"] = {"restart": "in-place"}  # the cluster takes both paths; each run says which
    spec_file = Path(tempfile.mkdtemp(prefix="tgk-bench-recovery-")) / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    spec = load_spec(spec_file)
    lc = LocalCluster(args.state_dir or cache_dir() / "local-cluster" / "bench-recovery-state", progress=log)
    lc.down()
    out: dict = {
        "measured": time.strftime("%Y-%m-%d"),
        "time_factor": time_factor(),
        "replace_after_s": args.replace_after,
        "load_average": list(__import__("os").getloadavg()),
        "paths": {},
    }
    try:
        lc.up(spec, spec_path=str(spec_file), build=False)
        kube = Cluster.connect(lc.kubeconfig, CONTEXT, timeout=30)
        for path in args.paths:
            out["paths"][path] = {}
            for disruption in args.disruptions:
                run = Run(lc, kube, f"bench-{path[:2]}-{disruption[:4]}", path, spec_file)
                run.submit(args.samples)
                wait(lambda run=run: "0" in run.attempts() or any("joined_at" in c for c in run.attempts().values()), 300, "the first attempt running")
                time.sleep(2)
                running, first, row = [], [], {}
                for i in range(args.samples):
                    try:
                        a, b = sample(run, disruption, i, args.replace_after)
                    except Stalled as e:  # the samples so far stand; the stall is a finding, said beside them
                        row["stalled"] = f"sample {i + 1}: {e}"
                        log(f"{path} {disruption} sample {i + 1}: {e}")
                        break
                    running.append(a)
                    first.append(b)
                    log(f"{path} {disruption} sample {i + 1}: all workers running {a:.2f} s, first new step {b:.2f} s")
                    time.sleep(1)
                if running:
                    row |= {"to_all_running_s": stats(running), "to_first_step_s": stats(first)}
                out["paths"][path][disruption] = row
                js = kube.jobset(NS, run.name) or {}
                out["paths"][path][disruption]["jobset_status"] = {
                    k: (js.get("status") or {}).get(k)
                    for k in ("restarts", "restartsCountTowardsMax", "currentInPlaceRestartAttempt", "previousInPlaceRestartAttempt")
                }
                kube.delete_jobset(NS, run.name)
    finally:
        if not args.keep_up:
            lc.down()

    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print(f"local control plane, time factor {out['time_factor']}, measured {out['measured']} (load {out['load_average'][0]:.1f}); p50 [min-max] s")
        for path, kinds in out["paths"].items():
            for kind, v in kinds.items():
                if "to_all_running_s" in v:
                    r, f = v["to_all_running_s"], v["to_first_step_s"]
                    print(
                        f"  {path:<9} {kind:<9} all running {r['p50']:>6.2f} [{r['min']:.2f}-{r['max']:.2f}]   "
                        f"first step {f['p50']:>6.2f} [{f['min']:.2f}-{f['max']:.2f}]  n={r['n']}"
                    )
                if "stalled" in v:
                    print(f"  {path:<9} {kind:<9} STALLED at {v['stalled']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
