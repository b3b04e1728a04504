"""The kubelet's part for pods that restart in place: JobSet's real agent as each pod's container, restarted by its rules.

kwok plays every kubelet of the local cluster, but a kwok container is only a status: nothing
runs and nothing restarts in it. A run that restarts in place (``workloads.render.inplace``)
needs both: JobSet's agent must run in each pod, talk to the API server, and be restarted in
place when it exits with the code the container's ``restartPolicyRules`` name. So the rehearsal
daemon plays that part for such pods (``Agents.tick``), and nothing else of them:

- when kwok has made the pod Running, the container starts: the agent binary of the build
  (``bin/in-place-restart-agent``, JobSet v0.12.0, unchanged) as a local process, with the
  environment the pod's container declares (its own ``POD_NAME``, ``JOBSET_NAME``,
  ``IN_PLACE_RESTART_EXIT_CODE``, resolved from the pod as the kubelet resolves them), a token
  of the pod's service account (TokenRequest, bound to the pod) in a kubeconfig, so JobSet's
  RBAC and the attempt-only admission policy apply to it as to the real one, and the pod's
  namespace at the path the agent reads it from (a private mount namespace: ``unshare``);
- ``WORKER_COMMAND`` is the one thing replaced: the agent starts a stand-in for the program
  (``STANDIN``), which says it started and then waits; the rehearsal daemon plays the
  program's log from that moment (the barrier is down);
- when the agent exits, the container's ``restartPolicyRules`` decide, as the kubelet does
  (Kubernetes container restart rules): a ``Restart`` rule restarts it in place (its
  ``restartCount`` goes up, its last state is the exit); no rule ends the container, and the
  pod, with that exit code (``restartPolicy: Never``): Succeeded on 0, Failed otherwise;
- a pod that is stopped (deleted, disrupted, ended by kwok) has its container stopped:
  SIGTERM to the agent, which ends the program (SIGKILL) and exits, then the process group.

What it cannot show: a real kubelet's timings (process start, image pull, the barrier's probe
period) and a real program's reaction to a lost peer. Everything the JobSet controller and the
agent decide is theirs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from toolkit.errors import NotFound, Rejected, ToolkitError
from toolkit.owned import write_atomic
from workloads.local import certs, state
from workloads.render.inplace import AGENT_BINARY, ATTEMPT_ANNOTATION

STOP_GRACE_S = 5.0  # SIGTERM -> SIGKILL of a stopped container's process group
TOKEN_SECONDS = 3600
# The stand-in for the program: it writes its pid when the agent starts it (the barrier is down)
# and waits; the daemon ends it with SIGTERM after writing the exit code it should end with.
STANDIN = """\
m="$1"
child=
trap 'kill "$child" 2>/dev/null; exit "$(cat "$m.exit" 2>/dev/null || echo 143)"' TERM
echo $$ > "$m.pid.tmp" && mv "$m.pid.tmp" "$m.pid"
sleep 2147483647 &
child=$!
wait "$child"
"""
_FIELD = re.compile(r"^metadata\.(name|namespace|uid|annotations|labels)(?:\['([^']+)'\])?$")


def is_agent_pod(pod: dict[str, Any]) -> bool:
    """The pod's workload container runs JobSet's in-place restart agent (a run that restarts in place)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    command = (containers[0].get("command") or [""]) if containers else [""]
    return bool(command) and str(command[0]).endswith(f"/{AGENT_BINARY}")


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def field_value(pod: dict[str, Any], path: str) -> str:
    """A downward-API fieldRef of the pod, as the kubelet resolves it ('' when the pod has no such value)."""
    m = _FIELD.fullmatch(path)
    if not m:
        return ""
    meta = pod.get("metadata") or {}
    what, key = m.group(1), m.group(2)
    if key is None:
        return str(meta.get(what) or "")
    return str((meta.get(what) or {}).get(key, ""))


def container_env(pod: dict[str, Any]) -> dict[str, str]:
    """The workload container's environment from its spec: values, and fieldRefs resolved against the pod."""
    c = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    out: dict[str, str] = {}
    for e in c.get("env") or []:
        if "value" in e:
            out[e["name"]] = str(e["value"]).replace("$$", "$")
        elif (ref := (e.get("valueFrom") or {}).get("fieldRef")) is not None:
            out[e["name"]] = field_value(pod, ref.get("fieldPath", ""))
    return out


def rule_action(pod: dict[str, Any], exit_code: int) -> str | None:
    """The action of the workload container's first restartPolicyRule that matches ``exit_code`` (None: no rule matches)."""
    c = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    for rule in c.get("restartPolicyRules") or []:
        codes = rule.get("exitCodes") or {}
        values = set(codes.get("values") or [])
        hit = exit_code in values if codes.get("operator") == "In" else exit_code not in values
        if hit:
            return rule.get("action")
    return None


@dataclass
class Container:
    """One pod's workload container: its agent process, how often it restarted, the program's stand-in."""

    namespace: str
    pod: str
    uid: str
    dir: Path
    restarts: int = 0
    proc: subprocess.Popen | None = None
    started: float = 0.0
    stopping: float | None = None  # when it was told to stop (SIGTERM)
    done: bool = False  # the container has ended for good (the pod is terminal or gone)
    exits: list[int] = field(default_factory=list)

    @property
    def marker(self) -> Path:
        """The stand-in of this incarnation writes <marker>.pid when the agent starts it."""
        return self.dir / f"worker-{self.restarts}"

    def worker_pid(self) -> int | None:
        try:
            return int((self.marker.parent / f"{self.marker.name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def worker_running(self) -> bool:
        pid = self.worker_pid()
        if pid is None or self.proc is None or self.proc.poll() is not None:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def end_worker(self, exit_code: int) -> bool:
        """End the program's stand-in with ``exit_code`` (the agent then exits with it); False when none runs."""
        pid = self.worker_pid()
        if pid is None:
            return False
        write_atomic(self.marker.parent / f"{self.marker.name}.exit", f"{exit_code}\n")
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return False
        return True


class Agents:
    """Every in-place pod's container on this cluster (``tick`` once per daemon pass)."""

    def __init__(self, state_dir: Path, kube: Any, *, log: Any = None) -> None:
        self.state_dir = state_dir
        self.kube = kube
        self.say = log or (lambda msg: None)
        self.containers: dict[str, Container] = {}
        st = state.read_state(state_dir) or {}
        self.agent_bin = Path(st.get("bin_dir", "")) / AGENT_BINARY
        self.server = f"https://127.0.0.1:{(st.get('ports') or {}).get('apiserver')}"
        self.ca = certs.Pki(state_dir / "pki").ca_cert
        self.root = state_dir / "rehearsal" / "agents"
        self.root.mkdir(parents=True, exist_ok=True)
        self.standin = self.root / "standin.sh"
        self.standin.write_text(STANDIN)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """Agents an earlier daemon started and did not stop (it was killed): their process groups end now."""
        for f in self.root.glob("*/pgid"):
            try:
                pgid = int(f.read_text().strip())
                if str(self.agent_bin) in Path(f"/proc/{pgid}/cmdline").read_text(errors="replace") or "agent-mount" in Path(f"/proc/{pgid}/cmdline").read_text(
                    errors="replace"
                ):
                    os.killpg(pgid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
            f.unlink(missing_ok=True)

    # -------------------------------------------------------------- the pass

    def tick(self, pods: list[dict[str, Any]], now: float) -> None:
        seen = set()
        for pod in pods:
            if not is_agent_pod(pod):
                continue
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            c = self.containers.get(uid)
            if c is None:
                c = self.containers[uid] = Container(pod["metadata"]["namespace"], pod["metadata"]["name"], uid, self.root / uid)
            self._step(c, pod, now)
        for uid in [u for u in self.containers if u not in seen]:
            self._stop(self.containers.pop(uid), now, gone=True)

    def _step(self, c: Container, pod: dict[str, Any], now: float) -> None:
        if c.done:
            return
        meta, status = pod["metadata"], pod.get("status") or {}
        phase = status.get("phase")
        disrupted = any(x.get("type") == "DisruptionTarget" and x.get("status") == "True" for x in status.get("conditions") or [])
        if meta.get("deletionTimestamp") or disrupted or phase in ("Succeeded", "Failed"):
            self._stop(c, now)
            return
        if phase != "Running" or not (pod.get("spec") or {}).get("nodeName"):
            return
        if c.proc is None:
            self._start(c, pod, now)
            return
        code = c.proc.poll()
        if code is None:
            return
        self._reap(c)
        c.exits.append(code)
        action = rule_action(pod, code)
        if action == "Restart":
            self.say(f"{c.namespace}/{c.pod}: agent exited {code}: restarting the container in place ({c.restarts + 1})")
            c.restarts += 1
            c.proc = None
            self._status(pod, c, running=True, last_exit=code)
            self._start(c, pod, now)
        else:
            self.say(f"{c.namespace}/{c.pod}: agent exited {code}: the container ends (no restart rule matches), pod {'Succeeded' if code == 0 else 'Failed'}")
            c.done = True
            self._status(pod, c, running=False, last_exit=code)

    # -------------------------------------------------------------- a container's life

    def _start(self, c: Container, pod: dict[str, Any], now: float) -> None:
        c.dir.mkdir(parents=True, exist_ok=True)
        env = container_env(pod)
        try:
            kubeconfig = self._kubeconfig(c, pod)
        except ToolkitError as e:
            self.say(f"{c.namespace}/{c.pod}: no service account token for the agent ({e}); retrying")
            return
        run = c.dir / "run"
        sa = run / "secrets" / "kubernetes.io" / "serviceaccount"
        sa.mkdir(parents=True, exist_ok=True)
        write_atomic(sa / "namespace", c.namespace)
        agent_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(c.dir),
            "KUBECONFIG": str(kubeconfig),
            "POD_NAME": env.get("POD_NAME", c.pod),
            "JOBSET_NAME": env.get("JOBSET_NAME", ""),
            "IN_PLACE_RESTART_EXIT_CODE": env.get("IN_PLACE_RESTART_EXIT_CODE", "1"),
            "SHELL": "/bin/sh",
            # The one replacement: the program is a stand-in (see the module docstring).
            "WORKER_COMMAND": f"exec /bin/sh {self.standin} {c.marker}",
        }
        # The agent reads its namespace from the fixed in-cluster path: a private mount namespace shows it ours.
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare[1:1] = ["--user", "--map-root-user"]
        argv = [*unshare, "/bin/sh", "-c", 'mount --bind "$1" /run && exec "$2"', "agent-mount", str(run), str(self.agent_bin)]
        log = open(c.dir / f"agent-{c.restarts}.log", "ab")
        try:
            c.proc = subprocess.Popen(argv, env=agent_env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        write_atomic(c.dir / "pgid", f"{c.proc.pid}\n")
        c.started = now
        if c.restarts == 0:
            self._status(pod, c, running=True, last_exit=None)

    def _stop(self, c: Container, now: float, *, gone: bool = False) -> None:
        if c.proc is not None and c.proc.poll() is None:
            if c.stopping is None:
                c.stopping = now
                self._signal(c, signal.SIGTERM)
                return
            if now - c.stopping < STOP_GRACE_S and not gone:
                return
        self._reap(c, kill=True)
        c.done = True

    def _signal(self, c: Container, sig: int) -> None:
        if c.proc is None:
            return
        try:
            os.killpg(c.proc.pid, sig)
        except OSError:
            pass

    def _reap(self, c: Container, *, kill: bool = True) -> None:
        """What is left of the container's processes (the program under a gone agent) ends with it."""
        if c.proc is None:
            return
        if kill:
            self._signal(c, signal.SIGKILL)
        try:
            c.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        for c in self.containers.values():
            self._signal(c, signal.SIGKILL)

    # -------------------------------------------------------------- the API server

    def _kubeconfig(self, c: Container, pod: dict[str, Any]) -> Path:
        """A kubeconfig with a token of the pod's service account, bound to the pod (what the kubelet projects)."""
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        info = self.kube.resource("v1", "ServiceAccount")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": c.pod, "uid": c.uid}},
        }
        got = self.kube.request("POST", info.path(c.namespace, sa, "token"), body)
        token = (got.get("status") or {}).get("token")
        if not token:
            raise Rejected(f"TokenRequest for {c.namespace}/{sa} returned no token")
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": c.namespace}}],
            "current-context": "c",
        }
        path = c.dir / "kubeconfig"
        write_atomic(path, yaml.safe_dump(doc), mode=0o600)
        return path

    def _status(self, pod: dict[str, Any], c: Container, *, running: bool, last_exit: int | None) -> None:
        """The pod's status as the kubelet reports it: the workload container running (with its restarts) or ended."""
        spec_c = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        now = _now_iso()
        cs: dict[str, Any] = {"name": spec_c.get("name"), "image": spec_c.get("image"), "imageID": "", "restartCount": c.restarts}
        if running:
            cs.update(ready=True, started=True, state={"running": {"startedAt": now}})
            if last_exit is not None:
                cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error" if last_exit else "Completed", "finishedAt": now}}
            body: dict[str, Any] = {"status": {"containerStatuses": [cs]}}
        else:
            reason = "Completed" if last_exit == 0 else "Error"
            cs.update(ready=False, started=False, state={"terminated": {"exitCode": last_exit, "reason": reason, "finishedAt": now}})
            body = {"status": {"phase": "Succeeded" if last_exit == 0 else "Failed", "containerStatuses": [cs]}}
        path = self.kube.resource("v1", "Pod").path(c.namespace, c.pod) + "/status"
        try:
            self.kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        except (NotFound, Rejected) as e:
            self.say(f"{c.namespace}/{c.pod}: cannot report its container ({e})")

    # -------------------------------------------------------------- what the rehearsal reads

    def incarnation(self, uid: str) -> tuple[int, bool] | None:
        """(restart count, program running) of a pod's container; None for a pod without an agent."""
        c = self.containers.get(uid)
        if c is None:
            return None
        return c.restarts, c.worker_running()

    def end_program(self, uid: str, exit_code: int) -> bool:
        """End the program of a pod's container with ``exit_code`` (the run finished, or a crash played on purpose)."""
        c = self.containers.get(uid)
        return c is not None and c.end_worker(exit_code)


def attempt_of(pod: dict[str, Any]) -> str:
    """The in-place restart attempt the pod's agent is at (JobSet's annotation; the agent writes it before it lifts the barrier)."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION, ""))
