"""A kubeconfig user's exec credential plugin (``users[].user.exec``), run within bounds.

GKE's kubeconfigs get their token from ``gke-gcloud-auth-plugin``; any kubeconfig may name
another program. The kubernetes client runs it with no timeout and reads all it prints, so a
plugin that never answers (waiting on a login prompt, a hung network call) hangs every
cluster command, and one that prints without end fills memory. Here it runs like every
external program (``toolkit.tools``): argv only, empty stdin, its own process group killed
at the request deadline (``transport.request_deadline()``, ``$TGK_REQUEST_TIMEOUT``), at
most ``MAX_OUTPUT_BYTES`` of output. The answer is the ExecCredential the Kubernetes
client-go protocol defines: ``status.token``, or ``status.clientCertificateData`` +
``clientKeyData``, with an optional ``expirationTimestamp`` after which it is run again.
Every failure is one ``ClusterError`` line (exit 3) naming the plugin.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit import tools
from toolkit.errors import ClusterError
from toolkit.jsontext import load_json
from workloads.cluster.errors import one_line

__all__ = ["ExecCredential", "MAX_OUTPUT_BYTES", "run_plugin"]

MAX_OUTPUT_BYTES = 1024 * 1024  # an ExecCredential is a token or a certificate: a few KiB
_RENEW_EARLY_S = 30.0  # renew a little before the expiry, not in the middle of a request


@dataclass(frozen=True)
class ExecCredential:
    """What a plugin answered: a bearer token, or a client certificate and key (PEM)."""

    token: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    expires: datetime | None = None

    def expired(self, now: datetime | None = None) -> bool:
        if self.expires is None:
            return False
        return (self.expires - (now or datetime.now(UTC))).total_seconds() < _RENEW_EARLY_S


def _fail(path: Path, command: str, problem: str) -> ClusterError:
    return ClusterError(f"kubeconfig {path}: the credential plugin {command!r} {problem} — run it by hand to see why, or use another --context")


def _program(command: str, base: Path) -> str:
    """A relative path with a slash is relative to the kubeconfig's directory (as kubectl reads it); a bare name is looked up on PATH."""
    if "/" in command and not os.path.isabs(command):
        return str(base / command)
    return shutil.which(command) or command


def run_plugin(exec_config: Any, cluster: dict, path: Path, timeout: float) -> ExecCredential:
    """Run the plugin of ``exec_config`` (the kubeconfig user's ``exec`` entry) once; its credential."""
    if not isinstance(exec_config, dict) or not isinstance(exec_config.get("command"), str) or not exec_config["command"]:
        raise ClusterError(f"kubeconfig {path}: the user's exec entry has no command — fix the context's user entry")
    command = exec_config["command"]
    api_version = str(exec_config.get("apiVersion") or "")
    args = exec_config.get("args") or []
    env_items = exec_config.get("env") or []
    if not isinstance(args, list) or not isinstance(env_items, list) or not all(isinstance(e, dict) for e in env_items):
        raise _fail(path, command, "is given args or env that are not lists")
    env = dict(os.environ)
    env.update({str(e.get("name")): str(e.get("value", "")) for e in env_items})
    info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    if exec_config.get("provideClusterInfo"):
        shown = {k: cluster[k] for k in ("server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name", "proxy-url") if k in cluster}
        ext = next(
            (x.get("extension") for x in cluster.get("extensions") or [] if isinstance(x, dict) and x.get("name") == "client.authentication.k8s.io/exec"), None
        )
        if ext is not None:
            shown["config"] = ext
        info["spec"]["cluster"] = shown
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        done = tools.run([_program(command, path.parent), *map(str, args)], env=env, cwd=path.parent, timeout=timeout, max_output=MAX_OUTPUT_BYTES)
    except ClusterError:
        raise
    except Exception as e:  # cannot start it: not installed, not executable
        raise _fail(path, command, f"cannot be run ({one_line(e)})") from None
    if done.timed_out:
        raise _fail(path, command, f"did not answer within {timeout:g} s (stopped; $TGK_REQUEST_TIMEOUT sets the limit)")
    if done.overflowed:
        raise _fail(path, command, f"printed more than {MAX_OUTPUT_BYTES // 1024} KiB (stopped): that is not a credential")
    if done.returncode != 0:
        last = tools.last_line(done.stderr) or tools.last_line(done.stdout)
        raise _fail(path, command, f"failed with exit code {done.returncode}" + (f": {one_line(Exception(last))}" if last else ""))
    return _credential(done.stdout, api_version, path, command)


def _credential(stdout: str, api_version: str, path: Path, command: str) -> ExecCredential:
    try:
        doc = load_json(stdout, max_bytes=MAX_OUTPUT_BYTES)
    except (ValueError, RecursionError):
        raise _fail(path, command, "printed something that is not an ExecCredential (JSON)") from None
    status = doc.get("status") if isinstance(doc, dict) else None
    if not isinstance(status, dict) or doc.get("kind") != "ExecCredential":
        raise _fail(path, command, "printed JSON that is not an ExecCredential with a status")
    if api_version and doc.get("apiVersion") != api_version:
        raise _fail(path, command, f"answered in {str(doc.get('apiVersion'))[:60]!r}, not the apiVersion {api_version!r} the kubeconfig asks for")
    expires = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        try:
            expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError:
            raise _fail(path, command, f"gave an expirationTimestamp that is not RFC 3339: {str(stamp)[:40]!r}") from None
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
    token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
    if isinstance(token, str) and token:
        return ExecCredential(token=token, expires=expires)
    if isinstance(cert, str) and isinstance(key, str) and cert and key:
        return ExecCredential(client_certificate=cert, client_key=key, expires=expires)
    raise _fail(path, command, "answered without a token or a client certificate and key")
