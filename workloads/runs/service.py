"""Plan, render, apply and wait for a run: the flow behind ``render`` and ``submit``, as functions returning data.

    plan(recipe, spec, Overrides, now, rand) -> RunPlan          pure with now/rand given
    render(plan)    -> RenderedRun    the Kustomize tree (base/<runtime>/ + overlays/<run>/), what
                                      `kustomize build overlays/<run>` gives for it, and its digest
    through_fleet(plan, rendered) -> RenderedRun   the objects as a fleet's manager takes them
    write(out, rendered) -> [paths]   the tree on disk (``render --out``)
    apply(cluster, plan, rendered) -> Submission   the cluster's hook (the local rehearsal), the
                                          resubmission check, what the plan needs of the cluster
                                          (workloads.cluster.capabilities), the checkpoint directory's
                                          owner (workloads.runs.identity), server-side apply
    wait(cluster, plan, timeout) -> AdmissionResult   Kueue admission
    submit(cluster, plan, timeout) = apply + wait

A run is rendered once per command: ``render`` builds its objects, computes their digest and
reads the tree back once (``workloads.render.kustomize.render_run``), and ``apply`` takes that
``RenderedRun`` instead of rendering again (it renders only when called without one). The
digest is computed again only for objects something changed after the render: a cluster
hook's decoration, a fleet's dispatch.

Nothing here prints: the CLI (``workloads.cli.runs``) reads the spec once, formats what these
return, and a notebook or pipeline step calls them directly. Bad input raises a
``ToolkitError`` naming the flag it comes from, before anything is applied. Whether a
cluster decorates runs is asked through ``workloads.runs.hooks``, by the cluster's
kubeconfig context.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from infra.recovery import IN_PLACE
from toolkit.errors import FieldError
from toolkit.names import TGK_FIELD_MANAGER
from workloads.planning.defaults import SUBMIT_TIMEOUT_S
from workloads.planning.overrides import Overrides
from workloads.runs import hooks

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from infra.spec import EnvSpec
    from workloads.cluster.client import AdmissionResult, Cluster
    from workloads.cluster.runkinds import RunKind
    from workloads.planning.model import RunPlan
    from workloads.render.kustomize import RenderedRun
    from workloads.runs.identity import Store, Verdict

TIMEOUT_S = SUBMIT_TIMEOUT_S


@dataclass(frozen=True)
class ExistingRun:
    """The very run was submitted before with the same options: nothing was applied."""

    kind: str  # JobSet, Job or RayJob
    phase: str  # a status.Phase value
    message: str


@dataclass(frozen=True)
class Submission:
    """What ``apply``/``submit`` did with a run."""

    plan: RunPlan
    applied: tuple[dict[str, Any], ...] = ()  # the objects as applied (decorated, stamped); () when ``existing``
    existing: ExistingRun | None = None
    note: str = ""  # the cluster hook's line (the local rehearsal's length); "" elsewhere
    admission: AdmissionResult | None = None  # None: not waited for (or nothing applied)
    checkpoints: Verdict | None = None  # whose checkpoint directory it is (workloads.runs.identity); None: the run keeps none
    dataset_access: str = ""  # why the dataset check could not prove the run may read its data (a warning); "" proven or no dataset
    secrets: str = ""  # why the Secrets the run reads could not be checked (a warning); "" checked or none read

    @property
    def refs(self) -> list[dict[str, str]]:
        """kind, name (and namespace) of each applied object."""
        return [ref(o) for o in self.applied]


def ref(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {"kind": obj["kind"], "name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})}


# ------------------------------------------------------------------ plan and render (pure)


def random_suffix() -> str:
    """Three random lowercase letters or digits: the tail of a generated run name."""
    import secrets  # imported here: it pulls in hmac/openssl, ~30 ms of every --help
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(3))


def plan(recipe: str, spec: EnvSpec, options: Overrides | None = None, *, now: datetime | None = None, rand: str | None = None) -> RunPlan:
    """The checked plan (``workloads.planning.planner.plan_run``); ``now``/``rand`` default to the clock and a random suffix."""
    from workloads.planning.planner import plan_run

    return plan_run(recipe, spec, options or Overrides(), now=now or datetime.now(UTC), rand=random_suffix() if rand is None else rand)


def warnings(plan: RunPlan, spec: EnvSpec) -> list[str]:
    """What the plan may trip over on the cluster the spec builds, without being wrong."""
    from workloads.planning.model import RUNTIME_RAY

    out = list(plan.program.warnings)
    if plan.runtime == RUNTIME_RAY and not spec.cluster.ray.enabled:
        # A warning, not a refusal: a cluster may run a KubeRay installed by hand (the local one does).
        out.append(
            "--runtime ray: the spec leaves GKE's Ray operator off, so the cluster it builds cannot run a RayJob"
            " — set cluster.ray.enabled: true and deploy (or install KubeRay yourself)"
        )
    return out


def render(plan: RunPlan) -> RenderedRun:
    """The run rendered once: its Kustomize tree (``base/<runtime>/``, shared by every run, and ``overlays/<run>/``),
    the objects ``kustomize build overlays/<run>`` gives for it (read back from its own text) and their digest."""
    from workloads.render.kustomize import render_run

    return render_run(plan)


def manifests(plan: RunPlan) -> list[dict[str, Any]]:
    """The objects ``kustomize build overlays/<run>`` gives for the tree ``render`` writes, built from its own text."""
    return list(render(plan).objects)


def write(out: Path, rendered: RenderedRun) -> list[Path]:
    """The rendered tree written under ``out`` (``--out``): only what the toolkit wrote is replaced (``kustomize.write_tree``)."""
    from workloads.render.kustomize import write_tree

    return write_tree(out, dict(rendered.files))


def fleet_options(options: Overrides) -> None:
    """Before a run through a fleet's manager is planned: what one worker has and the others do not is refused by name.

    The manager plans against the fleet's buckets only (``infra.fleet.Fleet.manager_env``):
    a dataset and a Managed Lustre instance are one worker's, and MultiKueue may run the
    job on (or move it to) another worker, whose identity cannot read them.
    """
    if options.dataset is not None:
        raise FieldError(
            "--dataset",
            "a dataset is one worker's (its spec's datasets:), and a fleet may dispatch the run to another worker, whose identity cannot read it",
            "submit to that worker's own spec (--spec WORKER.yaml, --context WORKER), or run without --dataset",
        )
    storage = options.checkpoint_storage
    if storage is not None and str(storage).split(":", 1)[0] == "lustre":
        # A Managed Lustre instance is one worker's (zonal, its claim in that cluster): the run may land elsewhere.
        raise FieldError("--checkpoint-storage", "lustre is one worker's instance, and a fleet may dispatch the run to another", "use gcs or gcsfuse")


def through_fleet(plan: RunPlan, rendered: RenderedRun) -> RenderedRun:
    """The run as submitted to a fleet's manager: its run object ``managedBy`` MultiKueue, which runs it on a worker.

    A run the fleet cannot carry is refused here, before anything is printed or applied.
    """
    from dataclasses import replace

    from workloads.planning.model import RUNTIME_RAY
    from workloads.render.multikueue import dispatched

    if plan.runtime == RUNTIME_RAY:
        # The workers' identity for the manager covers the kinds it is granted (multikueue.JOB_RESOURCES).
        raise FieldError("--runtime", "a fleet dispatches JobSets and Jobs, not RayJobs", "use --runtime jobset or job, or submit to one cluster's spec")
    storage = plan.policy.checkpoint_storage
    if storage is not None and storage.kind == "lustre":
        # A Managed Lustre instance is one worker's (zonal, its claim in that cluster): the run may land elsewhere.
        raise FieldError("--checkpoint-storage", "lustre is one worker's instance, and a fleet may dispatch the run to another", "use gcs or gcsfuse")
    return replace(rendered, objects=tuple(dispatched(list(rendered.objects))), stamped=False)


def summary(plan: RunPlan, spec: EnvSpec) -> dict[str, Any]:
    """The plan's summary with its estimated cost in every capacity mode (each price with its date)."""
    from infra.pricing import plan_cost

    cost = plan_cost(plan, spec)
    return {**plan.summary(), "estimated_cost": None if cost is None else cost.to_dict()}


def run_kind(plan: RunPlan) -> RunKind:
    """How the cluster side finds a run of the plan's runtime."""
    from workloads.cluster.runkinds import BY_RUNTIME

    return BY_RUNTIME[plan.runtime]


# ------------------------------------------------------------------ on the cluster


def apply(
    cluster: Cluster,
    plan: RunPlan,
    rendered: RenderedRun | None = None,
    *,
    rehearse_seconds: float | None = None,
    resume: bool = False,
    store: Store | None = None,
    spec: EnvSpec | None = None,
) -> Submission:
    """Server-side apply the run (``rendered``: its ``render``, made here if not given), unless the very same run is already there.

    With ``spec``, a run that reads a dataset has it checked first in the cluster's buckets
    (``data_check``): a dataset the run could not read is refused before anything is applied.
    So is a checkpoint to start from (``--load-parameters``) that is not there or not the
    run's model (``parameters_check``), and a Secret the run reads that is not there
    (``secrets_check``).

    On a cluster whose context has a hook (the local cluster) the objects are decorated
    first and stamped again with their digest; ``rehearse_seconds`` is refused elsewhere.
    Another run under the name is refused (``--name``) before anything is applied, on the
    cluster and in the checkpoint directory (``workloads.runs.identity``: ``resume`` asks
    for another run's checkpoints on purpose; ``store`` is that directory, by default the
    run's output directory in its bucket, or the bucket the cluster's hook provides).
    """
    from workloads.runs import identity

    if resume and not identity.resumable(plan):
        raise FieldError("--resume", f"run {plan.name} ({plan.program.recipe}) saves no checkpoints, so there is nothing to resume", "drop --resume")
    rendered = render(plan) if rendered is None else rendered
    objects = list(rendered.objects)
    digest = rendered.digest if rendered.stamped else None  # None: the objects changed since the render
    context = getattr(cluster, "context", None)
    hook = hooks.for_context(context)
    note = ""
    if hook is None:
        if rehearse_seconds is not None:
            raise FieldError(
                "--rehearse-seconds",
                f"the context is {context!r}, not the local cluster's ({', '.join(hooks.registry())})",
                "drop it: a real cluster runs as long as the run takes",
            )
    else:
        objects = hook.decorate(objects, plan, seconds=rehearse_seconds)
        digest = None
        note = hook.note(plan, seconds=rehearse_seconds)
    objects = _checked(cluster, plan, objects, digest)
    if isinstance(objects, ExistingRun):
        return Submission(plan, existing=objects, note=note)
    secrets = ""
    if not any((o.get("spec") or {}).get("managedBy") for o in objects):  # a fleet's manager runs nothing itself
        capability_check(cluster, plan)
        secrets = secrets_check(cluster, plan)
    facts = data_check(cluster, plan, spec) if spec is not None else None
    if plan.program.load_parameters is not None:
        parameters_check(cluster, plan)
    verdict = None
    if identity.guarded(plan):
        verdict = identity.claim(store or checkpoint_store(cluster, plan), plan, resume=resume, submission=rendered.digest)
    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    return Submission(plan, applied=tuple(objects), note=note, checkpoints=verdict, dataset_access=getattr(facts, "access_note", ""), secrets=secrets)


def capability_check(cluster: Cluster, plan: RunPlan) -> None:
    """What the plan needs of the cluster beyond queues and nodes (``workloads.cluster.capabilities``), refused before anything is applied."""
    from workloads.cluster import capabilities

    if plan.policy.multi_tier is not None and (problem := capabilities.multi_tier_problem(cluster)):
        raise FieldError(
            "--multi-tier-checkpointing",
            problem,
            "declare tpu_pools[].multi_tier_checkpointing in the spec and run python -m infra deploy (the stack turns the add-on on), or drop it",
        )
    if plan.policy.restart == IN_PLACE and (problem := capabilities.in_place_problem(cluster, plan.target.namespace)):
        raise FieldError(
            "--restart",
            problem,
            "install JobSet v0.11.0 or later with its InPlaceRestart gate on (the provision pipeline does, from recovery.restart), or pass --restart recreate",
        )


def secrets_check(cluster: Cluster, plan: RunPlan) -> str:
    """Each Secret the run's containers read (``--secret-env``, a recipe's ``secret_env``) asked for in the run's namespace.

    One that is not there is refused before anything is applied: on GKE the pods would wait in
    CreateContainerConfigError with the slice held. Only its metadata is asked for, never its
    values, so whether it holds KEY is not checked. Returns a warning when the caller may not
    read Secrets there (not proven either way); "" otherwise.
    """
    from toolkit.errors import Forbidden
    from toolkit.wording import listing

    refs = plan.program.secret_env
    if not refs:
        return ""
    info, ns, unknown = cluster.resource("v1", "Secret"), plan.target.namespace, []
    for secret in sorted({r.secret for r in refs}):
        try:
            found = cluster.metadata(info, secret, ns)
        except Forbidden:
            unknown.append(secret)
            continue
        if found is None:
            readers = [r.name for r in refs if r.secret == secret]
            who = f"{listing(readers)} {'reads' if len(readers) == 1 else 'read'} it"
            # Names and keys passed secret_env's checks (DNS-1123 names, [-._a-zA-Z0-9] keys): safe in a shell line.
            literals = " ".join(f"--from-literal={k}=..." for k in dict.fromkeys(r.key for r in refs if r.secret == secret))
            raise FieldError(
                "--secret-env",
                f"the Secret {secret} ({who}) does not exist in namespace {ns}",
                f"create it first (kubectl create secret generic {secret} -n {ns} {literals}), or name a Secret that exists",
            )
    if not unknown:
        return ""
    return f"cannot check that the Secret(s) {listing(unknown)} exist in namespace {ns} (not allowed to get secrets there); a missing one holds the pods in CreateContainerConfigError"


def data_check(cluster: Cluster, plan: RunPlan, spec: EnvSpec) -> Any:
    """The run's dataset checked in the buckets its cluster's runs read (``workloads.data.checks``); None without one.

    Raises the SpecError naming the dataset's field to fix: a bucket that is not there or
    that the team's identity may not read, no files the run's glob would see, files in
    another format, a missing tokenizer file.
    """
    d = plan.program.dataset
    if d is None:
        return None
    from infra import access
    from workloads.data import checks

    return checks.check_dataset(_buckets(cluster, spec.project), spec, d, access.run_member(spec, spec.team(plan.target.team), False))


def parameters_check(cluster: Cluster, plan: RunPlan) -> Any:
    """The checkpoint the run starts from (``--load-parameters``), in the buckets its cluster's runs read: there, a
    checkpoint, of the run's model (``workloads.runs.load_parameters``); a FieldError naming the flag otherwise."""
    from workloads.runs import load_parameters

    assert plan.program.load_parameters is not None
    return load_parameters.on_cluster(plan.program.load_parameters, _buckets(cluster))


def parameters_note(plan: RunPlan) -> str | None:
    """What a real submit checks about ``--load-parameters``, for ``--dry-run`` (None: the run starts from fresh weights)."""
    lp = plan.program.load_parameters
    if lp is None:
        return None
    return f"would check {lp.path} holds a MaxText checkpoint of {lp.describe()} before applying"


def _buckets(cluster: Cluster, project: str | None = None) -> Any:
    """The Cloud Storage client of the buckets the cluster's runs use (its hook's server, else Cloud Storage)."""
    return hooks.storage_client(hooks.for_context(getattr(cluster, "context", None)), cluster, project)


def checkpoint_store(cluster: Cluster, plan: RunPlan) -> Store:
    """The run's output directory: in the buckets its cluster's runs write (the local cluster's own, else Cloud Storage;
    ``gcs`` and ``gcsfuse`` storage alike), or on the team's Lustre, through a helper pod on the cluster."""
    from workloads.runs.identity import GcsStore, lustre_dir

    rel = lustre_dir(plan)
    if rel is not None:
        from workloads.runs.volume_store import Volume, VolumeStore

        st = plan.policy.checkpoint_storage
        assert st is not None and st.claim is not None
        location = st.location.removesuffix(f"{plan.target.namespace}/")
        return VolumeStore(cluster, Volume(plan.target.namespace, st.claim, st.mount_dir, location, plan.target.run_as_user), rel)
    assert plan.program.output_dir is not None
    return GcsStore(_buckets(cluster), plan.program.output_dir)


def checkpoint_check(plan: RunPlan, *, resume: bool = False) -> str | None:
    """What a real submit checks about the run's checkpoint directory, for ``--dry-run`` (None: the run keeps no checkpoints)."""
    from workloads.runs.identity import CHECKPOINTS, IDENTITY, guarded, resumable

    if resume and not resumable(plan):
        raise FieldError("--resume", f"run {plan.name} ({plan.program.recipe}) saves no checkpoints, so there is nothing to resume", "drop --resume")
    if not guarded(plan):
        return None
    ckpt = plan.checkpoint_dir or f"{plan.program.output_dir}{CHECKPOINTS}"
    where = ckpt.removesuffix(CHECKPOINTS)
    how = " (through a helper pod that mounts the team's Lustre claim)" if where.startswith("lustre:") else ""
    if resume:
        then = "continue from the checkpoints there (same model shape required; checkpoints no toolkit run recorded are read, not adopted)"
    else:
        then = "write the run's identity there, and refuse the submit if another run (or files it did not record) is there"
    return f"would check {where}{IDENTITY} and {where}{CHECKPOINTS}{how} before applying, {then}"


def _checked(cluster: Cluster, plan: RunPlan, objects: list[dict[str, Any]], digest: str | None) -> list[dict[str, Any]] | ExistingRun:
    """The objects stamped with their digest (workloads.render.submission), or the run already there under the name.

    ``digest``: the digest the objects already carry (as rendered); None when they changed since, and are stamped here.
    """
    from workloads.render import submission as resubmit

    ns = plan.target.namespace
    if digest is None:
        digest = resubmit.digest(objects)
        objects = resubmit.stamp(objects, run_kind(plan).kind, digest)
    found = cluster.find_run(ns, plan.name)
    verdict = resubmit.verdict(found[1] if found else None, objects, digest)
    if verdict == "new":
        return objects
    kind = found[0].kind
    if verdict != "same":
        why = "with different options" if verdict == "changed" else "and was not submitted by this toolkit"
        raise FieldError(
            "--name",
            f"{kind} {ns}/{plan.name} already exists {why}",
            f"pick another --name, or delete it first: python -m workloads delete {plan.name}",
        )
    status = cluster.run_status(ns, plan.name)
    return ExistingRun(kind, status.phase.value, status.message)


def wait(cluster: Cluster, plan: RunPlan, timeout: float = TIMEOUT_S, on_progress: Callable[[str], None] | None = None) -> AdmissionResult:
    """Wait until Kueue admits the run (or ``timeout`` seconds pass); ``on_progress`` gets each change of its Workload."""
    return cluster.wait_admitted(plan.target.namespace, plan.name, timeout=timeout, on_progress=on_progress, kind=run_kind(plan))


def submit(
    cluster: Cluster,
    plan: RunPlan,
    *,
    timeout: float | None = TIMEOUT_S,
    rehearse_seconds: float | None = None,
    resume: bool = False,
    on_progress: Callable[[str], None] | None = None,
    spec: EnvSpec | None = None,
) -> Submission:
    """``apply`` the run, then ``wait`` up to ``timeout`` seconds for its admission (None: do not wait)."""
    sub = apply(cluster, plan, rehearse_seconds=rehearse_seconds, resume=resume, spec=spec)
    if timeout is None or not sub.applied:
        return sub
    return replace(sub, admission=wait(cluster, plan, timeout, on_progress))
