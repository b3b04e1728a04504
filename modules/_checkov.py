"""Resource-scoped checkov suppressions carried in the synthesized JSON.

checkov's Terraform-JSON runner (3.3.x) ignores ``#checkov:skip`` lines, and a
global skip option would hide the same finding on every other resource.
So each construct records the checks it knowingly fails *on the resource
itself*, in the Terraform-JSON comment block (``"//"``, which Terraform
ignores), in the shape proposed upstream (bridgecrewio/checkov#4634)::

    "//": {"checkov": {"skip": [{"id": "CKV_GCP_62", "comment": "why"}]}}

``baseline`` turns those records into a checkov ``--baseline`` file, so plain
checkov reports zero failures while every exception stays next to its
resource with its reason. This module is pure apart from the one override.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # reading suppressions back must not start the jsii runtime
    from cdktn import TerraformResource

CHECK_ID = re.compile(r"^CKV2?_[A-Z0-9]+_[0-9]+$")


def suppress(resource: TerraformResource, reasons: Mapping[str, str]) -> None:
    """Record, on ``resource``, the checks it fails on purpose and why.

    Call once per resource with every reason: the override replaces the list.
    """
    if not reasons:
        return
    for check_id, why in reasons.items():
        if not CHECK_ID.fullmatch(check_id):
            raise ValueError(f"{check_id!r} is not a checkov check id (e.g. CKV_GCP_62)")
        if not why or not why.strip():
            raise ValueError(f"suppressing {check_id} needs a reason")
    resource.add_override(
        "//.checkov.skip",
        [{"id": check_id, "comment": why.strip()} for check_id, why in sorted(reasons.items())],
    )


def suppressions(tf_json: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    """(resource type, logical id) -> {check id: reason} read back from a synthesized stack."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for rtype, resources in (tf_json.get("resource") or {}).items():
        for name, body in resources.items():
            skips = ((body.get("//") or {}).get("checkov") or {}).get("skip") or []
            if skips:
                out[(rtype, name)] = {s.get("id", ""): s.get("comment", "") for s in skips}
    return out


def baseline(tf_json: Mapping[str, Any], file_path: str) -> dict[str, Any]:
    """A checkov baseline that accepts exactly the recorded suppressions.

    ``file_path`` is the file as checkov names it (relative to the scanned
    directory, with a leading slash). checkov's Terraform-JSON runner names a
    resource ``resource.<logical id>`` in its per-resource checks but
    ``<type>.<logical id>`` in its graph (CKV2_*) checks; logical ids are
    unique within a cdktn stack, so both are unambiguous here.
    """
    findings: dict[str, set[str]] = {}
    for (rtype, name), checks in suppressions(tf_json).items():
        for check in checks:
            key = f"{rtype}.{name}" if check.startswith("CKV2_") else f"resource.{name}"
            findings.setdefault(key, set()).add(check)
    entries = [{"resource": key, "check_ids": sorted(ids)} for key, ids in sorted(findings.items())]
    return {"failed_checks": [{"file": file_path, "findings": entries}] if entries else []}
