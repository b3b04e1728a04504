"""tpu-recipes' ``k8s/k8s_manifest.yaml`` (a JobSet, applied after ``envsubst``) -> the launch flags ``import_recipe`` reads. Pure.

The manifests are what ``xpk workload create`` would have applied: one replicated job
whose replicas are the slices, a node selector naming the TPU, and containers (two per VM
on tpu7x, each holding two chips) running the same ``bash -c`` script, which wraps the
training command in a subshell, a SIGTERM trap and a wait loop. Read here, in xpk's terms:

| manifest | as |
|---|---|
| ``replicatedJobs[0].replicas`` | ``--num-slices`` |
| node selector ``cloud.google.com/gke-tpu-accelerator`` + ``gke-tpu-topology`` | ``--device-type`` (``tpu7x`` + ``4x4x4`` -> ``tpu7x-4x4x4``) |
| the container's ``image`` | ``--docker-image`` |
| the container's ``bash -c`` script | ``--command`` (its wrapper lines are reported, not carried) |
| the container's ``env`` (literal values) | ``--env`` |

Every other field (the failure policy, restarts, TTL, host networking, privileged mode,
tolerations, the shared-memory volume, a second container's copy of the command) is one
``not carried`` line, naming what the toolkit sets instead.
"""

from __future__ import annotations

import re
from typing import Any

from infra import catalog
from toolkit import names
from toolkit.errors import FieldError
from toolkit.yamlfile import YamlFileError, load_yaml

_KIND = re.compile(r"^kind:\s*JobSet\s*$", re.M | re.ASCII)
ACCELERATOR = names.GKE_TPU_ACCELERATOR_LABEL
TOPOLOGY = names.GKE_TPU_TOPOLOGY_LABEL
TOPOLOGY_ANNOTATION = names.GKE_TPU_SLICE_TOPOLOGY_ANNOTATION

# What the toolkit's JobSet sets in place of each manifest field it does not carry.
_REPLACED = {
    "metadata.name": "the run name (submit --name)",
    "metadata.annotations": "its own annotations (one slice per node pool, Kueue's topology)",
    "metadata.labels": "its own labels",
    "spec.ttlSecondsAfterFinished": "its own cleanup (`cleanup`)",
    "spec.failurePolicy": "its own failure policy (submit --max-restarts; exit codes 1, 2 and fatal_exit_codes end the run)",
    "spec.successPolicy": "its own success policy",
    "job.parallelism": "one pod per VM of the slice",
    "job.completions": "one pod per VM of the slice",
    "job.backoffLimit": "its own failure policy",
    "job.podFailurePolicy": "its own failure policy",
    "pod.restartPolicy": "its own failure policy",
    "pod.hostNetwork": "submit --host-network",
    "pod.dnsPolicy": "the DNS policy that goes with the pod's network",
    "pod.tolerations": "the TPU tolerations of its pools",
    "pod.volumes": "its own volumes (the dataset, checkpoint storage and shared memory)",
    "pod.priorityClassName": "the team's priority",
    "pod.schedulerName": "the default scheduler, with Kueue admission",
    "pod.serviceAccountName": "the team's Kubernetes service account (its Workload Identity)",
    "pod.imagePullSecrets": "the spec's registry access (the nodes' service account)",
    "pod.terminationGracePeriodSeconds": "its own termination grace period",
    "container.securityContext": "its own security context",
    "container.resources": "the slice's TPU chips per VM",
    "container.volumeMounts": "its own volume mounts",
    "container.ports": "its own ports",
}


def is_manifest(text: str) -> bool:
    """Whether the text is a JobSet manifest rather than a shell script."""
    return bool(_KIND.search(text)) and text.lstrip().startswith(("apiVersion", "kind", "---", "#"))


def _bad(problem: str, fix: str) -> FieldError:
    return FieldError("import-recipe", problem, fix)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"the manifest's {where} is not a mapping", "import a JobSet manifest as tpu-recipes publishes it")
    return value


def launch_flags(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The JobSet's launch as xpk flags, and one report line per field not carried."""
    try:
        doc = load_yaml(text)
    except YamlFileError as e:
        raise _bad(f"the manifest is not readable YAML ({e.problem})", e.fix) from None
    doc = _mapping(doc, "document")
    spec = _mapping(doc.get("spec"), "spec")
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or len(jobs) != 1:
        raise _bad("the manifest does not have exactly one replicatedJobs entry", "import a JobSet of one replicated job (its replicas are the slices)")
    rjob = _mapping(jobs[0], "replicatedJobs[0]")
    job = _mapping(_mapping(rjob.get("template"), "replicatedJobs[0].template").get("spec"), "job spec")
    pod_template = _mapping(job.get("template"), "pod template")
    pod = _mapping(pod_template.get("spec"), "pod spec")
    pod_annotations = (pod_template.get("metadata") or {}).get("annotations") or {}
    notes: list[str] = []
    flags: list[tuple[str, str]] = [("num-slices", str(rjob.get("replicas", 1)))]

    selector = pod.get("nodeSelector") or {}
    accel = str(selector.get(ACCELERATOR, ""))
    # Newer manifests name the slice's shape in the pod's annotation (GKE's TPU slice topology), older ones in the selector.
    topology = str(selector.get(TOPOLOGY, "") or pod_annotations.get(TOPOLOGY_ANNOTATION, ""))
    gen = next((g for g in catalog.GENERATIONS.values() if g.accelerator_label == accel), None)
    if gen is None or not topology:
        raise FieldError(
            "nodeSelector",
            f"the manifest's node selector names no TPU ({ACCELERATOR}={accel!r}, {TOPOLOGY}={topology!r})",
            f"give both {ACCELERATOR} and {TOPOLOGY}",
        )
    flags.append(("device-type", f"{gen.canonical_prefix}-{topology}"))
    for key, value in selector.items():
        if key not in (ACCELERATOR, TOPOLOGY):
            notes.append(f"nodeSelector {key}={value}: not carried; the run lands on the pool the planner picks")

    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _bad("the manifest's pod has no containers", "import a JobSet whose container runs MaxText")
    first = _mapping(containers[0], "containers[0]")
    command = first.get("command") or []
    args = first.get("args") or []
    words = [str(w) for w in [*command, *args]]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh") and words[1] == "-c":
        flags.append(("command", words[2]))
    elif words:
        flags.append(("command", " ".join(words)))
    if first.get("image"):
        flags.append(("docker-image", str(first["image"])))
    for item in first.get("env") or []:
        if isinstance(item, dict) and "value" in item:
            flags.append(("env", f"{item.get('name')}={item['value']}"))
        elif isinstance(item, dict):
            notes.append(f"container env {item.get('name')}: taken from a reference (valueFrom), not carried")
    same = [
        c
        for c in containers[1:]
        if isinstance(c, dict) and (c.get("command"), c.get("args"), c.get("image")) == (command or None, args or None, first.get("image"))
    ]
    if len(containers) > 1:
        notes.append(
            f"{len(containers)} containers per VM (parallel containers, {len(same) + 1} running the same command): not carried;"
            " the toolkit runs one container per VM holding all its chips"
        )
    if len(same) != len(containers) - 1:
        raise _bad("the manifest's containers run different commands", "import a manifest whose TPU containers run one training")

    for key, value in (doc.get("metadata") or {}).items():
        if value:
            notes.append(_note(f"metadata.{key}"))
    for key, value in pod_annotations.items():
        if key != TOPOLOGY_ANNOTATION:
            notes.append(f"pod annotation {key}={str(value)[:60]}: not carried; the toolkit sets its own annotations")
    for key in spec:
        if key != "replicatedJobs":
            notes.append(_note(f"spec.{key}"))
    for key in job:
        if key != "template":
            notes.append(_note(f"job.{key}"))
    for key in pod:
        if key not in ("containers", "nodeSelector"):
            notes.append(_note(f"pod.{key}"))
    for key in first:
        if key not in ("name", "image", "command", "args", "env"):
            notes.append(_note(f"container.{key}"))
    return flags, notes


def _note(field: str) -> str:
    why = _REPLACED.get(field)
    return f"manifest {field}: not carried; " + (f"the toolkit sets {why}" if why else "a field the import does not know")
