"""Every manifest the toolkit renders, laid out for checkov's Kubernetes framework.

Shared by tests/test_k8s_policy.py (zero unaccepted findings) and
scripts/k8s_policy_by_kind.py (the findings counted by kind). Per example spec:

- ``cluster/``: what ``queues apply`` (and so the provision pipeline and ``local up``)
  applies: ``workloads.render.kueue.cluster_objects`` (Kueue, Namespaces, KSAs,
  PriorityClasses, the DCN DaemonSet, and whatever else the spec renders);
- ``tree/``: the Kustomize tree ``render`` writes (bases and one overlay per run);
- ``built/``: what ``submit`` applies, each overlay built (JobSet; Service + Job; RayJob);
- ``fleet/``: a fleet's own objects (examples/fleet/): the manager's MultiKueue objects and
  queues, the manager's identity on each worker (its ServiceAccount, RBAC and token Secret),
  and the manager's kubeconfig Secret per worker, with a token of the shape the worker's
  token controller writes (the real one exists only on a cluster);
- ``created/``: what the controllers create from those objects, which checkov has no
  model for: the JobSet controller's child Jobs (``replicatedJobs[].template`` verbatim),
  and KubeRay's head and worker pods and submitter Job (the RayJob's pod templates, with
  what KubeRay v1.6.0 adds, controllers/ray/common/pod.go: the liveness and readiness
  probes of the ray container, HTTP ``/api/healthz`` on the dashboard agent's port for
  Ray >= 2.53, and in workers the ``wait-gcs-ready`` init container: the ray container's
  image and securityContext, fixed 200m/256Mi resources). Without these checkov's pod
  and container policies would never see a TPU worker or a Ray pod.

Runs: every team's default run on every runtime the example's recipe offers (a runtime
the planner refuses for that example, e.g. Ray on a generation Ray has no accelerator
type for, is left out), and a ``--host-network`` JobSet run for teams that opted in.
Only the public planning and rendering functions are used, so the module also renders
an older checkout (how the report's "before" figures were taken).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infra.spec import EXAMPLES_DIR, load_spec, parse_spec
from toolkit.errors import ToolkitError
from workloads.planning.planner import Overrides, plan_run
from workloads.render import kueue, yamlio
from workloads.render.kustomize import build_overlay, render, write_tree

EXAMPLES = sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))
RECIPE = {
    "default": "maxtext-6b",
    "compute-class": "llama3-8b",
    "fallback": "llama3-8b",
    "flex-start": "llama3-8b",
    "teams": "maxtext-6b",
    "tpu7x": "maxtext-6b",
    "tpu7x-multislice": "maxtext-6b",
    "tpu7x-dynamic-slicing": "maxtext-6b",
    "v4": "maxtext-6b",
    "v5p": "gpt3-6b",
    "v6e-reservation": "llama3-8b",
}
RUNTIMES = ("jobset", "job", "ray", "pathways")
# KubeRay v1.6.0 (controllers/ray/common/pod.go): the worker init container it injects.
RAY_INIT_CONTAINER = "wait-gcs-ready"
RAY_INIT_RESOURCES = {"cpu": "200m", "memory": "256Mi"}
RAY_HEALTH = {"path": "/api/healthz", "port": 52365}  # utils.RayNodeHealthPath, DefaultDashboardAgentListenPort


def _ray_probes(container: dict[str, Any]) -> None:
    """The probes KubeRay gives the ray container when the template has none (initLivenessAndReadinessProbe)."""
    container.setdefault("livenessProbe", {"httpGet": dict(RAY_HEALTH), "initialDelaySeconds": 30, "periodSeconds": 5, "failureThreshold": 120})
    container.setdefault("readinessProbe", {"httpGet": dict(RAY_HEALTH), "initialDelaySeconds": 10, "periodSeconds": 5, "failureThreshold": 10})


# A Pathways head needs a CPU node of 24 vCPU and 132 GiB (workloads.planning.pathways); no example's CPU pool has one.
PATHWAYS_CPU_MACHINE = "n2-highmem-32"


def _for_pathways(spec: Any) -> Any:
    doc = spec.model_dump(mode="json", exclude_unset=True)
    doc.setdefault("cpu_pool", {})["machine_type"] = PATHWAYS_CPU_MACHINE
    return parse_spec(doc)


def runs(example: str) -> Iterator[Any]:
    """(plan) for every team x runtime the example allows, plus opted-in host-network JobSets.

    Pathways on the example with its CPU pool of ``PATHWAYS_CPU_MACHINE``, so that its head's pod is scanned too."""
    spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
    pathways_spec = _for_pathways(spec)
    for team in spec.teams:
        for runtime in RUNTIMES:
            for host in (False, True) if (team.host_network and runtime == "jobset") else (False,):
                name = f"{team.name}-{runtime}-{'hostnet' if host else 'podnet'}"[:30].rstrip("-")
                on = pathways_spec if runtime == "pathways" else spec
                try:
                    yield plan_run(RECIPE[example], on, Overrides(slices=1, name=name, team=team.name, host_network=host, runtime=runtime))
                except ToolkitError:
                    continue  # a runtime the recipe or the generation does not offer
        # The team's datasets (a read-only GCS FUSE volume) on every runtime, and multi-tier
        # checkpointing (its RAM disk volume) where the spec's pools offer it to the team.
        for d in getattr(spec, "datasets", ()):
            for runtime in RUNTIMES:
                name = f"{team.name}-{runtime}-data"[:30].rstrip("-")
                try:
                    yield plan_run(RECIPE[example], spec, Overrides(slices=1, name=name, team=team.name, runtime=runtime, dataset=d.name))
                except (ToolkitError, TypeError):
                    continue  # another team's dataset, or a checkout without --dataset
        for storage in ("gcsfuse", "lustre"):  # checkpoints through a GCS FUSE mount, or the spec's Lustre claim
            try:
                yield plan_run(RECIPE[example], spec, Overrides(slices=1, name=f"{team.name}-{storage}"[:30], team=team.name, checkpoint_storage=storage))
            except (ToolkitError, TypeError):
                continue  # no Lustre in the spec, or a checkout without the option
        if any(getattr(p, "multi_tier_checkpointing", None) for p in spec.tpu_pools):
            try:
                yield plan_run(RECIPE[example], spec, Overrides(slices=2, name=f"{team.name}-mtc"[:30], team=team.name, multi_tier_checkpointing=True))
            except (ToolkitError, TypeError):
                pass  # the pools back up to another team's bucket, or a checkout without the option


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


def _pod(name: str, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict((template.get("metadata") or {}).get("labels") or {})},
        "spec": copy.deepcopy(template["spec"]),
    }


def ray_created(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    """What KubeRay creates for a RayJob: the head pod, a pod per worker group, the submitter Job."""
    meta, spec = rayjob["metadata"], rayjob["spec"]
    ns, cluster = meta["namespace"], spec["rayClusterSpec"]
    head = _pod(f"{meta['name']}-head", ns, cluster["headGroupSpec"]["template"])
    _ray_probes(head["spec"]["containers"][0])
    out = [head]
    for group in cluster.get("workerGroupSpecs") or []:
        pod = _pod(f"{meta['name']}-{group['groupName']}-worker", ns, group["template"])
        ray = pod["spec"]["containers"][0]
        _ray_probes(ray)
        init = {
            "name": RAY_INIT_CONTAINER,
            "image": ray.get("image"),
            "imagePullPolicy": ray.get("imagePullPolicy"),
            "command": ["/bin/bash", "-lc", "--"],
            "args": ["ray health-check --address $FQ_RAY_IP:6379"],
            "resources": {"limits": dict(RAY_INIT_RESOURCES), "requests": dict(RAY_INIT_RESOURCES)},
        }
        if "securityContext" in ray:
            init["securityContext"] = copy.deepcopy(ray["securityContext"])
        pod["spec"]["initContainers"] = [*pod["spec"].get("initContainers", []), init]
        out.append(pod)
    if "submitterPodTemplate" in spec:
        out.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": meta["name"], "namespace": ns, "labels": dict(meta.get("labels") or {})},
                "spec": {"backoffLimit": 2, "template": copy.deepcopy(spec["submitterPodTemplate"])},
            }
        )
    return out


def created(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the controllers make of a run's objects (JobSet -> Jobs, RayJob -> pods and a Job)."""
    out: list[dict[str, Any]] = []
    for obj in objects:
        if obj["kind"] == "JobSet":
            out += child_jobs(obj)
        elif obj["kind"] == "RayJob":
            out += ray_created(obj)
    return out


def write_scan_tree(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every manifest of every example under ``root``: {checkov file path ("/<rel>"): the objects in it}."""
    objects: dict[str, list[dict[str, Any]]] = {}

    def put(rel: str, objs: list[dict[str, Any]]) -> None:
        if not objs:
            return
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yamlio.dump_all(objs))
        objects["/" + rel] = objs

    for example in EXAMPLES:
        spec = load_spec(EXAMPLES_DIR / f"{example}.yaml")
        put(f"{example}/cluster/objects.yaml", kueue.cluster_objects(spec))
        tree: dict[str, str] = {}
        for plan in runs(example):
            files = render(plan)
            tree.update(files)
            built = build_overlay(files, plan.name)
            put(f"{example}/built/{plan.name}.yaml", built)
            put(f"{example}/created/{plan.name}.yaml", created(built))
        write_tree(root / example / "tree", tree)
        for rel, text in tree.items():
            if rel.endswith(".yaml"):
                objects[f"/{example}/tree/{rel}"] = [o for o in yamlio.load_all(text) if isinstance(o, dict) and "kind" in o]
    for rel, objs in fleet_objects().items():
        put(rel, objs)
    return objects


# A service account token as the token controller writes one (a JWT's three parts); not a real credential.
PLACEHOLDER_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a3VldWUtc3lzdGVtOnRnay1tdWx0aWt1ZXVlIn0.c2lnbmF0dXJl"
PLACEHOLDER_CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def fleet_objects() -> dict[str, list[dict[str, Any]]]:
    """The fleet example's objects: {relative file: objects}, each side as ``queues apply --fleet`` applies it."""
    from infra.fleet import load_fleet
    from workloads.render import multikueue

    fleet = load_fleet(EXAMPLES_DIR / "fleet" / "fleet.yaml")
    out = {"fleet/manager/objects.yaml": multikueue.manager_objects(fleet)}
    secrets = []
    for w in fleet.workers:
        out[f"fleet/worker-{w.name}/objects.yaml"] = [*multikueue.worker_objects(fleet, w), multikueue.token_secret()]
        config = multikueue.kubeconfig(w.name, f"https://{w.spec.cluster.name}.example.internal", PLACEHOLDER_CA, PLACEHOLDER_TOKEN)
        secrets.append(multikueue.kubeconfig_secret(w.name, config))
    out["fleet/manager/secrets.yaml"] = secrets
    return out
