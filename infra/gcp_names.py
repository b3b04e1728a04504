"""GCP's rules for the values the stack sends that GCP alone would refuse, checked at spec load. Pure.

Each function returns ``(problem, fix)`` for a value GCP refuses, else None, so the spec's
validators can word it as one line before a single cloud call. Every limit cites where
GCP documents it. Name patterns and lengths the spec's fields already enforce
(``infra.naming``: GCE names, GKE cluster and node pool names, project and service
account ids) are not repeated here.

Audit: every spec string that reaches a GCP name, label or display name in the stack
(modules/*.py through infra/stack.py), and what holds it (tests/test_gcp_names.py checks
the synthesized JSON of every example and of generated specs against the same rules):
- ``project``: the provider's project (an existing project: GCP_ID); the default state
  bucket ``<project>-tf-state`` (bucket rules, infra.derived_names).
- ``labels``: every resource's labels (LABEL_KEY/LABEL_VALUE, LABELS_MAX with the stack's own).
- ``cluster.name``: the GKE cluster (40), service account ids (infra.naming, infra.derived_names),
  workload policies (< 63), the trigger ``<cluster>-ci`` (<= 43 of Cloud Build's 64), the
  ``tgk-cluster`` label value, display names (SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES).
- ``network.name``, ``network.dcn.name``: networks and subnets (63), router/NAT
  (``infra.spec.rules.check_derived_names``), the DCN firewall (infra.derived_names).
- ``cpu_pool.name`` / ``tpu_pools[].name``: node pools (40) and the ``tpu-pool`` label;
  ``cpu_pool.machine_type``: infra.machine_types.
- ``tpu_pools[].capacity.name`` / ``.project``: the reservation a node pool consumes (63; a project id).
- ``teams[]``: service account ids and display names, Workload Identity members (DNS labels).
- ``buckets[].name``, ``state.bucket``, ``state.prefix``: bucket_name_problem, state_prefix_problem.
- ``artifact_registry.repository``: the repository id (63, RFC 1035 form).
- ``tensorboard.display_name``: tensorboard_display_name_problem.
- ``cloud_build``: the trigger's branch (re2_problem), GitHub owner and repository, filename.
- ``cluster.name`` again: the log-based metrics ``tgk_<cluster>_steps`` / ``_attempts``
  (LOG_METRIC_NAME) and the monitoring display names (MONITORING_DISPLAY_NAME_MAX).
- ``monitoring.notification_channels[].address``: a channel's email, topic or URL (its form,
  ``infra.spec.monitoring``).
Not checked (GCP still refuses them mid-apply): a region or zone that does not exist (only
their form is checked), a GKE ``min_version`` GKE does not offer, a maintenance-window
RRULE past its ``FREQ=`` prefix.
"""

from __future__ import annotations

import ipaddress
import re

# --------------------------------------------------------------------- Cloud Storage

# cloud.google.com/storage/docs/buckets#naming ("Bucket name requirements"): 3-63 characters
# (a dotted name up to 222, each dot-separated component at most 63), lowercase letters,
# digits, '-', '_' and '.', starting and ending with a letter or digit; not an IP address
# in dotted-decimal form; not beginning with "goog"; not containing "google" or close
# misspellings such as "g00gle". (The length and characters are infra.naming.BUCKET_NAME.)
BUCKET_COMPONENT_MAX = 63
# Digits that stand in for the letters of "google" in the misspellings the rule names (g00gle).
_LOOKALIKE = str.maketrans({"0": "o", "9": "g", "6": "g", "1": "l", "3": "e"})


def _spelled_out(name: str) -> str:
    """``name`` with look-alike digits read as letters and separators dropped: g00-gle -> google."""
    return re.sub(r"[-_.]", "", name.translate(_LOOKALIKE))


def bucket_name_problem(name: str) -> tuple[str, str] | None:
    """Why Cloud Storage refuses ``name`` beyond its characters and length, or None."""
    if name.translate(_LOOKALIKE).startswith("goog"):
        return f"bucket name {name!r} begins with 'goog', which Cloud Storage reserves", "pick a name that does not start with goog"
    if "google" in _spelled_out(name):
        return (
            f"bucket name {name!r} contains 'google' (or a close misspelling such as g00gle), which Cloud Storage refuses",
            "pick a name without it",
        )
    parts = name.split(".")
    if any(not p for p in parts):
        return f"bucket name {name!r} has an empty dot-separated part", "write at most one '.' between parts"
    if any(len(p) > BUCKET_COMPONENT_MAX for p in parts):
        return f"bucket name {name!r} has a dot-separated part over {BUCKET_COMPONENT_MAX} characters", "shorten that part"
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return None
    return f"bucket name {name!r} is an IP address, which Cloud Storage refuses", "pick a name with letters in it"


# --------------------------------------------------------------------- display names

# IAM ServiceAccount.displayName: "The maximum length is 100 UTF-8 bytes" (iam v1 REST reference).
SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES = 100
# Vertex AI Tensorboard.displayName: "can be up to 128 characters long and can consist of any
# UTF-8 characters" (Vertex AI SDK, Tensorboard.create; the v1 REST resource requires it).
TENSORBOARD_DISPLAY_NAME_MAX = 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def tensorboard_display_name_problem(name: str) -> tuple[str, str] | None:
    if not name.strip():
        return "is blank", "give a name, or remove it to use the cluster name"
    if len(name) > TENSORBOARD_DISPLAY_NAME_MAX:
        return f"is {len(name)} characters, and Vertex AI allows {TENSORBOARD_DISPLAY_NAME_MAX}", f"shorten it to at most {TENSORBOARD_DISPLAY_NAME_MAX}"
    if _CONTROL.search(name):
        return "holds a control character (a newline, a tab...)", "write it on one line without control characters"
    return None


# --------------------------------------------------------------------- Cloud Logging, Cloud Monitoring

# cloud.google.com/logging/docs/reference/v2/rest/v2/projects.metrics (LogMetric.name): at most 100
# characters of A-Z, a-z, 0-9 and _-.,+!*',()%/ ('/' a hierarchy, never first).
LOG_METRIC_NAME = r"^[A-Za-z0-9_.,+!*'()%-][A-Za-z0-9_.,+!*'()%/-]{0,99}$"
# cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies (displayName) and
# projects.notificationChannels (displayName): at most 512 Unicode characters.
MONITORING_DISPLAY_NAME_MAX = 512


def fit_display_name(full: str, short: str, max_bytes: int = SERVICE_ACCOUNT_DISPLAY_NAME_MAX_BYTES) -> str:
    """``full`` when it fits ``max_bytes`` of UTF-8, else ``short`` cut to fit (a display name need not be unique)."""
    if len(full.encode()) <= max_bytes:
        return full
    return short.encode()[:max_bytes].decode(errors="ignore")


# --------------------------------------------------------------------- labels

# cloud.google.com/resource-manager/docs/labels-overview#requirements: at most 64 labels per
# resource; keys 1-63 characters, a lowercase letter first, then lowercase letters, digits,
# '_' and '-'; values 0-63 of the same. (International characters are allowed there; the
# spec keeps to ASCII.)
LABELS_MAX = 64
LABEL_KEY = r"^[a-z][-_a-z0-9]{0,62}$"
LABEL_VALUE = r"^[-_a-z0-9]{0,63}$"


# --------------------------------------------------------------------- Cloud Build

# cloud.google.com/build/docs/api/reference/rest/v1/projects.triggers: "Branch and tag names in
# trigger templates are interpreted as regular expressions" in RE2 syntax (Cloud Build's
# "Creating and managing build triggers": "uses RE2 syntax"), which has no lookaround and
# no backreferences and caps a repetition at 1000. Checked with RE2 itself (google-re2).


def re2_problem(pattern: str) -> tuple[str, str] | None:
    """Why RE2 refuses ``pattern``, or None."""
    import re2  # google-re2: imported on use, so loading a spec without a trigger does not load it

    options = re2.Options()
    options.log_errors = False  # RE2 logs every parse error to stderr by default; the refusal is the one line
    try:
        re2.compile(pattern, options)
    except re2.error as e:
        detail = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        return (
            f"{pattern!r} is not an RE2 regular expression, which Cloud Build reads branches as ({detail})",
            "write it in RE2 syntax, e.g. ^main$ or ^release/.*$ (no lookaround (?=...) or backreferences \\1)",
        )
    return None


# GitHub: a user or organization name is 1-39 letters, digits and single hyphens, not at either end;
# a repository name is 1-100 letters, digits, '.', '-' and '_' (and not "." or "..").
GITHUB_OWNER = r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$"
GITHUB_REPO = r"^(?!\.\.?$)[A-Za-z0-9._-]{1,100}$"


def build_config_path_problem(path: str) -> tuple[str, str] | None:
    """The trigger's ``filename`` is a path inside the repository."""
    if not path or path.startswith("/") or ".." in path.split("/") or _CONTROL.search(path):
        return f"{path!r} is not a path inside the repository", "write it relative to the repository root, e.g. cloudbuild/ci.yaml"
    return None


# --------------------------------------------------------------------- Terraform state

# Terraform's gcs backend refuses a prefix that starts with '/' (backend/remote-state/gcs);
# the state object is <prefix>/<workspace>.tfstate, and a Cloud Storage object name is at most
# 1024 bytes of UTF-8 without carriage returns or line feeds (storage/docs/objects#naming).
OBJECT_NAME_MAX_BYTES = 1024
STATE_OBJECT_TAIL = "/default.tfstate"


def state_prefix_problem(prefix: str) -> tuple[str, str] | None:
    if prefix.startswith("/"):
        return f"{prefix!r} starts with '/', which Terraform's gcs backend refuses", "drop the leading '/'"
    if _CONTROL.search(prefix):
        return "holds a control character, which a Cloud Storage object name cannot", "write it without control characters"
    if len((prefix + STATE_OBJECT_TAIL).encode()) > OBJECT_NAME_MAX_BYTES:
        return f"makes a state object name over {OBJECT_NAME_MAX_BYTES} bytes", "shorten it"
    return None
