"""The in-cluster half of tpu7x multislice DCN networking (spec ``network.dcn``). Pure.

What a multislice run over a second network needs in the cluster, which would otherwise be
set up by hand, from the spec:

- ``GKENetworkParamSet`` + ``Network`` (``networking.gke.io/v1``, cluster-scoped): the
  second VPC and its subnet as a ``Device`` network in ``NetDevice`` mode, so a pod
  that names it in ``networking.gke.io/interfaces`` gets the node's second NIC as its
  eth1 (``workloads.render.jobset.pod_annotations``). GKE serves both CRDs on a cluster
  with multi-networking; the local cluster gets the toolkit's own
  (``workloads/local/crds/gke-networking.yaml``).
- A DaemonSet on every TPU node that sets ``net.ipv4.tcp_rmem`` to the spec's value in
  the *host's* network namespace: hostNetwork runs (and xpk's) use it there. The
  sysctl is per network namespace, so pod-network runs set their own
  (``securityContext.sysctls``, a safe sysctl since Kubernetes 1.32).

What the DaemonSet's pod may do, exactly: its init container is privileged, because
that is the only way to write a sysctl of the host's network namespace. The kubelet
refuses ``securityContext.sysctls`` for ``net.*`` on a host-network pod (they would
change the node), and the container runtime mounts ``/proc/sys`` read-only in every
unprivileged container, whatever capabilities it holds (CAP_NET_ADMIN included). The
init container runs two busybox commands with a read-only root filesystem and exits;
the pod then holds only a pause container: non-root, no capabilities, no privilege
escalation, read-only root. Both run under the RuntimeDefault seccomp profile (the
privileged one ignores it, which is why privilege stays in a container that does
nothing else) and mount no service-account token.

Applied by ``queues apply`` after the Kueue objects.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec
from toolkit import names

GKE_NETWORKING_API = "networking.gke.io/v1"
TUNING_NAMESPACE = "kube-system"
TUNING_NAME = "tpu-dcn-tcp-tuning"
# Pinned images: the init container needs a shell and sysctl, the pod then only holds its place.
TUNING_IMAGE = "busybox:1.37.0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def dcn_vpc_name(spec: EnvSpec) -> str:
    dcn = spec.network.dcn
    assert dcn is not None
    return dcn.name or f"{spec.cluster.name}-dcn"


def param_set(spec: EnvSpec) -> dict[str, Any]:
    dcn = spec.network.dcn
    assert dcn is not None
    vpc = dcn_vpc_name(spec)
    return {
        "apiVersion": GKE_NETWORKING_API,
        "kind": "GKENetworkParamSet",
        "metadata": {"name": dcn.gke_network},
        # modules/network.py names the DCN subnet after its VPC.
        "spec": {"vpc": vpc, "vpcSubnet": vpc, "deviceMode": "NetDevice"},
    }


def network(spec: EnvSpec) -> dict[str, Any]:
    dcn = spec.network.dcn
    assert dcn is not None
    return {
        "apiVersion": GKE_NETWORKING_API,
        "kind": "Network",
        "metadata": {"name": dcn.gke_network},
        "spec": {
            "type": "Device",
            "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": dcn.gke_network},
        },
    }


def tcp_tuning_daemonset(spec: EnvSpec) -> dict[str, Any]:
    dcn = spec.network.dcn
    assert dcn is not None
    labels = {names.K8S_APP_NAME_LABEL: TUNING_NAME, names.K8S_MANAGED_BY_LABEL: "tpu-gke-toolkit"}
    # The value travels as an environment variable, not spliced into the script.
    script = 'sysctl -w net.ipv4.tcp_rmem="$TCP_RMEM" && test "$(sysctl -n net.ipv4.tcp_rmem | tr -s "\\t " " ")" = "$TCP_RMEM"'
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": TUNING_NAME, "namespace": TUNING_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {names.K8S_APP_NAME_LABEL: TUNING_NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # The host's network namespace is the one to tune; writing /proc/sys needs privilege.
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": [{"key": names.GKE_TPU_ACCELERATOR_LABEL, "operator": "Exists"}]}]
                            }
                        }
                    },
                    "tolerations": [dict(names.TPU_TOLERATION)],
                    "initContainers": [
                        {
                            "name": "tcp-rmem",
                            "image": TUNING_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script],
                            "env": [{"name": "TCP_RMEM", "value": dcn.tcp_rmem}],
                            # privileged: /proc/sys of the host's network namespace (see the module docstring).
                            "securityContext": {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True},
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}},
                        }
                    ],
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "runAsUser": 65535,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }


def network_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """The DCN network's in-cluster objects, in apply order; empty without ``network.dcn``."""
    if spec.network.dcn is None:
        return []
    return [param_set(spec), network(spec), tcp_tuning_daemonset(spec)]
