"""Convert a Hugging Face checkpoint to MaxText's format on the cluster: the flow behind ``convert``, as functions returning data.

    plan(recipe, spec, source, name, ...) -> Conversion       pure (workloads.planning.conversion)
    render(conversion) -> [Job]                               pure (workloads.render.convert_job)
    apply(cluster, conversion) -> Converted                   the source checked, the record claimed, the Job applied
    state(cluster, conversion) -> JobState                    where the Job is
    wait(cluster, conversion, timeout) -> JobState            until it completed or failed

Before anything is applied: the source prefix must hold what MaxText's conversion reads
(``model.safetensors``, or ``model.safetensors.index.json`` and the shards it names), read
through the cluster's storage client (the local cluster's own bucket server, else Cloud
Storage); the destination must be free or this very conversion's
(``workloads.runs.base_checkpoints.claim``, which records it). The local cluster plays
the Job as it plays any pod (it completes) but runs no MaxText: ``convert --local``
(``workloads.maxtext.convert_local``) is the real conversion on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit import ledger
from toolkit.errors import FieldError
from toolkit.jsontext import load_json
from toolkit.names import JOB_API, TGK_FIELD_MANAGER
from workloads.cluster.cleanup import delete_toolkit_object
from workloads.planning.conversion import Conversion, plan_conversion
from workloads.runs import base_checkpoints, hooks

if TYPE_CHECKING:
    from workloads.cluster.client import Cluster

__all__ = ["Converted", "JobState", "apply", "plan_conversion", "render", "source_check", "state", "wait"]

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class JobState:
    phase: str  # missing | running | succeeded | failed
    message: str = ""


@dataclass(frozen=True)
class Converted:
    conversion: Conversion
    claimed: base_checkpoints.Claimed
    applied: tuple[dict[str, str], ...] = ()  # kind/name/namespace of what was applied; () when the Job was already there
    job: JobState | None = None  # the Job found already there (None: applied now)
    note: str = ""


def render(c: Conversion) -> list[dict[str, Any]]:
    from workloads.render.convert_job import convert_objects

    return convert_objects(c)


def source_check(client: Any, c: Conversion) -> list[str]:
    """The safetensors files under the source prefix; a FieldError (``--from``) when MaxText's conversion would find none."""
    from workloads.observe.storage import storage_call

    prefix = c.source_prefix.rstrip("/") + "/"
    blobs = storage_call(f"list {c.source}", c.source_bucket, lambda: list(client.list_blobs(c.source_bucket, prefix=prefix)))
    names = {b.name[len(prefix) :]: b for b in blobs}
    if SAFETENSORS_INDEX in names:
        raw = storage_call(f"read {c.source}{SAFETENSORS_INDEX}", c.source_bucket, names[SAFETENSORS_INDEX].download_as_bytes)
        try:
            shards = sorted(set((load_json(raw, max_bytes=64 * 2**20).get("weight_map") or {}).values()))
        except (ValueError, AttributeError):
            raise FieldError(
                "--from", f"{c.source}{SAFETENSORS_INDEX} is not a safetensors index", "upload the model's files as Hugging Face publishes them"
            ) from None
        missing = [s for s in shards if s not in names]
        if not shards or missing:
            raise FieldError(
                "--from", f"{c.source}{SAFETENSORS_INDEX} names shards that are not there ({', '.join(missing[:3]) or 'none'})", "upload every shard"
            )
        return shards
    if SAFETENSORS in names:
        return [SAFETENSORS]
    bins = [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    why = (
        f"only PyTorch files ({', '.join(sorted(bins)[:3])}), which MaxText's lazy conversion does not read" if bins else "no model.safetensors (or its index)"
    )
    raise FieldError(
        "--from",
        f"{c.source} holds {why}",
        f"upload the Hugging Face safetensors of {c.hf_repo} there (huggingface-cli download, then data upload or gcloud storage cp)",
    )


def _storage(cluster: Cluster, project: str | None = None) -> Any:
    return hooks.storage_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


def state(cluster: Cluster, c: Conversion) -> JobState:
    job = cluster.get(cluster.resource(JOB_API, "Job"), c.job_name, c.namespace)
    if job is None:
        return JobState("missing")
    st = job.get("status") or {}
    conds = {x.get("type"): x for x in st.get("conditions") or [] if str(x.get("status")) == "True"}
    if "Complete" in conds:
        return JobState("succeeded", " ".join(str(conds["Complete"].get("message") or "completed").split()))
    if "Failed" in conds:
        f = conds["Failed"]
        return JobState("failed", " ".join(f"{f.get('reason') or 'Failed'}: {f.get('message') or ''}".split()).rstrip(":"))
    return JobState("running", f"{int(st.get('active') or 0)} pod(s) active, {int(st.get('failed') or 0)} failed")


def apply(cluster: Cluster, c: Conversion, *, project: str | None = None, storage: Any = None) -> Converted:
    """Check the source, claim the destination (its record), apply the Job — unless this very conversion's Job is already there."""
    from workloads.runs.identity import GcsStore

    client = storage or _storage(cluster, project)
    source_check(client, c)
    found = state(cluster, c)
    claimed = base_checkpoints.claim(GcsStore(client, c.directory), base_checkpoints.record_of(c))
    note = ""
    if hooks.for_context(getattr(cluster, "context", None)) is not None:
        note = "the local cluster plays the conversion Job (its pod completes) but runs no MaxText: `convert --local` converts for real"
    if found.phase in ("running", "succeeded"):
        return Converted(c, claimed, job=found, note=note)
    objects = render(c)
    if found.phase == "failed":
        info = cluster.resource(JOB_API, "Job")
        verdict = ledger.toolkit_object(cluster.get(info, c.job_name, c.namespace), kind="Job", name=c.job_name, namespace=c.namespace)
        if isinstance(verdict, ledger.Kept):
            raise FieldError("--name", f"{verdict.what} failed and {verdict.why}", "delete it yourself, or convert under another --name")
        delete_toolkit_object(cluster, info, "Job", c.job_name, c.namespace, verdict, propagation="Foreground")
    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    refs = tuple({"kind": o["kind"], "name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]} for o in objects)
    return Converted(c, claimed, applied=refs, note=note)


def wait(cluster: Cluster, c: Conversion, *, timeout: float) -> JobState:
    """Until the Job completed or failed; ``WaitTimeout`` (with the last state) after ``timeout`` seconds."""
    from workloads.cluster.wait import wait_for

    return wait_for(
        lambda: state(cluster, c),
        timeout=timeout,
        what=f"conversion Job {c.namespace}/{c.job_name}",
        interval=2.0,
        until=lambda s: s.phase in ("succeeded", "failed", "missing"),
    )
