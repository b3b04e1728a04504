"""``python -m workloads local up | down | status | preempt``: the simulated GKE TPU cluster.

A real control plane (etcd, kube-apiserver, controller-manager, scheduler) plus
kwok-simulated TPU nodes, JobSet and Kueue, all on 127.0.0.1, built from the Go
module proxy by scripts/build-local-cluster.sh. Only typer and the shared CLI
options are imported here; workloads.local loads when a command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, make_app, print_json
from workloads.cli import Output, SpecOpt, app, check_out_dir
from workloads.planning.defaults import INT32_MAX, MAX_WAIT_S

local_app = make_app("local", "A simulated GKE TPU cluster on a real local control plane (kwok nodes, JobSet, Kueue).")
app.add_typer(local_app, name="local")

StateDirOpt = Annotated[
    Optional[Path],
    typer.Option("--state-dir", help="where pki, logs, pid files and the kubeconfig live (default $TGK_CACHE/local-cluster/state)"),
]

FleetOpt = Annotated[
    Optional[Path],
    typer.Option("--fleet", help="a fleet file: a MultiKueue manager and one control plane per worker, each its own state dir under --state-dir"),
]
FleetFlag = Annotated[bool, typer.Option("--fleet", help="the local fleet in --state-dir (default $TGK_CACHE/local-cluster/fleet)")]


def _progress(msg: str) -> None:
    sys.stderr.write(f"[local] {msg}\n")
    sys.stderr.flush()


def _cluster(state_dir: Path | None, quiet: bool = False):
    from workloads.local.controlplane import LocalCluster
    from workloads.local.state import default_state_dir

    return LocalCluster(state_dir or default_state_dir(), progress=(lambda m: None) if quiet else _progress)


def _print_status(st: dict, output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(st)
        return
    lines = [f"state:      {st['state']}", f"state dir:  {st['state_dir']}"]
    if st.get("server"):
        lines += [
            f"server:     {st['server']} ({st.get('version')})",
            f"nodes:      {st.get('nodes_ready')}/{st.get('nodes')} Ready",
            f"spec:       {st.get('spec')}",
        ]
    for name, d in st["daemons"].items():
        lines.append(f"  {name:<24} {'running pid ' + str(d['pid']) if d['running'] else 'stopped':<20} {d['rss_mib']:>8} MiB")
    lines.append(f"control plane RSS: {st['rss_mib_total']} MiB")
    if st.get("kubeconfig"):
        lines.append(f"kubeconfig: {st['kubeconfig']}")
    sys.stdout.write("\n".join(lines) + "\n")


@local_app.command("up")
def up(
    spec: SpecOpt = None,
    state_dir: StateDirOpt = None,
    build: Annotated[bool, typer.Option("--build/--no-build", help="build missing binaries first (cold: ~25 min)")] = True,
    timeout: Annotated[float, typer.Option("--timeout", min=1, max=MAX_WAIT_S, help="seconds to wait for each component")] = 300.0,
    with_: Annotated[
        Optional[list[str]],
        typer.Option(
            "--with",
            metavar="ADDON",
            help="optional add-on to run too: 'ray' (KubeRay v1.6.0 and a stand-in Ray head; also on when the spec turns the Ray add-on on)",
        ),
    ] = None,
    output: Output = OutputFormat.text,
    fleet: FleetOpt = None,
) -> None:
    """Start the local cluster (or reuse a healthy one) with nodes from the spec; print the kubeconfig."""
    from infra.spec import load_spec, spec_path
    from toolkit.errors import ToolkitError

    unknown = [a for a in (with_ or []) if a != "ray"]
    if unknown:
        raise ToolkitError(f"--with {unknown[0]}: unknown add-on — the local cluster offers only --with ray")
    if fleet is not None:
        if with_:
            raise ToolkitError("--with: a local fleet runs no add-ons — leave out --with or --fleet")
        _fleet_up(fleet, state_dir, build, timeout, output)
        return
    env = load_spec(spec)
    if state_dir is not None:
        check_out_dir(state_dir, "--state-dir")
    st = _cluster(state_dir).up(env, spec_path=str(spec_path(spec)), build=build, timeout=timeout, with_ray="ray" in (with_ or []))
    if output is OutputFormat.json:
        print_json(st)
    else:
        sys.stdout.write(f"{st['kubeconfig']}\n")


def _fleet_up(path: Path, state_dir: Path | None, build: bool, timeout: float, output: OutputFormat) -> None:
    """A manager and every worker of the fleet file, each its own control plane; then the MultiKueue wiring."""
    from infra.fleet import load_fleet
    from workloads.local.fleet import LocalFleet, default_root
    from workloads.runs.fleet import apply_fleet, wait_active

    f = load_fleet(path)  # refused before anything starts
    if state_dir is not None:
        check_out_dir(state_dir, "--state-dir")
    lf = LocalFleet(state_dir or default_root(), progress=_progress)
    st = lf.up(f, build=build, timeout=timeout)
    manager, workers = lf.clients(f)
    apply_fleet(f, manager, workers, progress=_progress)
    active = wait_active(manager, f, timeout=timeout)
    st = {**st, "active": active, "kubeconfigs": {n: str(m.kubeconfig) for n, m in lf.members().items()}}
    if output is OutputFormat.json:
        print_json(st)
        return
    for name, kc in st["kubeconfigs"].items():
        state = "" if name == "manager" else f"  (MultiKueueCluster active: {active.get(name)})"
        sys.stdout.write(f"{name:<12} {kc}{state}\n")


def _fleet_status(state_dir: Path | None, output: OutputFormat) -> None:
    from workloads.local.fleet import LocalFleet, default_root

    st = LocalFleet(state_dir or default_root()).status()
    if output is OutputFormat.json:
        print_json(st)
        return
    for name, m in st["members"].items():
        sys.stdout.write(f"{name:<12} {m['state']:<9} {m['rss_mib_total']:>8} MiB  {m['state_dir']}\n")
    sys.stdout.write(f"fleet RSS: {st['rss_mib_total']} MiB\n")


@local_app.command("down")
def down(state_dir: StateDirOpt = None, output: Output = OutputFormat.text, fleet: FleetFlag = False) -> None:
    """Stop every local-cluster process and discard the cluster's data (keeps pki and logs)."""
    if fleet:
        from workloads.local.fleet import LocalFleet, default_root

        res = LocalFleet(state_dir or default_root(), progress=_progress).down()
        if output is OutputFormat.json:
            print_json({"stopped": res})
        else:
            for name, stopped in res.items():
                sys.stdout.write(f"{name}: " + ("stopped: " + ", ".join(stopped) if stopped else "nothing was running") + "\n")
        return
    stopped = _cluster(state_dir).down()
    if output is OutputFormat.json:
        print_json({"stopped": stopped})
    else:
        sys.stdout.write(("stopped: " + ", ".join(stopped) if stopped else "nothing was running") + "\n")


@local_app.command("status")
def status(state_dir: StateDirOpt = None, output: Output = OutputFormat.text, fleet: FleetFlag = False) -> None:
    """Show whether the local cluster runs, its processes and memory, and the kubeconfig."""
    if fleet:
        _fleet_status(state_dir, output)
        return
    _print_status(_cluster(state_dir, quiet=True).status(), output)


@local_app.command("crash")
def crash(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    slice_index: Annotated[int, typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index) of the worker")] = 0,
    worker: Annotated[int, typer.Option("--worker", min=0, max=INT32_MAX, help="worker (completion index) within the slice")] = 0,
    exit_code: Annotated[int, typer.Option("--exit-code", min=1, max=255, help="what the program exits with (137: killed)")] = 137,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")] = None,
    spec: SpecOpt = None,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """One worker's program fails and its VM stays: the run restarts by its restart path (recreate, or in place)."""
    from infra.spec import load_spec
    from workloads.local.disrupt import crash as do_crash

    ns = namespace or load_spec(spec).team(team).ns
    lc = _cluster(state_dir, quiet=True)
    res = do_crash(lc.client(), lc.state_dir, ns, run, slice_index, worker, exit_code=exit_code)
    if output is OutputFormat.json:
        print_json(res.to_dict())
        return
    sys.stdout.write(f"crashed {res.namespace}/{res.pod} (slice {res.slice}, worker {res.worker}) with exit code {res.exit_code}: {res.how}\n")


@local_app.command("preempt")
def preempt(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    slice_index: Annotated[int, typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index) whose node pool GKE takes away")] = 0,
    maintenance: Annotated[
        bool,
        typer.Option(
            "--maintenance",
            help="a maintenance event: the node pool is drained through the Eviction API (default: a spot preemption, the kubelet's node shutdown)",
        ),
    ] = False,
    replace_after: Annotated[
        float, typer.Option("--replace-after", min=0, max=3600, metavar="SECONDS", help="seconds until the replaced nodes are back and Ready")
    ] = 5.0,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")] = None,
    spec: SpecOpt = None,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Do to a run's slice what GKE does on a preemption or maintenance: pods disrupted, nodes NotReady, replaced, Ready again."""
    from infra.spec import load_spec
    from workloads.local.disrupt import preempt as do_preempt

    ns = namespace or load_spec(spec).team(team).ns
    lc = _cluster(state_dir, quiet=True)
    kube = lc.client()
    _rehearsal_running(lc)
    res = do_preempt(kube, lc.state_dir, ns, run, slice_index, maintenance=maintenance, replace_after=replace_after)
    if output is OutputFormat.json:
        print_json(res.to_dict())
        return
    how = "drained through the Eviction API (maintenance)" if maintenance else "terminated by the kubelet's node shutdown (spot preemption)"
    sys.stdout.write(
        f"preempted {res.namespace}/{res.run} slice {res.slice}: {len(res.pods)} pods {how}; "
        f"node pool {res.pool} ({len(res.nodes)} nodes) goes NotReady and is replaced, Ready again at {res.to_dict()['back_at']}\n"
    )


@local_app.command("fault")
def fault(
    node_pool: Annotated[str, typer.Argument(metavar="NODE_POOL", help="a dynamically sliced pool's sub-block node pool, e.g. tpu7x-cubes-1")],
    repair: Annotated[bool, typer.Option("--repair", help="the sub-block is healthy again (its partitions HEALTHY)")] = False,
    state_dir: StateDirOpt = None,
) -> None:
    """A faulty host in a dynamic-slicing sub-block, as GKE reports it: its partitions UNHEALTHY, its Slices FAILED, runs moved off it."""
    from workloads.local import LocalClusterError, slices

    lc = _cluster(state_dir, quiet=True)
    if not lc.daemon("rehearsal").alive():
        raise LocalClusterError(f"the rehearsal daemon of the local cluster in {lc.state_dir} is not running (it plays the slice controllers) — run 'local up'")
    n = (slices.repair if repair else slices.fault)(lc.client(), node_pool)
    state = "HEALTHY again" if repair else "UNHEALTHY: its Slices fail, and Kueue places their runs on healthy sub-blocks"
    sys.stdout.write(f"sub-block {node_pool} ({n} nodes): every partition {state}\n")


def _rehearsal_running(lc) -> None:  # noqa: ANN001  (a LocalCluster)
    from workloads.local import LocalClusterError

    if not lc.daemon("rehearsal").alive():
        raise LocalClusterError(
            f"the rehearsal daemon of the local cluster in {lc.state_dir} is not running (nothing would bring the nodes back) — run 'python -m workloads local down' and 'local up'"
        )


@local_app.command("upgrade")
def upgrade(
    pool: Annotated[str, typer.Option("--pool", help="GKE node pool (cloud.google.com/gke-nodepool) to upgrade: one TPU slice's pool")],
    version: Annotated[
        Optional[str], typer.Option("--version", help="kubelet version the upgraded nodes report (default: the control plane's, as GKE upgrades to)")
    ] = None,
    replace_after: Annotated[
        float, typer.Option("--replace-after", min=0, max=3600, metavar="SECONDS", help="seconds until the upgraded nodes are back and Ready")
    ] = 5.0,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Upgrade a node pool as GKE's surge upgrade does: cordoned, drained through the Eviction API, its VMs recreated at the new version."""
    from workloads.local.upgrade import upgrade as do_upgrade

    lc = _cluster(state_dir, quiet=True)
    kube = lc.client()
    _rehearsal_running(lc)
    res = do_upgrade(kube, lc.state_dir, pool, version, replace_after=replace_after)
    if output is OutputFormat.json:
        print_json(res.to_dict())
        return
    sys.stdout.write(
        f"upgrading node pool {res.pool} ({len(res.nodes)} nodes) from kubelet {res.from_version} to {res.to_version}: cordoned, "
        f"{len(res.pods)} pods evicted; its VMs are recreated, Ready again at {res.to_dict()['back_at']}\n"
    )


@local_app.command("maintenance")
def maintenance(
    node: Annotated[str, typer.Option("--node", help="a node of the TPU slice Compute Engine will maintain (its whole node pool is announced)")],
    in_: Annotated[str, typer.Option("--in", metavar="DURATION", help="when the window starts, from now: 90s, 10m, 2h, 7d")] = "10m",
    replace_after: Annotated[
        float, typer.Option("--replace-after", min=0, max=3600, metavar="SECONDS", help="seconds from the window's start until the nodes are back and Ready")
    ] = 5.0,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Announce host maintenance as GKE labels it (cloud.google.com/scheduled-maintenance-time); at the window the pool is drained and replaced."""
    from workloads.cluster.cleanup import parse_duration
    from workloads.cluster.maintenance import iso
    from workloads.local.upgrade import announce

    seconds = parse_duration(in_, "--in")
    lc = _cluster(state_dir, quiet=True)
    kube = lc.client()
    _rehearsal_running(lc)
    rec = announce(kube, lc.state_dir, node, seconds, replace_after=replace_after)
    if output is OutputFormat.json:
        print_json({"pool": rec.pool, "nodes": rec.nodes, "window_start": iso(rec.window_start)})
        return
    sys.stdout.write(f"host maintenance announced for node pool {rec.pool} ({len(rec.nodes)} nodes): window starts {iso(rec.window_start)}\n")


# Faults GKE's own tools do not make, played by the rehearsal daemon (workloads.local.faults).
@local_app.command("badhost")
def fault_badhost(
    node: Annotated[str, typer.Argument(metavar="NODE", help="a TPU node of the local cluster")],
    exit_code: Annotated[int, typer.Option("--exit-code", min=1, max=255, help="what every workload container on it exits with (default 134, SIGABRT)")] = 134,
    clear: Annotated[bool, typer.Option("--clear", help="the node is healthy again")] = False,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Every workload container on NODE fails, attempt after attempt (a VM with a broken TPU host)."""
    from workloads.local import faults

    res = faults.bad_host(_cluster(state_dir, quiet=True).client(), node, exit_code=exit_code, clear=clear)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"bad host {res.target}: {res.detail}\n")


@local_app.command("hang")
def fault_hang(
    run: Annotated[str, typer.Argument(metavar="RUN", help="run (JobSet) name")],
    slice_index: Annotated[int, typer.Option("--slice", min=0, max=INT32_MAX, help="slice (JobSet job index)")] = 0,
    worker: Annotated[int, typer.Option("--worker", min=0, max=INT32_MAX, help="worker within the slice")] = 0,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="namespace of the run (default: the team's)")] = None,
    team: Annotated[Optional[str], typer.Option("--team", help="team from the spec whose namespace holds the run")] = None,
    spec: SpecOpt = None,
    state_dir: StateDirOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """One worker of RUN stops stepping while its pod stays Running (a collective that never completes)."""
    from infra.spec import load_spec
    from workloads.local import faults

    ns = namespace or load_spec(spec).team(team).ns
    res = faults.hang(_cluster(state_dir, quiet=True).client(), ns, run, slice_index, worker)
    print_json(res.to_dict()) if output is OutputFormat.json else sys.stdout.write(f"hang {res.target}: {res.detail}\n")
