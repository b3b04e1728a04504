"""Credentials: which names and texts hold one, and the one redaction every message goes through. Pure.

A credential reaches the toolkit in three shapes, and each has one rule:

- **in a URL**, as its user information (``https://user:password@host``, or a token as the
  user, ``https://ghp_x@github.com``): ``url_credentials`` finds it; ``redact`` writes
  ``https://***@host``;
- **as the value of a name that holds one**: a MaxText key (``hf_access_token``: the pinned
  MaxText's list, ``workloads/recipes/_maxtext_keys.yaml``'s ``secret_keys``), or an
  environment variable whose name ends in a credential word (``HF_TOKEN``, ``WANDB_API_KEY``,
  ``DB_PASSWORD``; ``is_secret_name``). ``redact`` writes ``hf_access_token=***``,
  ``"token": "***"``, ``Authorization: Bearer ***``;
- **in a server's answer** quoted by an error: the same two rules, applied to every line the
  CLIs print (``toolkit.terminal`` applies ``redact`` to stdout and stderr, ``ToolkitError``
  to its own text, so a message carried in JSON is redacted too).

A run never carries a credential as a plain value: the planner refuses one
(``workloads.planning.program_text``) and points at ``--secret-env NAME=SECRET/KEY``, which
renders a ``secretKeyRef``: the value stays in the Kubernetes Secret, never in a manifest,
a file the toolkit writes, or its output.

Redaction keeps booleans, numbers and ``null`` (``automountServiceAccountToken: false`` is
no credential) and the first value after the name only, so a line stays readable.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "is_secret_name", "redact", "url_credentials"]

REDACTED = "***"

# The words a credential's name ends in (as a word: HF_TOKEN, hf_access_token, client-secret,
# api.key), compared case-insensitively. TOKENIZER_PATH, tokenize_train_data and
# num_moe_token_chunks do not end in one.
_SECRET_WORDS = (
    "token",
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "access_key",
    "secret_key",
    "private_key",
    "auth_key",
    "credential",
    "credentials",
    "client_secret",
)
_SECRET_NAME = re.compile(r"(?:^|.*[_.-])(?:" + "|".join(w.replace("_", "[_.-]?") for w in _SECRET_WORDS) + r")", re.IGNORECASE | re.ASCII)
# Names that end in a credential word but hold no credential: a path to one, and a listing's page cursor
# (Google's pageToken / nextPageToken, in every paged answer and the dry runs' GETs).
_NOT_SECRET = frozenset({"google_application_credentials"})
_PAGE_CURSOR = re.compile(r"(?:.*[_.-])?(?:next[_.-]?)?page[_.-]?token", re.IGNORECASE | re.ASCII)


def _no_credential(name: str) -> bool:
    return name.lower() in _NOT_SECRET or _PAGE_CURSOR.fullmatch(name) is not None


def is_secret_name(name: str) -> bool:
    """Whether a key or environment variable named ``name`` holds a credential (by its last word)."""
    return not _no_credential(name) and _SECRET_NAME.fullmatch(name) is not None


# scheme://userinfo@ — userinfo is anything up to '@' without '/', whitespace or another '@'.
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,30}://)([^/\s@?#]+)@", re.ASCII)


def url_credentials(text: str) -> str | None:
    """The user information of the first URL in ``text`` that carries some (``user:pass``, a token), else None."""
    m = _URL_USERINFO.search(text)
    return m.group(2) if m else None


_WORDS = "|".join(w.replace("_", "[_.-]?") for w in _SECRET_WORDS)
_NAME = r"(?P<name>[\"']?(?:--)?[A-Za-z0-9_.-]*?(?:" + _WORDS + r")[\"']?)"
_VALUE = r"(?P<quote>[\"']?)(?P<value>[^\s\"',;&)}\]]+)"
# name=value (a command line, a query string, an environment) and --name 'value': the value is redacted wherever it stands.
_KEY_EQUALS = re.compile(_NAME + r"(?P<sep>[ \t]*=[ \t]*|[ \t]+(?=[\"']))" + _VALUE, re.IGNORECASE | re.ASCII)
# name: value (YAML, JSON, HTTP headers): only a quoted value or one that ends its line or item, so that
# prose ("hf_access_token: a credential, not carried") stays readable. The separator stays on the line.
_KEY_COLON = re.compile(
    _NAME + r"(?P<sep>[ \t]*:[ \t]*)" + r"(?:(?P<quote>[\"'])(?P<value>[^\"'\n]+)|(?P<bare>[^\s\"',;&)}\]]+)(?=[ \t]*(?:\n|$|[,;)}\]])))",
    re.IGNORECASE | re.ASCII,
)
_AUTHORIZATION = re.compile(
    r"(?P<head>\bauthorization[\"']?[ \t]*[=:][ \t]*[\"']?(?:bearer|basic|token)?[ \t]*)(?P<value>[^\s\"',;]+)", re.IGNORECASE | re.ASCII
)
_PLAIN = re.compile(r"true|false|null|none|yes|no|-?[0-9]+(?:\.[0-9]+)?|\*\*\*", re.IGNORECASE | re.ASCII)


# A --secret-env argument names a Secret (NAME=SECRET/KEY): a reference, never the value.
_REFERENCE_FLAG = "--secret-env"


def _key_value(m: re.Match[str]) -> str:
    name = m.group("name").strip("\"'").removeprefix("--")
    value = m.group("value") or m.groupdict().get("bare") or ""
    before = m.string[max(0, m.start() - len(_REFERENCE_FLAG) - 1) : m.start()].rstrip(" =")
    if _no_credential(name) or _PLAIN.fullmatch(value) or before.endswith(_REFERENCE_FLAG):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{m.group('quote') or ''}{REDACTED}"  # a closing quote stays where it was


def redact(text: str) -> str:
    """``text`` with URL user information, values of credential-named keys and Authorization values replaced by ``***``."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m.group('head')}{REDACTED}", text)
    return _KEY_COLON.sub(_key_value, _KEY_EQUALS.sub(_key_value, text))
