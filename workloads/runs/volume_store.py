"""A run's directory on the team's Lustre, reached through the cluster: the helper pod, its answer, its removal.

The toolkit's machine does not mount Managed Lustre; the cluster's nodes do. So each
request of ``toolkit.dirops`` (read the identity, look at the directory, create the
identity, survey the team's runs, delete a run's checkpoints) runs in a short-lived pod
in the team's namespace that mounts the team's claim (``workloads.render.volume_helper``):

1. the claim is checked first: it must exist and be Bound (``queues apply`` makes it once
   ``lustre.ip`` is known); otherwise one line, exit 2, nothing created;
2. the pod is created, and waited for until it has ended (``DEADLINE_S``; at most
   ``WAIT_S`` here);
3. its log's result line is read (``dirops.RESULT_MARK``);
4. the pod is deleted — through the ownership ledger, as the pod this very call created
   (``toolkit.ledger.helper_pod``: its uid and labels).

On the local cluster the run hook decorates the pod (``helper``) so that the rehearsal
daemon plays its kubelet: it runs this same ``toolkit.dirops`` request against the
directory that plays the claim's volume (``workloads.local.volumes``), writes the result to
the pod's log and ends the pod, as a kubelet would after the container exits.

``VolumeStore`` is ``workloads.runs.identity``'s store for ``--checkpoint-storage lustre``;
``run_ops`` serves ``cleanup``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit import dirops, ledger
from toolkit.errors import ClusterError, FieldError, NotFound, ToolkitError
from toolkit.jsontext import load_json
from workloads.render import volume_helper
from workloads.runs import hooks
from workloads.runs.identity import OpsStore

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster

MAX_ANSWER = 16 * 1024 * 1024  # the helper's answer line: a directory listing's digests, far under this
WAIT_S = 300.0  # a new image on a node, a slow mount: longer than that is a cluster problem


class VolumeError(ClusterError):
    """The helper pod could not answer (image, mount, node): exit 3, like any cluster that misbehaves."""


@dataclass(frozen=True)
class Volume:
    """Where the team's Lustre is, for the helper pod."""

    namespace: str
    claim: str
    mount_dir: str  # where runs mount it (the same path here)
    location: str  # lustre:<instance>/ : how the user knows it
    run_as_user: int | None = None


def _check_claim(cluster: Cluster, v: Volume) -> None:
    pvc = cluster.get(cluster.resource("v1", "PersistentVolumeClaim"), v.claim, v.namespace)
    phase = ((pvc or {}).get("status") or {}).get("phase")
    if phase != "Bound":
        what = "does not exist" if pvc is None else f"is {phase or 'not bound'}"
        raise FieldError(
            "--checkpoint-storage",
            f"the team's Lustre claim {v.namespace}/{v.claim} {what}, so {v.location} cannot be reached",
            "set lustre.ip in the spec (python -m infra outputs) and run python -m workloads queues apply",
        )


def run_ops(cluster: Cluster, v: Volume, ops: list[dict[str, Any]], *, timeout: float = WAIT_S) -> list[dict[str, Any]]:
    """The results of ``ops`` (``toolkit.dirops``), run in a helper pod with the claim mounted; each op's error is its own result."""
    from workloads.cluster.wait import WaitTimeout, wait_for

    _check_claim(cluster, v)
    name = f"{volume_helper.HELPER_NAME}-{secrets.token_hex(4)}"
    pod = volume_helper.helper_pod(
        name=name, namespace=v.namespace, claim=v.claim, mount_dir=v.mount_dir, request={"base": v.mount_dir, "ops": ops}, run_as_user=v.run_as_user
    )
    hook = hooks.for_context(getattr(cluster, "context", None))
    decorate = getattr(hook, "helper", None)
    if decorate is not None:
        pod = decorate(pod)
    created = cluster.create(pod)
    uid = str((created.get("metadata") or {}).get("uid") or "")
    info = cluster.resource("v1", "Pod")
    try:

        def phase() -> dict[str, Any] | None:
            return cluster.get(info, name, v.namespace)

        def ended(p: dict[str, Any] | None) -> bool:
            return p is None or ((p.get("status") or {}).get("phase") in ("Succeeded", "Failed"))

        try:
            last = wait_for(phase, timeout=timeout, what=f"the Lustre helper pod {v.namespace}/{name}", until=ended, interval=1.0)
        except WaitTimeout as e:
            why = _pending_reason(e.last)
            raise VolumeError(f"the Lustre helper pod {v.namespace}/{name} did not finish within {timeout:g}s{why}") from None
        if last is None:
            raise VolumeError(f"the Lustre helper pod {v.namespace}/{name} went away before it finished")
        text = "".join(cluster.logs(v.namespace, name))
        return _results(text, len(ops), f"{v.namespace}/{name}", (last.get("status") or {}).get("phase"))
    finally:
        _remove(cluster, v.namespace, name, uid)


def _pending_reason(p: Any) -> str:
    conds = ((p or {}).get("status") or {}).get("conditions") or [] if isinstance(p, dict) else []
    msgs = [c.get("message") for c in conds if c.get("status") == "False" and c.get("message")]
    return f" ({' '.join(str(msgs[0]).split())[:200]})" if msgs else ""


def _results(text: str, n: int, pod: str, phase: str | None) -> list[dict[str, Any]]:
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith(dirops.RESULT_MARK)), None)
    if line is None:
        tail = " ".join(text.split())[-200:] or "no output"
        raise VolumeError(f"the Lustre helper pod {pod} ended {phase or ''} without an answer: {tail}")
    try:
        results = load_json(line[len(dirops.RESULT_MARK) :], max_bytes=MAX_ANSWER)
    except ValueError:
        raise VolumeError(f"the Lustre helper pod {pod} answered something unreadable") from None
    if not isinstance(results, list) or len(results) != n or not all(isinstance(r, dict) for r in results):
        raise VolumeError(f"the Lustre helper pod {pod} answered {len(results) if isinstance(results, list) else 'no'} results for {n} requests")
    return results


def _remove(cluster: Cluster, namespace: str, name: str, uid: str) -> None:
    """Delete the helper pod this call created (the ledger checks it is that pod); a pod already gone is fine."""
    try:
        live = cluster.get(cluster.resource("v1", "Pod"), name, namespace)
    except ToolkitError:
        return  # its activeDeadlineSeconds ends it; the next look finds it gone
    if live is None:
        return
    verdict = ledger.helper_pod(live, created_uid=uid)
    if isinstance(verdict, ledger.Permit):
        try:
            cluster.delete_owned(verdict, cluster.resource("v1", "Pod"), name, namespace)
        except (NotFound, ToolkitError):
            pass


class VolumeStore(OpsStore):
    """``workloads.runs.identity``'s store for a run on the team's Lustre: every look and write one helper pod."""

    flag = "--checkpoint-storage"

    def __init__(self, cluster: Cluster, volume: Volume, rel: str) -> None:
        super().__init__(rel)
        self.cluster = cluster
        self.volume = volume
        base = volume.mount_dir.rstrip("/")
        self.where = f"{volume.location}{self.rel}"
        self._base = base

    def ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return run_ops(self.cluster, self.volume, ops)

    def fail(self, problem: str) -> ToolkitError:
        return VolumeError(f"{self.where}: {problem}")
