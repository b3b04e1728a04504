"""The local cluster's Cloud Storage: a real GCS-compatible server (gcp-storage-emulator) on loopback.

On GKE a run's pods and the toolkit see the same buckets: MaxText writes checkpoints to
``<bucket>/<run>/checkpoints/`` and a restarted (or resubmitted) run restores from there;
``submit`` writes the run's identity beside them (``workloads.runs.identity``) and
``cleanup --checkpoints`` lists them. The local cluster plays that with one emulator
process (built by scripts/setup-gcs-emulator.sh, the server the storage tests use), its
data in ``<state>/gcs/``: ``local up`` starts it and creates the spec's buckets, the
rehearsal daemon keeps each rehearsal's checkpoints in it, and the cluster says where it
is in the ConfigMap ``kube-public/tgk-local-storage`` (``workloads.local.loopback``), which the local
run hook (``runhooks``) reads to give ``submit`` and ``cleanup`` a client for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import tools
from toolkit.paths import script
from workloads.local import LocalClusterError
from workloads.local.loopback import PROJECT, LoopbackService
from workloads.observe.storage import make_client

if TYPE_CHECKING:
    from infra.spec import EnvSpec
    from workloads.local.daemons import Daemons

SETUP_SCRIPT = script("setup-gcs-emulator.sh")
SERVICE = LoopbackService(
    daemon="gcs", configmap_name="tgk-local-storage", what="Cloud Storage server", health=f"/storage/v1/b?project={PROJECT}", make_client=make_client
)


def data_dir(state_dir: Path) -> Path:
    return state_dir / "gcs"


def start(daemons: Daemons, port: int, timeout: float) -> str:
    """The emulator as daemon ``gcs``, its data in ``<state>/gcs/``, answering on ``port``; its base URL."""
    data = data_dir(daemons.state_dir)
    data.mkdir(parents=True, exist_ok=True)
    return SERVICE.start(daemons, port, timeout, lambda: argv(executable(), port), env={"STORAGE_BASE": str(data)}, cwd=data)


def publish(kube: Any, spec: EnvSpec, base: str, progress: Callable[[str], None], bindings: dict[str, list[tuple[str, str]]] | None = None) -> None:
    """The spec's buckets, with what ``infra deploy`` grants on them (``bindings``, else the spec's own), in the server at ``base``; its address published."""
    made = ensure_buckets(base, spec)
    if made:
        progress(f"  buckets created: {', '.join(made)}")
    grant_buckets(base, spec, bindings)
    SERVICE.publish(kube, base)


def executable(timeout: float = 900) -> str:
    """The emulator's command, from its cached venv (built on first use by the setup script)."""
    return str(tools.script_path(SETUP_SCRIPT, what="cannot set up the local Cloud Storage server", error=LocalClusterError, timeout=timeout))


def argv(exe: str, port: int) -> list[str]:
    return [exe, "start", "--host", "127.0.0.1", "--port", str(port), "--quiet"]


def split_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b/`` -> (bucket, ``a/b/``)."""
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


def ensure_buckets(url: str, spec: EnvSpec, timeout: float = 30) -> list[str]:
    """Every bucket of the spec exists in the local server (as ``infra deploy`` creates them); the names made."""
    from google.api_core import exceptions as gexc

    c = SERVICE.client(url)
    made = []
    deadline = time.monotonic() + timeout
    for b in spec.buckets:
        while True:
            try:
                if c.lookup_bucket(b.name) is None:
                    c.create_bucket(b.name)
                    made.append(b.name)
                break
            except (gexc.GoogleAPICallError, OSError) as e:
                if time.monotonic() > deadline:
                    raise LocalClusterError(f"the local Cloud Storage server did not create bucket {b.name}: {e}") from None
                time.sleep(0.2)
    return made


def grant_buckets(url: str, spec: EnvSpec, bindings: dict[str, list[tuple[str, str]]] | None = None) -> int:
    """Each bucket's IAM policy holds what ``infra deploy`` grants on it (``infra.access.bucket_bindings``); the bindings added.

    The server stores policies without enforcing them, as a record: a check that asks "may
    this run's identity read the dataset" (``workloads.data.checks``) reads the same
    policy here as on Cloud Storage. Bindings already there are kept.
    """
    from infra import access

    c = SERVICE.client(url)
    added = 0
    for name, grants in (access.bucket_bindings(spec) if bindings is None else bindings).items():
        b = c.bucket(name)
        policy = b.get_iam_policy(requested_policy_version=3)
        have = {(x["role"], m) for x in policy.bindings for m in x.get("members") or ()}
        missing = [(role, member) for role, member in grants if (role, member) not in have]
        if missing:
            for role, member in missing:
                policy.bindings.append({"role": role, "members": {member}})
            b.set_iam_policy(policy)
            added += len(missing)
    return added
