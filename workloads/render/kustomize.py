"""A Kustomize tree for a run: ``base/`` plus ``overlays/<run>/``.

``base/`` is the recipe's JobSet on the target shape with one slice and the
recipe's name; ``overlays/<run>/`` turns it into this run with JSON 6902 patches
(name, labels, slices, nodes per slice, args, env) and Kustomize's namespace
transformer. JSON patches rather than strategic merge: JobSet is a CRD, so
Kustomize would fall back to merge-patch and replace whole lists anyway; an
explicit path per change is easier to read and review.

``kustomize build overlays/<run>`` yields exactly ``manifests.run_objects(plan)``,
which is what ``submit`` applies: :func:`render` checks that with an in-process
patch applier before anything is written, and tests check it with the real,
pinned kustomize (scripts/build-kustomize.sh).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from toolkit.errors import ExternalToolError, ToolkitError
from workloads.render import yamlio
from workloads.render.jobset import jobset, run_labels
from workloads.planning.planner import RunPlan

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
KUSTOMIZE_ENV = "TGK_KUSTOMIZE"
_JOB = "/spec/replicatedJobs/0/template/spec"
_POD = f"{_JOB}/template"
_CONTAINER = f"{_POD}/spec/containers/0"


def base_name(plan: RunPlan) -> str:
    return plan.recipe.replace(".", "-")


def base_plan(plan: RunPlan) -> RunPlan:
    """The run as the base describes it: same recipe and shape, one slice, recipe name."""
    return dataclasses.replace(plan, name=base_name(plan), slices=1)


def base_jobset(plan: RunPlan) -> dict[str, Any]:
    obj = jobset(base_plan(plan))
    del obj["metadata"]["namespace"]  # the overlay's namespace transformer owns it
    return obj


def overlay_patch(plan: RunPlan) -> list[dict[str, Any]]:
    """JSON 6902 operations that make the base JobSet this run's JobSet."""
    final = jobset(plan)
    job = final["spec"]["replicatedJobs"][0]
    jspec = job["template"]["spec"]
    cont = jspec["template"]["spec"]["containers"][0]
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/name", "value": plan.name},
        {"op": "replace", "path": "/metadata/labels", "value": run_labels(plan)},
        {"op": "replace", "path": "/spec/replicatedJobs/0/replicas", "value": job["replicas"]},
        {"op": "replace", "path": f"{_JOB}/parallelism", "value": jspec["parallelism"]},
        {"op": "replace", "path": f"{_JOB}/completions", "value": jspec["completions"]},
        {"op": "replace", "path": f"{_POD}/metadata/labels", "value": jspec["template"]["metadata"]["labels"]},
    ]
    if "args" in cont:
        ops.append({"op": "replace", "path": f"{_CONTAINER}/args", "value": cont["args"]})
    ops.append({"op": "replace", "path": f"{_CONTAINER}/env", "value": cont["env"]})
    return ops


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def apply_json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The subset of RFC 6902 the overlay uses (replace), to self-check a render."""
    out = copy.deepcopy(obj)
    for op in ops:
        if op["op"] != "replace":
            raise ValueError(f"unsupported op {op['op']}")
        *parents, last = _pointer(op["path"])
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = copy.deepcopy(op["value"])
        else:
            if last not in node:
                raise KeyError(op["path"])  # RFC 6902: replace needs an existing target
            node[last] = copy.deepcopy(op["value"])
    return out


def render(plan: RunPlan) -> dict[str, str]:
    """Relative path -> file text for the whole tree. Pure."""
    base = base_jobset(plan)
    ops = overlay_patch(plan)
    expected = jobset(plan)
    built = apply_json_patch(base, ops)
    built["metadata"] = {"name": built["metadata"]["name"], "namespace": plan.namespace, **{k: v for k, v in built["metadata"].items() if k != "name"}}
    if built != expected:
        raise ToolkitError(f"internal: the overlay for {plan.name} does not rebuild its JobSet; please report this")

    run_dir = f"overlays/{plan.name}"
    return {
        "base/jobset.yaml": yamlio.dump(base),
        "base/kustomization.yaml": yamlio.dump(
            {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": ["jobset.yaml"]}
        ),
        f"{run_dir}/patch-run.yaml": yamlio.dump(ops),
        f"{run_dir}/kustomization.yaml": yamlio.dump(
            {
                "apiVersion": KUSTOMIZE_API,
                "kind": "Kustomization",
                "namespace": plan.namespace,
                "resources": ["../../base"],
                "patches": [
                    {
                        "path": "patch-run.yaml",
                        "target": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet", "name": base_name(plan)},
                    }
                ],
            }
        ),
    }


def write_tree(out: Path, files: dict[str, str]) -> list[Path]:
    """Write into a scratch dir beside ``out``, then move each unit into place.

    Units are ``base/`` and ``overlays/<run>/``: each is replaced whole, so a
    failed render leaves no half-written unit; other runs' overlays are kept.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
    try:
        units: set[Path] = set()
        for rel, text in files.items():
            parts = Path(rel).parts
            units.add(Path(*parts[:2]) if parts[0] == "overlays" else Path(parts[0]))
            p = scratch / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for unit in sorted(units):
            dst = out / unit
            if dst.exists():
                shutil.rmtree(dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(scratch / unit), str(dst))
        return [out / rel for rel in files]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def find_kustomize() -> str:
    """$TGK_KUSTOMIZE, else the pinned build in the cache, else `kustomize` on PATH."""
    env = os.environ.get(KUSTOMIZE_ENV)
    if env:
        return env
    cache = Path(os.environ.get("TGK_CACHE", Path.home() / ".cache" / "tpu-gke-toolkit"))
    pinned = cache / "bin" / "kustomize-v5.5.0" / "kustomize"
    if pinned.exists():
        return str(pinned)
    found = shutil.which("kustomize")
    if found:
        return found
    raise ExternalToolError("kustomize: not found — run scripts/build-kustomize.sh or set TGK_KUSTOMIZE")


def build(directory: Path, binary: str | None = None, timeout: float = 120) -> list[dict[str, Any]]:
    """``kustomize build DIR``, parsed."""
    cmd = [binary or find_kustomize(), "build", str(directory)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ExternalToolError(f"kustomize: {cmd[0]} not found — run scripts/build-kustomize.sh") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise ExternalToolError(f"kustomize build {directory}: {last}")
    return yamlio.load_all(proc.stdout)
