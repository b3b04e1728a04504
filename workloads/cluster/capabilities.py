"""What a run's plan needs of its cluster besides queues and nodes, asked of the cluster itself.

Each probe returns None when the cluster has it, else one line saying what is missing. The same
probes serve ``preflight`` (a row that fails) and ``submit`` (refused before anything is applied:
``runs.service.apply``, one line naming the flag, exit 2), so the two cannot disagree.

- multi-tier checkpointing: GKE's HighScaleCheckpointing add-on serves the CheckpointConfiguration
  API (checkpointing.gke.io), which the pools' RAM disks are configured through; without it the
  add-on is off and a multi-tier run's RAM-disk volume can never be mounted.
- in-place restart: a server-side dry-run create of a small JobSet that restarts in place goes
  through the cluster's own JobSet CRD and webhook, which refuse it when the JobSet predates
  InPlaceRestart (v0.11.0: the CRD's restartStrategy enum) or runs with its gate off.
"""

from __future__ import annotations

from typing import Any

from toolkit.errors import NotFound, Rejected
from toolkit.names import JOBSET_API, TGK_FIELD_MANAGER

CHECKPOINTING_GROUP = "checkpointing.gke.io"


def multi_tier_problem(cluster: Any) -> str | None:
    try:
        cluster.preferred_version(CHECKPOINTING_GROUP)
    except NotFound:
        return f"the cluster does not serve {CHECKPOINTING_GROUP}: GKE's multi-tier checkpointing add-on (HighScaleCheckpointing) is off"
    return None


def _probe(namespace: str) -> dict[str, Any]:
    """The smallest JobSet JobSet v0.12.0's webhook accepts with restartStrategy InPlaceRestart."""
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": "tgk-in-place-restart-probe", "namespace": namespace},
        "spec": {
            "failurePolicy": {"maxRestarts": 1, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 2**31 - 1,
                            "podReplacementPolicy": "Failed",
                            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
                        }
                    },
                }
            ],
        },
    }


def in_place_problem(cluster: Any, namespace: str) -> str | None:
    try:
        cluster.create(_probe(namespace), field_manager=TGK_FIELD_MANAGER, dry_run=True)
    except NotFound:
        return "the cluster does not serve JobSets"
    except Rejected as e:
        text = str(e)
        # The two refusals a JobSet gives, said plainly: the webhook's reason comes last and a
        # shortened message would lose it (jobset_webhook.go; the CRD's restartStrategy enum).
        if "feature gate is disabled" in text:
            return "the cluster's JobSet runs with its InPlaceRestart feature gate off (its webhook refuses restartStrategy: InPlaceRestart)"
        if "Unsupported value" in text and "InPlaceRestart" in text:
            return "the cluster's JobSet predates in-place restarts (its CRD has no restartStrategy InPlaceRestart)"
        return f"the cluster's JobSet refuses in-place restarts ({_short(text)})"
    return None


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
