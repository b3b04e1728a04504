"""The local cluster's loopback Google services: what its Cloud Storage and Cloud Logging servers share.

Each (``bucket``: Cloud Storage, ``cloudlogging``: Cloud Logging) is a server on 127.0.0.1
on a port of its own, run as one of the cluster's daemons. ``local up`` starts it, waits
until it answers, and writes its address into a ConfigMap in ``kube-public``; the run
hook (``runhooks``) reads that back through the API server, so a command that only has
the kubeconfig finds the cluster's servers, and talks to them with Google's own client
library pointed at the address (anonymous: the servers check no credentials).
``LoopbackService`` is that skeleton, once; each module declares its own.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import ClusterError
from toolkit.names import TGK_LOCAL_FIELD_MANAGER

if TYPE_CHECKING:
    from workloads.local.daemons import Daemons

NAMESPACE = "kube-public"
ENDPOINT_KEY = "endpoint"
PROJECT = "tgk-local"  # the clients' own project; what they store carries the spec's


def url(port: int) -> str:
    """The base URL of a server on loopback port ``port``."""
    return f"http://127.0.0.1:{port}"


@dataclass(frozen=True)
class LoopbackService:
    """One loopback Google service of the local cluster: its daemon, where it is published, how it is reached."""

    daemon: str  # its name among the cluster's daemons (run/<daemon>.pid, logs/<daemon>.log)
    configmap_name: str  # kube-public/<this> holds its address
    what: str  # "Cloud Storage server", in messages
    health: str  # a GET path it answers with 200 once it serves
    make_client: Callable[..., Any]  # make_client(project, endpoint=url): the Google client library's client, pointed at a URL

    def start(self, daemons: Daemons, port: int, timeout: float, command: Callable[[], list[str]], *, env: dict[str, str], cwd: Path) -> str:
        """Its daemon started on ``port`` (``command()``: its argv, which may first set the server up), answering; its base URL."""
        daemons.progress(f"starting the local {self.what}")
        daemons.daemon(self.daemon).start(command(), env=env, cwd=cwd)
        base = url(port)
        daemons.wait(f"the local {self.what}", lambda: self.answers(base), timeout)
        return base

    def publish(self, kube: Any, base: str) -> None:
        """Its address written where the run hook reads it (``configmap``), through ``kube`` (the cluster's admin client)."""
        kube.apply([self.configmap(base)], field_manager=TGK_LOCAL_FIELD_MANAGER, force_conflicts=True)

    def answers(self, base: str) -> bool:
        try:
            with urllib.request.urlopen(f"{base}{self.health}", timeout=2) as r:  # noqa: S310 - a loopback URL
                return r.status == 200
        except OSError:
            return False

    def configmap(self, base: str) -> dict[str, Any]:
        """The ConfigMap that says where the server is, for the run hook to read through the API server."""
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.configmap_name, "namespace": NAMESPACE}, "data": {ENDPOINT_KEY: base}}

    def endpoint_of(self, cluster: Any) -> str:
        """The server's address that the local cluster behind ``cluster`` (a ``workloads.cluster.client.Cluster``) publishes."""
        found = cluster.get(cluster.resource("v1", "ConfigMap"), self.configmap_name, NAMESPACE)
        base = ((found or {}).get("data") or {}).get(ENDPOINT_KEY, "")
        if not re.fullmatch(r"http://127\.0\.0\.1:\d{1,5}", base, re.ASCII):
            raise ClusterError(
                f"the local cluster publishes no {self.what} ({NAMESPACE}/{self.configmap_name}): it was started by an older toolkit — "
                "run 'python -m workloads local down' and 'local up'"
            )
        return base

    def client(self, base: str) -> Any:
        """Google's client for the server at ``base``."""
        return self.make_client(PROJECT, endpoint=base)

    def client_of(self, cluster: Any) -> Any:
        """Google's client for the server of the local cluster behind ``cluster``."""
        return self.client(self.endpoint_of(cluster))
