#!/usr/bin/env python3
"""Create the Terraform state bucket named by the environment spec, if it is missing.

The bucket is ``state.bucket`` (default ``<project>-tf-state``) in the spec's region,
with uniform bucket-level access, public access prevention enforced and object
versioning on (so a bad apply can be rolled back to an earlier state file).

Idempotent: an existing bucket is reused; if its access or versioning settings are
weaker than the above they are tightened (location cannot change and is only reported).

    python scripts/bootstrap_state_bucket.py [--spec FILE] [--dry-run] [--output json]

``--spec`` may name a fleet file (``infra.fleet``): every distinct state bucket of its
members (the workers', and the manager's), each as above, in the fleet's order.

Honours STORAGE_EMULATOR_HOST (the google-cloud-storage client talks to an emulator).
Exit codes: 0 done, 2 bad input (one ``error:`` line), 1 the storage API refused, 3 it could not
be reached in time or answered what no Google API does (the toolkit's bounded client,
``workloads.observe.google_http``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Plan:
    bucket: str
    project: str
    location: str
    action: str  # create | update | none
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would " if dry_run else ""
        if self.action == "create":
            out = [
                f"{verb}create bucket gs://{self.bucket} in project {self.project}: location {self.location}, "
                "uniform bucket-level access, public access prevention enforced, versioning on"
            ]
        elif self.action == "update":
            out = [f"{verb}update bucket gs://{self.bucket}: {'; '.join(self.changes)}"]
        else:
            out = [f"bucket gs://{self.bucket} exists with the required settings; nothing to do"]
        return out + [f"note: {n}" for n in self.notes]


def _client(project: str):
    """The toolkit's bounded Cloud Storage client (anonymous against $STORAGE_EMULATOR_HOST)."""
    from workloads.observe.storage import make_client

    return make_client(project)


def plan_for(existing: Any | None, bucket: str, project: str, location: str) -> Plan:
    """What to do, given the bucket as it is now (None when it does not exist)."""
    if existing is None:
        return Plan(bucket, project, location, "create")
    changes: list[str] = []
    iam = existing.iam_configuration
    if not iam.uniform_bucket_level_access_enabled:
        changes.append("turn on uniform bucket-level access")
    if iam.public_access_prevention != "enforced":
        changes.append("enforce public access prevention")
    if not existing.versioning_enabled:
        changes.append("turn on versioning")
    notes = []
    have = (existing.location or "").lower()
    if have and have != location.lower():
        notes.append(f"the bucket is in {existing.location}, not {location}; Terraform state works from any location")
    return Plan(bucket, project, location, "update" if changes else "none", changes, notes)


def apply(client: Any, plan: Plan, existing: Any | None) -> None:
    if plan.action == "create":
        from toolkit.names import TGK

        b = client.bucket(plan.bucket)
        b.iam_configuration.uniform_bucket_level_access_enabled = True
        b.iam_configuration.public_access_prevention = "enforced"
        b.versioning_enabled = True
        b.labels = {"managed-by": TGK, "purpose": "terraform-state"}
        client.create_bucket(b, project=plan.project, location=plan.location)
    elif plan.action == "update":
        existing.iam_configuration.uniform_bucket_level_access_enabled = True
        existing.iam_configuration.public_access_prevention = "enforced"
        existing.versioning_enabled = True
        existing.patch()


def main(argv: list[str] | None = None, client: Any | None = None) -> int:
    ap = argparse.ArgumentParser(description="Create the Terraform state bucket from the spec, if missing.")
    ap.add_argument("--spec", help="environment spec YAML (default: $TGK_SPEC, else examples/default.yaml)")
    ap.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    ap.add_argument("--output", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)

    from infra.fleet import Fleet, load_spec_or_fleet, members
    from toolkit.errors import ToolkitError

    try:
        found = load_spec_or_fleet(args.spec)
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    models = [m.model for m in members(found)] if isinstance(found, Fleet) else [found]
    # Each state bucket once, in its first member's region (a fleet's members may share one).
    targets = list(dict.fromkeys((m.state_bucket, m.project) for m in models))
    regions = {(m.state_bucket, m.project): m.region for m in reversed(models)}
    for bucket, project in targets:
        rc = _bootstrap(bucket, project, regions[(bucket, project)], args, client)
        if rc:
            return rc
    return 0


def _bootstrap(bucket: str, project: str, location: str, args: argparse.Namespace, client: Any | None) -> int:
    from google.api_core import exceptions as gexc

    from toolkit.errors import GoogleApiError
    from workloads.observe.storage import StorageError

    try:
        client = client or _client(project)
    except StorageError:  # no Application Default Credentials
        if args.dry_run:
            plan = Plan(bucket, project, location, "create", notes=["no Google credentials, so whether the bucket exists was not checked"])
            return _report(plan, args)
        print("error: no Google credentials — run `gcloud auth application-default login` or set STORAGE_EMULATOR_HOST", file=sys.stderr)
        return 1
    try:
        existing = client.lookup_bucket(bucket)
        plan = plan_for(existing, bucket, project, location)
        if not args.dry_run:
            apply(client, plan, existing)
    except GoogleApiError as e:  # unreachable, too slow, or an answer no Google API gives: one line naming Cloud Storage
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except gexc.Forbidden as e:
        print(
            f"error: gs://{bucket}: permission denied ({e.message}) — use an account with storage.buckets.create on {project}, or pick another state.bucket",
            file=sys.stderr,
        )
        return 1
    except gexc.Conflict:
        print(f"error: state.bucket: gs://{bucket} is taken by another project — set state.bucket to a globally unique name", file=sys.stderr)
        return 2
    except gexc.GoogleAPIError as e:
        print(f"error: gs://{bucket}: {e} — retry, or check the project and network", file=sys.stderr)
        return 1

    return _report(plan, args)


def _report(plan: Plan, args: argparse.Namespace) -> int:
    if args.output == "json":
        print(json.dumps({**asdict(plan), "dry_run": args.dry_run}, indent=2))
    else:
        for line in plan.lines(args.dry_run):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
