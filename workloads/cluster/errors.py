"""What the API server or the network said, as one typed line (the cluster classes of toolkit.errors).

``refusal`` sorts an HTTP answer by status: 404 ``NotFound``, 401/403 from authorization
``Forbidden``, 409 ``Conflict``, anything else ``Rejected``; ``unreachable`` says why no
answer came. A 403 is ``Forbidden`` only when authorization said no (RBAC's
``User "..." cannot <verb> resource ...``): admission (a webhook, Pod Security, a
ResourceQuota, a terminating namespace) answers 403 too, and its fix is another one.

A Forbidden line names the RBAC verb and resource the request needed, read from the
request itself the way the API server does (``access``), and how to check it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from toolkit.errors import ClusterError, Conflict, Forbidden, NotFound, Rejected, Unreachable
from toolkit.jsontext import load_json

if TYPE_CHECKING:
    from workloads.cluster.response import Response

__all__ = ["Access", "access", "one_line", "refusal", "unreachable"]

# The fix that follows "cannot reach the API server": the same whichever transport failed.
_REACH_FIX = "is the cluster up? check --kubeconfig/--context (for GKE: gcloud container clusters get-credentials)"


@dataclass(frozen=True)
class Access:
    """The RBAC request an API call makes: a verb on a resource (or a non-resource path)."""

    verb: str  # get, list, watch, create, patch, update, delete, deletecollection
    resource: str  # plural[.group][/subresource], or a path such as /version
    namespace: str | None = None

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}" + (f" in namespace {self.namespace}" if self.namespace else "")

    def can_i(self) -> str:
        """The kubectl command that tells whether the current identity may do it."""
        return f"kubectl auth can-i {self.verb} {self.resource}" + (f" -n {self.namespace}" if self.namespace else "")


_BY_METHOD = {"POST": "create", "PATCH": "patch", "PUT": "update"}


def access(method: str, path: str, query: list[tuple[str, str]] | None = None) -> Access:
    """The verb and resource of a request, as the API server's request-info reads its path."""
    parts = [unquote(p) for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:  # discovery, /version, /readyz: non-resource URLs
        return Access(_BY_METHOD.get(method, method.lower()), path)
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:  # ["namespaces", name] alone is the Namespace itself
        namespace, rest = rest[1], rest[2:]
    plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
    if method == "GET":
        verb = "get" if name else "watch" if ("watch", "true") in (query or []) else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _BY_METHOD.get(method, method.lower())
    resource = plural + (f".{group}" if group else "") + (f"/{sub}" if sub else "")
    return Access(verb, resource, namespace)


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__


def status_message(body: bytes) -> str:
    """The message of a Kubernetes Status reply (or the first line of any other body)."""
    try:
        obj = load_json(body, max_bytes=len(body)) if body else {}
    except (ValueError, RecursionError):
        lines = body.decode(errors="replace").strip().splitlines()
        return lines[0][:300] if lines else ""
    if isinstance(obj, dict):
        return str(obj.get("message") or obj.get("reason") or "")
    return ""


# Authorization's denial ("User \"x\" cannot list resource ..."); admission's 403s say something else after "is forbidden:".
_ADMISSION_403 = re.compile(r"is forbidden: (?!User \")")


def refusal(resp: Response, what: str, *, method: str = "GET", path: str = "", query: list[tuple[str, str]] | None = None) -> ClusterError:
    """The one-line, typed error for a non-2xx answer to ``method path`` (``what`` says what was being done)."""
    msg = " ".join((status_message(resp.body) or f"HTTP {resp.status}").split())
    status = resp.status
    if status == 401:
        return Forbidden(
            f"{what}: unauthorized ({msg}) — refresh credentials (gcloud container clusters get-credentials) or check the kubeconfig user", status=401
        )
    if status == 403 and "admission webhook" in msg:
        return Rejected(f"{what}: refused by an admission webhook: {msg}", status=403)
    if status == 403 and not _ADMISSION_403.search(msg):
        if not path:
            return Forbidden(f"{what}: forbidden ({msg}) — the kubeconfig identity lacks RBAC permission for this", status=403)
        need = access(method, path, query)
        return Forbidden(
            f"{what}: forbidden ({msg}) — the kubeconfig identity lacks RBAC permission to {need}: use a kubeconfig that has it,"
            f" or ask a cluster admin for a Role granting it (check: {need.can_i()})",
            status=403,
        )
    if status == 404:
        return NotFound(f"{what}: {msg} (HTTP 404)")
    if status == 409 and method != "PATCH":  # a create of a name that is taken
        return Conflict(f"{what}: {msg} (HTTP 409)")
    if status == 409:
        return Conflict(
            f"{what}: conflict ({msg}) — another field manager (kubectl, another tool) owns these fields; undo its change, or apply with force_conflicts to take them over"
        )
    return Rejected(f"{what}: {msg} (HTTP {status})", status=status)


def unreachable(server: str, exc: BaseException) -> Unreachable:
    """No answer from ``server``: why, in a few words, and what to check."""
    reason = str(getattr(exc, "reason", "") or exc)
    low = reason.lower()
    if "refused" in low:
        what = "connection refused"
    elif "timed out" in low or "timeout" in low:
        what = "timed out"
    elif "name or service not known" in low or "nodename nor servname" in low or "failed to resolve" in low:
        what = "host name does not resolve"
    elif "certificate" in low or "ssl" in low:
        what = "TLS handshake failed (certificate mismatch?)"
    else:
        what = reason.splitlines()[0][:160] if reason else type(exc).__name__
    return Unreachable(f"cannot reach the Kubernetes API server at {server} ({what}) — {_REACH_FIX}")
