#!/usr/bin/env python3
"""A bad host and a hang on the local cluster: time to detection, to every worker Running again, and steps redone.

    python scripts/bench_faults.py [--samples 3] [--state-dir DIR] [--seconds 40]

Each sample submits a fresh one-slice run of maxtext-6b (the default spec's v5e-16 pools: two
slices' worth of node pools, so a slice has somewhere else to go) and, once it trains:

- bad host: ``local badhost`` on one of its VMs (the event); then polls ``badhost``'s
  verdict (``workloads.runs.badhost.examine``, the same the command reads) until it names the
  VM (detection) and applies ``--cordon`` at once, as an operator or a cron job would; then
  waits for every worker of a new attempt Running on other VMs (recovered). The run restarts
  in a loop meanwhile, which is what the detection ends.
- hang: ``local hang`` on worker 0 (the event); detection is the first workload container
  that ended with the exit guard's 124; recovered is every worker of the next attempt Running.

Steps redone are the run's, from ``metrics`` (Cloud Logging's attempts) once it has finished.
Times are wall seconds on the local cluster, where a run's clock is scaled by the rehearsal's
time factor (the hang bound too: the plan's 240 s is a few seconds here); a line says each
run's factor. Everything it marked (the bad node's annotation, cordon, taint and pool label) it
clears after each sample. The local cluster must be up (``local up --state-dir DIR``).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolkit.names import GKE_NODEPOOL_LABEL, TGK_DEGRADED_SLICE_LABEL  # noqa: E402
from workloads.cluster.client import Cluster  # noqa: E402
from workloads.local import faults as localfaults  # noqa: E402
from workloads.runs import badhost  # noqa: E402

NS = "research"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def wl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workloads", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def wait(pred, timeout: float, what: str, interval: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")


def running(c: Cluster, run: str, *, not_on: str | None = None, attempt_above: int = -1) -> list[dict] | None:
    pods = [p for p in c.pods(NS, run) if not p["metadata"].get("deletionTimestamp")]
    live = [p for p in pods if p["status"].get("phase") == "Running" and int(p["metadata"]["labels"].get(ATTEMPT, "0")) > attempt_above]
    if len(live) == 4 and all(p["spec"].get("nodeName") != not_on for p in live):
        return live
    return None


def last_step(c: Cluster, run: str) -> int:
    pod = c.find_pod(NS, run, slice_index=0, worker=0)
    try:
        text = "\n".join(c.logs(NS, pod["metadata"]["name"])) if pod else ""
    except Exception:
        return -1
    import re

    steps = re.findall(r"completed step: ([0-9]+),", text)
    return int(steps[-1]) if steps else -1


def finish_and_redone(c: Cluster, kubeconfig: str, run: str) -> tuple[int, float, float]:
    wait(lambda: (c.jobset(NS, run) or {}).get("status", {}).get("terminalState") or _done(c, run), 400, f"{run} to finish", 1.0)
    met = wl("metrics", run, "--pool", "v5e-16", "-o", "json", "--kubeconfig", kubeconfig)
    g = json.loads(met.stdout)["goodput"] if met.returncode == 0 else {}
    return int(g.get("steps_redone", -1)), float(g.get("hang", 0.0)), float(g.get("goodput") or 0.0)


def _done(c: Cluster, run: str) -> bool:
    js = c.jobset(NS, run) or {}
    return any(x.get("type") in ("Completed", "Failed") and x.get("status") == "True" for x in (js.get("status") or {}).get("conditions") or [])


def clear_node(c: Cluster, node: str) -> None:
    info = c.resource("v1", "Node")
    obj = c.get(info, node) or {}
    pool = ((obj.get("metadata") or {}).get("labels") or {}).get(GKE_NODEPOOL_LABEL)
    taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if t.get("key") != badhost.BAD_HOST_TAINT_KEY]
    c.request(
        "PATCH",
        info.path(None, node),
        body={"spec": {"unschedulable": None, "taints": taints}, "metadata": {"annotations": {localfaults.BAD_HOST_ANNOTATION: None}}},
        content_type="application/merge-patch+json",
    )
    for n in c.list(info, None, label_selector=f"{GKE_NODEPOOL_LABEL}={pool}"):
        c.request(
            "PATCH",
            info.path(None, n["metadata"]["name"]),
            body={"metadata": {"labels": {TGK_DEGRADED_SLICE_LABEL: None}}},
            content_type="application/merge-patch+json",
        )


def submit(kubeconfig: str, run: str, seconds: float) -> None:
    r = wl("submit", "maxtext-6b", "--slices", "1", "--name", run, "--rehearse-seconds", str(seconds), "--max-restarts", "20", "--kubeconfig", kubeconfig)
    if r.returncode:
        raise SystemExit(f"submit {run} failed: {r.stderr.strip()[-400:]}")


def bad_host_sample(c: Cluster, kubeconfig: str, run: str, seconds: float) -> dict | None:
    submit(kubeconfig, run, seconds)
    pods = wait(lambda: running(c, run), 180, "every worker Running")
    wait(lambda: last_step(c, run) >= 10, 120, "step 10", 0.3)
    node = pods[-1]["spec"]["nodeName"]  # not worker 0's VM: the verdict must not lean on worker 0
    t0 = time.monotonic()
    localfaults.bad_host(c, node)
    history = badhost.cloud_logging_history(c, _spec, NS, _logging)

    def named_or_gone():
        e = badhost.examine(c, NS, run, history=history)
        if e.verdict.node:
            return e
        # The scheduler may place the restarted slice on the other pool by itself: no loop to end.
        return "moved" if _done(c, run) or _pool_changed(c, run, node) else None

    examined = wait(named_or_gone, 300, "badhost to name the VM", 0.5)
    detected = time.monotonic() - t0
    if examined == "moved":
        finish_and_redone(c, kubeconfig, run)
        clear_node(c, node)
        return None
    assert examined.verdict.node == node, (examined.verdict, node)
    attempt = max(int(p["metadata"]["labels"].get(ATTEMPT, "0")) for p in c.pods(NS, run)) if c.pods(NS, run) else 0
    badhost.act(c, examined, cordon=True, report=False, dry_run=False)
    wait(lambda: running(c, run, not_on=node, attempt_above=attempt - 1) if _pool_changed(c, run, node) else None, 300, "every worker Running off the bad pool")
    back = time.monotonic() - t0
    restarts = int((c.jobset(NS, run) or {}).get("status", {}).get("restarts") or 0)
    redone, _, good = finish_and_redone(c, kubeconfig, run)
    clear_node(c, node)
    return {"detect_s": detected, "running_s": back, "steps_redone": redone, "restarts": restarts, "goodput": good}


def _pool_changed(c: Cluster, run: str, node: str) -> bool:
    info = c.resource("v1", "Node")
    bad_pool = ((c.get(info, node) or {}).get("metadata", {}).get("labels") or {}).get(GKE_NODEPOOL_LABEL)
    nodes = {p["spec"].get("nodeName") for p in c.pods(NS, run) if p["status"].get("phase") == "Running"}
    pools = {((c.get(info, n) or {}).get("metadata", {}).get("labels") or {}).get(GKE_NODEPOOL_LABEL) for n in nodes if n}
    return bool(pools) and bad_pool not in pools


def hang_sample(c: Cluster, kubeconfig: str, run: str, seconds: float) -> dict:
    submit(kubeconfig, run, seconds)
    wait(lambda: running(c, run), 180, "every worker Running")
    wait(lambda: last_step(c, run) >= 10, 120, "step 10", 0.3)
    t0 = time.monotonic()
    localfaults.hang(c, NS, run)

    def ended() -> bool:
        for p in c.pods(NS, run):
            for cs in p["status"].get("containerStatuses") or []:
                if ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 124:
                    return True
        return False

    wait(ended, 300, "the exit guard to end the hung attempt", 0.1)
    detected = time.monotonic() - t0
    wait(lambda: running(c, run, attempt_above=0), 300, "every worker of the next attempt Running")
    back = time.monotonic() - t0
    redone, hang_s, good = finish_and_redone(c, kubeconfig, run)
    return {"detect_s": detected, "running_s": back, "steps_redone": redone, "hang_badput_s": hang_s, "goodput": good}


def _spec():
    from infra.spec import DEFAULT_SPEC_PATH, load_spec

    return load_spec(DEFAULT_SPEC_PATH)


def _logging(cluster, project):
    from workloads.runs import hooks

    return hooks.logging_client(hooks.for_context(cluster.context), cluster, project)


def summary(name: str, rows: list[dict]) -> None:
    print(f"\n{name}: {len(rows)} samples")
    for key in rows[0]:
        vals = [r[key] for r in rows]
        fmt = (lambda v: f"{v:.1f}") if isinstance(vals[0], float) else str
        print(f"  {key:<14} median {fmt(statistics.median(vals))}  min {fmt(min(vals))}  max {fmt(max(vals))}   ({', '.join(fmt(v) for v in vals)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40.0, help="each run's rehearsal seconds")
    ap.add_argument("--state-dir", type=Path, default=Path(os.environ.get("TGK_LOCAL_TEST_STATE", "")) if os.environ.get("TGK_LOCAL_TEST_STATE") else None)
    ap.add_argument("--only", choices=("badhost", "hang"))
    a = ap.parse_args()
    from workloads.local.controlplane import LocalCluster
    from workloads.local.state import default_state_dir

    lc = LocalCluster(a.state_dir or default_state_dir())
    kubeconfig = str(lc.kubeconfig)
    c = Cluster.connect(Path(kubeconfig), None)
    tag = os.urandom(2).hex()
    print(f"local cluster {lc.state_dir}; runs of maxtext-6b, 1 slice, {a.seconds:g} s of rehearsal each")
    for kind, fn in (("badhost", bad_host_sample), ("hang", hang_sample)):
        if a.only and a.only != kind:
            continue
        rows: list[dict] = []
        for i in range(3 * a.samples):
            if len(rows) == a.samples:
                break
            run = f"bf-{kind[:2]}-{tag}-{i}"
            row = fn(c, kubeconfig, run, a.seconds)
            c.delete_jobset(NS, run)
            wait(lambda run=run: not c.pods(NS, run), 120, f"{run}'s pods to go")
            if row is None:
                print(f"  {kind} try {i}: the restarted slice landed on the other pool by itself (no loop); not a sample", flush=True)
                continue
            rows.append(row)
            print(f"  {kind} sample {len(rows) - 1}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
        summary(kind, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
