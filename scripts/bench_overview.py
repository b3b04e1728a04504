#!/usr/bin/env python3
"""How long ``list`` and ``queues status`` take on a local cluster holding hundreds of runs (not a test).

    $venv/bin/python scripts/bench_overview.py [--runs 200] [--repeat 3] [--keep] [-o json]

1. starts a local cluster of its own (state dir ``$TGK_CACHE/local-cluster/bench-overview``,
   examples/default.yaml), unless one is already up there;
2. submits ``--runs`` one-slice maxtext-6b runs through the run service (``runs.apply``: the
   rehearsal's decoration, the identity written to the cluster's bucket), as ``submit
   --no-wait`` does: the team's quota admits two at a time, the rest queue in Kueue;
3. times, each in a fresh process (a user's command is one), the median of ``--repeat``, wall
   and CPU: ``python -m workloads list``, ``list -o json`` (with its request count), ``queues
   status`` and ``list --wide`` (one log read per started run); then the service calls alone in
   this process, and ``list --help`` (what starting the interpreter and the CLI costs);
4. takes the cluster down (``--keep`` leaves it, and the runs, up).

The request count is the point as much as the time: it must not grow with the runs
(one list call per kind). The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.spec import DEFAULT_SPEC_PATH, load_spec  # noqa: E402
from toolkit.paths import cache_dir  # noqa: E402
from workloads.local.controlplane import LocalCluster  # noqa: E402


def log(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def timed(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float, str]:
    """Median wall and CPU (user + system) seconds of ``repeat`` fresh processes, and the last one's stdout.

    CPU time is the process's own (``wait4``): a loaded machine stretches the wall time far
    more than the work, so both are printed.
    """
    import tempfile

    walls, cpus, out = [], [], ""
    for _ in range(repeat):
        with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "workloads", *argv], env=env, stdout=so, stderr=se, cwd=REPO)
            _, status, usage = os.wait4(proc.pid, 0)
            walls.append(time.monotonic() - t0)
            cpus.append(usage.ru_utime + usage.ru_stime)
            so.seek(0)
            se.seek(0)
            rc = os.waitstatus_to_exitcode(status)
            if rc != 0:
                raise SystemExit(f"{' '.join(argv)} failed ({rc}): {se.read().decode(errors='replace')[-2000:]}")
            out = so.read().decode()
    return statistics.median(walls), statistics.median(cpus), out


def in_process(kubeconfig: Path, repeat: int) -> dict[str, float]:
    """The service calls alone (no interpreter start, no imports): median seconds of ``list_runs`` and ``queue_status``."""
    from workloads.cluster.client import Cluster
    from workloads.runs import overview

    cluster = Cluster.connect(kubeconfig)
    sc = overview.scope(load_spec(DEFAULT_SPEC_PATH))
    out: dict[str, float] = {}
    for name, call in (
        ("list_runs_s", lambda: overview.list_runs(cluster, sc, now=time.time())),
        ("queue_status_s", lambda: overview.queue_status(cluster, sc)),
    ):
        times = []
        for _ in range(repeat):
            t0 = time.monotonic()
            call()
            times.append(time.monotonic() - t0)
        out[name] = statistics.median(times)
    return out


def submit_many(kubeconfig: Path, runs: int) -> float:
    from workloads import runs as service
    from workloads.cluster.client import Cluster
    from workloads.planning.overrides import Overrides

    spec = load_spec(DEFAULT_SPEC_PATH)
    cluster = Cluster.connect(kubeconfig)
    have = {r["metadata"]["name"] for r in cluster.list(cluster.resource("jobset.x-k8s.io/v1alpha2", "JobSet"), None)}
    t0 = time.monotonic()
    for i in range(runs):
        name = f"bench-{i:04d}"
        if name in have:
            continue
        plan = service.plan("maxtext-6b", spec, Overrides(slices=1, name=name))
        service.apply(cluster, plan, rehearse_seconds=3600.0)
        if (i + 1) % 50 == 0:
            log(f"submitted {i + 1}/{runs}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the cluster and its runs up")
    ap.add_argument("--state-dir", type=Path, default=cache_dir() / "local-cluster" / "bench-overview")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()

    a.state_dir.mkdir(parents=True, exist_ok=True)
    (a.state_dir / ".tgk-local-state").touch()
    lc = LocalCluster(state_dir=a.state_dir, progress=log)
    t0 = time.monotonic()
    lc.up(load_spec(DEFAULT_SPEC_PATH), spec_path=str(DEFAULT_SPEC_PATH), build=False)
    log(f"local cluster up in {time.monotonic() - t0:.0f} s ({lc.kubeconfig})")
    env = {**os.environ, "KUBECONFIG": str(lc.kubeconfig)}
    try:
        submitted = submit_many(lc.kubeconfig, a.runs)
        log(f"{a.runs} runs there ({submitted:.0f} s to submit the missing ones)")
        time.sleep(5)  # Kueue has made every Workload and admitted what fits
        figures: dict[str, object] = {"runs": a.runs, "repeat": a.repeat}
        figures["list_s"], figures["list_cpu_s"], _ = timed(["list"], env, a.repeat)
        figures["list_json_s"], _, out = timed(["list", "-o", "json"], env, a.repeat)
        doc = json.loads(out)
        figures["list_rows"] = len(doc["runs"])
        figures["list_requests"] = doc["requests"]
        figures["list_states"] = {s: sum(r["state"] == s for r in doc["runs"]) for s in sorted({r["state"] for r in doc["runs"]})}
        figures["queues_status_s"], figures["queues_status_cpu_s"], out = timed(["queues", "status", "-o", "json"], env, a.repeat)
        q = json.loads(out)
        figures["queues_status_requests"] = q["requests"]
        figures["queues_pending_rows"] = len(q["pending"])
        figures["list_wide_s"], _, out = timed(["list", "--wide", "-o", "json"], env, 1)
        figures["list_wide_logs_read"] = sum(r["state"] not in ("Queued", "Suspended") for r in json.loads(out)["runs"])
        figures.update(in_process(lc.kubeconfig, a.repeat))
        figures["help_s"], figures["help_cpu_s"], _ = timed(["list", "--help"], env, a.repeat)  # the interpreter and the CLI alone
        figures["load_average"] = os.getloadavg()
    finally:
        if not a.keep:
            lc.down()
            log("local cluster down")
    if a.output == "json":
        print(json.dumps(figures, indent=2))
        return
    print(f"{a.runs} runs on the local cluster ({figures['list_states']}), median of {a.repeat} fresh processes:")
    print(f"  list                {figures['list_s']:.2f} s   ({figures['list_requests']} list requests for {figures['list_rows']} runs)")
    print(f"  list -o json        {figures['list_json_s']:.2f} s")
    print(
        f"  queues status       {figures['queues_status_s']:.2f} s   ({figures['queues_status_requests']} requests, {figures['queues_pending_rows']} waiting runs)"
    )
    print(f"  list --wide         {figures['list_wide_s']:.2f} s   ({figures['list_wide_logs_read']} logs read, one run)")
    print(f"  load average        {' '.join(f'{x:.1f}' for x in figures['load_average'])}")


if __name__ == "__main__":
    main()
