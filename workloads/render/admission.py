"""The PriorityClasses a team may use, enforced by the API server. Pure.

``submit`` refuses a priority the spec does not allow the team (``TeamSpec.allowed_priorities``),
but anyone with kubectl can write any ``priorityClassName``, including
``system-cluster-critical``, and Kueue orders, admits and preempts by it. So each team
namespace gets a ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, GA in
Kubernetes 1.30) and its binding (``validationActions: [Deny]``) over what can carry a pod
template there: Pods, Jobs, JobSets, RayJobs and RayClusters, on create, and on update
when the priorities in the object change (a run admitted before the spec narrowed a
team's list is not stuck: Kueue and the controllers keep updating it).

Refused, with a message naming the team, the priority and the allowed ones:

- a pod template (any of the object's) whose ``priorityClassName`` is not one of the
  team's; an empty name is allowed (the pod then gets priority 0, below every toolkit class);
- the ``kueue.x-k8s.io/priority-class`` label, which would give the run a Kueue
  WorkloadPriorityClass instead (the toolkit makes none; the pods' class is the one
  priority, see workloads/render/jobset.py).

The policy reads the object as the API server stores it, so a kind whose CRD is not
installed (a cluster without KubeRay) matches nothing and costs nothing. Applied with
the rest of ``cluster_objects``: by ``queues apply``, the provision pipeline and ``local up``.
"""

from __future__ import annotations

from typing import Any

from infra.spec import EnvSpec, TeamSpec
from toolkit.names import ADMISSION_API, JOBSET_GROUP, K8S_MANAGED_BY_LABEL, K8S_NAMESPACE_NAME_LABEL, KUEUE_PRIORITY_CLASS_LABEL, TGK

# What the policy reads a pod spec from, per resource (the API server's plural names).
RESOURCES: tuple[tuple[str, str, str], ...] = (
    ("", "v1", "pods"),
    ("batch", "v1", "jobs"),
    (JOBSET_GROUP, "*", "jobsets"),
    ("ray.io", "*", "rayjobs"),
    ("ray.io", "*", "rayclusters"),
)

# Every pod spec of the object, per resource (CEL over the stored object; has() guards the optional parts).
_RAY_CLUSTER = "[{c}.headGroupSpec.template.spec] + (has({c}.workerGroupSpecs) ? {c}.workerGroupSpecs.map(g, g.template.spec) : [])"
_POD_SPECS = (
    "request.resource.resource == 'pods' ? [{o}.spec] : "
    "request.resource.resource == 'jobs' ? [{o}.spec.template.spec] : "
    "request.resource.resource == 'jobsets' ? {o}.spec.replicatedJobs.map(r, r.template.spec.template.spec) : "
    "request.resource.resource == 'rayclusters' ? " + _RAY_CLUSTER.format(c="{o}.spec") + " : "
    "(has({o}.spec.submitterPodTemplate) ? [{o}.spec.submitterPodTemplate.spec] : []) + "
    "(has({o}.spec.rayClusterSpec) ? " + _RAY_CLUSTER.format(c="{o}.spec.rayClusterSpec") + " : [])"
)


def _names(obj: str) -> str:
    """CEL: the priorityClassName of every pod spec of ``obj`` ('' where none is set)."""
    return f"({_POD_SPECS.format(o=obj)}).map(s, has(s.priorityClassName) ? s.priorityClassName : '')"


def policy_name(team: TeamSpec) -> str:
    return f"tgk-priorities-{team.name}"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def priority_policy(team: TeamSpec) -> dict[str, Any]:
    allowed = team.allowed_priorities
    shown = ", ".join(allowed)
    return {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(team), "labels": {K8S_MANAGED_BY_LABEL: TGK}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"], "resources": [resource]}
                    for group, version, resource in RESOURCES
                ]
            },
            "variables": [
                {"name": "allowed", "expression": _cel_list(allowed)},
                {"name": "used", "expression": _names("object")},
                {"name": "before", "expression": _names("oldObject")},  # read on UPDATE only
                # On update, only a change of priorities is checked (controllers keep updating admitted runs).
                {"name": "changed", "expression": "request.operation == 'CREATE' || variables.used != variables.before"},
            ],
            "validations": [
                {
                    "expression": "!variables.changed || variables.used.all(p, p == '' || p in variables.allowed)",
                    "messageExpression": (
                        f"'priorityClassName ' + variables.used.filter(p, p != '' && !(p in variables.allowed)).join(', ') + "
                        f"' is not allowed in namespace ' + request.namespace + ' (team {team.name} may use {shown}; "
                        f"the spec sets it in teams[].priorities)'"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": f"!variables.changed || !has(object.metadata.labels) || !('{KUEUE_PRIORITY_CLASS_LABEL}' in object.metadata.labels)",
                    "message": (
                        f"the {KUEUE_PRIORITY_CLASS_LABEL} label is not allowed in team {team.name}'s namespace: "
                        f"a run's priority is its pods' priorityClassName ({shown})"
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    }


def priority_binding(team: TeamSpec) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name(team), "labels": {K8S_MANAGED_BY_LABEL: TGK}},
        "spec": {
            "policyName": policy_name(team),
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {K8S_NAMESPACE_NAME_LABEL: team.ns}}},
        },
    }


def admission_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Per team: its priority policy, then the binding that puts it on the team's namespace."""
    return [o for team in spec.teams for o in (priority_policy(team), priority_binding(team))]
