"""The rehearsal daemon: what a training run's processes and GKE's node-pool repair do, on kwok.

``local up`` runs it like its other daemons (``python -m workloads.local.rehearsald
--state-dir DIR``; its log is ``<state>/logs/rehearsal.log``). Every ``POLL_S``
(``IDLE_POLL_S`` while there is nothing to play) it:

- follows the rehearsal pods (``submit`` on the local cluster labels them; see
  ``workloads.local.rehearsal``). A run's clock starts when every worker of the
  attempt (the JobSet's restart attempt) is Running: a JAX program starts when all its
  processes have joined; it stops for all when one worker stops (preempted, deleted,
  crashed): the others wait in a collective. Each worker's log is written on that
  clock, step by step, to ``<state>/pod-logs/<namespace>/<pod>.log``, which a kwok
  ``Logs`` object (owned by the pod) names, so ``kubectl logs`` / ``workloads logs``
  read it through the apiserver and kwok like a kubelet's. As on GKE, a pod's log holds
  its own attempt only: a restarted worker is a new pod with a new log. Like GKE's
  logging agent, the daemon also ships every line to the local Cloud Logging
  (``workloads.local.cloudlogging``), stamped with the container and the pod's labels:
  that is where ``metrics``, ``report`` and goodput find the earlier attempts. The finish
  time goes on each pod (``FINISH_AT_ANNOTATION``); kwok completes the pod then.
- keeps each run's checkpoints where MaxText keeps them, in the run's checkpoint
  directory (``gs://<bucket>/<run>/checkpoints/<step>/``) on the local cluster's Cloud
  Storage server (``workloads.local.bucket``): a save every ``checkpoint_period`` steps,
  at a SIGTERM with autocheckpoint (a disrupted or deleted pod), and at the end. A
  restarted attempt — or a new JobSet under the same name, as on GKE — restores the
  latest there and continues from the step after it, and its log says so. Worker 0 also
  leaves what MaxText's process 0 leaves in the run's bucket: its gcs_metrics files every
  ``log_period`` steps (a gs:// output), and at the end of each attempt (completed, or
  stopped by SIGTERM) its TensorBoard event file (``<run>/tensorboard/``, directly or through
  a GCS FUSE mount: ``workloads.observe.tb_events``). The daemon's
  own book of a run (``<state>/rehearsal/runs/<jobset uid>.json``) keeps its attempts'
  clocks.
- replaces preempted node pools (``workloads.local.disrupt``): NotReady once their
  pods have stopped, back and Ready at the time ``preempt`` recorded.

Why a daemon rather than ``preempt`` waiting: the logs must grow while the run runs,
the finish time is only known once every worker is up (after a preemption, when the
replaced nodes are back), and a replacement must finish even if the command that
asked for it is interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.digits import is_decimal
from toolkit.errors import Conflict, ToolkitError
from toolkit.names import GKE_NODEPOOL_LABEL, JOBSET_JOB_INDEX_LABEL, JOBSET_REPLICAS_ANNOTATION, K8S_COMPLETION_INDEX_LABEL
from toolkit.owned import write_atomic
from workloads.local import agents, cloudlogging, disrupt, loopback, pathways_rehearsal, slices, state, upgrade, volumes
from workloads.local import faults as localfaults
from workloads.local.addons import FINISH_AT_ANNOTATION, PATHWAYS_ANNOTATION, REHEARSAL_ANNOTATION, REHEARSAL_LABEL, VOLUME_HELPER_ANNOTATION
from workloads.local.rehearsal import (
    MaxTextLog,
    Rehearsal,
    _phase,
    finish_time,
    gcs_metrics_dir,
    iso,
    local_steps,
    metrics_file_name,
    pod_log_file,
    saved_steps,
    step_end,
    steps_done_by,
    tensorboard_dir,
)

POLL_S = 0.25  # while rehearsal pods or node replacements are about
IDLE_POLL_S = 1.0  # while there are none: a pass costs a LIST, on 2 shared cores
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
KWOK_API = "kwok.x-k8s.io/v1alpha1"
_STEP_RE = re.compile(r"completed step: (\d+),", re.ASCII)
TMP_SUFFIX = ".orbax-checkpoint-tmp"  # a save's directory until it is complete (Orbax's atomic rename)


def ready_file(state_dir: Path) -> Path:
    return state_dir / "rehearsal" / "ready"


def _say(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------ a run's checkpoints


@dataclass
class RunBook:
    """One run (JobSet uid): its latest checkpoint and the clock of each attempt."""

    path: Path
    saved: int | None = None
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)  # attempt -> t0, first, restored, uids
    # Saves started and not complete yet: {"step", "attempt", "done_at"} (an async save takes Rehearsal.save_seconds).
    pending: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path) -> RunBook:
        try:
            d = json.loads(path.read_text())
            return cls(path, d.get("saved"), d.get("attempts") or {}, d.get("pending") or [])
        except (OSError, ValueError):
            return cls(path)

    def save_step(self, step: int | None) -> None:
        if step is not None and (self.saved is None or step > self.saved):
            self.saved = step
            self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"saved": self.saved, "attempts": self.attempts, "pending": self.pending}))


class RamDisks:
    """Multi-tier checkpointing's RAM disks, one per slice's node pool (``<state>/rehearsal/ramdisk/<pool>/<run uid>/<step>``).

    A RAM disk lives as long as its VMs: a node pool being replaced (``disrupt``) loses it.
    Each slice's disk holds the whole checkpoint (its own shards, and its peer's replicated to it).
    """

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "rehearsal" / "ramdisk"

    def save(self, pools: set[str], run_uid: str, step: int) -> None:
        for pool in pools:
            d = self.root / pool / run_uid
            d.mkdir(parents=True, exist_ok=True)
            (d / str(step)).touch()
            for old in sorted((int(f.name) for f in d.iterdir() if f.name.isdigit()), reverse=True)[2:]:  # two kept, as MaxText's local tier
                (d / str(old)).unlink(missing_ok=True)

    def newest(self, pools: set[str], run_uid: str) -> int | None:
        steps = [int(f.name) for pool in pools if (self.root / pool / run_uid).is_dir() for f in (self.root / pool / run_uid).iterdir() if f.name.isdigit()]
        return max(steps) if steps else None

    def wipe(self, pool: str) -> None:
        shutil.rmtree(self.root / pool, ignore_errors=True)


class Checkpoints:
    """Rehearsal checkpoints in the local cluster's bucket server: one small object per saved step."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._client: Any = None
        self._latest: dict[str, int | None] = {}

    def client(self) -> Any:
        if self._client is None:
            from workloads.local import bucket

            st = json.loads((self.state_dir / "cluster.json").read_text())
            # A fleet's worker uses the fleet's one server (controlplane.Role.gcs_url), not a port of its own.
            self._client = bucket.SERVICE.client(st.get("gcs_url") or loopback.url(st["ports"]["gcs"]))
        return self._client

    def latest(self, uri: str, mounts: dict[str, str] | None = None) -> int | None:
        """The newest step saved under ``uri`` (gs://bucket/run/checkpoints/, or an in-pod path on a mounted Lustre claim),
        as MaxText's checkpoint manager finds it at a start."""
        steps = set()
        if uri.startswith("/"):
            local = volumes.local_path(mounts or {}, uri)
            if local is None:
                raise OSError(f"{uri} is on no volume the pod mounts")
            steps = {int(p.name) for p in local.iterdir() if p.is_dir() and is_decimal(p.name)} if local.is_dir() else set()
        else:
            from workloads.local.bucket import split_gs

            bucket, prefix = split_gs(uri)
            for blob in self.client().list_blobs(bucket, prefix=prefix):
                head = blob.name[len(prefix) :].split("/", 1)[0]
                if is_decimal(head):
                    steps.add(int(head))
        self._latest[uri] = max(steps) if steps else None
        return self._latest[uri]

    def upload_events(self, directory: str, name: str, data: bytes) -> None:
        """One of MaxText's TensorBoard event files, as its writer leaves it when closed."""
        from workloads.local.bucket import split_gs

        bucket, prefix = split_gs(directory)
        self.client().bucket(bucket).blob(f"{prefix}{name}").upload_from_string(data, content_type="application/octet-stream")

    def upload_metrics(self, directory: str, name: str, records: list[dict[str, Any]]) -> None:
        """One of MaxText's gcs_metrics files: a JSON document per line."""
        from workloads.local.bucket import split_gs

        bucket, prefix = split_gs(directory)
        body = "".join(json.dumps(rec) + "\n" for rec in records).encode()
        self.client().bucket(bucket).blob(f"{prefix}{name}").upload_from_string(body, content_type="text/plain")

    def _local(self, uri: str, mounts: dict[str, str] | None) -> Path:
        """A Lustre checkpoint directory (an in-pod path) as the local directory the pod's claim stands for."""
        local = volumes.local_path(mounts or {}, uri)
        if local is None:
            raise OSError(f"{uri} is on no volume the pod mounts")
        return local

    def begin(self, uri: str, step: int, run: str, mounts: dict[str, str] | None = None) -> None:
        """A save of ``step`` has started: Orbax writes into ``<step>.orbax-checkpoint-tmp/`` first, which a restore never reads."""
        body = json.dumps({"rehearsal": run, "step": step, "complete": False}).encode()
        if uri.startswith("/"):
            item = self._local(uri, mounts) / f"{step}{TMP_SUFFIX}" / "items" / "rehearsal.json"
            item.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(item, body)
            return
        from workloads.local.bucket import split_gs

        bucket, prefix = split_gs(uri)
        self.client().bucket(bucket).blob(f"{prefix}{step}{TMP_SUFFIX}/items/rehearsal.json").upload_from_string(body, content_type="application/json")

    def save(self, uri: str, step: int, run: str, mounts: dict[str, str] | None = None) -> None:
        """``step`` complete (each worker of a run reports the same saves: the first one writes); its tmp directory goes."""
        if uri in self._latest and (self._latest[uri] if self._latest[uri] is not None else -1) >= step:
            return
        body = json.dumps({"rehearsal": run, "step": step}).encode()
        if uri.startswith("/"):
            local = self._local(uri, mounts)
            item = local / str(step) / "items" / "rehearsal.json"
            item.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(item, body)
            shutil.rmtree(local / f"{step}{TMP_SUFFIX}", ignore_errors=True)
        else:
            from workloads.local.bucket import split_gs

            bucket, prefix = split_gs(uri)
            self.client().bucket(bucket).blob(f"{prefix}{step}/items/rehearsal.json").upload_from_string(body, content_type="application/json")
            for blob in self.client().list_blobs(bucket, prefix=f"{prefix}{step}{TMP_SUFFIX}"):
                blob.delete()
        self._latest[uri] = step


# ------------------------------------------------------------------ one worker


@dataclass
class Worker:
    namespace: str
    name: str
    uid: str
    run_uid: str
    attempt: str
    r: Rehearsal
    log: MaxTextLog
    path: Path
    agent: cloudlogging.Store | None = None  # the logging agent's store, with where the lines come from
    source: cloudlogging.Container | None = None
    started: bool = False  # start lines written
    joined: bool = False  # the attempt's clock has started and its lines are written
    next_step: int | None = None
    ended: bool = False
    metrics: list[dict[str, Any]] = field(default_factory=list)  # gcs_metrics records not uploaded yet (process 0's)
    events: list[Any] = field(default_factory=list)  # process 0's TensorBoard scalars of this attempt (tb_events.Scalars), written at its end
    t0: float = 0.0  # when this attempt's clock started (the event file's name)
    pod: dict[str, Any] | None = None  # the pod as last listed (what a vanished worker's SIGTERM is played with)

    def write(self, lines: list[str]) -> None:
        if lines:
            with open(self.path, "a") as f:
                f.writelines(lines)
            if self.agent is not None and self.source is not None:
                self.agent.ship(self.source, lines, time.time())


def _resume_point(path: Path) -> int | None:
    """The step after the last one already in a log file (a daemon restarted mid-run), else None."""
    try:
        text = path.read_text()
    except OSError:
        return None
    steps = _STEP_RE.findall(text)
    return int(steps[-1]) + 1 if steps else None


# ------------------------------------------------------------------ the daemon


class Rehearsals:
    def __init__(self, state_dir: Path, kube) -> None:
        self.state_dir = state_dir
        self.kube = kube
        self.agents = agents.Agents(state_dir, kube, log=_say)  # the kubelet's part for pods that restart in place
        self.faults = localfaults.Faults(kube)  # a bad host's and a hang's part (``local badhost``/``local hang``)
        self.workers: dict[str, Worker] = {}
        self.incarnations: dict[str, list[str]] = defaultdict(list)  # in-place pod uid -> its containers' worker keys
        self.books: dict[str, RunBook] = {}
        self.checkpoints = Checkpoints(state_dir)
        self.ramdisks = RamDisks(state_dir)
        self._pools: dict[str, str] = {}  # node -> its GKE node pool
        self.agent = cloudlogging.Store(cloudlogging.store_file(state_dir))
        self._stamps: dict[str | None, tuple[str, str, str]] = {}
        self.helpers: set[str] = set()  # helper pods played (their uid)
        self.mounts: dict[str, dict[str, str]] = {}  # run uid -> its pods' Lustre mounts (in-pod path -> local directory)

    def restorable(self, r: Rehearsal, book: RunBook) -> int | None:
        """The step a (re)start restores: the newest in the run's checkpoint directory (the book's without one)."""
        if not r.checkpoint_dir:
            return book.saved
        try:
            return self.checkpoints.latest(r.checkpoint_dir, self.mounts.get(book.path.stem))
        except Exception as e:  # the bucket server is down: MaxText would fail to start; here the run starts fresh
            _say(f"run {r.run}: cannot list {r.checkpoint_dir} ({e}); starting without a restore")
            return None

    def save(self, r: Rehearsal, book: RunBook, step: int | None) -> None:
        """``step`` complete in the bucket now (a save at a SIGTERM, inside the grace period; the last step's, awaited at the end)."""
        if step is None:
            return
        book.save_step(step)
        if r.checkpoint_dir:
            try:
                self.checkpoints.save(r.checkpoint_dir, step, r.run, self.mounts.get(book.path.stem))
            except Exception as e:  # a failed save, as MaxText's can fail: the previous one stays the latest
                _say(f"run {r.run}: saving step {step} to {r.checkpoint_dir} failed: {e}")

    def start_save(self, r: Rehearsal, book: RunBook, step: int, attempt: str, done_at: float) -> None:
        """An async save of ``step`` started; it is complete at ``done_at``, unless its attempt stops before (``finish_saves``)."""
        if r.save_seconds <= 0:
            self.save(r, book, step)
            return
        if r.checkpoint_dir:
            try:
                self.checkpoints.begin(r.checkpoint_dir, step, r.run, self.mounts.get(book.path.stem))
            except Exception as e:
                _say(f"run {r.run}: starting the save of step {step} failed: {e}")
        book.pending.append({"step": step, "attempt": attempt, "done_at": done_at})
        book.write()

    def finish_saves(self, r: Rehearsal, book: RunBook, now: float, *, all_done: bool = False) -> None:
        """Complete the saves that are due; drop those whose attempt stopped first (left incomplete, as a killed Orbax leaves them)."""
        left = []
        for p in book.pending:
            stopped = (book.attempts.get(p["attempt"]) or {}).get("stopped")
            if stopped is not None and float(stopped) < p["done_at"] and not all_done:
                _say(f"run {r.run}: the save of step {p['step']} did not complete (attempt {p['attempt']} stopped first)")
            elif all_done or p["done_at"] <= now:
                self.save(r, book, p["step"])
            else:
                left.append(p)
        if left != book.pending:
            book.pending = left
            book.write()

    def pools(self, pods: list[dict[str, Any]]) -> set[str]:
        """The GKE node pools the pods run on (a multi-tier run's RAM disks)."""
        out = set()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            if node not in self._pools:
                obj = self.kube.get(self.kube.resource("v1", "Node"), node) or {}
                self._pools[node] = ((obj.get("metadata") or {}).get("labels") or {}).get(GKE_NODEPOOL_LABEL, "")
            if self._pools[node]:
                out.add(self._pools[node])
        return out

    def book(self, run_uid: str) -> RunBook:
        if run_uid not in self.books:
            self.books[run_uid] = RunBook.open(self.state_dir / "rehearsal" / "runs" / f"{run_uid}.json")
        return self.books[run_uid]

    # -------------------------------------------------------------- pods

    @property
    def busy(self) -> bool:
        return (
            any(not w.ended for w in self.workers.values()) or bool(disrupt.pending(self.state_dir)) or any(not c.done for c in self.agents.containers.values())
        )

    def tick(self, now: float) -> None:
        pods = self.kube.list(self.kube.resource("v1", "Pod"), None, label_selector=f"{REHEARSAL_LABEL}=true")
        self.agents.tick(pods, now)
        live: set[str] = set()
        groups: dict[tuple[str, str], list[tuple[Worker, dict[str, Any], str]]] = defaultdict(list)
        for pod in pods:
            if (pod["metadata"].get("annotations") or {}).get(VOLUME_HELPER_ANNOTATION):
                self._helper(pod)
                continue
            members = self._in_place_workers(pod) if agents.is_agent_pod(pod) else [(self._worker(pod), _phase(pod))]
            for w, phase in members:
                if w is None:
                    continue
                live.add(w.uid)
                w.pod = pod
                groups[(w.run_uid, w.attempt)].append((w, pod, phase))
        first: set[tuple[str, str]] = set()  # attempts a vanished worker is played in: they go before the others
        for uid, w in list(self.workers.items()):
            if uid in live:
                continue
            del self.workers[uid]
            if w.joined and not w.ended and w.pod is not None:
                # Deleted between two passes: the kubelet removes a pod once its containers have
                # exited, so on GKE its SIGTERM's work (a save, the event file) was done by then.
                # Played now, before any attempt that may restore from it.
                groups[(w.run_uid, w.attempt)].append((w, w.pod, "stopping"))
                first.add((w.run_uid, w.attempt))
        for key in sorted(groups, key=lambda k: k not in first):
            self._attempt(key[0], key[1], groups[key], now)

    def _in_place_workers(self, pod: dict[str, Any]) -> list[tuple[Worker | None, str]]:
        """A pod that restarts in place: one worker per container incarnation whose program ran (the barrier went down).

        The attempt is JobSet's in-place restart attempt (every worker of an attempt starts together);
        an earlier incarnation is stopping until its lines are written.
        """
        uid = pod["metadata"]["uid"]
        inc = self.agents.incarnation(uid)
        if inc is None:
            return []
        restarts, running = inc
        pod_phase = _phase(pod)
        key = f"{uid}#{restarts}"
        if running and key not in self.incarnations[uid]:
            # The attempt as the agent wrote it before it lifted the barrier: the pod as listed at the
            # start of this pass may predate that write (then its workers fell into two attempts and
            # the run never started), so the pod is read again.
            current = self._current(pod)
            if current is not None:  # else: the next pass
                w = self._worker(pod, key=key, attempt=f"in-place-{agents.attempt_of(current)}", fresh_log=bool(self.incarnations[uid]))
                if w is not None:
                    self.incarnations[uid].append(key)
        out: list[tuple[Worker | None, str]] = []
        for k in self.incarnations[uid]:
            w = self.workers.get(k)
            if w is None:
                continue
            if k != key:
                phase = "stopping"  # the container restarted in place: this program was stopped
            elif pod_phase in ("succeeded", "stopping", "crashed"):
                phase = pod_phase
            else:
                phase = "running" if running else "stopping"
            out.append((w, phase))
        return out

    def _current(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod as the API server holds it now; None when it is gone (or is another pod) or cannot be read."""
        meta = pod["metadata"]
        try:
            current = self.kube.get(self.kube.resource("v1", "Pod"), meta["name"], meta["namespace"])
        except ToolkitError as e:
            _say(f"{meta['namespace']}/{meta['name']}: cannot read it again ({e}); retrying")
            return None
        return current if current is not None and (current.get("metadata") or {}).get("uid") == meta.get("uid") else None

    def _worker(self, pod: dict[str, Any], *, key: str | None = None, attempt: str | None = None, fresh_log: bool = False) -> Worker | None:
        """The worker of a pod (``key``/``attempt``: of one container incarnation of a pod that restarts in place;
        ``fresh_log``: a restarted container, whose log starts empty as the kubelet's does, the last one kept beside it)."""
        meta = pod["metadata"]
        uid = key or meta.get("uid", "")
        if uid in self.workers:
            return self.workers[uid]
        if not (pod.get("spec") or {}).get("nodeName"):
            return None  # not placed yet: no kubelet, no log
        if PATHWAYS_ANNOTATION in (meta.get("annotations") or {}):
            return None  # a Pathways run: its head and workers are played together (pathways_rehearsal)
        try:
            r = Rehearsal.from_annotation((meta.get("annotations") or {})[REHEARSAL_ANNOTATION])
        except (KeyError, ValueError, TypeError) as e:
            _say(f"{meta.get('namespace')}/{meta.get('name')}: unreadable rehearsal annotation ({e}); ignored")
            return None
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        replicas = int(annotations.get(JOBSET_REPLICAS_ANNOTATION) or 1)
        per_slice = max(1, r.workers // max(1, replicas))
        index = int(labels.get(JOBSET_JOB_INDEX_LABEL, 0)) * per_slice + int(labels.get(K8S_COMPLETION_INDEX_LABEL, 0))
        ns, name = meta["namespace"], meta["name"]
        path = pod_log_file(self.state_dir, ns, name)
        w = Worker(
            namespace=ns,
            name=name,
            uid=uid,
            run_uid=labels.get(JOBSET_UID_LABEL, r.run),
            attempt=attempt or labels.get(RESTART_ATTEMPT_LABEL, "0"),
            r=r,
            log=MaxTextLog(r, name, index),
            path=path,
            agent=self.agent,
            source=self._source(pod),
        )
        if w.run_uid not in self.mounts and r.checkpoint_dir.startswith("/"):
            try:
                self.mounts[w.run_uid] = volumes.pod_mounts(self.kube, self.state_dir, pod)
            except ToolkitError as e:  # the claim cannot be read now: MaxText would fail to start on its mount
                _say(f"{ns}/{name}: cannot resolve its volumes ({e})")
        if fresh_log and path.exists():
            # A restarted container's log starts empty (kubectl logs --previous has the last one's).
            write_atomic(path.with_name(path.name + ".previous"), path.read_bytes())
            path.write_bytes(b"")
        resumed = None if key else _resume_point(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if resumed is not None:  # the daemon restarted mid-run: go on where the log ends
            w.started = w.joined = True
            w.next_step = resumed
        else:
            path.touch()  # a new pod, a new log: its earlier attempts are in Cloud Logging only
        # Only a pod seen running is played: one that already ended (seen first after a daemon
        # restart, or stopped before it ever ran) keeps the log it has.
        w.ended = key is None and _phase(pod) not in ("pending", "running")
        self._logs_object(pod, path)
        self.workers[uid] = w
        return w

    def _cluster_stamp(self) -> tuple[str, str, str]:
        """(project, location, cluster) of the spec ``local up`` was given, read once per spec (every worker of every run asks)."""
        spec_path = (state.read_state(self.state_dir) or {}).get("spec")
        if spec_path not in self._stamps:
            stamp = (loopback.PROJECT, "local", "tgk-local")
            try:
                from infra.spec import load_spec

                if spec_path:
                    env = load_spec(Path(spec_path))
                    stamp = (env.project, env.region, env.cluster.name)
            except Exception as e:  # a spec edited since `up`: the lines still go somewhere findable
                _say(f"the cluster's spec is unreadable ({e}); log entries are stamped {'/'.join(stamp)}")
            self._stamps[spec_path] = stamp
        return self._stamps[spec_path]

    def _source(self, pod: dict[str, Any]) -> cloudlogging.Container:
        """What GKE's agent stamps on the pod's lines: the cluster, the container, the pod's labels."""
        meta = pod["metadata"]
        project, location, cluster = self._cluster_stamp()
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        return cloudlogging.Container(
            project=project,
            location=location,
            cluster=cluster,
            namespace=meta["namespace"],
            pod=meta["name"],
            container=str(containers[0].get("name") or ""),
            pod_labels=dict(meta.get("labels") or {}),
        )

    def _logs_object(self, pod: dict[str, Any], path: Path) -> None:
        """kwok's ``Logs`` for the pod: its workload container's log is ``path``; deleted with the pod."""
        meta = pod["metadata"]
        obj = {
            "apiVersion": KWOK_API,
            "kind": "Logs",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}],
            },
            "spec": {"logs": [{"logsFile": str(path), "follow": True}]},
        }
        try:
            self.kube.create(obj, field_manager="tgk-rehearsal")
        except Conflict:
            pass  # made by an earlier pass

    def _helper(self, pod: dict[str, Any]) -> None:
        """A Lustre helper pod, once placed and Running: its request run, its log written, its end set (``workloads.local.volumes``)."""
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        if uid in self.helpers or _phase(pod) != "running" or not (pod.get("spec") or {}).get("nodeName"):
            return
        path = pod_log_file(self.state_dir, meta["namespace"], meta["name"])  # helper pods have names of their own (random)
        volumes.play_helper(self.kube, self.state_dir, pod, path)
        self._logs_object(pod, path)
        self._finish_at(pod, iso(time.time()))
        self.helpers.add(uid)
        _say(f"{meta['namespace']}/{meta['name']}: Lustre helper answered")

    def _attempt(self, run_uid: str, attempt: str, members: list[tuple[Worker, dict[str, Any], str]], now: float) -> None:
        book = self.book(run_uid)
        r = members[0][0].r
        phases = {w.uid: phase for w, _, phase in members}
        for w, _, _ in members:
            if not w.started and not w.ended and phases[w.uid] in ("running", "stopping", "succeeded"):
                w.write(w.log.start(now))
                w.started = True
        clock = book.attempts.get(attempt)
        if clock is not None and not any(w.uid in clock.get("uids", ()) for w, _, _ in members):
            clock = None  # the same attempt number, new pods (e.g. after a Kueue eviction): a new start
        if clock is None and sum(1 for p in phases.values() if p == "running") >= r.workers:
            saved = self.restorable(r, book)
            t0, source = now, None
            if r.mtc_local_period:
                # Multi-tier: a surviving slice's RAM disk if one holds a newer (or the same) step, else the backup.
                local = self.ramdisks.newest(self.pools([pod for _, pod, _ in members]), run_uid)
                if local is not None and (saved is None or local >= saved):
                    saved, source, t0 = local, "peer-ramdisk", now + r.restore_peer_seconds
                elif saved is not None:
                    source, t0 = "bucket", now + r.restore_bucket_seconds
            first = 0 if saved is None else saved + 1
            clock = {"t0": t0, "first": min(first, r.steps), "restored": saved, "uids": sorted(phases), "source": source, "joined_at": now}
            book.attempts[attempt] = clock
            book.write()
            restored = f" (restored step {saved})" if saved is not None else ""
            _say(
                f"run {r.run} attempt {attempt}: all {r.workers} workers running; steps {clock['first']}..{r.steps - 1}{restored}, until {iso(finish_time(r, now, clock['first']))}"
            )
        if clock is None:
            for w, _, _ in members:
                if phases[w.uid] not in ("pending", "running"):
                    w.ended = True
            return
        t0, first = float(clock["t0"]), int(clock["first"])
        finish = iso(finish_time(r, t0, first))
        hung = "hung" in clock
        if self.faults.attempt(clock, members, r, now):  # workloads.local.faults: a bad host's pods failed, a hang played
            finish = iso(localfaults.never(now))
            if not hung:
                book.write()
        if "stopped" not in clock and any(phases[w.uid] in ("stopping", "crashed") for w, _, _ in members):
            # One process gone stops them all: the others wait in a collective until they are stopped too.
            clock["stopped"] = now
            book.write()
        self.finish_saves(r, book, now)
        pools = self.pools([pod for _, pod, _ in members]) if r.mtc_local_period else set()
        horizon = min(now, float(clock.get("stopped", now)), float(clock.get("hung", now)))
        for w, pod, _ in members:
            phase = phases[w.uid]
            if w.ended:
                continue
            if not w.joined:
                if phase not in ("running", "stopping", "succeeded"):
                    w.ended = phase == "crashed"
                    continue
                lines = w.log.joined(t0, clock.get("restored"))
                if clock.get("source"):
                    lines += w.log.restored_from(t0, clock["restored"], clock["source"], t0 - float(clock.get("joined_at", t0)))
                w.write(lines)
                w.joined = True
                w.next_step = first
            if phase == "running" and "#" in w.uid:
                # In place, the program ends itself (exit 0), and the agent and the container with it.
                if now >= finish_time(r, t0, first):
                    self.agents.end_program(pod["metadata"]["uid"], 0)
            elif phase == "running" and (pod["metadata"].get("annotations") or {}).get(FINISH_AT_ANNOTATION) != finish:
                self._finish_at(pod, finish)
            done = r.steps if phase == "succeeded" else steps_done_by(r, t0, first, horizon)
            self._steps(w, book, t0, first, done, attempt, pools)
            if phase == "stopping":
                # SIGTERM: with autocheckpoint MaxText saves the step it reached, then exits.
                last = done - 1 if done > first else None
                lines = w.log.preempted(now, last)
                w.write(lines)
                if lines:
                    self.save(r, book, last)
                w.ended = True
            elif phase == "crashed":
                w.ended = True
            elif phase == "succeeded":
                final = w.log.final_save_step()
                if final is not None:
                    w.write(w.log.save(now, final))
                    self.save(r, book, final)
                self.finish_saves(r, book, now, all_done=True)  # MaxText waits for its async saves before it exits
                w.ended = True
            if w.ended:
                self._close_events(w)

    def _steps(self, w: Worker, book: RunBook, t0: float, first: int, done: int, attempt: str = "", pools: set[str] | None = None) -> None:
        start = w.next_step if w.next_step is not None else first
        if done <= start:
            return
        lines: list[str] = []
        for step in range(start, done):
            lines += w.log.step(step_end(w.r, t0, first, step), step, first)
        w.write(lines)
        w.next_step = done
        self._gcs_metrics(w, first, start, done)
        self._tensorboard(w, t0, first, start, done)
        if w.log.worker != 0:
            return  # every worker reports the same saves: process 0 keeps the books
        for step in saved_steps(w.r, start, done):
            self.start_save(w.r, book, step, attempt, step_end(w.r, t0, first, step) + w.r.save_seconds)
        local = local_steps(w.r, start, done)
        if local and pools:
            self.ramdisks.save(pools, w.run_uid, local[-1])

    def _gcs_metrics(self, w: Worker, first: int, start: int, done: int) -> None:
        """Process 0 keeps each step's metrics and uploads a file at MaxText's boundaries; a stopped process loses what it kept."""
        directory = gcs_metrics_dir(w.r)
        if directory is None or w.log.worker != 0:
            return
        for step in range(start, done):
            w.metrics.append(w.log.metrics_record(step, first))
            name = metrics_file_name(w.r, step)
            if name is None:
                continue
            try:
                self.checkpoints.upload_metrics(directory, name, w.metrics)
            except Exception as e:  # MaxText's upload failing fails the run; here the rehearsal says so and goes on
                _say(f"run {w.r.run}: uploading {directory}{name} failed: {e}")
            w.metrics = []

    def _tensorboard(self, w: Worker, t0: float, first: int, start: int, done: int) -> None:
        """Process 0 keeps each step's scalars in its TensorBoard writer (tensorboardX), written out when the attempt ends."""
        if tensorboard_dir(w.r) is None or w.log.worker != 0:
            return
        from workloads.observe.tb_events import Scalars

        w.t0 = w.t0 or t0
        for step in range(start, done):
            rec = w.log.metrics_record(step, first)
            w.events.append(Scalars(step, step_end(w.r, t0, first, step), {k: float(v) for k, v in rec.items() if k not in ("step", "run_name")}))

    def _close_events(self, w: Worker) -> None:
        """The attempt's end (completed, crashed or stopped by SIGTERM): MaxText closes its writer, and through a mount the file appears."""
        directory = tensorboard_dir(w.r)
        if directory is None or w.log.worker != 0 or not w.events:
            return
        from workloads.observe.tb_events import encode

        name = f"events.out.tfevents.{int(w.t0)}.{w.name}"
        try:
            self.checkpoints.upload_events(directory, name, encode(w.t0, w.events))
        except Exception as e:  # the bucket server is down: the run's figures are in its log still
            _say(f"run {w.r.run}: writing {directory}{name} failed: {e}")
        w.events = []

    def _finish_at(self, pod: dict[str, Any], finish: str) -> None:
        meta = pod["metadata"]
        path = self.kube.resource("v1", "Pod").path(meta["namespace"], meta["name"])
        try:
            disrupt.patch(self.kube, path, {"metadata": {"annotations": {FINISH_AT_ANNOTATION: finish}}})
        except ToolkitError as e:
            _say(f"{meta['namespace']}/{meta['name']}: cannot set its finish time ({e}); retrying")

    # -------------------------------------------------------------- nodes

    def replace_nodes(self, now: float) -> None:
        for path in disrupt.pending(self.state_dir):
            try:
                record = disrupt.Replacement.load(path)
            except (OSError, ValueError, TypeError) as e:
                _say(f"{path.name}: unreadable replacement record ({e}); dropped")
                path.unlink(missing_ok=True)
                continue
            before = (record.down, record.gone, record.created)
            if record.created is False:
                self.ramdisks.wipe(record.pool)  # the VMs are going (or gone): their RAM disks with them
            if disrupt.advance(self.kube, record, now):
                _say(f"node pool {record.pool}: {len(record.nodes)} nodes replaced, Ready and schedulable")
                path.unlink(missing_ok=True)
            elif (record.down, record.gone, record.created) != before:
                if record.created:
                    step = "created again (cordoned until kwok holds them)"
                elif record.gone is not None:
                    step = "Nodes deleted"
                else:
                    step = f"NotReady; back at {iso(record.up_at)}"
                _say(f"node pool {record.pool}: {step}")
                record.save(self.state_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workloads.local.rehearsald", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    state_dir = args.state_dir
    kube = state.client(state_dir)
    daemon = Rehearsals(state_dir, kube)

    def stop(signum: int, frame: Any) -> None:
        # The containers of pods that restart in place are processes of ours: they end with the daemon.
        daemon.agents.stop_all()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    slice_controllers = slices.SliceControllers(kube, _say)  # dynamic slicing's admission and GKE's slice forming
    pathways_runs = pathways_rehearsal.PathwaysRehearsals(daemon, _say)  # a Pathways run's head and workers
    ready = ready_file(state_dir)
    _say(f"rehearsal daemon for {state_dir} (poll {POLL_S}s)")

    def begin_maintenance(now: float) -> None:  # announced host maintenance whose window has come (``local maintenance``)
        upgrade.begin_due_maintenance(kube, state_dir, now, _say)

    while True:
        now = time.time()
        for step in (daemon.tick, begin_maintenance, daemon.replace_nodes, slice_controllers.tick, pathways_runs.tick):
            try:
                step(now)
            except (ToolkitError, OSError) as e:
                _say(f"{step.__name__}: {e}")
        if not ready.is_file():
            ready.parent.mkdir(parents=True, exist_ok=True)
            ready.write_text(f"{os.getpid()}\n")
        time.sleep(max(0.0, (POLL_S if daemon.busy else IDLE_POLL_S) - (time.time() - now)))


if __name__ == "__main__":
    raise SystemExit(main())
