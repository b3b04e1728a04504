"""The toolkit's Kubernetes client: ``Cluster``, the one class the rest of the toolkit connects with.

``Cluster`` is the generic client (``api.KubeApi``: discovery, apply, get, list, delete,
watch, logs) plus the run-level queries here: a run's top-level object, its Workload,
pods, status, log pod, deletion and the admission wait. Build one with ``Cluster.connect``
(a kubeconfig and context) or ``Cluster.with_client_cert``. A run is found by name among
the runtimes' kinds (``runkinds.LOOKUP_ORDER``); the pure reading of what is found is
``status``.

What each query makes of an error: a runtime whose CRD is not installed has no run
(``NotFound`` on its kind), Kueue not installed means no Workload; a refusal (``Forbidden``)
or no answer (``Unreachable``) is never read as "no such run": it is raised, one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from toolkit import ledger
from toolkit.errors import ClusterError, FieldError, Forbidden, NotFound, Unreachable
from toolkit.names import JOBSET_API, KUEUE_JOB_UID_LABEL, KUEUE_QUEUE_LABEL
from workloads.cluster import runkinds as rk
from workloads.cluster import status as st
from workloads.cluster.api import DeleteResult, KubeApi, ResourceInfo
from workloads.cluster.wait import WaitTimeout, wait_for

__all__ = ["AdmissionResult", "Cluster", "NotOwned"]


class NotOwned(FieldError):
    """The object under the name is not the toolkit's (``toolkit.ledger``): nothing is deleted."""

    def __init__(self, problem: str) -> None:
        super().__init__("RUN", problem, "pick the name of a run this toolkit submitted (status lists them)")


@dataclass(frozen=True)
class AdmissionResult:
    """How the wait for Kueue admission ended."""

    admitted: bool
    workload: str | None  # Workload name, None if Kueue never created one
    state: str  # a status.WorkloadState value
    flavors: dict[str, str] = field(default_factory=dict)  # podset -> ResourceFlavor
    reason: str = ""  # why it is not admitted (Kueue's condition message)
    waited_seconds: float = 0.0


# Workload states that end the wait for admission: admitted (or already done), or deactivated.
_ADMISSION_OVER = (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED, st.WorkloadState.INACTIVE)


class Cluster(KubeApi):
    """A connected API server with the run-level queries. Build with ``Cluster.connect`` (or pass a Transport in tests)."""

    def jobset(self, namespace: str, name: str) -> dict | None:
        return self.get(self.resource(JOBSET_API, "JobSet"), name, namespace)

    def find_run(self, namespace: str, run: str) -> tuple[rk.RunKind, dict] | None:
        """The run's top-level object, whichever runtime made it (runkinds.LOOKUP_ORDER); None if there is none.

        None only when no kind has an object of that name (or its CRD is not installed);
        a refused read raises Forbidden, naming the verb and resource it needed.
        """
        for kind in rk.LOOKUP_ORDER:
            try:
                info = self.resource(kind.api_version, kind.kind)
            except NotFound:
                continue  # that runtime's CRDs are not installed: no run of it here
            obj = self.get(info, run, namespace)
            if obj is not None:
                return rk.refine(kind, obj), obj
        return None

    def workload_for(self, namespace: str, jobset: dict) -> dict | None:
        """The Kueue Workload owned by a JobSet (by Kueue's job-uid label, else owner reference)."""
        uid = (jobset.get("metadata") or {}).get("uid")
        info = self.kueue("Workload")
        if uid:
            items = self.list(info, namespace, label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}")
            if not items:
                items = [w for w in self.list(info, namespace) if _owned_by(w, uid)]
            if items:
                return max(items, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
        return None

    def pods(self, namespace: str, run: str, kind: rk.RunKind = rk.JOBSET) -> list[dict]:
        return self.list(self.resource("v1", "Pod"), namespace, label_selector=kind.pod_selector(run))

    def run_status(self, namespace: str, run: str) -> st.RunStatus:
        found = self.find_run(namespace, run)
        if found is None:
            return st.run_status(namespace, run, None, None, [])
        kind, obj = found
        try:
            wl = self.workload_for(namespace, obj)
        except NotFound:
            wl = None  # Kueue not installed: still show the run and its pods
        return st.run_status(namespace, run, obj, wl, self.pods(namespace, run, kind), self.events(namespace, kind.kind, run))

    def events(self, namespace: str, kind: str, name: str) -> list[dict]:
        """Events about one object; none (not an error) when the server will not list them (not served, or not allowed)."""
        try:
            return self.list(self.resource("v1", "Event"), namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
        except (NotFound, Forbidden):
            return []  # events only add detail to a status; an identity without them still sees the run

    def find_pod(
        self,
        namespace: str,
        run: str,
        *,
        slice_index: int | None = None,
        worker: int | None = None,
        head: bool = False,
        found: tuple[rk.RunKind, dict] | None = None,
    ) -> dict | None:
        """A pod of the run: with neither slice nor worker, the run's own log (a RayJob's driver,
        else worker 0 of slice 0); ``head``: a RayJob's head. ``found``: ``find_run``'s answer,
        when the caller already has it (else it is looked up here)."""
        if found is None:
            found = self.find_run(namespace, run)
        kind = found[0] if found else rk.JOBSET
        pod_info = self.resource("v1", "Pod")
        driver = kind.driver_selector(run) if slice_index is None and worker is None else None
        if head:
            selector = f"{kind.run_label}={run},{rk.RAY_HEAD_FILTER}"
        elif driver:
            selector = driver
        else:
            selector = kind.worker_selector(run, slice_index or 0, worker or 0)
        pods = self.list(pod_info, namespace, label_selector=selector)
        if not pods and kind is rk.RAYJOB and not head and not driver and not worker:
            # KubeRay labels a host index only in multi-host groups: a one-VM slice's worker has none.
            in_slice = f"{kind.pod_selector(run)},{kind.slice_label}={slice_index or 0}"
            pods = [
                p for p in self.list(pod_info, namespace, label_selector=in_slice) if kind.worker_label not in ((p.get("metadata") or {}).get("labels") or {})
            ]
        if not pods:
            return None
        # Several attempts after restarts: the newest is the one that is running.
        return max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")

    def delete_owned(self, permit: ledger.Permit, info: ResourceInfo, name: str, namespace: str, *, dry_run: bool = False) -> DeleteResult:
        """Delete one object the ownership ledger permitted (Foreground: what it owns goes first); the one way the toolkit deletes an object."""
        ledger.require(permit, permit.kind, f"{namespace}/{name}")
        return self.delete(info, name, namespace, dry_run=dry_run, propagation="Foreground")

    def delete_jobset(self, namespace: str, name: str, *, dry_run: bool = False) -> DeleteResult:
        """Delete a JobSet the toolkit submitted (Foreground: its Jobs and pods go first, so a resubmit under the
        name does not race the old pods); one it did not submit is kept (``deleted`` False)."""
        obj = self.jobset(namespace, name)
        if obj is None:
            return DeleteResult("JobSet", name, namespace, deleted=False, dry_run=dry_run)
        verdict = ledger.run_object({"apiVersion": JOBSET_API, "kind": "JobSet", **obj}, name=name, namespace=namespace)
        if not isinstance(verdict, ledger.Permit):
            return DeleteResult("JobSet", name, namespace, deleted=False, dry_run=dry_run)
        return self.delete_owned(verdict, self.resource(JOBSET_API, "JobSet"), name, namespace, dry_run=dry_run)

    def delete_run(self, namespace: str, name: str, *, dry_run: bool = False) -> list[DeleteResult]:
        """Delete a run of any runtime (Foreground), and the headless Service a plain Job run has beside it.

        Only a run the toolkit submitted (``toolkit.ledger.run_object``: its labels): another
        object under the name is refused (``NotOwned``, one line, exit 2, nothing deleted).
        The Service is also deleted when the Job is already gone (its ``ttlSecondsAfterFinished``
        removes the Job but nothing owns the Service). Only a Service labelled as this run's is
        touched. Nothing found: one result with ``deleted`` False (a JobSet, the default runtime's kind).
        """
        found = self.find_run(namespace, name)
        out: list[DeleteResult] = []
        if found is not None:
            kind, obj = found
            verdict = ledger.run_object({"apiVersion": kind.api_version, "kind": kind.kind, **obj}, name=name, namespace=namespace)
            if not isinstance(verdict, ledger.Permit):
                raise NotOwned(f"{verdict.what} {verdict.why}")
            out.append(self.delete_owned(verdict, self.resource(kind.api_version, kind.kind), name, namespace, dry_run=dry_run))
        if found is None or found[0] is rk.JOB:
            svc_info = self.resource("v1", "Service")
            svc = self.get(svc_info, name, namespace)
            if svc is not None:
                verdict = ledger.run_object({"apiVersion": "v1", "kind": "Service", **svc}, name=name, namespace=namespace)
                if isinstance(verdict, ledger.Permit):
                    out.append(self.delete_owned(verdict, svc_info, name, namespace, dry_run=dry_run))
        return out or [DeleteResult("JobSet", name, namespace, deleted=False, dry_run=dry_run)]

    # ---------------------------------------------------------------- admission

    def wait_admitted(
        self,
        namespace: str,
        jobset: str,
        *,
        timeout: float,
        kind: rk.RunKind = rk.JOBSET,
        on_progress: Callable[[str], None] | None = None,
        poll: float = 2.0,
    ) -> AdmissionResult:
        """Follow the JobSet's Workload until Kueue admits it (or deactivates it) or ``timeout`` passes.

        Between polls it watches the Workload (the watch is the wait's sleep), so admission is
        seen as soon as Kueue writes it. QuotaReserved without Admitted means admission checks
        (e.g. a ProvisioningRequest) are still pending.
        """
        start = time.monotonic()
        uid: str | None = None
        followed: str | None = None  # the Workload's name, once seen

        def seen(wl: dict | None) -> dict | None:
            nonlocal followed
            if wl is not None:
                followed = (wl.get("metadata") or {}).get("name") or followed
            return wl

        def current() -> dict | None:
            nonlocal uid
            js = self.get(self.resource(kind.api_version, kind.kind), jobset, namespace)
            if js is None:
                raise NotFound(f"{kind.kind} {namespace}/{jobset} does not exist — submit it first (or check --namespace)")
            uid = (js.get("metadata") or {}).get("uid")
            return seen(self.workload_for(namespace, js))

        def changes(wl: dict | None, remaining: float) -> Iterator[dict]:
            for obj in self._workload_changes(namespace, uid, wl, min(remaining, 30)):
                yield seen(obj)

        def describe(wl: dict | None) -> str:
            if wl is None:
                return f"waiting for Kueue to create a Workload for {kind.kind} {jobset} (is the queue-name label set and Kueue running?)"
            return st.workload_status(wl).describe()

        try:
            wl = wait_for(
                current,
                timeout=timeout,
                what=f"admission of {kind.kind} {namespace}/{jobset}",
                interval=poll,
                between=changes,
                until=lambda w: w is not None and st.workload_status(w).state in _ADMISSION_OVER,
                key=describe,
                on_change=(lambda w: on_progress(describe(w))) if on_progress else None,
            )
        except WaitTimeout:
            return self._not_admitted(namespace, followed, start)
        final = st.workload_status(wl)
        # Deactivated (INACTIVE) ends the wait too: Kueue will not retry it.
        return self._admission(final, final.state in (st.WorkloadState.ADMITTED, st.WorkloadState.FINISHED), start)

    def _workload_changes(self, namespace: str, uid: str | None, after: dict | None, seconds: float) -> Iterator[dict]:
        """The job's Workload as Kueue changes it after ``after``, for about ``seconds``; nothing if watching is refused."""
        rv = (after.get("metadata") or {}).get("resourceVersion") if after else None
        selector = f"{KUEUE_JOB_UID_LABEL}={uid}" if uid else None
        try:
            for _typ, obj in self.watch(self.kueue("Workload"), namespace, label_selector=selector, resource_version=rv, timeout=seconds):
                yield obj
        except Unreachable:
            raise  # the server is gone: the wait cannot go on by polling either
        except ClusterError:
            return  # watch refused (e.g. RBAC allows list only) or not possible now: the wait polls instead

    def _not_admitted(self, namespace: str, workload: str | None, start: float) -> AdmissionResult:
        """Where a Workload stands when the wait for its admission timed out."""
        if workload is None:
            return AdmissionResult(
                False,
                None,
                st.WorkloadState.MISSING.value,
                reason=f"Kueue created no Workload (no {KUEUE_QUEUE_LABEL} label, or Kueue is not running)",
                waited_seconds=time.monotonic() - start,
            )
        latest = self.get(self.kueue("Workload"), workload, namespace)
        if latest is None:
            return AdmissionResult(
                False, workload, st.WorkloadState.MISSING.value, reason="the Workload disappeared (JobSet deleted?)", waited_seconds=time.monotonic() - start
            )
        final = st.workload_status(latest)
        return self._admission(final, final.state is st.WorkloadState.ADMITTED, start)

    @staticmethod
    def _admission(s: st.WorkloadStatus, admitted: bool, start: float) -> AdmissionResult:
        return AdmissionResult(
            admitted=admitted,
            workload=s.name,
            state=s.state.value,
            flavors=dict(s.flavors),
            reason="" if admitted else s.message,
            waited_seconds=time.monotonic() - start,
        )


def _owned_by(obj: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])
