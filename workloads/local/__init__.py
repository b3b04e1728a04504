"""A simulated GKE TPU cluster on a real Kubernetes control plane, on loopback.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local
processes built from the Go module proxy (scripts/build-local-cluster.sh); kwok
plays the kubelets of Nodes labelled like GKE TPU slice node pools; JobSet and
Kueue run as local processes with their webhooks reachable from the apiserver.

Modules: ``controlplane`` (up / down / status: the order of the steps), ``state``
(the state directory: whose it is, what ``up`` recorded, a client), ``daemons`` (the
cluster's daemons as a group: ports, waits, stop) over ``procs`` (one detached daemon
with its pid file), ``boot`` (etcd, kube-apiserver, controller-manager, scheduler, kwok),
``jobset_kueue`` (JobSet and Kueue as local processes, their webhooks reachable),
``spec_objects`` (the spec's nodes and cluster objects applied), ``certs`` (a private CA
and the certificates), ``nodes`` (Node objects from the environment spec), ``addons``
(the Kueue / JobSet / kwok install objects, kwok's stages, GKE's CRDs), ``loopback``
(the skeleton of the loopback Google services: ``bucket``, Cloud Storage, and
``cloudlogging``, Cloud Logging), ``rehearsal`` (a run's simulated duration and MaxText
log, pure), ``rehearsald`` (the daemon that plays them and replaces preempted nodes),
``disrupt`` (``local preempt``: what GKE does to a slice), ``kuberay`` (``local up
--with ray``: the KubeRay operator and a real Ray head standing in for head pods),
``fleet`` (one control plane per member of a fleet). The API server is reached through
the toolkit's one client, ``workloads.cluster.client.Cluster``, on its standard-library
transport (no ``kubernetes`` import, so ``up`` starts at once). Nothing here is imported
by the CLI until a ``local`` command runs.
"""

from __future__ import annotations

from toolkit.errors import ToolkitError

# The kubeconfig context `local up` writes: how the CLI knows it talks to the local cluster
# (``submit`` then makes the run a rehearsal: its hook in workloads.local.runhooks).
CONTEXT = "tgk-local"


class LocalClusterError(ToolkitError):
    """The local cluster could not be built, started, reached or stopped."""

    exit_code = 1
