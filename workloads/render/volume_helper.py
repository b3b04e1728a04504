"""The short-lived pod that reads and writes a run's directory on the team's Lustre. Pure.

Managed Lustre is mounted by the cluster's nodes only, so the toolkit reaches a run's
directory there through a pod in the team's namespace that mounts the team's claim
(``workloads.render.lustre``) where a run mounts it (``/checkpoints``), runs the directory
operations of ``toolkit.dirops`` (its source, with ``python3 -c``: nothing to build or
push) on one JSON request, prints one result line and exits. Why each choice:

- the request travels as one argument, never through a shell: run names and paths are
  data, not words of a command line;
- the pod runs as the team's runs do (``podsecurity``: the same UID and group when the
  team names one), so what it creates there (a new run's directory and its identity) the
  run's pods may write into, and what the runs wrote it may remove;
- no service account token, no network needs, no TPU: it tolerates nothing, so it lands on
  the cluster's CPU nodes; ``activeDeadlineSeconds`` ends it if it hangs on the mount;
- ``restartPolicy: Never``: one attempt, whose log is the answer;
- the image: ``HELPER_IMAGE``, a pinned slim Python from Docker Hub (the toolkit's
  clusters reach it through Cloud NAT, as the DCN tuning DaemonSet's busybox); the
  program needs the standard library only.

Labelled ``app.kubernetes.io/managed-by: tpu-gke-toolkit`` and ``app.kubernetes.io/name:
tgk-volume-helper``: the ownership ledger deletes it only as the pod this very call made
(``toolkit.ledger.helper_pod``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit import dirops, names
from toolkit.jsontext import load_json
from workloads.render import podsecurity
from workloads.render.volumes import CHECKPOINT_VOLUME

HELPER_IMAGE = "python:3.12.10-slim-bookworm"
HELPER_NAME = "tgk-volume-helper"  # app.kubernetes.io/name
CONTAINER = "dirops"
DEADLINE_S = 600  # the pod's activeDeadlineSeconds: a hung mount ends it


def program_source() -> str:
    """What the pod runs: ``toolkit/dirops.py`` as it is in this checkout."""
    return Path(dirops.__file__).read_text()


def helper_pod(*, name: str, namespace: str, claim: str, mount_dir: str, request: dict[str, Any], run_as_user: int | None) -> dict[str, Any]:
    """The pod that runs ``request`` (``toolkit.dirops``) with the team's Lustre claim mounted at ``mount_dir``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.K8S_MANAGED_BY_LABEL: names.TGK, names.K8S_APP_NAME_LABEL: HELPER_NAME},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_S,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": podsecurity.pod_security_context(run_as_user),
            "containers": [
                {
                    "name": CONTAINER,
                    "image": HELPER_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", program_source()],
                    "args": [json.dumps(request, separators=(",", ":"), sort_keys=True)],
                    "securityContext": {**podsecurity.container_security_context(), "readOnlyRootFilesystem": True},
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "volumeMounts": [{"name": CHECKPOINT_VOLUME, "mountPath": mount_dir}],
                }
            ],
            "volumes": [{"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def request_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The request a helper pod carries, if it runs this checkout's program (the local cluster plays only that)."""
    try:
        (c,) = pod["spec"]["containers"]
        if c.get("command") != ["python3", "-c", program_source()]:
            return None
        doc = load_json(c["args"][0], max_bytes=1024 * 1024)
        return doc if isinstance(doc, dict) else None
    except (KeyError, ValueError, TypeError, IndexError):
        return None
