"""NetworkPolicies of every team namespace (spec ``network_policy``). Pure.

What they allow (everything else into a team's pods is denied once a policy selects them):

- ``tgk-same-namespace``: every pod of the namespace accepts connections from the
  namespace's own pods, and only from them. A run's pods reach each other: JAX's
  coordinator (worker 0 of slice 0), megascale's DCN port, the Job runtime's headless
  Service, the Ray head's GCS, client and dashboard ports from its workers and the
  submitter. Another team's pods are refused, whatever port they try. Runs of one team
  reach each other too: they share the team's identity already (its KSA, GSA and
  buckets), so a wall between them would protect nothing the identity does not give.
- ``tgk-ray-dashboard``: a Ray head's dashboard (8265) also from KubeRay's operator,
  which follows every RayJob through it: pods in ``network_policy.ray_operator_namespaces``
  (a KubeRay installed by hand), and with the spec's Ray add-on the control plane's range
  (``cluster.master_cidr``; GKE hosts the add-on's operator. Not verified on a GKE cluster).
- ``tgk-ray-metrics`` (with the Ray add-on's ``monitoring``): Ray pods' metrics port (8080)
  from ``gmp-system``, where GKE's Managed Service for Prometheus runs its collectors, which
  scrape them on the pod network.
- ``tgk-egress`` (only when ``network_policy.egress_cidrs`` is a list; egress is open
  otherwise): the namespace's pods, cluster DNS, the GKE metadata server (Workload
  Identity's tokens: 169.254.169.254 on 80/8080 with Dataplane V2, 169.254.169.252 on
  987/988 otherwise), and the listed CIDRs.

Who enforces them: GKE with Dataplane V2 (``cluster.dataplane_v2``, the default) or the
legacy dataplane's Calico, which the stack turns on otherwise. Not covered: pods on the
host network (``--host-network`` runs, xpk's, the DCN DaemonSet) are in the node's network
namespace, where no NetworkPolicy applies; nor the DCN NIC a pod-network run gets on GKE
multi-networking (a ``Device`` network hands the NIC to the pod, outside the dataplane).
Cluster-side components need nothing here: Kueue's and JobSet's webhooks are called by the
API server in their own namespaces, and the kubelet's probes come from the node.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec, TeamSpec
from toolkit.names import K8S_MANAGED_BY_LABEL, K8S_NAMESPACE_NAME_LABEL, NETWORK_POLICY_API, RAY_NODE_TYPE_LABEL, TGK

SAME_NAMESPACE = "tgk-same-namespace"
RAY_DASHBOARD = "tgk-ray-dashboard"
EGRESS = "tgk-egress"
RAY_METRICS = "tgk-ray-metrics"
RAY_DASHBOARD_PORT = 8265  # workloads.render.rayjob.HEAD_PORTS' dashboard
RAY_METRICS_PORT = 8080  # KubeRay's DefaultMetricsPort, which it adds to every Ray container
RAY_NODE_LABEL = "ray.io/is-ray-node"  # KubeRay's utils.RayNodeLabelKey, "yes" on every Ray pod
GMP_NAMESPACE = "gmp-system"  # GKE's managed collection (the Ray add-on's monitoring scrapes through it)
# The GKE metadata server, where Workload Identity's tokens come from (GKE's documented egress for it).
METADATA_SERVER = (("169.254.169.254/32", (80, 8080)), ("169.254.169.252/32", (987, 988)))
KUBE_DNS = {"namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}}


def _policy(team: TeamSpec, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": NETWORK_POLICY_API,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": team.ns, "labels": {K8S_MANAGED_BY_LABEL: TGK}},
        "spec": spec,
    }


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def same_namespace(team: TeamSpec) -> dict[str, Any]:
    return _policy(team, SAME_NAMESPACE, {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]})


def ray_dashboard(spec: EnvSpec, team: TeamSpec) -> dict[str, Any]:
    np = spec.network_policy
    peers: list[dict[str, Any]] = [
        {"namespaceSelector": {"matchExpressions": [{"key": K8S_NAMESPACE_NAME_LABEL, "operator": "In", "values": list(np.ray_operator_namespaces)}]}}
    ]
    if spec.cluster.ray.enabled:
        peers.append({"ipBlock": {"cidr": spec.cluster.master_cidr}})
    return _policy(
        team,
        RAY_DASHBOARD,
        {
            "podSelector": {"matchLabels": {RAY_NODE_TYPE_LABEL: "head"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": _tcp(RAY_DASHBOARD_PORT)}],
        },
    )


def ray_metrics(team: TeamSpec) -> dict[str, Any]:
    return _policy(
        team,
        RAY_METRICS,
        {
            "podSelector": {"matchLabels": {RAY_NODE_LABEL: "yes"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: GMP_NAMESPACE}}}], "ports": _tcp(RAY_METRICS_PORT)}],
        },
    )


def egress(spec: EnvSpec, team: TeamSpec) -> dict[str, Any]:
    cidrs = spec.network_policy.egress_cidrs or []
    dns = {"namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: KUBE_DNS["namespace"]}}, "podSelector": {"matchLabels": dict(KUBE_DNS["labels"])}}
    rules: list[dict[str, Any]] = [
        {"to": [{"podSelector": {}}]},
        {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        *({"to": [{"ipBlock": {"cidr": cidr}}], "ports": _tcp(*ports)} for cidr, ports in METADATA_SERVER),
    ]
    if cidrs:
        rules.append({"to": [{"ipBlock": {"cidr": c}} for c in cidrs]})
    return _policy(team, EGRESS, {"podSelector": {}, "policyTypes": ["Egress"], "egress": rules})


def network_policies(spec: EnvSpec) -> list[dict[str, Any]]:
    """Every team namespace's NetworkPolicies; none when ``network_policy.enabled`` is false."""
    np = spec.network_policy
    if not np.enabled:
        return []
    out: list[dict[str, Any]] = []
    for team in spec.teams:
        out += [same_namespace(team), ray_dashboard(spec, team)]
        if spec.cluster.ray.enabled and spec.cluster.ray.monitoring:
            out.append(ray_metrics(team))
        if np.egress_cidrs is not None:
            out.append(egress(spec, team))
    return out
