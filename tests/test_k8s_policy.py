"""checkov's Kubernetes policies on every rendered manifest: zero unaccepted findings.

The Terraform is scanned in tests/test_checkov.py; this is the same for the
Kubernetes side, with checkov 3.3.30's ``kubernetes`` framework over what
tests/support/k8s_scan.py lays out per example: the cluster objects (``queues apply``: Kueue,
Namespaces, KSAs, PriorityClasses, NetworkPolicies, the priority admission policies,
the DCN DaemonSet), the Kustomize tree of every runtime, what ``submit`` applies (JobSet;
Service + Job; RayJob), and what the controllers create from it (the JobSet's child
Jobs; KubeRay's head and worker pods and submitter Job), which checkov has no model of.

Rendered objects carry no checkov annotations (the manifests are the product), so
accepted findings live in ACCEPTED below, each scoped to a kind and to the objects it
applies to, and carrying its reason. Two runs, as for the Terraform: plain checkov must
fail exactly the accepted findings (nothing unaccepted, nothing stale); with a baseline
made from them, zero failures. ``scripts/k8s_policy_by_kind.py`` counts the raw
findings by kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from modules._checkov import CHECK_ID
from tests.support.k8s_scan import write_scan_tree
from tests.test_checkov import run_checkov as checkov_report
from toolkit.names import RAY_SUBMITTER_CONTAINER, TPU_RESOURCE
from workloads.render.pathways import PROXY_CONTAINER
from workloads.render.rayjob import HEAD_CONTAINER
from workloads.render.skeleton import BASE_NAME

pytestmark = pytest.mark.tools


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a scanned Job or Pod."""
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def tpu_worker(obj: dict[str, Any]) -> bool:
    """A TPU worker: a Job or Pod whose containers ask for TPU chips, or a runtime's base skeleton (no run yet)."""
    if obj["kind"] == "Job" and obj["metadata"]["name"] == BASE_NAME:
        return True
    return any(TPU_RESOURCE in (c.get("resources") or {}).get("limits", {}) for c in _pod(obj).get("containers", []))


def cpu_run_pod(obj: dict[str, Any]) -> bool:
    """A run's CPU pod on the spec's CPU pool: a RayJob's head pod or its submitter Job, a Pathways head Job (its proxy and
    resource manager as native sidecars)."""
    pod = _pod(obj)
    names = {c["name"] for c in [*pod.get("containers", []), *pod.get("initContainers", [])]}
    return not tpu_worker(obj) and bool(names & {HEAD_CONTAINER, RAY_SUBMITTER_CONTAINER, PROXY_CONTAINER})


def run_pod(obj: dict[str, Any]) -> bool:
    return tpu_worker(obj) or cpu_run_pod(obj)


def _always(_obj: dict[str, Any]) -> bool:
    return True


def _default_ns(obj: dict[str, Any]) -> bool:
    return obj["metadata"].get("namespace") == "default"


def _host_network(obj: dict[str, Any]) -> bool:
    return bool(_pod(obj).get("hostNetwork"))


def _skeleton(obj: dict[str, Any]) -> bool:
    return obj["metadata"]["name"] == BASE_NAME


def _xpk_configmap(obj: dict[str, Any]) -> bool:
    return _default_ns(obj) and obj["metadata"]["name"].endswith(("-resources-configmap", "-metadata-configmap"))


@dataclass(frozen=True)
class Accepted:
    check: str
    kind: str  # the kind checkov names in the finding
    reason: str
    applies: Callable[[dict[str, Any]], bool] = run_pod  # on the scanned object

    @property
    def scope(self) -> str:
        return self.applies.__name__


_RUN = "a run's pods (TPU workers of the JobSet, the Job and the RayJob's worker group; the Ray head and submitter)"
_DAEMONSET = "the DCN TCP-tuning DaemonSet (workloads/render/multinetwork.py, network.dcn)"
_PRIVILEGED = (
    f"{_DAEMONSET}: its init container writes net.ipv4.tcp_rmem in the host's network namespace, which needs hostNetwork and "
    "privileged (the kubelet refuses net.* sysctls on host-network pods; /proc/sys is read-only in every unprivileged container)"
)
_IN_DEFAULT_NS = (
    "a spec without teams: gets one implicit team named default in the default namespace (infra.spec.EnvSpec.teams), "
    "so a one-team cluster needs no namespace of its own; specs that list teams give each its own namespace"
)


def _resources(check: str, what: str) -> tuple[Accepted, ...]:
    """One resources finding, for the TPU workers and for the runs' CPU pods (Jobs and Pods alike)."""
    cpu = (
        "the Ray head and submitter and the Pathways head request no CPU or memory on purpose: the team's ClusterQueue has only TPU "
        "flavors, and Kueue would give a pod set that requests a resource they cover a TPU flavor's node labels (workloads/render/rayjob.py); "
        "a Pathways head's CPU node is checked against its sidecars' published sizes at plan time (workloads/planning/pathways.py)"
    )
    return tuple(
        Accepted(check, kind, reason, applies)
        for kind in ("Job", "Pod")
        for reason, applies in ((f"the TPU worker owns its whole TPU VM (it takes every chip); {what}", tpu_worker), (cpu, cpu_run_pod))
    )


ACCEPTED: tuple[Accepted, ...] = (
    Accepted(
        "CKV_K8S_19",
        "Job",
        (
            "hostNetwork only for runs of teams with host_network: true in the spec, asked for with --host-network: "
            "the pods skip the pod network for DCN traffic (apple/axlearn#641: 50% -> 58% MFU on 2x v5e-256) and act as "
            "the node SA, which holds only opted-in teams' buckets; every other team's namespace enforces Pod Security baseline"
        ),
        _host_network,
    ),
    *_resources("CKV_K8S_10", "a CPU request adds nothing and Kueue's quota is in chips"),
    *_resources("CKV_K8S_11", "a CPU limit would only throttle the input pipeline and host-side XLA work"),
    *_resources("CKV_K8S_12", "a memory request would only have to guess the host memory MaxText's input pipeline needs"),
    *_resources("CKV_K8S_13", "a memory limit below the VM's would OOM-kill a multi-hour run for no neighbour's benefit"),
    *(
        Accepted(
            "CKV_K8S_15",
            kind,
            f"{_RUN} pull IfNotPresent: images are pinned by tag or digest (the planner refuses untagged --image) and multi-GB, "
            "and a restart of 64 slices must not re-pull",
        )
        for kind in ("Job", "Pod")
    ),
    *(
        Accepted(
            "CKV_K8S_43",
            kind,
            f"{_RUN} name images by tag (recipes, checked by the planner) so Artifact Registry pushes from CI apply; --image takes a digest for a pinned run",
        )
        for kind in ("Job", "Pod")
    ),
    *(
        Accepted(
            "CKV_K8S_22",
            kind,
            f"{_RUN}: JAX, libtpu, MaxText and Ray write caches, logs and temporary files under the root filesystem (~/.cache, /tmp/tpu_logs, "
            "/tmp/ray); a read-only root needs an emptyDir for each, to be confirmed on a TPU run (follow-up)",
        )
        for kind in ("Job", "Pod")
    ),
    Accepted(
        "CKV_K8S_14",
        "Job",
        "the runtimes' base skeletons (base/jobset/, base/job/) carry no image: every overlay's patch sets the run's pinned image",
        _skeleton,
    ),
    *(Accepted("CKV_K8S_21", kind, _IN_DEFAULT_NS, _default_ns) for kind in ("Job", "Pod", "Service", "ServiceAccount")),
    *(
        Accepted(
            "CKV_K8S_21",
            kind,
            "the runtimes' base skeletons (base/<runtime>/) name no namespace: every overlay's namespace transformer puts the run in its team's",
            _skeleton,
        )
        for kind in ("Job", "Service")
    ),
    Accepted(
        "CKV_K8S_21",
        "ConfigMap",
        (
            "xpk's <cluster>-resources-configmap and -metadata-configmap (workloads/render/xpk.py, xpk.enabled): xpk 1.13 reads them "
            "with `kubectl get configmap` and no -n, i.e. in its kube context's namespace, which is default unless xpk.namespace says otherwise"
        ),
        _xpk_configmap,
    ),
    # The DCN DaemonSet: privileged exactly where the host's sysctl needs it (multinetwork.py's docstring says why).
    Accepted("CKV_K8S_16", "DaemonSet", f"{_PRIVILEGED}; it runs two busybox commands with a read-only root and exits", _always),
    Accepted("CKV_K8S_19", "DaemonSet", f"{_PRIVILEGED}; the host's namespace is the one hostNetwork runs (and xpk's) use", _always),
    Accepted(
        "CKV_K8S_20", "DaemonSet", f"{_PRIVILEGED}; the API refuses allowPrivilegeEscalation: false beside privileged (the pause container sets it)", _always
    ),
    Accepted(
        "CKV_K8S_28", "DaemonSet", f"{_PRIVILEGED}; a privileged container holds every capability whatever it drops (the pause container drops ALL)", _always
    ),
    Accepted(
        "CKV_K8S_37", "DaemonSet", f"{_PRIVILEGED}; a privileged container holds every capability whatever it drops (the pause container drops ALL)", _always
    ),
    Accepted("CKV_K8S_15", "DaemonSet", f"{_DAEMONSET} pulls IfNotPresent: both images are pinned by tag (busybox:1.37.0, pause:3.10)", _always),
    Accepted("CKV_K8S_43", "DaemonSet", f"{_DAEMONSET} names busybox:1.37.0 and registry.k8s.io/pause:3.10 by tag (pinned; digests are a follow-up)", _always),
    *(
        Accepted(
            check,
            "DaemonSet",
            f"{_DAEMONSET}: its work is the init container, which runs to completion before the pod starts; the pause container only holds "
            "the place (restarting it would redo the sysctl), so a probe would check nothing",
            _always,
        )
        for check in ("CKV_K8S_8", "CKV_K8S_9")
    ),
)


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """Every manifest written into one tree: {checkov file path: the objects in it}."""
    root = tmp_path_factory.mktemp("k8s-policy")
    return root, write_scan_tree(root)


def run_checkov(root: Path, *extra: str) -> dict[str, Any]:
    return checkov_report(root, *extra, framework="kubernetes")


def _key(finding: dict[str, Any]) -> tuple[str, str, str, str]:
    """(file, kind, name, check): checkov names a resource <kind>.<namespace>.<name>[.<more>]."""
    kind, _ns, name = finding["resource"].split(".")[:3]
    return finding["file_path"], kind, name, finding["check_id"]


def expected_findings(objects: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str, str, str], str]:
    out = {}
    for file, objs in objects.items():
        for obj in objs:
            for a in ACCEPTED:
                if obj["kind"] == a.kind and a.applies(obj):
                    out[(file, a.kind, obj["metadata"]["name"], a.check)] = a.reason
    return out


def test_every_acceptance_has_a_check_id_and_a_reason():
    seen = set()
    for a in ACCEPTED:
        assert CHECK_ID.match(a.check) and a.check.startswith(("CKV_K8S_", "CKV2_K8S_")), a.check
        assert len(a.reason.strip()) >= 40, f"{a.check}: accepted without a real reason"
        assert (a.check, a.kind, a.scope) not in seen, f"{a.check} accepted twice for {a.kind} ({a.scope})"
        seen.add((a.check, a.kind, a.scope))


def test_every_runtime_and_kind_is_scanned(scanned):
    """The scan covers each runtime's objects, what their controllers create, and the cluster-side objects."""
    _root, objects = scanned
    kinds = {o["kind"] for objs in objects.values() for o in objs}
    assert {"JobSet", "Job", "Service", "RayJob", "Pod", "DaemonSet", "NetworkPolicy", "ValidatingAdmissionPolicy"} <= kinds, kinds
    created = [o for f, objs in objects.items() if "/created/" in f for o in objs]
    assert any(tpu_worker(o) and o["kind"] == "Pod" for o in created), "no Ray TPU worker pod scanned"
    assert any(cpu_run_pod(o) and o["kind"] == "Pod" for o in created), "no Ray head pod scanned"
    assert any(cpu_run_pod(o) and o["kind"] == "Job" and o["metadata"]["name"].endswith("-pathways-head") for o in created), "no Pathways head scanned"
    assert any(cpu_run_pod(o) and o["kind"] == "Job" and not o["metadata"]["name"].endswith("-pathways-head") for o in created), "no Ray submitter Job scanned"


def test_the_fleet_s_own_objects_are_scanned(scanned):
    """The manager's MultiKueue objects, its identity's RBAC and token Secret on each worker, and its kubeconfig Secrets."""
    _root, objects = scanned
    fleet = {o["kind"] for f, objs in objects.items() if f.startswith("/fleet/") for o in objs}
    assert {"ClusterRole", "ClusterRoleBinding", "RoleBinding", "ServiceAccount", "Secret", "MultiKueueCluster", "ClusterQueue"} <= fleet, fleet
    secrets = [o for f, objs in objects.items() if f.startswith("/fleet/") for o in objs if o["kind"] == "Secret"]
    assert {s.get("type") for s in secrets} == {"kubernetes.io/service-account-token", "Opaque"}  # token Secrets and kubeconfig Secrets


@pytest.fixture(scope="module")
def plain_report(scanned) -> dict[str, Any]:
    """Plain checkov over the tree, once: both tests below read the same findings."""
    return run_checkov(scanned[0])


def test_findings_are_exactly_the_accepted_ones(scanned, plain_report):
    _root, objects = scanned
    report = plain_report
    assert report["summary"]["passed"] > 0, "checkov scanned nothing"
    # (--quiet lists only failures; that the worker Jobs are scanned at all shows in the Job findings below)
    failed = {_key(f) for f in report["results"]["failed_checks"]}
    expected = set(expected_findings(objects))
    unaccepted = sorted(failed - expected)
    stale = sorted(expected - failed)
    assert not unaccepted, "checkov findings without an acceptance in ACCEPTED:\n" + "\n".join(map(str, unaccepted))
    assert not stale, "acceptances for checks that now pass (remove them):\n" + "\n".join(map(str, stale))


def test_host_network_is_flagged_only_where_a_team_opted_in(scanned):
    _root, objects = scanned
    flagged = {(f, n) for (f, k, n, c) in expected_findings(objects) if c == "CKV_K8S_19" and k == "Job"}  # (the DaemonSet's is its own)
    assert flagged, "no opted-in hostNetwork run was scanned"
    for file, name in flagged:
        example = file.split("/")[1]
        spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
        (job,) = [o for o in objects[file] if o["metadata"]["name"] == name]
        team = next(t for t in spec.teams if t.ns == job["metadata"]["namespace"])
        assert team.host_network, f"{name}: hostNetwork in {team.name}'s namespace, which did not opt in"


def test_zero_failures_with_a_baseline_of_the_accepted_findings(scanned, plain_report, tmp_path):
    root, objects = scanned
    report = plain_report
    expected = expected_findings(objects)
    by_file: dict[str, dict[str, set[str]]] = {}
    for f in report["results"]["failed_checks"]:
        if _key(f) in expected:
            by_file.setdefault(f["file_path"], {}).setdefault(f["resource"], set()).add(f["check_id"])
    base = tmp_path / "k8s.baseline"
    base.write_text(
        json.dumps(
            {
                "failed_checks": [
                    {"file": file, "findings": [{"resource": r, "check_ids": sorted(ids)} for r, ids in sorted(res.items())]}
                    for file, res in sorted(by_file.items())
                ]
            }
        )
    )
    again = run_checkov(root, "--baseline", str(base))
    failed = [(f["file_path"], f["resource"], f["check_id"]) for f in again["results"]["failed_checks"]]
    assert failed == [], f"checkov still fails: {failed}"
