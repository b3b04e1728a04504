"""A local cluster's state directory: whose it is, what ``up`` recorded there, and a client on its API server.

``controlplane`` claims the directory, writes the state and starts the daemons
(``rehearsald``, ``provisioner``, the KubeRay stand-in); the daemons reach their cluster
through this module, so neither side imports the other.

A state dir is the toolkit's once it holds ``STATE_MARKER`` (or is the default one under
the cache); a directory that holds anything else is refused, never cleaned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from toolkit.paths import cache_dir
from workloads.cluster.client import Cluster
from workloads.local import CONTEXT, LocalClusterError, certs

# The file that marks a directory as a local cluster's state dir (what `up` may clean).
STATE_MARKER = ".tgk-local-state"


def default_state_dir() -> Path:
    return cache_dir() / "local-cluster" / "state"


def state_file(state_dir: Path) -> Path:
    return state_dir / "cluster.json"


def kubeconfig(state_dir: Path) -> Path:
    """The admin kubeconfig ``up`` writes (context ``tgk-local``)."""
    return state_dir / "kubeconfig"


def is_ours(state_dir: Path) -> bool:
    """Whether ``state_dir`` is a local cluster's state dir: marked, or under the cache's own local-cluster dir."""
    return (state_dir / STATE_MARKER).is_file() or state_dir.resolve().is_relative_to(cache_dir().resolve() / "local-cluster")


def claim(state_dir: Path) -> None:
    """Make sure the state dir is the toolkit's before anything in it is wiped: new, empty,
    marked (``STATE_MARKER``) or the toolkit's own default under the cache; else refused."""
    sd = state_dir
    if not os.path.lexists(sd):
        sd.mkdir(parents=True)
    if os.path.islink(sd) or not sd.is_dir():
        raise LocalClusterError(f"--state-dir: {sd} is a symlink or a file — pass a directory of its own for the local cluster")
    marker = sd / STATE_MARKER
    # The lock file `up` holds is the only entry a fresh state dir has.
    if not is_ours(sd) and any(p.name != ".lock" for p in sd.iterdir()):
        raise LocalClusterError(f"--state-dir: {sd} holds files the local cluster did not write (no {STATE_MARKER}) — pass an empty or new directory")
    if not marker.is_file():
        marker.write_text("a tpu-gke-toolkit local cluster's state: `local up` may wipe its subdirectories\n")


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """What ``up`` recorded (ports, layout, the spec), or None when no cluster was started here."""
    try:
        return json.loads(state_file(state_dir).read_text())
    except (FileNotFoundError, ValueError):
        return None


def client(state_dir: Path, who: str = "admin") -> Cluster:
    """The toolkit's cluster client on the cluster of ``state_dir``, speaking as ``who`` (a certs.CLIENTS identity)."""
    st = read_state(state_dir)
    if not st:
        raise LocalClusterError(f"no local cluster in {state_dir} — run 'python -m workloads local up'")
    return client_on(state_dir, st["ports"]["apiserver"], who)


def client_on(state_dir: Path, port: int, who: str = "admin") -> Cluster:
    # The standard-library transport: no kubernetes package import, so `up` starts at once.
    pki = certs.Pki(state_dir / "pki")
    return Cluster.with_client_cert(f"https://127.0.0.1:{port}", ca=pki.ca_cert, cert=pki.client_cert(who), key=pki.client_key(who), context=CONTEXT)
