"""Build and call ``tests/support/kubeside/main.go``: KubeRay v1.6.0's submitter command and the kubelet's
``$(NAME)`` expansion, computed by their own Go code (the module cache's sources, compiled here).

The kubelet's expansion lives in the ``k8s.io/kubernetes`` module, which cannot be required as
a dependency (its go.mod points at staging copies by relative paths); its package has only the
standard library behind it, so the build module replaces it by a directory holding a go.mod and
a symlink to the package in the module cache. Cached under ``$TGK_CACHE/kubeside/<key>``; cold
it downloads the modules (the Go module proxy) and compiles KubeRay's controller packages,
several minutes on 2 cores; warm it is instant.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from toolkit.paths import cache_dir

SOURCE = Path(__file__).resolve().parent / "kubeside" / "main.go"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = "v1.6.0"  # workloads/local/kuberay.py KUBERAY_VERSION
KUBERNETES_VERSION = "v1.34.2"  # scripts/build-local-cluster.sh K8S_VERSION
EXPANSION = "k8s.io/kubernetes/third_party/forked/golang"


class KubesideError(Exception):
    pass


def _go(args: list[str], cwd: Path, timeout: float) -> str:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    done = subprocess.run(["nice", "-n", "10", "go", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise KubesideError(f"go {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def build(timeout: float = 1800) -> Path:
    """The kubeside binary, built on first use."""
    if shutil.which("go") is None:
        raise KubesideError("no go toolchain on PATH (scripts/build-kuberay.sh needs it too)")
    go_version = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    key = hashlib.sha256(f"{SOURCE.read_text()}|{KUBERAY_VERSION}|{KUBERNETES_VERSION}|{go_version}".encode()).hexdigest()[:12]
    root = cache_dir() / "kubeside" / key
    binary = root / "kubeside"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        work = root / "src"
        shutil.rmtree(work, ignore_errors=True)
        (work / "forked").mkdir(parents=True)
        k8s = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"], root, timeout))
        (work / "forked" / "go.mod").write_text(f"module {EXPANSION}\n\ngo 1.25.0\n")
        (work / "forked" / "expansion").symlink_to(Path(k8s["Dir"]) / "third_party" / "forked" / "golang" / "expansion")
        (work / "go.mod").write_text(
            "module tgk.local/kubeside\n\ngo 1.25.0\n\n"
            f"require (\n\t{KUBERAY_MODULE} {KUBERAY_VERSION}\n\t{EXPANSION} v0.0.0\n)\n\n"
            f"replace {EXPANSION} => ./forked\n"
        )
        shutil.copyfile(SOURCE, work / "main.go")
        _go(["build", "-trimpath", "-o", str(binary), "."], work, timeout)
        return binary


def call(binary: Path, request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([str(binary)], input=json.dumps(request), capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise KubesideError(f"kubeside failed: {done.stderr.strip()}")
    return json.loads(done.stdout)
