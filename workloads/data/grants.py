"""Whether an IAM member holds permissions somewhere in a resource's policy hierarchy: granted,
proven absent, or not provable. Pure: the policies and roles are read elsewhere
(``workloads.observe.iam``, the bucket's policy by ``workloads.data.checks``).

A run's pods read a dataset as one service account. Google Cloud grants it the read where any
level grants it: the bucket's own policy, its project's, any folder above and the
organization; through a predefined role, a basic role or a custom role; to the account
itself, or to a group, a domain, ``allUsers`` or a project convenience value it belongs to.
This module walks every binding of every level it is given and sorts each one:

- **proves**: the member itself (``serviceAccount:<email>``), ``allUsers`` or
  ``allAuthenticatedUsers``, or a project convenience value (``projectViewer:<project>``)
  whose basic role the member provably holds on that project; no condition; the role's
  permissions known;
- **might**: a ``group:``, ``domain:`` or ``principal(Set)://`` member (membership cannot be
  listed with the reads the check makes), a binding with an IAM condition (not evaluated), a
  role whose permissions could not be read;
- **does not**: anyone else.

The verdict: **granted** when every needed permission has a binding that proves it;
**absent** when no binding proves or might give one of them and every level was read; else
**unproven**, with the reasons (a warning, never a refusal: only a grant proven absent
refuses a run). What it does not model: IAM deny policies and principal access boundaries
(they only take grants away, so "granted" can be wrong where "absent" cannot), and object
ACLs (a bucket without uniform bucket-level access can grant through them: the caller passes
that as a doubt).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

READ_PERMISSIONS = frozenset({"storage.objects.get", "storage.objects.list"})  # a FUSE mount lists the prefix, Grain reads the files

# Basic roles a project convenience value stands for (projectViewer:<project> = the project's viewers).
CONVENIENCE_ROLES = {"projectOwner": "roles/owner", "projectEditor": "roles/editor", "projectViewer": "roles/viewer"}
PUBLIC = frozenset({"allUsers", "allAuthenticatedUsers"})


@dataclass(frozen=True)
class Binding:
    role: str
    members: tuple[str, ...]
    condition: str = ""  # the condition's title or expression; "" unconditional


@dataclass(frozen=True)
class Policy:
    """A resource's IAM policy: ``resource`` as an error names it (``gs://b``, ``projects/p``, ``folders/1``)."""

    resource: str
    bindings: tuple[Binding, ...]
    project_id: str = ""  # for a project: its id (what convenience values name)


@dataclass(frozen=True)
class Unreadable:
    """A level (or a role) the check could not read, and why."""

    resource: str
    why: str


Level = Policy | Unreadable
Permissions = Callable[[str], frozenset[str] | Unreadable]


@dataclass(frozen=True)
class Verdict:
    state: str  # "granted" | "unproven" | "absent"
    member: str
    grants: tuple[str, ...] = ()  # granted: the bindings that prove it ("roles/storage.objectViewer on gs://b")
    doubts: tuple[str, ...] = ()  # unproven: why it could not be proven
    missing: tuple[str, ...] = ()  # absent: the permissions no binding gives
    checked: tuple[str, ...] = field(default_factory=tuple)  # the levels read

    @property
    def granted(self) -> bool:
        return self.state == "granted"

    @property
    def absent(self) -> bool:
        return self.state == "absent"

    def line(self) -> str:
        who = self.member.removeprefix("serviceAccount:")
        if self.granted:
            return f"{who} may read it ({'; '.join(self.grants)})"
        if self.absent:
            return f"{who} holds no {' or '.join(self.missing)} on {', '.join(self.checked)}"
        return f"cannot prove that {who} may read it: {'; '.join(self.doubts)}"


def _member_kind(m: str) -> str:
    return m.split(":", 1)[0] if ":" in m and not m.startswith(("principal://", "principalSet://")) else m.split("://", 1)[0]


def matches(member: str, candidate: str, levels: Sequence[Level]) -> tuple[str, str]:
    """("yes" | "maybe" | "no", why) for ``member`` being (in) ``candidate``, an IAM policy member."""
    if candidate == member or candidate.lower() == member.lower() and member.startswith("serviceAccount:"):
        return "yes", "the account itself"
    if candidate in PUBLIC:
        return "yes", candidate
    kind = _member_kind(candidate)
    if kind in ("user", "serviceAccount", "deleted"):
        return "no", ""
    if kind in ("group", "domain"):
        return "maybe", f"{candidate} (its members cannot be listed here)"
    if kind in ("principal", "principalSet"):
        return "maybe", f"{candidate} (a workload identity principal, not resolved here)"
    if kind in CONVENIENCE_ROLES:
        project = candidate.split(":", 1)[1]
        return _holds_basic_role(member, CONVENIENCE_ROLES[kind], project, levels)
    return "maybe", f"{candidate} (a member kind the check does not know)"


def _holds_basic_role(member: str, role: str, project: str, levels: Sequence[Level]) -> tuple[str, str]:
    """Whether ``member`` holds basic ``role`` on ``project``: that project's level and the ones above it."""
    chain = _from_project(project, levels)
    if chain is None:
        return "maybe", f"{CONVENIENCE_ROLES_BY_ROLE[role]}:{project} (project {project}'s policy was not read)"
    maybe = ""
    for level in chain:
        if isinstance(level, Unreadable):
            maybe = maybe or f"{CONVENIENCE_ROLES_BY_ROLE[role]}:{project} ({level.resource} unreadable)"
            continue
        for b in level.bindings:
            if b.role != role:
                continue
            for m in b.members:
                if _member_kind(m) in CONVENIENCE_ROLES:
                    continue  # a basic role granted to a convenience value names itself: no new member
                got, why = matches(member, m, ())
                if got == "yes" and not b.condition:
                    return "yes", f"{role} on {level.resource}"
                if got in ("yes", "maybe"):
                    maybe = maybe or f"{CONVENIENCE_ROLES_BY_ROLE[role]}:{project} ({why or 'a conditional binding'} holds {role})"
    return ("maybe", maybe) if maybe else ("no", "")


CONVENIENCE_ROLES_BY_ROLE = {v: k for k, v in CONVENIENCE_ROLES.items()}


def _from_project(project: str, levels: Sequence[Level]) -> list[Level] | None:
    for i, level in enumerate(levels):
        if isinstance(level, Policy) and project and project in (level.project_id, level.resource.removeprefix("projects/")):
            return list(levels[i:])
    return None


def evaluate(
    member: str, levels: Sequence[Level], permissions: Permissions, *, needed: frozenset[str] = READ_PERMISSIONS, doubts: Iterable[str] = ()
) -> Verdict:
    """The verdict for ``member`` holding ``needed`` through any binding of ``levels`` (the bucket's policy first, then up).

    ``permissions(role)`` is the role's permissions (or Unreadable); ``doubts``: what else may
    grant any permission that the levels do not show (object ACLs). A permission no binding
    gives or might give, with every level read and no doubt, is proven absent, and one such
    permission is enough: the run cannot read the data.
    """
    proven: dict[str, list[str]] = {p: [] for p in needed}
    possible: dict[str, list[str]] = {p: [] for p in needed}
    anywhere: list[str] = list(doubts)  # what might grant any permission
    roles: dict[str, frozenset[str] | Unreadable] = {}
    for level in levels:
        if isinstance(level, Unreadable):
            anywhere.append(f"{level.resource}: {level.why}")
            continue
        for b in level.bindings:
            hits = [(m, got, why) for m in b.members for got, why in [matches(member, m, levels)] if got != "no"]
            if not hits:
                continue
            if b.role not in roles:
                roles[b.role] = permissions(b.role)
            perms = roles[b.role]
            gives = needed if isinstance(perms, Unreadable) else needed & perms
            where = f"{b.role} on {level.resource}"
            for m, got, why in hits:
                doubts_here = [
                    why if got == "maybe" else "",
                    f"under condition {b.condition!r}" if b.condition else "",
                    f"its permissions unread ({perms.why})" if isinstance(perms, Unreadable) else "",
                ]
                doubt = ", ".join(d for d in doubts_here if d)
                for p in gives:
                    if doubt:
                        possible[p].append(f"{where} to {m}: {doubt}" if got == "yes" else f"{where}: {doubt}")
                    else:
                        proven[p].append(where)
    checked = tuple(level.resource for level in levels)
    if all(proven[p] for p in needed):
        return Verdict("granted", member, grants=tuple(dict.fromkeys(proven[p][0] for p in sorted(needed))), checked=checked)
    missing = tuple(sorted(p for p in needed if not proven[p]))
    absent = tuple(p for p in missing if not possible[p] and not anywhere)
    if absent:
        return Verdict("absent", member, missing=absent, checked=checked)
    reasons = anywhere + [r for p in missing for r in possible[p]]
    return Verdict("unproven", member, doubts=tuple(dict.fromkeys(reasons)), missing=missing, checked=checked)
