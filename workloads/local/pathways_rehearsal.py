"""A Pathways run rehearsed: its program in the head, its slices' workers, and an elastic slice replaced.

On GKE a Pathways run's one JAX program runs in the head pod and drives every slice's workers
through the resource manager. With elastic slices (``--elastic-slices``), losing a slice does
not end the program: the slice's workers are recreated by their Job (``restartPolicy:
OnFailure``, ``backoffLimit`` = max slice restarts x hosts), the head and the other slices keep
their processes, and MaxText's elastic training, once the slice is back, restores its last
checkpoint in the same process and goes on counting steps from there (MaxText's elastic training
guide; the proxy's ``--num_elastic_slices``).

``PathwaysRehearsals.tick`` (a step of the rehearsal daemon, ``rehearsald``) plays that on kwok:

- the clock starts when the head and every worker of the run are Running; the head's log (its
  program container's) gets MaxText's start, join and step lines, the checkpoints go to the run's
  directory as ``rehearsald`` keeps them;
- a worker that stops (``local preempt RUN --slice N``: disrupted, its node pool replaced) pauses
  the program: the steps stop at that moment and the log says which slice was lost;
- when every worker is Running again, and at least ``RECOVERY_S`` after the loss (the ~40 s end to
  end MaxText's elastic training measured: Pathways re-registers the slice, MaxText restores in
  process and recompiles nothing), the program restores the latest checkpoint and goes on from the
  step after it, in the same head pod; a run without elastic slices ends its program there instead
  (exit 1 in its log, as a lost slice ends a non-elastic Pathways program);
- the head's finish time is written when the last step is due (kwok then completes it, and the
  JobSet's success policy completes the run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from toolkit.names import JOBSET_JOB_INDEX_LABEL
from workloads.local.addons import PATHWAYS_ANNOTATION, REHEARSAL_ANNOTATION, REHEARSAL_LABEL
from workloads.local.rehearsal import MaxTextLog, Rehearsal, _phase, finish_time, iso, pod_log_file, step_end, steps_done_by

RECOVERY_S = 40.0
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"


@dataclass
class _Run:
    head_uid: str
    r: Rehearsal
    elastic: int
    log: MaxTextLog
    path: Any
    t0: float | None = None  # the running clock's start (None: paused or not started)
    first: int = 0
    done: int = 0  # steps completed and logged
    lost_at: float | None = None
    lost: set[str] = field(default_factory=set)  # slice indexes lost
    ended: bool = False
    finish: str | None = None


class PathwaysRehearsals:
    def __init__(self, daemon: Any, say: Any) -> None:
        self.d, self.say = daemon, say  # the rehearsal daemon: its books, checkpoints, logs agent, kwok Logs
        self.runs: dict[str, _Run] = {}

    def tick(self, now: float) -> None:
        pods = [
            p
            for p in self.d.kube.list(self.d.kube.resource("v1", "Pod"), None, label_selector=f"{REHEARSAL_LABEL}=true")
            if PATHWAYS_ANNOTATION in (p["metadata"].get("annotations") or {})
        ]
        by_run: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            by_run.setdefault((p["metadata"].get("labels") or {}).get(JOBSET_UID_LABEL, ""), []).append(p)
        for uid, members in by_run.items():
            heads = [p for p in members if p["metadata"]["labels"].get(REPLICATED_JOB_LABEL) == "pathways-head" and p["spec"].get("nodeName")]
            workers = [p for p in members if p["metadata"]["labels"].get(REPLICATED_JOB_LABEL) == "worker"]
            if not heads:
                continue
            head = heads[0]
            run = self.runs.get(uid)
            if run is None or run.head_uid != head["metadata"]["uid"]:
                run = self._start(uid, head)
                if run is None:
                    continue
            if not run.ended:
                self._play(uid, run, head, workers, now)

    def _start(self, uid: str, head: dict[str, Any]) -> _Run | None:
        meta = head["metadata"]
        try:
            r = Rehearsal.from_annotation(meta["annotations"][REHEARSAL_ANNOTATION])
            elastic = int(meta["annotations"][PATHWAYS_ANNOTATION] or 0)
        except (KeyError, ValueError, TypeError) as e:
            self.say(f"{meta['namespace']}/{meta['name']}: unreadable Pathways rehearsal facts ({e}); ignored")
            return None
        path = pod_log_file(self.d.state_dir, meta["namespace"], meta["name"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.d._logs_object(head, path)
        run = _Run(meta["uid"], r, elastic, MaxTextLog(r, meta["name"], 0), path)
        self.runs[uid] = run
        return run

    def _write(self, run: _Run, head: dict[str, Any], lines: list[str]) -> None:
        if lines:
            with open(run.path, "a") as f:
                f.writelines(lines)
            self.d.agent.ship(self.d._source(head), lines, time.time())

    def _play(self, uid: str, run: _Run, head: dict[str, Any], workers: list[dict[str, Any]], now: float) -> None:

        r = run.r
        book = self.d.book(uid)
        live = [w for w in workers if _phase(w) == "running"]
        slices_up = {w["metadata"]["labels"].get(JOBSET_JOB_INDEX_LABEL) for w in live}
        all_up = _phase(head) == "running" and len(live) >= r.workers
        if run.t0 is None and run.lost_at is None:  # not started yet
            if not all_up:
                return
            saved = self.d.restorable(r, book)
            run.first = run.done = 0 if saved is None else min(r.steps, saved + 1)
            run.t0 = now
            self._write(run, head, run.log.start(now) + run.log.joined(now, saved))
            self.say(f"pathways run {r.run}: head and {len(live)} workers running; steps {run.first}..{r.steps - 1}")
        if run.t0 is not None and not all_up:  # a slice is gone: the program waits in a collective
            self._steps(run, head, book, steps_done_by(r, run.t0, run.first, now))
            run.lost = {
                str(i) for i in range(max(1, len({w["metadata"]["labels"].get(JOBSET_JOB_INDEX_LABEL) for w in workers}))) if str(i) not in slices_up
            } or {"?"}
            run.t0, run.lost_at = None, now
            if not run.elastic:
                self._write(
                    run, head, [run.log.line(now, "train.py:1", f"slice {', '.join(sorted(run.lost))} lost and the run has no elastic slices: exiting 1", "E")]
                )
                run.ended = True
                return
            self._write(
                run,
                head,
                [
                    run.log.line(
                        now, "elastic_utils.py:1", f"Elastic: slice {', '.join(sorted(run.lost))} lost after step {run.done - 1}; waiting for it to come back"
                    )
                ],
            )
            self.say(f"pathways run {r.run}: slice {', '.join(sorted(run.lost))} lost at step {run.done}")
            return
        if run.t0 is None and run.lost_at is not None:
            if not all_up or now < run.lost_at + RECOVERY_S:
                return
            saved = self.d.restorable(r, book)
            run.first = run.done = 0 if saved is None else min(r.steps, saved + 1)
            run.t0, lost_for = now, now - run.lost_at
            run.lost_at = None
            self._write(
                run,
                head,
                [
                    run.log.line(
                        now,
                        "elastic_utils.py:2",
                        f"Elastic: slice {', '.join(sorted(run.lost))} back after {lost_for:.1f} s; restored step {saved}, continuing",
                    )
                ],
            )
            self.say(f"pathways run {r.run}: slice back after {lost_for:.1f} s, continuing from step {run.first}")
        if run.t0 is None:
            return
        self._steps(run, head, book, steps_done_by(r, run.t0, run.first, now))
        finish = iso(finish_time(r, run.t0, run.first))
        if run.finish != finish:
            self.d._finish_at(head, finish)
            run.finish = finish
        if run.done >= r.steps:
            final = run.log.final_save_step()
            if final is not None:
                self._write(run, head, run.log.save(now, final))
                self.d.save(r, book, final)
            run.ended = True

    def _steps(self, run: _Run, head: dict[str, Any], book: Any, done: int) -> None:
        from workloads.local.rehearsal import saved_steps

        if done <= run.done or run.t0 is None:
            return
        lines: list[str] = []
        for step in range(run.done, done):
            lines += run.log.step(step_end(run.r, run.t0, run.first, step), step, run.first)
        self._write(run, head, lines)
        saves = saved_steps(run.r, run.done, done)
        run.done = done
        if saves:
            self.d.save(run.r, book, saves[-1])
