"""A real Ray head on loopback, standing in for the dashboard of a RayCluster's head pod.

On the local cluster the head pod is a kwok pod: nothing listens on its dashboard
port, yet KubeRay follows every RayJob through that dashboard (the Ray Jobs REST API,
``/api/jobs/<id>``). ``local up --with ray`` starts this process with the Ray venv's
python (scripts/setup-ray.sh) and routes KubeRay's dashboard calls to it
(workloads.local.kuberay): Ray's own job manager then answers them.

    python -m workloads.ray.standin_head --ready-file F [--dashboard-port P] [--num-cpus N]

The dashboard binds its port itself (Ray's own search from 8265 up, unless ``--dashboard-port``
names one) and the ready file, written once it answers, names it: ``{"dashboard": URL, "port":
N, "ray": VERSION}``. No port is picked by a parent and released before Ray binds it, and a
start-up attempt that fails leaves its port to the next one (a dashboard of a failed attempt
can outlive ``ray.shutdown``). Runs until SIGTERM, then shuts Ray down (its GCS, raylet and dashboard are children
of this process and go with it). Only the standard library and Ray are imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ATTEMPTS = 3


def _dashboard_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=2) as r:  # noqa: S310 - loopback
            return r.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.ray.standin_head")
    p.add_argument("--dashboard-port", type=int, default=None, help="default: the first free port from 8265 up, bound by the dashboard itself")
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs the head offers (job supervisors and entrypoints)")
    args = p.parse_args(argv)

    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # The dashboard starts each of its modules as a Python process, giving each 30 s and
    # the whole dashboard 60 s to come up; on 2 shared cores under a test run that is
    # not always enough.
    os.environ.setdefault("RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", "300")
    os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "600")
    import ray

    _agent_port_of_its_own()
    # A private temp dir (short: Ray's Unix sockets live under it) and address="local":
    # never join, nor leave a marker for, another Ray on this machine.
    temp_dir = tempfile.mkdtemp(prefix="tgk-ray-")
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                context = ray.init(
                    address="local",
                    num_cpus=args.num_cpus,
                    include_dashboard=True,
                    dashboard_host="127.0.0.1",
                    dashboard_port=args.dashboard_port,
                    _temp_dir=temp_dir,
                    configure_logging=False,
                )
                break
            except Exception as e:  # noqa: BLE001 - Ray raises plain Exception for a start-up timeout
                # Ray waits a fixed 30 s for its raylet to register; a loaded 2-core machine can miss it.
                sys.stderr.write(f"Ray head start-up attempt {attempt}/{ATTEMPTS} failed: {str(e).strip().splitlines()[0]}\n")
                ray.shutdown()
                if attempt == ATTEMPTS or stop.is_set():
                    raise
        # Ray's core installs its own SIGTERM handler (a stack dump, then exit), which would
        # skip the shutdown below: take SIGTERM back.
        signal.signal(signal.SIGTERM, on_signal)
        port = int(context.dashboard_url.rsplit(":", 1)[1])  # "127.0.0.1:8265", as the dashboard bound it
        deadline = time.monotonic() + 120
        while not _dashboard_up(port):
            if time.monotonic() > deadline or stop.is_set():
                sys.stderr.write(f"the Ray dashboard did not answer on 127.0.0.1:{port}\n")
                return 1
            time.sleep(0.25)
        partial = args.ready_file.with_name(args.ready_file.name + ".partial")
        partial.write_text(json.dumps({"dashboard": f"http://127.0.0.1:{port}", "port": port, "ray": ray.__version__}))
        partial.replace(args.ready_file)  # whole or absent: the parent reads it as soon as it exists
        print(f"Ray {ray.__version__} head up; dashboard on 127.0.0.1:{port}", flush=True)
        stop.wait()
    finally:
        ray.shutdown()
        _stop_leftovers()
        shutil.rmtree(temp_dir, ignore_errors=True)  # Ray's session files and logs: a throwaway head's
    return 0


def _agent_port_of_its_own() -> None:
    """Let the dashboard agent bind a free HTTP port rather than Ray's fixed 52365.

    ``ray.init`` offers no argument for it, and a second Ray on the machine (another
    stand-in, a test's own head) then finds 52365 taken: its agent serves no HTTP, and its
    Jobs API answers every submission "No available agent to submit job". The agent
    publishes the port it bound in the GCS, where the job manager looks it up, so port 0
    is safe. ``ray.init`` builds its ``RayParams`` through the module attribute, looked up
    at call time (Ray 2.54.0, the pinned version).
    """
    import ray._private.parameter as parameter  # noqa: PLC0415 - Ray is imported late, in main()

    base = parameter.RayParams
    if getattr(base, "_tgk_agent_port", False):
        return

    class RayParams(base):  # type: ignore[misc, valid-type]
        _tgk_agent_port = True

        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs.setdefault("dashboard_agent_listen_port", 0)
            super().__init__(*args, **kwargs)

    parameter.RayParams = RayParams


def _stop_leftovers() -> None:
    """Ray's dashboard module processes can outlive ``ray.shutdown``; they are in this process's group.

    ``local up`` starts this process as a session leader (its own process group), so
    the group holds only what this head started.
    """
    if os.getpgid(0) != os.getpid():
        return  # not a group of our own (run by hand from a shell): leave the group alone
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
