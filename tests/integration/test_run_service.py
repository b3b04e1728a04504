"""A notebook submits a run to the live local cluster through workloads.runs, without the CLI.

The same few lines as tests/test_run_service.py, against the real control plane: the
cluster's kubeconfig context (tgk-local) makes the run a rehearsal through its hook, Kueue
admits it, a second submit of the same plan is recognised as the same run (nothing
applied), and the run completes on kwok.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from infra.spec import DEFAULT_SPEC_PATH, load_spec
from tests.support.local_cluster import wait_for
from workloads import runs
from workloads.cluster.client import Cluster
from workloads.local.addons import REHEARSAL_LABEL


def test_a_notebook_submits_to_the_local_cluster_and_the_run_completes(kubeconfig: Path, cluster, tpu_quota) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    run = f"nb-{secrets.token_hex(3)}"
    plan = runs.plan("hello-tpu", spec, runs.Overrides(name=run))
    ns = plan.target.namespace
    live = Cluster.connect(kubeconfig, "tgk-local", timeout=30)
    try:
        result = runs.submit(live, plan, timeout=120, rehearse_seconds=2)
        assert result.existing is None
        assert result.refs == [{"kind": "JobSet", "name": run, "namespace": ns}]
        assert result.admission is not None and result.admission.admitted, result.admission
        assert result.note.startswith("rehearsal on the local cluster: every worker Running for 2.0 s (--rehearse-seconds)")

        stored = cluster.jobset(ns, run)
        pod = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        assert pod["metadata"]["labels"][REHEARSAL_LABEL] == "true"  # decorated by the local cluster's hook

        again = runs.submit(live, plan, timeout=120, rehearse_seconds=2)
        assert again.applied == () and again.admission is None
        assert again.existing is not None and again.existing.kind == "JobSet"

        done = wait_for(lambda: (s := cluster.run_status(ns, run)).phase.value in ("Succeeded", "Failed") and s, 180, f"{run} to finish")
        assert done.phase.value == "Succeeded", done.message
    finally:
        cluster.delete_run(ns, run)
