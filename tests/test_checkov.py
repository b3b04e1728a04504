"""checkov on the synthesized JSON of every example: zero unaccepted findings.

Also scanned: v6e-reservation with the GKE Ray operator add-on on (``cluster.ray``; no
example turns it on), so the add-on's Terraform is held to the same two runs; and every
stack of the fleet example (examples/fleet/): its workers and its MultiKueue manager, whose
stack holds the fleet's buckets and their grants to the workers' identities.

Accepted findings live next to their resource (``"//".checkov.skip`` with a
reason, written by modules/_checkov.suppress). checkov 3.3's Terraform-JSON
runner does not read inline skips, so they reach checkov as a generated
``--baseline`` (per file, per resource, per check). Two runs:

1. plain checkov: its failures must be exactly the recorded suppressions —
   nothing unaccepted, and no stale suppression left behind;
2. checkov with the generated baseline: zero failed checks, as CI will run it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.spec import EXAMPLES_DIR, load_spec, parse_spec
from modules._checkov import CHECK_ID, baseline, suppressions
from tests.support import EXAMPLE_NAMES, example_doc

pytestmark = [pytest.mark.tools, pytest.mark.synth]

RAY_ON = {"enabled": True, "logging": True, "monitoring": False}


def _checkov() -> str:
    exe = os.environ.get("TGK_CHECKOV") or shutil.which("checkov")
    if not exe or not Path(exe).exists():
        pytest.fail(
            "checkov is not installed: run `bash scripts/setup.sh` and `source scripts/env.sh` (sets $TGK_CHECKOV to the pinned checkov venv)",
            pytrace=False,
        )
    return exe


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """All examples (and the Ray add-on variant) synthesized once into one tree: {checkov file path: parsed JSON}."""
    from infra.stack import synth

    root = tmp_path_factory.mktemp("checkov")
    specs = {name: load_spec(EXAMPLES_DIR / f"{name}.yaml") for name in EXAMPLE_NAMES}
    ray_doc = example_doc("v6e-reservation")
    ray_doc["cluster"]["ray"] = RAY_ON
    specs["v6e-reservation-ray"] = parse_spec(ray_doc)
    # A ComputeClass pool: no TPU node pools, node auto-provisioning on the cluster.
    class_doc = example_doc("fallback")
    class_doc["tpu_pools"][0]["compute_class"] = True
    specs["fallback-compute-class"] = parse_spec(class_doc)
    docs = {}
    for name, spec in specs.items():
        path = synth(spec, root / name)
        docs["/" + str(path.relative_to(root))] = json.loads(path.read_text())
    from infra.fleet import load_fleet
    from infra.fleet_stack import synth_fleet

    for path in synth_fleet(load_fleet(EXAMPLES_DIR / "fleet" / "fleet.yaml"), root / "fleet"):
        docs["/" + str(path.relative_to(root))] = json.loads(path.read_text())
    return root, docs


def run_checkov(root: Path, *extra: str, framework: str = "terraform_json") -> dict[str, Any]:
    """checkov's report on every file of ``framework`` under ``root`` (test_k8s_policy scans with ``kubernetes``)."""
    proc = subprocess.run(
        [_checkov(), "-d", str(root), "--framework", framework, "--skip-download", "--compact", "--quiet", "-o", "json", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    # checkov exits 1 when checks fail; anything else is checkov itself failing.
    assert proc.returncode in (0, 1), f"checkov failed ({proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout)
    reports = out if isinstance(out, list) else [out]
    (report,) = [r for r in reports if r.get("check_type") == framework] or [{"results": {"failed_checks": []}, "summary": {}}]
    assert report["summary"].get("parsing_errors", 0) == 0
    return report


def test_findings_are_exactly_the_suppressions(synthesized):
    root, docs = synthesized
    report = run_checkov(root)
    assert report["summary"]["passed"] > 0, "checkov scanned nothing"
    failed = {(f["file_path"], f["resource"].split(".", 1)[1], f["check_id"]) for f in report["results"]["failed_checks"]}
    accepted = {(file, name, check) for file, doc in docs.items() for (_t, name), checks in suppressions(doc).items() for check in checks}
    unaccepted = sorted(failed - accepted)
    stale = sorted(accepted - failed)
    assert not unaccepted, "checkov findings without a suppression next to the resource:\n" + "\n".join(map(str, unaccepted))
    assert not stale, "suppressions for checks that now pass (remove them):\n" + "\n".join(map(str, stale))


def test_the_fleet_manager_s_stack_is_scanned(synthesized):
    _root, docs = synthesized
    managers = [d for f, d in docs.items() if f.startswith("/fleet/") and f.split("/")[3] == "tpu-fleet-mgr"]
    (mgr,) = managers
    assert "google_storage_bucket_iam_member" in mgr["resource"], "the fleet buckets' grants to the workers are in the scan"


def test_zero_failures_with_the_generated_baseline(synthesized, tmp_path):
    root, docs = synthesized
    merged = {"failed_checks": [entry for file, doc in docs.items() for entry in baseline(doc, file)["failed_checks"]]}
    base = tmp_path / "checkov.baseline"
    base.write_text(json.dumps(merged))
    report = run_checkov(root, "--baseline", str(base))
    failed = [(f["file_path"], f["resource"], f["check_id"]) for f in report["results"]["failed_checks"]]
    assert failed == [], f"checkov still fails: {failed}"


def test_every_suppression_has_a_reason(synthesized):
    _, docs = synthesized
    seen = 0
    for file, doc in docs.items():
        for (rtype, name), checks in suppressions(doc).items():
            for check, why in checks.items():
                seen += 1
                assert CHECK_ID.match(check), f"{file} {rtype}.{name}: {check!r} is not a check id"
                assert why and len(why.strip()) >= 20, f"{file} {rtype}.{name}: {check} is suppressed without a real reason"
    assert seen, "no suppressions found at all: the reader is broken"


def test_no_global_skips_in_the_repo():
    """Suppressions belong next to resources: no checkov config file, no --skip-check anywhere."""
    repo = Path(__file__).resolve().parent.parent
    assert not (repo / ".checkov.yaml").exists() and not (repo / ".checkov.yml").exists()
    offenders = []
    for path in list(repo.glob("scripts/*")) + list(repo.glob("cloudbuild/*")) + list(repo.glob("infra/*.py")) + list(repo.glob("modules/*.py")):
        if path.is_file() and re.search(r"--skip-check|skip-check:", path.read_text(errors="ignore")):
            offenders.append(str(path.relative_to(repo)))
    assert not offenders, f"global checkov skips in {offenders}"
