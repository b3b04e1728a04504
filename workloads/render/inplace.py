"""JobSet's in-place restart (``restartStrategy: InPlaceRestart``, JobSet v0.12.0): what a run and its team need for it.

A run that restarts in place keeps its healthy pods on their VMs: when any worker fails, every
worker's container restarts where it is and only lost pods are made again, and a barrier holds
every worker until all are at the same restart attempt, so every worker of every slice still
starts together (JobSet's keps/467-InPlaceRestart). The pieces, all JobSet's own, as the JobSet
webhook of v0.12.0 checks them:

- the child Job: ``backoffLimit`` MaxInt32 and ``podReplacementPolicy: Failed`` (a failed pod is
  replaced, not the Job failed); its podFailurePolicy ignores disruptions (rule 0) and still fails
  the Job on a program error (rule 1, the same index and message as a recreate run's, so the
  JobSet's ``program_error`` rule is the same too);
- ``backoffLimitPerIndex`` MaxInt32 (the toolkit's, not the webhook's): the Job outlives every
  restart, and Kubernetes' Job controller holds back a failed pod's replacement for 10 s doubling
  with every failure it has counted, up to 10 min, disruptions included
  (``infra.recovery.job_replacement_backoff``). Counted per Job, a preempted 4-host slice's pods
  would come back after 80 s, and after 10 min from its second preemption on; counted per index,
  after 10 s at a slice's first loss, 20 s at its second;
- JobSet's agent (``cmd/in-place-restart-agent``), in *main container* mode: it is the workload
  container's command, copied into the pod by an init container from its own image
  (``Policy.agent_image``) so any worker image works; it runs the real command (``WORKER_COMMAND``)
  only once the JobSet says every worker is at its attempt, and exits ``AGENT_EXIT_CODE`` when
  the JobSet asks its pod to restart;
- the container's ``restartPolicyRules`` (Kubernetes container restart rules, beta from 1.35):
  restart in place on the agent's code and on any failure that is not a program error; a program
  error or exit 0 ends the container as before;
- the agent's identity: the team's service account, with its token mounted into the workload
  container only (``automountServiceAccountToken`` stays false for the pod), allowed to read its
  JobSet and patch its pods (``team_objects``), and by a ValidatingAdmissionPolicy nothing on a
  pod but the agent's annotation.

Why main-container mode: sidecar mode needs the ``RestartAllContainers`` action (Kubernetes 1.36
beta). Its cost: the agent is the container's first process and ends the program with SIGKILL
(Go's ``exec.CommandContext``) when the pod is stopped, so MaxText does not save at a preemption
(the planner turns autocheckpoint off for these runs: ``policy._checkpointing``).
"""

from __future__ import annotations

import shlex
from typing import Any

from infra.spec import EnvSpec
from toolkit import names
from workloads.planning.model import RunPlan
from workloads.render import podsecurity
from workloads.render.kubelet_escape import k8s_literal

INT32_MAX = 2**31 - 1
# The agent's exit code for "restart my pod in place" (its IN_PLACE_RESTART_EXIT_CODE; JobSet's
# default 1 is a program error here). Not a shell's 126/127, nor 128+signal of a real signal.
AGENT_EXIT_CODE = 198
AGENT_BINARY = "in-place-restart-agent"  # where the agent image keeps it, at /
AGENT_DIR = "/tgk-agent"  # the emptyDir the init container copies it into
AGENT_VOLUME = "tgk-restart-agent"
AGENT_INIT_CONTAINER = "tgk-restart-agent"
TOKEN_VOLUME = "tgk-restart-agent-token"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the agent's client looks (in-cluster config)
TOKEN_SECONDS = 3607  # what the kubelet's own projection uses; it refreshes the file before it expires
JOBSET_NAME_ANNOTATION = names.JOBSET_NAME_ANNOTATION
ATTEMPT_ANNOTATION = names.JOBSET_IN_PLACE_ATTEMPT_ANNOTATION
STRATEGY = "InPlaceRestart"
ROLE = f"{names.TGK}-in-place-restart"
POLICY = f"{names.TGK}-in-place-restart-attempt-only"


def worker_command(command: list[str], args: list[str]) -> str:
    """The program as the agent runs it: one shell command line (``$SHELL -c``), every word quoted."""
    return shlex.join([*command, *args])


def agent_env(plan: RunPlan, command: list[str], args: list[str]) -> list[dict[str, Any]]:
    """What the agent reads: its pod, its JobSet, the program and its restart code (cmd/in-place-restart-agent/main.go)."""
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "JOBSET_NAME", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOBSET_NAME_ANNOTATION}']"}}},
        {"name": "WORKER_COMMAND", "value": k8s_literal(worker_command(command, args))},
        {"name": "IN_PLACE_RESTART_EXIT_CODE", "value": str(AGENT_EXIT_CODE)},
        # The agent starts the program with $SHELL, else bash: every image has /bin/sh.
        {"name": "SHELL", "value": "/bin/sh"},
    ]


def restart_rules(plan: RunPlan) -> list[dict[str, Any]]:
    """The workload container's restartPolicyRules: first match wins; no match is its restartPolicy, Never."""
    ends = sorted({0, *plan.policy.program_error_exit_codes})
    return [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [AGENT_EXIT_CODE]}},
        # A crash that is not the program's fault (a signal, a lost peer) restarts in place too:
        # the restarted agent asks for the next attempt and the JobSet brings every worker along.
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [*ends, AGENT_EXIT_CODE]}},
    ]


def make_container(plan: RunPlan, c: dict[str, Any]) -> dict[str, Any]:
    """The workload container with the agent as its command and the program as the agent's WORKER_COMMAND."""
    command, args = list(c.pop("command")), list(c.pop("args", []))
    # command/args were escaped for the kubelet already; the agent's env value is escaped once, whole.
    program = [t.replace("$$", "$") for t in command], [t.replace("$$", "$") for t in args]
    return {
        **c,
        "command": [f"{AGENT_DIR}/{AGENT_BINARY}"],
        "env": [*c.get("env", []), *agent_env(plan, *program)],
        "restartPolicy": "Never",
        "restartPolicyRules": restart_rules(plan),
        "volumeMounts": [
            *c.get("volumeMounts", []),
            {"name": AGENT_VOLUME, "mountPath": AGENT_DIR, "readOnly": True},
            {"name": TOKEN_VOLUME, "mountPath": SA_DIR, "readOnly": True},
        ],
    }


def init_container(plan: RunPlan, security_context: dict[str, Any]) -> dict[str, Any]:
    """Copies the agent out of its image into the pod (the image has a shell and cp: busybox)."""
    assert plan.policy.agent_image is not None
    return {
        "name": AGENT_INIT_CONTAINER,
        "image": plan.policy.agent_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", f"/{AGENT_BINARY}", f"{AGENT_DIR}/{AGENT_BINARY}"],
        "env": podsecurity.home_env(plan.target.run_as_user, []),  # as every container of a run's pod has it
        "volumeMounts": [{"name": AGENT_VOLUME, "mountPath": AGENT_DIR}],
        "securityContext": security_context,
    }


def volumes() -> list[dict[str, Any]]:
    """The agent's directory, and the service account token the kubelet would mount were the pod to automount one."""
    token = {
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        }
    }
    return [{"name": AGENT_VOLUME, "emptyDir": {}}, {"name": TOKEN_VOLUME, **token}]


def job_fields() -> dict[str, Any]:
    """The child Job's fields for an in-place run; see the module docstring for why each is there."""
    return {"backoffLimit": INT32_MAX, "backoffLimitPerIndex": INT32_MAX, "podReplacementPolicy": "Failed"}


# ------------------------------------------------------------------ the cluster (JobSet's settings, queues apply)


def jobset_settings(spec: EnvSpec) -> dict[str, Any]:
    """The parts of JobSet's own Configuration (config.jobset.x-k8s.io/v1alpha1) the spec decides: its InPlaceRestart gate.

    Laid over the release's configuration by the provision pipeline
    (``python -m workloads queues manager-config --controller jobset``) and by ``local up``.
    """
    return {"featureGates": {"InPlaceRestart": True}} if available(spec) else {}


def available(spec: EnvSpec) -> bool:
    """Runs of this spec may restart in place (``--restart in-place`` or the spec's default)."""
    return spec.cluster_has_in_place_restart


def team_objects(spec: EnvSpec) -> list[dict[str, Any]]:
    """Each team's Role + RoleBinding for the agent, and one policy that keeps it to its annotation; none without in-place restarts."""
    if not available(spec):
        return []
    out: list[dict[str, Any]] = []
    for t in spec.teams:
        meta = {"name": ROLE, "namespace": t.ns, "labels": {names.K8S_MANAGED_BY_LABEL: names.TGK}}
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": [
                    {"apiGroups": [names.JOBSET_GROUP], "resources": ["jobsets"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
                ],
            }
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "subjects": [{"kind": "ServiceAccount", "name": t.ksa, "namespace": t.ns}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
            }
        )
    out += attempt_only_policy(spec)
    return out


def attempt_only_policy(spec: EnvSpec) -> list[dict[str, Any]]:
    """A team's service account may change nothing on a pod but the agent's attempt annotation (keps/467's policy)."""
    accounts = "[" + ", ".join(f"'system:serviceaccount:{t.ns}:{t.ksa}'" for t in sorted(spec.teams, key=lambda t: t.ns)) + "]"
    keep = (
        "oldObject.spec == object.spec && "
        "oldObject.metadata.?labels.orValue({}) == object.metadata.?labels.orValue({}) && "
        f"oldObject.metadata.?annotations.orValue({{}}).all(k, k == '{ATTEMPT_ANNOTATION}' || "
        "(k in object.metadata.?annotations.orValue({}) && object.metadata.annotations[k] == oldObject.metadata.annotations[k])) && "
        f"object.metadata.?annotations.orValue({{}}).all(k, k == '{ATTEMPT_ANNOTATION}' || k in oldObject.metadata.?annotations.orValue({{}}))"
    )
    return [
        {
            "apiVersion": names.ADMISSION_API,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY, "labels": {names.K8S_MANAGED_BY_LABEL: names.TGK}},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]},
                "matchConditions": [{"name": "a-teams-service-account", "expression": f"request.userInfo.username in {accounts}"}],
                "validations": [
                    {
                        "expression": keep,
                        "message": f"a team's service account may change only the {ATTEMPT_ANNOTATION} annotation of a pod (JobSet's in-place restart agent)",
                    }
                ],
            },
        },
        {
            "apiVersion": names.ADMISSION_API,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY, "labels": {names.K8S_MANAGED_BY_LABEL: names.TGK}},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    ]
