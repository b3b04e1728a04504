"""The local cluster's run hook: on its kubeconfig context a submitted run becomes a rehearsal,
and its buckets are the local Cloud Storage server's (``workloads.local.bucket``).

Found by ``workloads.runs.hooks`` (by this module's name), so the run service and the CLI
apply a run here without knowing this package. The rehearsal itself is ``rehearsal``;
it is imported when a run is submitted here, not when the hooks are listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workloads.local import CONTEXT

if TYPE_CHECKING:
    from workloads.planning.model import RunPlan


class Rehearse:
    """``workloads.runs.hooks.RunHook`` for ``tgk-local``: pods labelled and annotated for the rehearsal daemon."""

    def decorate(self, objects: list[dict[str, Any]], plan: RunPlan, *, seconds: float | None) -> list[dict[str, Any]]:
        from workloads.local import rehearsal

        return rehearsal.decorate(objects, plan, seconds=seconds)

    def note(self, plan: RunPlan, *, seconds: float | None) -> str:
        from workloads.local import rehearsal

        return rehearsal.summary(plan, seconds)

    def helper(self, pod: dict[str, Any]) -> dict[str, Any]:
        """A Lustre helper pod (``workloads.runs.volume_store``) for the rehearsal daemon, which plays its kubelet and mount."""
        import copy

        from workloads.local.addons import REHEARSAL_LABEL, VOLUME_HELPER_ANNOTATION

        out = copy.deepcopy(pod)
        meta = out.setdefault("metadata", {})
        meta.setdefault("labels", {})[REHEARSAL_LABEL] = "true"
        meta.setdefault("annotations", {})[VOLUME_HELPER_ANNOTATION] = "true"
        return out

    def storage(self, cluster: Any) -> Any:
        """A Cloud Storage client for the cluster's own bucket server, where its runs keep their checkpoints."""
        from workloads.local import bucket

        return bucket.SERVICE.client_of(cluster)

    def storage_endpoint(self, cluster: Any) -> str:
        """The bucket server's base URL: ``run-local --dataset`` mounts its buckets with gcsfuse."""
        from workloads.local import bucket

        return bucket.SERVICE.endpoint_of(cluster)

    def logging(self, cluster: Any) -> Any:
        """A Cloud Logging client for the cluster's own logging server, which holds every attempt of its pods."""
        from workloads.local import cloudlogging

        return cloudlogging.SERVICE.client_of(cluster)


HOOKS = {CONTEXT: Rehearse()}
