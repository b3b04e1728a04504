"""What the tests share, one module per kind of helper (fixtures and hooks stay in the conftest files).

- ``paths``: ``REPO``, ``EXAMPLES``, ``EXAMPLE_FILES``, ``EXAMPLE_NAMES``;
- ``cli``: the toolkit's CLIs run as a user sees them, in process (``cli``) or as a process (``run_module``);
- ``specs``: an example spec as a document to change (``example_doc``) or parsed with keys set (``spec_from``); the least a spec needs (``MINIMAL``) and it with one pool of a shape (``one_pool``);
- ``goldens``: rendered objects against tests/golden/ (``check_golden``; ``TGK_UPDATE_GOLDEN=1`` regenerates);
- ``memory_store``: a run's checkpoint directory in memory (behind the ``memory_buckets`` fixture);
- ``local_cluster``: the integration tier's control planes (state dirs, a module's own cluster, ``wait_for``);
- ``fake_apiserver``: a recording Kubernetes API server on loopback, for the cluster client;
- ``hostile_server``: a loopback server that misbehaves on purpose (trickles, or never stops talking);
- ``fake_google``: Google's REST APIs on loopback in their documented shapes (GETs by path, POSTs recorded);
- ``gcs_emulator``: a real GCS-compatible server on loopback;
- ``google_iam_server``: Cloud Resource Manager and IAM on loopback, Cloud Storage passed through to the emulator;
- ``k8s_scan``: every example's rendered objects laid out as files, for checkov;
- ``shell_layers``: what stands between a rendered object and the program's argv (the kubelet's
  expansion, KubeRay's submitter, recording shims), run for real where it can be;
- ``kubeside``: KubeRay's and the kubelet's own Go code, built and called (tests/support/kubeside/main.go).

The first three are re-exported here: ``from tests.support import REPO, cli, spec_from``.
"""

from tests.support.cli import cli, cli_app, run_module
from tests.support.paths import EXAMPLE_FILES, EXAMPLE_NAMES, EXAMPLES, REPO
from tests.support.specs import example_doc, spec_from

__all__ = ["EXAMPLES", "EXAMPLE_FILES", "EXAMPLE_NAMES", "REPO", "cli", "cli_app", "example_doc", "run_module", "spec_from"]
