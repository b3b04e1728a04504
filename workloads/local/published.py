"""Where the local cluster's loopback servers are: one ConfigMap in ``kube-public`` per server.

``local up`` starts each server (Cloud Storage: ``bucket``; Cloud Logging: ``cloudlogging``)
on a port of its own and writes its address here; the run hook (``runhooks``) reads it back
through the API server, so a command that only has the kubeconfig finds the cluster's
servers.
"""

from __future__ import annotations

import re
from typing import Any

from toolkit.errors import ClusterError

NAMESPACE = "kube-public"
ENDPOINT_KEY = "endpoint"


def loopback(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def configmap(name: str, url: str) -> dict[str, Any]:
    """The ConfigMap that says where a server is."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}, "data": {ENDPOINT_KEY: url}}


def endpoint_of(cluster: Any, name: str, what: str) -> str:
    """The loopback address ``cluster`` (a ``workloads.cluster.client.Cluster``) publishes in ConfigMap ``name``; ``what`` names the server."""
    found = cluster.get(cluster.resource("v1", "ConfigMap"), name, NAMESPACE)
    url = ((found or {}).get("data") or {}).get(ENDPOINT_KEY, "")
    if not re.fullmatch(r"http://127\.0\.0\.1:\d{1,5}", url):
        raise ClusterError(
            f"the local cluster publishes no {what} ({NAMESPACE}/{name}): it was started by an older toolkit — run 'python -m workloads local down' and 'local up'"
        )
    return url
