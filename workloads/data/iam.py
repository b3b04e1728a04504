"""The IAM reads of the dataset check: the policies above a bucket and what a role holds.

A read grant can sit on the bucket (its policy comes with the storage client, in
``workloads.data.checks``), on the bucket's project, on any folder above it or on the
organization (Cloud Resource Manager v3: ``projects.get``/``folders.get`` for the parent,
``getIamPolicy`` for each, at policy version 3 so conditional bindings show as such), through
a predefined, basic or custom role (IAM v1 ``roles.get``, ``projects.roles.get``,
``organizations.roles.get``: ``includedPermissions``). ``workloads.data.grants`` weighs
what these return.

Every request goes through the bounded transport (``workloads.observe.google_http``) with
the storage client's own credentials; ``$TGK_GOOGLE_API_ENDPOINT`` (the override the
capacity checks take too, ``infra.gcp_api``) replaces both hosts, as a test's loopback
server does. A level the caller may not read (401, 403, 404) is ``Unreadable``: a reason the
check cannot prove a grant, never an error. An unreachable or misbehaving service is the
transport's one line, exit 3, as an answer of another status is.

A bucket server that is not Google's (the local cluster's, an emulator) belongs to no Google
project: ``reader_for`` gives it ``NoHierarchy``, under which the bucket's own policy decides.
"""

from __future__ import annotations

import os
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from infra.access import READ_ROLES
from infra.gcp_api import ENDPOINT_ENV_VAR
from toolkit.errors import GoogleApiError
from workloads.data.grants import READ_PERMISSIONS, Binding, Level, Policy, Unreadable

RESOURCE_MANAGER_HOST = "https://cloudresourcemanager.googleapis.com"
IAM_HOST = "https://iam.googleapis.com"
MAX_LEVELS = 12  # a project, at most 10 nested folders, an organization
MAX_BINDINGS = 1500  # an IAM policy holds at most 1,500 principals: more is not a policy

# The predefined roles the stack grants on buckets (``infra.access.READ_ROLES``) all hold both
# read permissions; any other role is asked of IAM.
KNOWN_ROLES: dict[str, frozenset[str]] = {role: READ_PERMISSIONS for role in READ_ROLES}


class IamReader(Protocol):
    def hierarchy(self, project: str) -> tuple[Level, ...]:
        """The policies of ``project`` and of every folder and organization above it, nearest first."""
        ...

    def permissions(self, role: str) -> frozenset[str] | Unreadable: ...


class NoHierarchy:
    """A bucket server that belongs to no Google project (the local cluster's, an emulator): nothing above the bucket grants."""

    def hierarchy(self, project: str) -> tuple[Level, ...]:
        return ()

    def permissions(self, role: str) -> frozenset[str] | Unreadable:
        return KNOWN_ROLES.get(role) or Unreadable(role, "a role this bucket server does not define")


def policy_from(resource: str, doc: Any, project_id: str = "") -> Policy:
    """A Policy from an IAM policy document ({"bindings": [{"role", "members", "condition"}]}), or GoogleApiError when it is none."""
    bindings = doc.get("bindings") if isinstance(doc, dict) else None
    if bindings is None:
        bindings = []
    if not isinstance(bindings, list) or len(bindings) > MAX_BINDINGS:
        raise GoogleApiError(f"the IAM policy of {resource} is not a policy (its bindings are not a list of at most {MAX_BINDINGS}) — check the endpoint")
    out = []
    for b in bindings:
        if not isinstance(b, dict) or not isinstance(b.get("role"), str):
            continue
        members = tuple(m for m in b.get("members") or () if isinstance(m, str))
        cond = b.get("condition")
        title = (cond.get("title") or cond.get("expression") or "a condition") if isinstance(cond, dict) else ""
        out.append(Binding(b["role"], members, str(title)[:120]))
    return Policy(resource, tuple(out), project_id)


class GoogleIam:
    """Cloud Resource Manager and IAM over the bounded transport, with ``credentials`` (the storage client's)."""

    def __init__(self, credentials: Any, endpoint: str | None = None) -> None:
        from workloads.observe import google_http

        self._rm = google_http.session(google_http.RESOURCE_MANAGER, credentials)
        self._iam = google_http.session(google_http.IAM, credentials)
        self._rm_base = (endpoint or RESOURCE_MANAGER_HOST).rstrip("/")
        self._iam_base = (endpoint or IAM_HOST).rstrip("/")
        self._roles: dict[str, frozenset[str] | Unreadable] = {}

    def _call(self, session: Any, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[Any, str]:
        """(the JSON answer, "") for a 200; (None, why) for an answer that means "you may not read it"."""
        from workloads.observe import google_http

        answer = google_http.call(session, method, url, body=body)
        if answer.status == 200:
            return answer.doc if answer.doc is not None else {}, ""
        said = google_http.error_message(answer.doc)
        if answer.status in (401, 403, 404):
            why = {401: "no usable credentials", 403: "permission denied", 404: "not found"}[answer.status]
            return None, f"{why}{f' ({said})' if said else ''}"
        api = google_http.RESOURCE_MANAGER if session is self._rm else google_http.IAM
        raise GoogleApiError(
            f"{api} ({google_http.where(method, url)}): HTTP {answer.status} {said} — try again later, or check the endpoint", status=answer.status
        )

    def hierarchy(self, project: str) -> tuple[Level, ...]:
        from workloads.observe import google_http

        levels: list[Level] = []
        resource = f"projects/{project}"
        for _ in range(MAX_LEVELS):
            top = resource.startswith("organizations/")  # nothing above an organization: its parent is not asked for
            meta, meta_why = ({}, "") if top else self._call(self._rm, "GET", f"{self._rm_base}/v3/{quote(resource)}")
            doc, why = self._call(self._rm, "POST", f"{self._rm_base}/v3/{quote(resource)}:getIamPolicy", {"options": {"requestedPolicyVersion": 3}})
            project_id = str((meta or {}).get("projectId") or "") if resource.startswith("projects/") else ""
            shown = f"projects/{project_id}" if project_id else resource
            levels.append(Unreadable(shown, f"its IAM policy: {why}") if doc is None else policy_from(shown, doc, project_id))
            if top:
                break
            if meta is None:
                levels.append(Unreadable(f"the folders and organization above {shown}", f"its parent: {meta_why}"))
                break
            parent = meta.get("parent") if isinstance(meta, dict) else None
            if not parent:
                break
            if not isinstance(parent, str) or not parent.startswith(("folders/", "organizations/")) or len(parent) > 100:
                raise GoogleApiError(
                    f"{google_http.RESOURCE_MANAGER} ({resource}): its parent {str(parent)[:40]!r} is not a folder or organization — check the endpoint"
                )
            resource = parent
        else:
            levels.append(Unreadable(f"the levels above {resource}", f"more than {MAX_LEVELS} levels, more than Google Cloud nests"))
        return tuple(levels)

    def permissions(self, role: str) -> frozenset[str] | Unreadable:
        if role in KNOWN_ROLES:
            return KNOWN_ROLES[role]
        if role not in self._roles:
            if not role.startswith(("roles/", "projects/", "organizations/")) or len(role) > 300:
                self._roles[role] = Unreadable(role, "not a role name IAM knows")
            else:
                doc, why = self._call(self._iam, "GET", f"{self._iam_base}/v1/{quote(role)}")
                if doc is None:
                    self._roles[role] = Unreadable(role, why)
                else:
                    perms = doc.get("includedPermissions") or []
                    self._roles[role] = (
                        frozenset(p for p in perms if isinstance(p, str))
                        if isinstance(perms, list)
                        else Unreadable(role, "its includedPermissions are not a list")
                    )
        return self._roles[role]


def reader_for(storage_client: Any) -> IamReader:
    """The IAM reads that go with a storage client: Google's (its credentials), or ``NoHierarchy`` for a bucket server that is not Google's."""
    endpoint = os.environ.get(ENDPOINT_ENV_VAR) or None
    credentials = getattr(storage_client, "_credentials", None)
    if endpoint:
        return GoogleIam(credentials, endpoint)
    base = getattr(getattr(storage_client, "_connection", None), "API_BASE_URL", "") or ""
    host = urlsplit(base).hostname or ""
    if not (host == "googleapis.com" or host.endswith(".googleapis.com")):
        return NoHierarchy()
    return GoogleIam(credentials)
