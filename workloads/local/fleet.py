"""A fleet rehearsed on loopback: one control plane per cluster of an ``infra.fleet`` file.

Each member is a ``LocalCluster`` of its own (its own etcd, API server, Kueue, JobSet,
free ports reported in its ``cluster.json``) in ``<root>/manager`` and
``<root>/worker-<name>``, started in that order. What each runs is what GKE would give it,
and no more, so the extra control planes stay small:

- the manager: no TPU node (it holds the queue; MultiKueue keeps its runs suspended
  there), no rehearsal daemon, no provisioner, no logging server (no pod ever runs
  there); its Cloud Storage server is the fleet's one, as GCS is one service for every region;
- each worker: its own spec's nodes, rehearsal daemon and logging server, the fleet's
  Cloud Storage server, a provisioner only if one of its pools is queued (flex-start).

Wiring the MultiKueue Secrets is not done here: ``workloads.runs.fleet.apply_fleet`` does
it, the same code ``queues apply --fleet`` runs against GKE.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.fleet import Fleet, Worker
from toolkit.owned import write_atomic
from workloads.cluster.client import Cluster
from workloads.local import LocalClusterError, loopback, rehearsal
from workloads.local.controlplane import LocalCluster, Role
from workloads.local.daemons import Progress
from workloads.local.state import default_state_dir
from workloads.render import multikueue

MANAGER_SKIPS = ("rehearsal", "provisioner", "logging")
FLEET_MARKER = ".tgk-local-fleet"


def default_root() -> Path:
    return default_state_dir().parent / "fleet"


def manager_role(fleet: Fleet) -> Role:
    return Role(
        name="multikueue manager",
        objects=tuple(multikueue.manager_objects(fleet)),
        kueue_settings=multikueue.manager_settings(fleet, time_scale=rehearsal.time_factor()),
        tpu_nodes=False,
        skip=MANAGER_SKIPS,
        bucket_bindings=fleet.bucket_bindings(),  # the fleet's buckets, granted to every worker's identity as the manager's stack does
    )


def worker_role(fleet: Fleet, worker: Worker, gcs_url: str) -> Role:
    queued = any(p.queued for p in worker.spec.tpu_pools)
    return Role(
        name=f"multikueue worker {worker.name}",
        objects=tuple(multikueue.worker_objects(fleet, worker)),
        skip=("gcs",) if queued else ("gcs", "provisioner"),
        gcs_url=gcs_url,
    )


@dataclass
class LocalFleet:
    root: Path = field(default_factory=default_root)
    progress: Progress = field(default=lambda msg: None)

    def _member(self, state_dir: Path, who: str, role: Role | None = None) -> LocalCluster:
        return LocalCluster(state_dir, progress=lambda m: self.progress(f"[{who}] {m}"), role=role or Role())

    @property
    def manager_dir(self) -> Path:
        return self.root / "manager"

    def worker_dir(self, name: str) -> Path:
        return self.root / f"worker-{name}"

    def _claim(self) -> None:
        """The root is the fleet's: new, empty or marked; never a directory of someone else's."""
        r = self.root
        r.mkdir(parents=True, exist_ok=True)
        marker = r / FLEET_MARKER
        if not marker.is_file() and any(r.iterdir()):
            raise LocalClusterError(f"--state-dir: {r} holds files a local fleet did not write (no {FLEET_MARKER}) — pass an empty or new directory")
        marker.write_text("a tpu-gke-toolkit local fleet: one local cluster's state dir per member\n")

    def up(self, fleet: Fleet, *, build: bool = True, timeout: float = 300.0) -> dict[str, Any]:
        """Start (or reuse) the manager and every worker; what each reports, with start-up seconds."""
        self._claim()
        t0 = time.monotonic()
        manager = self._member(self.manager_dir, "manager", manager_role(fleet))
        mst = manager.up(fleet.manager_env(), spec_path=str(fleet.path), build=build, timeout=timeout)
        gcs_url = loopback.url(json.loads(manager.state_file.read_text())["ports"]["gcs"])
        members = {"manager": mst}
        for w in fleet.workers:
            lc = self._member(self.worker_dir(w.name), w.name, worker_role(fleet, w, gcs_url))
            members[w.name] = lc.up(w.spec, spec_path=str(w.spec_path), build=build, timeout=timeout)
        write_atomic(self.root / "fleet.json", json.dumps({"fleet": str(fleet.path), "workers": [w.name for w in fleet.workers]}, indent=2))
        return {"root": str(self.root), "up_seconds": round(time.monotonic() - t0, 1), "members": members}

    def clients(self, fleet: Fleet) -> tuple[Cluster, dict[str, Cluster]]:
        """The admin client of the manager and of each worker."""
        return self._member(self.manager_dir, "manager").client(), {w.name: self._member(self.worker_dir(w.name), w.name).client() for w in fleet.workers}

    def members(self) -> dict[str, LocalCluster]:
        out = {}
        if self.manager_dir.is_dir():
            out["manager"] = self._member(self.manager_dir, "manager")
        for d in sorted(self.root.glob("worker-*")) if self.root.is_dir() else []:
            name = d.name.removeprefix("worker-")
            out[name] = self._member(d, name)
        return out

    def status(self) -> dict[str, Any]:
        members = {name: lc.status() for name, lc in self.members().items()}
        return {"root": str(self.root), "members": members, "rss_mib_total": round(sum(m["rss_mib_total"] for m in members.values()), 1)}

    def down(self) -> dict[str, list[str]]:
        # Workers first: the manager's Kueue would otherwise see them go and start requeueing.
        members = self.members()
        order = [n for n in members if n != "manager"] + (["manager"] if "manager" in members else [])
        return {n: members[n].down() for n in order}
