"""The JobSet for a RunPlan, as plain data (dicts), per docs/facts/jobset-kueue.md.

Pure: a RunPlan in, dicts out; ``workloads.render.yamlio`` serializes them. Choices
made here (and why):

- Priority: the pod's ``priorityClassName`` (the five PriorityClasses from
  ``infra.spec.PRIORITY_CLASSES``, created by ``queues apply``). Kueue takes a
  JobSet's workload priority from it, and the kube-scheduler sees the same value,
  so there is one priority, not two that can disagree. No WorkloadPriorityClass.
- hostNetwork (off unless the run asks and its team opted in): GKE's multislice
  examples and xpk use it for DCN throughput, but hostNetwork pods reach the node's
  metadata server and act as the *node* service account, so Workload Identity (the
  team KSA's GSA) does not apply. README "Isolation between teams" has the trade-off.
- Entrypoint: the program runs under ``exitguard`` so a worker stopped by SIGTERM
  never ends Succeeded (MaxText exits 0 after saving at a SIGTERM).
- Multislice env is explicit: MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID come
  from the JobSet's downward-API annotations (so a changed replica count cannot
  leave them stale); the coordinator is worker 0 of slice 0 by its stable DNS name.
  JobSet's ``spec.coordinator`` is not used: it writes ``<pod>.<jobset>`` into a
  *label*, whose 63-character limit would cap run names near 26 characters.
- Failure handling (JobSet v0.12.0 on Kubernetes 1.34; the rules are v0.10's): a multi-host JAX program
  cannot take a replacement pod, and GKE recreates a multi-host slice as a unit, so
  every failure ends the child Job at once (``backoffLimit: 0``) and JobSet decides:

    child Job podFailurePolicy            Job failure message (Kubernetes 1.34)       JobSet rule
    0 FailJob on DisruptionTarget=True    "Pod <ns>/<pod> has condition               disruption: RestartJobSetAndIgnoreMaxRestarts
      (preemption, maintenance,            DisruptionTarget matching FailJob rule
      eviction, node loss)                 at index 0"
    1 FailJob on exit code in 1, 2 and    "Container workload for pod <ns>/<pod>      program_error: FailJobSet (the Job's
      the recipe's fatal_exit_codes        failed with exit code N matching FailJob    message names the exit code)
                                           rule at index 1"
    (none: counted, backoffLimit 0)       reason BackoffLimitExceeded                  other_failure: RestartJobSet, counts
                                                                                       toward maxRestarts

  Both FailJob rules give the same reason (``PodFailurePolicy``), so the JobSet rules
  tell them apart by the message (``onJobFailureMessagePatterns``, new in JobSet
  v0.10), anchored on the rule index this module rendered. Disruption is checked
  first on both levels: a disrupted pod that also exited 1 on SIGTERM is a disruption,
  and a disrupted slice outranks a peer slice that crashed because of it, as long as
  its Job has failed by the time JobSet looks (see ``failure_policy``).
"""

from __future__ import annotations

import json
from typing import Any

from infra.recovery import IN_PLACE
from toolkit import names
from workloads.planning.model import RUNTIME_JOBSET, RunPlan
from workloads.planning.target import REPLICATED_JOB
from workloads.render import dynamic_slicing, exitguard, inplace, podsecurity, volumes
from workloads.render.kubelet_escape import k8s_literals
from workloads.render.program_env import program_env

RUNTIME = RUNTIME_JOBSET
MEGASCALE_PORT = 8080
TPU_RUNTIME_PORT = 8471
# JobSet failure-policy rule names (JobSet's webhook refuses '-': letters, digits and '_').
DISRUPTION_RULE = "disruption"
PROGRAM_ERROR_RULE = "program_error"
OTHER_FAILURE_RULE = "other_failure"
# The child Job's podFailurePolicy rules, in order: the Job controller's failure
# message names the index of the rule that matched, and the JobSet rules match on it.
DISRUPTION_INDEX = 0
PROGRAM_ERROR_INDEX = 1
JOB_FAILURE_REASON = "PodFailurePolicy"  # the Job condition reason of any FailJob match


def disruption_message_pattern() -> str:
    """RE2 for Kubernetes 1.34's message for a FailJob pod-condition match (pkg/controller/job/pod_failure_policy.go)."""
    return rf"^Pod \S+ has condition DisruptionTarget matching FailJob rule at index {DISRUPTION_INDEX}$"


def program_error_message_pattern(parallel: bool = False) -> str:
    """RE2 for Kubernetes 1.34's message for a FailJob exit-code match of the workload container (with
    ``parallel`` containers, of any of them: ``workload-2`` is the second)."""
    name = f"{names.WORKLOAD_CONTAINER}(-\\d+)?" if parallel else names.WORKLOAD_CONTAINER
    return rf"^Container {name} for pod \S+ failed with exit code \d+ matching FailJob rule at index {PROGRAM_ERROR_INDEX}$"


def coordinator_address(plan: RunPlan) -> str:
    """Worker 0 of slice 0 through the JobSet's headless Service (subdomain = name)."""
    return f"{plan.name}-{REPLICATED_JOB}-0-0.{plan.name}"


def _annotation_ref(annotation: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}


# libtpu's MegaScale (the multislice transport) sends its DCN gRPC over the interfaces this
# flag names: the second network's NIC first (eth1: the host's with hostNetwork, the pod's
# own with GKE multi-networking; eth2 on machines with two), the loopback last.
MEGASCALE_GRPC_FLAG = "--megascale_grpc_interface_prefixes=eth1,eth2,lo"
GKE_DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
GKE_INTERFACES_ANNOTATION = "networking.gke.io/interfaces"


def _libtpu_args(env: list[dict[str, Any]], flag: str) -> list[dict[str, Any]]:
    """``flag`` added to LIBTPU_INIT_ARGS (kept where it is, after the recipe's flags), unless already there."""
    for e in env:
        if e["name"] == "LIBTPU_INIT_ARGS":
            if flag.split("=")[0] not in e.get("value", ""):
                e["value"] = f"{e.get('value', '')} {flag}".strip()
            return env
    return [*env, {"name": "LIBTPU_INIT_ARGS", "value": flag}]


def _env(plan: RunPlan) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = program_env(plan.program)
    env += exitguard.env(plan.policy.hang)
    if plan.target.multislice and plan.target.containers_per_vm > 1:
        # Two processes per pod cannot share one MegaScale port: GKE's TPU webhook sets each container's
        # (workloads.planning.parallel_containers); the DCN interfaces are still the run's to name.
        return _libtpu_args(env, MEGASCALE_GRPC_FLAG) if plan.target.dcn is not None else env
    if plan.target.multislice:
        env += [
            {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": coordinator_address(plan)},
            {"name": "MEGASCALE_NUM_SLICES", "valueFrom": _annotation_ref(names.JOBSET_REPLICAS_ANNOTATION)},
            {"name": "MEGASCALE_SLICE_ID", "valueFrom": _annotation_ref(names.JOBSET_JOB_INDEX_LABEL)},
            {"name": "MEGASCALE_PORT", "value": str(MEGASCALE_PORT)},
        ]
        if plan.target.dcn is not None:
            env = _libtpu_args(env, MEGASCALE_GRPC_FLAG)
    return env


def pod_annotations(plan: RunPlan) -> dict[str, str]:
    """On the pod network, GKE multi-networking gives the pod the DCN NIC as eth1 (hostNetwork pods use the host's);
    a GCS FUSE volume (the dataset) asks GKE for the driver's sidecar (``volumes.pod_annotations``)."""
    out = {**volumes.pod_annotations(plan), **dynamic_slicing.pod_annotations(plan)}
    dcn = plan.target.dcn
    if dcn is None or plan.policy.host_network:
        return out
    interfaces = [{"interfaceName": "eth0", "network": "default"}, {"interfaceName": "eth1", "network": dcn.network}]
    return {GKE_DEFAULT_INTERFACE_ANNOTATION: "eth0", GKE_INTERFACES_ANNOTATION: json.dumps(interfaces, separators=(",", ":")), **out}


def run_labels(plan: RunPlan) -> dict[str, str]:
    return {names.KUEUE_QUEUE_LABEL: plan.target.local_queue, **dict(plan.labels)}


def pod_labels(plan: RunPlan) -> dict[str, str]:
    return dict(plan.labels)


def containers(plan: RunPlan) -> list[dict[str, Any]]:
    """The pod's training containers: one, or with parallel containers one per NUMA node, each with its share of the chips.

    The second is ``workload-2``, the same program; it declares no ports (two processes of a pod
    cannot hold the same ones, and GKE's TPU webhook gives each container its own).
    """
    first = container(plan)
    out = [first]
    for i in range(2, plan.target.containers_per_vm + 1):
        c = {**first, "name": f"{names.WORKLOAD_CONTAINER}-{i}"}
        c.pop("ports")
        out.append(c)
    return out


def container(plan: RunPlan) -> dict[str, Any]:
    program, tpu = plan.program, plan.target.chips_per_container
    c: dict[str, Any] = {
        "name": names.WORKLOAD_CONTAINER,
        "image": program.image,
        "imagePullPolicy": "IfNotPresent",
    }
    # Every worker runs under the exit guard: a drained worker must not end Succeeded. The
    # program and its arguments are the guard's argv ("$@"), never part of its script, and
    # carry their `$` doubled: the kubelet would expand $(NAME) in them.
    c["command"], c["args"] = exitguard.wrap(program.command, program.args)
    c["args"] = k8s_literals(c["args"])
    c["env"] = podsecurity.home_env(plan.target.run_as_user, _env(plan))
    c["ports"] = [
        {"name": "tpu-runtime", "containerPort": TPU_RUNTIME_PORT},
        {"name": "megascale", "containerPort": MEGASCALE_PORT},
    ]
    c["resources"] = {"requests": {names.TPU_RESOURCE: tpu}, "limits": {names.TPU_RESOURCE: tpu}}
    c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}, *volumes.volume_mounts(plan)]
    c["securityContext"] = podsecurity.container_security_context()
    return c


def node_selector(plan: RunPlan) -> dict[str, str]:
    """The GKE labels every TPU VM of the target shape carries (and only those VMs)."""
    t = plan.target
    if t.dynamic is not None:
        return dynamic_slicing.node_selector(plan)  # Kueue and GKE's slice controller place it (workloads.render.dynamic_slicing)
    selector = {names.GKE_TPU_ACCELERATOR_LABEL: t.shape.accelerator_label, names.GKE_TPU_TOPOLOGY_LABEL: t.shape.topology}
    if t.placement_policy:
        selector[names.GKE_PLACEMENT_POLICY_LABEL] = t.placement_policy
    return selector


def in_place(plan: RunPlan) -> bool:
    return plan.policy.restart == IN_PLACE


def pod_spec(plan: RunPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": plan.target.priority,
        "serviceAccountName": plan.target.service_account,
        # The team's KSA is the pod's Google identity through the GKE metadata server; no
        # program in the pod calls the Kubernetes API (workloads/render/podsecurity.py).
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
    }
    sysctls = None
    if plan.policy.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    elif plan.target.dcn is not None:
        # tcp_rmem is per network namespace (and a safe sysctl since Kubernetes 1.32, allowed by
        # Pod Security baseline): the pod sets its own; host-network runs get the DaemonSet's.
        sysctls = [{"name": "net.ipv4.tcp_rmem", "value": plan.target.dcn.tcp_rmem}]
    spec["securityContext"] = podsecurity.pod_security_context(plan.target.run_as_user, sysctls)
    spec["nodeSelector"] = node_selector(plan)
    # A multi-host slice is one node pool: a pool with a VM cordoned as a bad host (workloads/runs/badhost.py)
    # cannot hold a slice, and a first pod placed there would hold its peers Pending for good. Dynamic
    # slicing adds its sub-block health to the same term (both must hold).
    expressions = [{"key": names.TGK_DEGRADED_SLICE_LABEL, "operator": "DoesNotExist"}]
    if (aff := dynamic_slicing.affinity(plan)) is not None:
        for term in aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
            expressions += term["matchExpressions"]
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}}
    spec["tolerations"] = [dict(names.TPU_TOLERATION)]
    if in_place(plan):
        # JobSet's agent runs the program (workloads/render/inplace.py).
        spec["initContainers"] = [inplace.init_container(plan, podsecurity.container_security_context())]
        spec["containers"] = [inplace.make_container(plan, container(plan))]
    else:
        spec["containers"] = containers(plan)
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes.volumes(plan)]
    if in_place(plan):
        spec["volumes"] += inplace.volumes()
    return spec


def pod_failure_policy(plan: RunPlan) -> dict[str, Any]:
    """Every classified failure ends the Job at once; the rule index tells JobSet which it was.

    ``status: "True"`` is always written: the API server requires it (HTTP 422
    ``onPodConditions[0].status: Required value`` otherwise).
    """
    rules: list[dict[str, Any]] = [{}, {}]
    # In place, a disrupted pod is replaced and the others restart where they are: the Job goes on.
    on_disruption = "Ignore" if in_place(plan) else "FailJob"
    rules[DISRUPTION_INDEX] = {"action": on_disruption, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    codes: dict[str, Any] = {"containerName": names.WORKLOAD_CONTAINER, "operator": "In", "values": list(plan.policy.program_error_exit_codes)}
    if plan.target.containers_per_vm > 1:
        del codes["containerName"]  # any of the parallel containers (a rule without a name covers them all)
    rules[PROGRAM_ERROR_INDEX] = {"action": "FailJob", "onExitCodes": codes}
    return {"rules": rules}


def job_spec(plan: RunPlan) -> dict[str, Any]:
    hosts = plan.target.shape.nodes
    return {
        "parallelism": hosts,
        "completions": hosts,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        **(inplace.job_fields() if in_place(plan) else {}),
        "podFailurePolicy": pod_failure_policy(plan),
        "template": {
            "metadata": {"labels": pod_labels(plan), **({"annotations": a} if (a := pod_annotations(plan)) else {})},
            "spec": pod_spec(plan),
        },
    }


def failure_policy(plan: RunPlan) -> dict[str, Any]:
    """JobSet's rules, first match wins (over all failed Jobs, rule by rule).

    A disruption restarts the whole JobSet without spending ``maxRestarts``; a program
    error fails it with the Job's message in its status; anything else restarts it up
    to ``plan.policy.max_restarts`` times (``Recreate``: every slice comes back).
    Known race: when one slice is preempted and a peer slice's JAX dies of the lost
    collective with exit code 1 *before* the preempted Job is marked failed, JobSet
    sees only the peer's Job and fails the run as a program error.
    """
    if in_place(plan):
        # Jobs fail only on a program error (backoffLimit MaxInt32, disruptions ignored); every other
        # failure restarts the workers in place, counted by JobSet against maxRestarts.
        return {
            "maxRestarts": plan.policy.max_restarts,
            "restartStrategy": inplace.STRATEGY,
            "rules": [
                {
                    "name": PROGRAM_ERROR_RULE,
                    "action": "FailJobSet",
                    "onJobFailureReasons": [JOB_FAILURE_REASON],
                    "onJobFailureMessagePatterns": [program_error_message_pattern()],
                },
                {"name": OTHER_FAILURE_RULE, "action": "RestartJobSet"},
            ],
        }
    return {
        "maxRestarts": plan.policy.max_restarts,
        "rules": [
            {
                "name": DISRUPTION_RULE,
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": [JOB_FAILURE_REASON],
                "onJobFailureMessagePatterns": [disruption_message_pattern()],
            },
            {
                "name": PROGRAM_ERROR_RULE,
                "action": "FailJobSet",
                "onJobFailureReasons": [JOB_FAILURE_REASON],
                "onJobFailureMessagePatterns": [program_error_message_pattern(plan.target.containers_per_vm > 1)],
            },
            {"name": OTHER_FAILURE_RULE, "action": "RestartJobSet"},
        ],
    }


def jobset(plan: RunPlan) -> dict[str, Any]:
    """The JobSet that runs the plan: one child Job per slice, one pod per TPU VM."""
    return {
        "apiVersion": names.JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": plan.name,
            "namespace": plan.target.namespace,
            "labels": run_labels(plan),
            # One slice per node pool; dynamic slices share node pools or span several, and Kueue places them.
            **({} if plan.target.dynamic else {"annotations": {names.JOBSET_EXCLUSIVE_TOPOLOGY_ANNOTATION: names.GKE_NODEPOOL_LABEL}}),
        },
        "spec": {
            "ttlSecondsAfterFinished": plan.policy.ttl_seconds,
            "failurePolicy": failure_policy(plan),
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": plan.target.slices,
                    "template": {"spec": job_spec(plan)},
                }
            ],
        },
    }


def run_objects(plan: RunPlan) -> list[dict[str, Any]]:
    """Every object of the run in the JobSet runtime (Kueue objects come from `queues apply`)."""
    return [jobset(plan)]
