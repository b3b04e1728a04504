"""A Kustomize tree that holds many runs: ``base/<runtime>/`` plus ``overlays/<run>/``.

``base/<runtime>/`` is the runtime's skeleton: the parts of its objects that are the
same for every run the toolkit renders (the JobSet's exclusive-placement annotation,
Indexed completion, ``restartPolicy: Never``, the container's name, ports and
``/dev/shm``, the TPU toleration). It never depends on a plan, so every render writes
it byte for byte the same and a directory can hold any number of runs.

``overlays/<run>/`` carries everything about one run: a JSON 6902 patch per object
that turns the skeleton into the run's object (name, labels, slices, hosts, image,
command, args, env, node selector, TPU resources, priority, identity, failure policy,
TTL), Kustomize's namespace transformer, and any object the runtime has no skeleton
for as a plain resource file. The patch is computed by diffing the skeleton with the
run's object, so a field cannot be forgotten.

One render of a run is :func:`render_run`: the runtime's objects are built once, their
submission digest computed once (``workloads.render.submission``), the files written from
them, and the files read back once through :func:`build_overlay` — the overlay's patches
applied to the base, from the very YAML text ``render`` writes. That read-back must equal
the stamped objects (the self-check, before anything is written or applied), and it is
what ``submit`` applies: ``RenderedRun`` carries the files, those objects and the digest,
so nothing downstream renders, parses or hashes the run again. The test tier checks the
read-back against the real, pinned ``kustomize build`` (scripts/build-kustomize.sh) for
every example.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import names, tools
from toolkit.errors import ExternalToolError, ToolkitError
from toolkit.paths import cache_dir
from workloads.cluster import runkinds
from workloads.planning.model import RunPlan
from workloads.render import job, jobset, pathways, rayjob, submission, yamlio
from workloads.render.skeleton import BASE_NAME, indexed_job_spec

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
KUSTOMIZE_ENV = "TGK_KUSTOMIZE"
KUSTOMIZE_VERSION = "v5.5.0"


@dataclass(frozen=True)
class Runtime:
    """What the tree needs from a runtime renderer."""

    name: str
    skeletons: Callable[[], list[dict[str, Any]]]
    objects: Callable[[RunPlan], list[dict[str, Any]]]

    @property
    def kind(self) -> str:
        """The run's top-level object, which carries the submission digest: the one
        ``status``/``delete`` find, so it is read from the cluster side's table."""
        return runkinds.BY_RUNTIME[self.name].kind


RUNTIMES: dict[str, Runtime] = {
    jobset.RUNTIME: Runtime(jobset.RUNTIME, lambda: [jobset_skeleton()], jobset.run_objects),
    job.RUNTIME: Runtime(job.RUNTIME, job.skeletons, job.run_objects),
    rayjob.RUNTIME: Runtime(rayjob.RUNTIME, rayjob.skeletons, rayjob.run_objects),
    pathways.RUNTIME: Runtime(pathways.RUNTIME, pathways.skeletons, pathways.run_objects),
}


def jobset_skeleton() -> dict[str, Any]:
    """What every JobSet the toolkit renders has in common."""
    return {
        "apiVersion": names.JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": BASE_NAME,
            "annotations": {names.JOBSET_EXCLUSIVE_TOPOLOGY_ANNOTATION: names.GKE_NODEPOOL_LABEL},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": jobset.REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "spec": indexed_job_spec(
                            [
                                {"name": "tpu-runtime", "containerPort": jobset.TPU_RUNTIME_PORT},
                                {"name": "megascale", "containerPort": jobset.MEGASCALE_PORT},
                            ]
                        )
                    },
                }
            ]
        },
    }


# ------------------------------------------------------------------ JSON patches


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def diff(base: Any, final: Any, path: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations that turn ``base`` into ``final``.

    Maps are compared key by key; lists of the same length element by element; a
    list whose length differs is replaced whole (readable, and what a reviewer
    expects for e.g. ``env``).
    """
    if isinstance(base, dict) and isinstance(final, dict):
        ops: list[dict[str, Any]] = []
        for key in base:
            if key not in final:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in final.items():
            sub = f"{path}/{_escape(key)}"
            if key in base:
                ops.extend(diff(base[key], value, sub))
            else:
                ops.append({"op": "add", "path": sub, "value": copy.deepcopy(value)})
        return ops
    if isinstance(base, list) and isinstance(final, list) and len(base) == len(final):
        return [op for i, (b, f) in enumerate(zip(base, final, strict=True)) for op in diff(b, f, f"{path}/{i}")]
    if base == final and type(base) is type(final):
        return []
    return [{"op": "replace", "path": path, "value": copy.deepcopy(final)}]


def apply_json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply add/replace/remove operations (what :func:`diff` writes), as kustomize does."""
    out = copy.deepcopy(obj)
    for op in ops:
        kind = op.get("op")
        if kind not in ("add", "replace", "remove"):
            raise ValueError(f"unsupported op {kind}")
        *parents, last = _pointer(op["path"])
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            i = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(i, copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[i] = copy.deepcopy(op["value"])
            else:
                del node[i]
            continue
        if kind != "add" and last not in node:
            raise KeyError(op["path"])  # RFC 6902: replace and remove need an existing target
        if kind == "remove":
            del node[last]
        else:
            node[last] = copy.deepcopy(op["value"])
    return out


# ------------------------------------------------------------------ the tree


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["apiVersion"], obj["kind"]


def _file_stem(obj: dict[str, Any]) -> str:
    return obj["kind"].lower()


def _without_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out.get("metadata", {}).pop("namespace", None)
    return out


def base_files(runtime: str) -> dict[str, str]:
    """``base/<runtime>/``: the skeletons and their kustomization. Independent of any run."""
    rt = RUNTIMES[runtime]
    files: dict[str, str] = {}
    resources = []
    for obj in rt.skeletons():
        name = f"{_file_stem(obj)}.yaml"
        files[f"base/{runtime}/{name}"] = yamlio.dump(obj)
        resources.append(name)
    files[f"base/{runtime}/kustomization.yaml"] = yamlio.dump({"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": resources})
    return files


def run_objects(plan: RunPlan, runtime: str | None = None) -> list[dict[str, Any]]:
    """The run's objects as the overlay holds them: the runtime's, with the submission digest
    on the top-level object (``submission``: how a resubmission under the same name is judged)."""
    rt = RUNTIMES[runtime or plan.runtime]
    return submission.stamp(rt.objects(plan), rt.kind)


def overlay_files(plan: RunPlan, runtime: str | None = None, objects: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """``overlays/<run>/``: one patch per skeleton object, other objects as resources.

    ``objects``: the run's stamped objects when the caller has them (``run_objects`` otherwise).
    """
    runtime = runtime or plan.runtime
    rt = RUNTIMES[runtime]
    skeletons = {_key(s): s for s in rt.skeletons()}
    run_dir = f"overlays/{plan.name}"
    files: dict[str, str] = {}
    patches, resources = [], [f"../../base/{runtime}"]
    for obj in run_objects(plan, runtime) if objects is None else objects:
        final = _without_namespace(obj)  # the overlay's namespace transformer sets it
        skeleton = skeletons.get(_key(obj))
        if skeleton is None:
            name = f"{_file_stem(obj)}-{obj['metadata']['name']}.yaml"
            files[f"{run_dir}/{name}"] = yamlio.dump(final)
            resources.append(name)
            continue
        name = f"patch-{_file_stem(obj)}.yaml"
        files[f"{run_dir}/{name}"] = yamlio.dump(diff(skeleton, final))
        group, _, version = obj["apiVersion"].rpartition("/")
        target = {"group": group, "version": version, "kind": obj["kind"], "name": skeleton["metadata"]["name"]}
        patches.append({"path": name, "target": {k: v for k, v in target.items() if v}})
    kustomization: dict[str, Any] = {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "namespace": plan.target.namespace,
        "resources": resources,
    }
    if patches:
        kustomization["patches"] = patches
    files[f"{run_dir}/kustomization.yaml"] = yamlio.dump(kustomization)
    return files


@dataclass(frozen=True)
class RenderedRun:
    """One render of a run: its Kustomize tree, what ``kustomize build overlays/<run>`` gives for it, and the digest.

    ``objects`` carry ``digest`` on the run's top-level object (``submission.stamp``) while
    ``stamped`` holds; a step that changes them after the render (a fleet's dispatch to
    MultiKueue) clears it, so ``apply`` stamps them again with the digest of what it applies.
    ``digest`` stays the run's as rendered, before any cluster's changes: the run's identity
    beside its checkpoints is keyed by it (``workloads.runs.identity``).
    """

    name: str
    files: Mapping[str, str]  # relative path -> text: base/<runtime>/ and overlays/<run>/
    objects: tuple[dict[str, Any], ...]
    digest: str
    stamped: bool = True


def render_run(plan: RunPlan, runtime: str | None = None) -> RenderedRun:
    """The run rendered once (see the module doc): objects built once, digest computed once, the files
    read back once and checked to rebuild exactly those objects. Pure."""
    runtime = runtime or plan.runtime
    rt = RUNTIMES[runtime]
    objects = rt.objects(plan)
    digest = submission.digest(objects)
    stamped = submission.stamp(objects, rt.kind, digest)
    files = {**base_files(runtime), **overlay_files(plan, runtime, stamped)}
    built = build_overlay(files, plan.name)
    if built != stamped:
        raise ToolkitError(f"internal: the overlay for {plan.name} does not rebuild its objects; please report this")
    return RenderedRun(plan.name, files, tuple(built), digest)


def render(plan: RunPlan, runtime: str | None = None) -> dict[str, str]:
    """Relative path -> file text for the base and this run's overlay (the plan's runtime). Pure; self-checked (``render_run``)."""
    return dict(render_run(plan, runtime).files)


def build_overlay(files: dict[str, str], run: str) -> list[dict[str, Any]]:
    """What ``kustomize build overlays/<run>`` gives, computed from the files' text.

    Only the features :func:`overlay_files` writes: resources (a base directory or
    files), JSON 6902 patches by kind and name, and the namespace transformer.
    """
    return _build_dir(files, f"overlays/{run}")


def _build_dir(files: dict[str, str], directory: str) -> list[dict[str, Any]]:
    kz = yamlio.load(files[f"{directory}/kustomization.yaml"])
    objects: list[dict[str, Any]] = []
    for res in kz.get("resources", []):
        path = os.path.normpath(f"{directory}/{res}")
        if f"{path}/kustomization.yaml" in files:
            objects.extend(_build_dir(files, path))
        else:
            objects.extend(yamlio.load_all(files[path]))
    for patch in kz.get("patches", []):
        ops = yamlio.load(files[f"{directory}/{patch['path']}"])
        t = patch["target"]
        for i, obj in enumerate(objects):
            if obj["kind"] == t["kind"] and obj["metadata"]["name"] == t["name"]:
                objects[i] = apply_json_patch(obj, ops)
    if "namespace" in kz:
        for obj in objects:
            meta = obj["metadata"]
            # The transformer's place for it in the output: right after the name.
            obj["metadata"] = {"name": meta["name"], "namespace": kz["namespace"], **{k: v for k, v in meta.items() if k not in ("name", "namespace")}}
    return objects


def write_tree(out: Path, files: dict[str, str], flag: str = "--out") -> list[Path]:
    """Write the units of ``files`` into ``out``: each of ``base/<runtime>/`` and ``overlays/<run>/`` swapped in whole.

    Only what the toolkit wrote is replaced (``toolkit.owned``: each unit's ``.tgk-files.json``
    lists its files and digests): a user's extra files in a unit are kept, a file of the
    toolkit's the user changed, a symlink or a file where a directory belongs is refused
    with one line before anything is written. Writers of one ``out`` take turns on its lock,
    so concurrent renders each land whole; a re-render of the same run replaces its own files.
    """
    from toolkit import owned

    out = owned.check_root(Path(out), flag)
    units: dict[str, dict[str, str]] = {}
    for rel, text in files.items():
        parts = Path(rel).parts
        units.setdefault("/".join(parts[:2]), {})["/".join(parts[2:])] = text

    def check() -> None:
        # Every unit is surveyed before any is written: a refusal changes nothing.
        for unit, content in units.items():
            owned.check_dir_path(out, str(Path(unit).parent), flag)
            survey = owned.survey(out / unit, flag)
            owned.check_collisions(survey, {k: v.encode() for k, v in content.items()}, flag)

    def write() -> None:
        for unit, content in sorted(units.items()):
            owned.replace_unit(out, unit, content, flag)

    owned.check_then_write(out, flag, check, write)
    return [out / rel for rel in files]


# ------------------------------------------------------------------ the real kustomize


def find_kustomize() -> str:
    """$TGK_KUSTOMIZE, else the pinned build in the cache, else `kustomize` on PATH."""
    env = os.environ.get(KUSTOMIZE_ENV)
    if env:
        return env
    pinned = cache_dir() / "bin" / f"kustomize-{KUSTOMIZE_VERSION}" / "kustomize"
    if pinned.exists():
        return str(pinned)
    found = shutil.which("kustomize")
    if found:
        return found
    raise ExternalToolError("kustomize: not found — run scripts/build-kustomize.sh or set TGK_KUSTOMIZE")


def build(directory: Path, binary: str | None = None, timeout: float = 120) -> list[dict[str, Any]]:
    """``kustomize build DIR``, parsed."""
    done = tools.run([binary or find_kustomize(), "build", str(directory)], timeout=timeout)
    if not done.ok:
        raise done.failure(f"kustomize build {directory}")
    return yamlio.load_all(done.stdout)
