"""checkov's Kubernetes policies on every rendered manifest: zero unaccepted findings.

The Terraform is scanned in tests/test_checkov.py; this is the same for the
Kubernetes side, with checkov 3.3.30's ``kubernetes`` framework over, per example:

- the Kueue objects ``queues apply`` applies (Namespaces, KSAs, PriorityClasses,
  ResourceFlavors, ClusterQueues, LocalQueues);
- the Kustomize tree ``render`` writes (base skeleton and one overlay per run);
- what ``submit`` applies: each overlay built (the JobSet);
- the child Jobs the JobSet controller creates from ``replicatedJobs[].template``.
  checkov has no JobSet model, so without these its pod and container policies
  would never see a TPU worker's pod.

Runs: every team's default run, and a ``--host-network`` run for teams that opted in.
Rendered objects carry no checkov annotations (the manifests are the product), so
accepted findings live in ACCEPTED below, each scoped to a kind (and, where it
matters, to the objects it applies to) and carrying its reason. Two runs, as for
the Terraform: plain checkov must fail exactly the accepted findings (nothing
unaccepted, nothing stale); with a baseline made from them, zero failures.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.spec import EXAMPLES_DIR, load_spec
from modules._checkov import CHECK_ID
from tests.conftest import EXAMPLE_NAMES
from tests.test_checkov import _checkov
from workloads.planning.planner import Overrides, plan_run
from workloads.render import kueue, yamlio
from workloads.render.kustomize import build_overlay, render, write_tree

pytestmark = pytest.mark.tools

RECIPE = {
    "default": "maxtext-6b",
    "fallback": "llama3-8b",
    "flex-start": "llama3-8b",
    "teams": "maxtext-6b",
    "tpu7x": "maxtext-6b",
    "tpu7x-multislice": "maxtext-6b",
    "v4": "maxtext-6b",
    "v5p": "gpt3-6b",
    "v6e-reservation": "llama3-8b",
}


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def _always(_obj: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Accepted:
    check: str
    kind: str  # the kind checkov names in the finding
    reason: str
    applies: Callable[[dict[str, Any]], bool] = _always  # on the scanned object (a Job for "Job" and "Pod")


# Why the TPU worker's pod is as it is. Each entry is scoped to the objects it names;
# a finding anywhere else fails the test, and so does an entry nothing fails any more.
_WORKER = "the TPU worker pod (the JobSet's Job template, rendered by workloads/render/jobset.py)"
ACCEPTED: tuple[Accepted, ...] = (
    Accepted(
        "CKV_K8S_19",
        "Job",
        (
            "hostNetwork only for runs of teams with host_network: true in the spec, asked for with --host-network: "
            "the pods skip the pod network for DCN traffic (apple/axlearn#641: 50% -> 58% MFU on 2x v5e-256) and act as "
            "the node SA, which holds only opted-in teams' buckets; every other team's namespace enforces Pod Security baseline"
        ),
        lambda job: bool(_pod(job).get("hostNetwork")),
    ),
    Accepted(
        "CKV_K8S_10", "Job", f"{_WORKER} is the only workload pod on its TPU VM (it takes every chip); a CPU request adds nothing and Kueue's quota is in chips"
    ),
    Accepted("CKV_K8S_11", "Job", f"{_WORKER} owns its whole TPU VM; a CPU limit would only throttle the input pipeline and host-side XLA work"),
    Accepted("CKV_K8S_12", "Job", f"{_WORKER} owns its whole TPU VM; a memory request would only have to guess the host memory MaxText's input pipeline needs"),
    Accepted("CKV_K8S_13", "Job", f"{_WORKER} owns its whole TPU VM; a memory limit below the VM's would OOM-kill a multi-hour run for no neighbour's benefit"),
    Accepted(
        "CKV_K8S_15",
        "Job",
        f"{_WORKER} pulls IfNotPresent: images are pinned by tag or digest (the planner refuses untagged --image) and multi-GB, and a restart of 64 slices must not re-pull",
    ),
    Accepted(
        "CKV_K8S_43",
        "Job",
        f"{_WORKER} names images by tag (recipes, checked by the planner) so Artifact Registry pushes from CI apply; --image takes a digest for a pinned run",
    ),
    Accepted(
        "CKV_K8S_20",
        "Job",
        f"{_WORKER} runs the upstream MaxText image unchanged; setting allowPrivilegeEscalation: false needs a TPU run to confirm libtpu is unaffected (hardening follow-up)",
    ),
    Accepted(
        "CKV_K8S_22",
        "Job",
        f"{_WORKER}: JAX, libtpu and MaxText write caches and temporary files under the root filesystem; a read-only root needs an emptyDir for each (hardening follow-up)",
    ),
    Accepted("CKV_K8S_23", "Job", f"{_WORKER} runs as the MaxText image's user (root); a non-root user needs an image built for it (hardening follow-up)"),
    Accepted("CKV_K8S_40", "Job", f"{_WORKER} runs as the MaxText image's user (root); a high UID needs an image built for it (hardening follow-up)"),
    Accepted(
        "CKV_K8S_28",
        "Job",
        f"{_WORKER} keeps the runtime's default capabilities; dropping NET_RAW needs a TPU run to confirm libtpu/megascale are unaffected (hardening follow-up)",
    ),
    Accepted(
        "CKV_K8S_37",
        "Job",
        f"{_WORKER} keeps the runtime's default capabilities; drop ALL needs a TPU run to confirm libtpu/megascale are unaffected (hardening follow-up)",
    ),
    Accepted("CKV_K8S_29", "Job", f"{_WORKER} sets no securityContext yet: the settings it would carry are the accepted CKV_K8S_20/23/28/31/37/40 items above"),
    Accepted(
        "CKV_K8S_30",
        "Job",
        f"{_WORKER} sets no container securityContext yet: the settings it would carry are the accepted CKV_K8S_20/22/23/28/37/40 items above",
    ),
    Accepted(
        "CKV_K8S_31",
        "Job",
        f"{_WORKER} uses the node's default seccomp profile; RuntimeDefault needs a TPU run to confirm libtpu's syscalls pass (hardening follow-up)",
    ),
    Accepted(
        "CKV_K8S_38", "Job", f"{_WORKER} keeps the KSA token mounted: the team's KSA is its identity (Workload Identity) and tools in the image may read it"
    ),
    *(
        Accepted(
            "CKV_K8S_21",
            kind,
            (
                "a spec without teams: gets one implicit team named default in the default namespace (infra.spec.EnvSpec.teams), "
                "so a one-team cluster needs no namespace of its own; specs that list teams give each its own namespace"
            ),
            lambda obj: obj["metadata"].get("namespace") == "default",
        )
        for kind in ("Job", "ServiceAccount")
    ),
    Accepted(
        "CKV_K8S_21",
        "ConfigMap",
        (
            "xpk's <cluster>-resources-configmap and -metadata-configmap (workloads/render/xpk.py, xpk.enabled): xpk 1.13 reads them "
            "with `kubectl get configmap` and no -n, i.e. in its kube context's namespace, which is default unless xpk.namespace says otherwise"
        ),
        lambda obj: obj["metadata"].get("namespace") == "default" and obj["metadata"]["name"].endswith(("-resources-configmap", "-metadata-configmap")),
    ),
    Accepted(
        "CKV2_K8S_6",
        "Pod",
        (
            f"{_WORKER}: cross-team isolation here is by identity (one GSA per team, Pod Security baseline); "
            "a per-namespace NetworkPolicy needs the cluster's policy enforcement (Dataplane V2) and an allowance for "
            "the JobSet's own DNS and megascale traffic (follow-up)"
        ),
    ),
)


def child_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """The Jobs the JobSet controller creates: one per replicated job, its template verbatim."""
    meta = jobset["metadata"]
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{meta['name']}-{rj['name']}", "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {})},
            "spec": rj["template"]["spec"],
        }
        for rj in jobset["spec"]["replicatedJobs"]
    ]


def runs(example: str):
    spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
    for team in spec.teams:
        for host in (False, True) if team.host_network else (False,):
            name = f"{team.name}-{'hostnet' if host else 'podnet'}"[:30].rstrip("-")
            yield plan_run(RECIPE[example], spec, Overrides(slices=1, name=name, team=team.name, host_network=host))


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """Every manifest written into one tree: {checkov file path: the objects in it}."""
    root = tmp_path_factory.mktemp("k8s-policy")
    objects: dict[str, list[dict[str, Any]]] = {}

    def put(rel: str, objs: list[dict[str, Any]]) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yamlio.dump_all(objs))
        objects["/" + rel] = objs

    for example in EXAMPLE_NAMES:
        spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
        put(f"{example}/kueue.yaml", kueue.queue_objects(spec))
        tree: dict[str, str] = {}
        for plan in runs(example):
            files = render(plan)
            tree.update(files)
            built = build_overlay(files, plan.name)
            put(f"{example}/built/{plan.name}.yaml", built)
            put(f"{example}/jobs/{plan.name}.yaml", [j for obj in built if obj["kind"] == "JobSet" for j in child_jobs(obj)])
        write_tree(root / example / "tree", tree)
        for rel, text in tree.items():
            if rel.endswith(".yaml"):
                objects[f"/{example}/tree/{rel}"] = [o for o in yamlio.load_all(text) if isinstance(o, dict) and "kind" in o]
    return root, objects


def run_checkov(root: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [_checkov(), "-d", str(root), "--framework", "kubernetes", "--skip-download", "--compact", "--quiet", "-o", "json", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    assert proc.returncode in (0, 1), f"checkov failed ({proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout)
    reports = out if isinstance(out, list) else [out]
    (report,) = [r for r in reports if r.get("check_type") == "kubernetes"] or [{"results": {"failed_checks": []}, "summary": {}}]
    assert report["summary"].get("parsing_errors", 0) == 0
    return report


def _key(finding: dict[str, Any]) -> tuple[str, str, str, str]:
    """(file, kind, name, check): checkov names a resource <kind>.<namespace>.<name>[.<more>]."""
    kind, _ns, name = finding["resource"].split(".")[:3]
    return finding["file_path"], kind, name, finding["check_id"]


def expected_findings(objects: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str, str, str], str]:
    out = {}
    for file, objs in objects.items():
        for obj in objs:
            for a in ACCEPTED:
                scanned_as = "Job" if a.kind == "Pod" else a.kind  # checkov's Pod graph node for a Job's template
                if obj["kind"] == scanned_as and a.applies(obj):
                    out[(file, a.kind, obj["metadata"]["name"], a.check)] = a.reason
    return out


def test_every_acceptance_has_a_check_id_and_a_reason():
    seen = set()
    for a in ACCEPTED:
        assert CHECK_ID.match(a.check) and a.check.startswith(("CKV_K8S_", "CKV2_K8S_")), a.check
        assert len(a.reason.strip()) >= 40, f"{a.check}: accepted without a real reason"
        assert (a.check, a.kind) not in seen, f"{a.check} accepted twice for {a.kind}"
        seen.add((a.check, a.kind))


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
    flagged = {(f, n) for (f, k, n, c) in expected_findings(objects) if c == "CKV_K8S_19"}
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
