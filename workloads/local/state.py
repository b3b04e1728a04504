"""A local cluster's state directory: what ``up`` recorded there, and a client on its API server.

``controlplane`` writes the state and starts the daemons (``rehearsald``, ``provisioner``,
the KubeRay stand-in); the daemons reach their cluster through this module, so neither
side imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workloads.cluster.client import Cluster
from workloads.local import CONTEXT, LocalClusterError, certs


def state_file(state_dir: Path) -> Path:
    return state_dir / "cluster.json"


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
