"""A run's environment variables from Kubernetes Secrets: ``--secret-env NAME=SECRET/KEY`` and a recipe's ``secret_env``. Pure.

A credential never rides in a run as a plain value (``program_text`` refuses one): a manifest
is read by whoever may read the namespace's JobSets, the render lands in a directory, the dry
run and ``status`` print it. Instead the worker container's ``env`` holds a ``secretKeyRef``
(``workloads/render/program_env.py``) that the kubelet resolves when the container starts:
the value stays in the Secret, readable by whom the namespace's RBAC lets read Secrets.

MaxText 0.2.5 takes a key from the environment: ``hf_access_token`` from ``HF_TOKEN`` (when it
is not set otherwise), any key from ``M_<KEY>`` (``maxtext_keys.secret_env_name``).

A reference is checked as Kubernetes checks it, before anything is rendered:

- NAME: an environment variable name (``program_text.env_name_problem``), not one the run
  already sets as a plain value;
- SECRET: a Secret's name, a DNS-1123 subdomain (at most 253 characters);
- KEY: a key of the Secret's data (letters, digits, ``-``, ``_``, ``.``; at most 253).

The Secret itself is the team's to create in its namespace (``kubectl create secret generic``);
the toolkit never reads its values (``submit`` asks only whether it exists, by its metadata:
``runs.service.secrets_check``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from workloads.planning import program_text
from workloads.planning.errors import PlanError
from workloads.planning.model import SecretRef

# metadata.name of a Secret (IsDNS1123Subdomain) and a key of its data (IsConfigMapKey), Kubernetes 1.34.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")
NAME_MAX = 253
FORM = "NAME=SECRET/KEY"


def reference_problem(name: str, ref: str) -> str | None:
    """Why ``name`` = ``ref`` (``SECRET/KEY``) is not a Secret reference Kubernetes takes, or None."""
    bad = program_text.env_name_problem(name)
    if bad:
        return f"{name[:60]!r} {bad}"
    secret, slash, key = ref.partition("/")
    if not slash:
        return f"{ref[:60]!r} is not SECRET/KEY"
    if len(secret) > NAME_MAX or not _SUBDOMAIN.fullmatch(secret):
        return f"{secret[:60]!r} is not a Secret name (lowercase letters, digits, '-' and '.')"
    if len(key) > NAME_MAX or not _DATA_KEY.fullmatch(key):
        return f"{key[:60]!r} is not a key of a Secret's data (letters, digits, '-', '_' and '.')"
    return None


def parse_flag(items: Iterable[str]) -> dict[str, str]:
    """``--secret-env NAME=SECRET/KEY`` items: NAME -> SECRET/KEY; a PlanError for a malformed one or a NAME given twice."""
    out: dict[str, str] = {}
    for item in items:
        name, eq, ref = item.partition("=")
        bad = reference_problem(name, ref) if eq else f"{item[:60]!r} is not {FORM}"
        if bad:
            raise PlanError("--secret-env", bad, f"write it like --secret-env HF_TOKEN=hf-token/token ({FORM}: a Secret in the team's namespace)")
        if name in out:
            raise PlanError("--secret-env", f"{name} is given twice", "give each variable once")
        out[name] = ref
    return out


def references(recipe: Mapping[str, str], flags: Iterable[str], plain_env: Iterable[str]) -> tuple[SecretRef, ...]:
    """The run's Secret references: the recipe's ``secret_env`` with ``--secret-env`` over it, none named like a plain variable."""
    merged = {**recipe, **parse_flag(flags)}
    clash = sorted(set(merged) & set(plain_env))
    if clash:
        raise PlanError(
            "--secret-env",
            f"{clash[0]} is also a plain environment variable of the run",
            f"drop it from the recipe's env (or from secret_env), so {clash[0]} has one source",
        )
    return tuple(SecretRef(name, *ref.split("/", 1)) for name, ref in merged.items())
