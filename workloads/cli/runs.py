"""Commands that plan and start runs: ``recipes``, ``render``, ``submit``, ``queues apply``.

Each command loads the spec, plans and renders first (pure, and where every
user error is raised), and only then touches the file system or the cluster:
bad input leaves nothing written or applied. The clock and the random name
suffix are read here, at the edge, and passed into the planner.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from toolkit.clikit import OutputFormat, make_app, print_json
from toolkit.errors import ToolkitError
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app

if TYPE_CHECKING:
    from infra.spec import EnvSpec
    from workloads.planning.planner import RunPlan

queues_app = make_app("queues", "Kueue objects derived from the spec (flavors, queues, priorities).")
app.add_typer(queues_app, name="queues")

RecipeArg = Annotated[str, typer.Argument(help="recipe name (see `recipes`)", show_default=False)]
SlicesOpt = Annotated[Optional[int], typer.Option("--slices", help="number of TPU slices (default: the recipe's, 1 unless imported with --num-slices)")]
PoolOpt = Annotated[Optional[str], typer.Option("--pool", help="tpu_pools entry to run on (default: the recipe's preferred shape)")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="MaxText key=value; repeatable")]
StepsOpt = Annotated[Optional[int], typer.Option("--steps", help="training steps (default: the recipe's)")]
ImageOpt = Annotated[Optional[str], typer.Option("--image", help="container image with a tag or digest")]
TeamOpt = Annotated[Optional[str], typer.Option("--team", help="team (namespace, queue, service account); default the spec's first")]
PriorityOpt = Annotated[Optional[str], typer.Option("--priority", help="very-low, low, medium, high, very-high (default: the team's)")]
NameOpt = Annotated[Optional[str], typer.Option("--name", help="exact run name (default: <recipe>-<MMDD-HHMM>-<random>)")]
SuffixOpt = Annotated[Optional[str], typer.Option("--suffix", help="suffix for the run name instead of the time and random part")]
HostNetOpt = Annotated[
    bool,
    typer.Option(
        "--host-network/--no-host-network",
        help="hostNetwork pods: more DCN throughput, but they act as the TPU nodes' SA, not the team's "
        "(only for teams with host_network: true in the spec); default: pod network with the team's own identity",
    ),
]
RestartsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-restarts",
        help="whole-JobSet restarts after a failure that is neither a disruption (always restarted, free) nor a program error "
        "(exit 1, 2: fails at once); default by capacity: spot/flex-start 3, on-demand/reservation 1",
    ),
]
CheckpointEveryOpt = Annotated[
    Optional[float],
    typer.Option(
        "--checkpoint-every",
        metavar="MINUTES",
        help="minutes between checkpoints (MaxText recipes); default by capacity: spot 15, flex-start 30, on-demand/reservation 60",
    ),
]
RehearseOpt = Annotated[
    Optional[float],
    typer.Option(
        "--rehearse-seconds",
        min=0,
        metavar="SECONDS",
        help="local cluster only: how long the run's pods stay Running (default: the plan's estimated run time x the rehearsal time factor)",
    ),
]
RuntimeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--runtime",
        help="jobset (slices restart together), job (an Indexed Job + headless Service, one slice) or ray (a KubeRay RayJob); default: the recipe's first",
    ),
]
ProfileOpt = Annotated[
    Optional[int],
    typer.Option(
        "--profile",
        metavar="STEPS",
        help="record STEPS steps with MaxText's xplane profiler and upload them to the spec's Vertex AI TensorBoard "
        "(an experiment named after the run); traces also stay in <output>/<run>/tensorboard/",
    ),
]
ProfileStartOpt = Annotated[
    Optional[int],
    typer.Option("--profile-start", metavar="STEP", help="steps to skip before profiling (default 5: past compilation and warm-up)"),
]
TIMEOUT_S = 600.0


class NotAdmitted(ToolkitError):
    """Applied, but Kueue did not admit the run in time (or refused it)."""

    exit_code = 4


def _spec(path: Path | None) -> EnvSpec:
    from infra.spec import load_spec

    return load_spec(path)


def _random_suffix() -> str:
    import secrets  # imported here: it pulls in hmac/openssl, ~30 ms of every --help
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(3))


def _plan(
    recipe: str,
    spec: EnvSpec,
    *,
    slices: int | None,
    pool: str | None,
    sets: list[str] | None,
    steps: int | None,
    image: str | None,
    team: str | None,
    priority: str | None,
    name: str | None,
    suffix: str | None,
    host_network: bool,
    max_restarts: int | None,
    checkpoint_every: float | None = None,
    runtime: str | None = None,
    profile: int | None = None,
    profile_start: int | None = None,
) -> RunPlan:
    from workloads.planning.model import RUNTIME_RAY
    from workloads.planning.planner import Overrides, plan_run

    overrides = Overrides(
        slices=slices,
        pool=pool,
        sets=tuple(sets or ()),
        steps=steps,
        image=image,
        team=team,
        priority=priority,
        name=name,
        suffix=suffix,
        host_network=host_network,
        max_restarts=max_restarts,
        checkpoint_every=checkpoint_every,
        runtime=runtime,
        profile_steps=profile,
        profile_start=profile_start,
    )
    plan = plan_run(recipe, spec, overrides, now=datetime.now(UTC), rand=_random_suffix())
    if plan.runtime == RUNTIME_RAY and not spec.cluster.ray.enabled:
        # A warning, not a refusal: a cluster may run a KubeRay installed by hand (the local one does).
        typer.echo(
            "warning: --runtime ray: the spec leaves GKE's Ray operator off, so the cluster it builds cannot run a RayJob"
            " — set cluster.ray.enabled: true and deploy (or install KubeRay yourself)",
            err=True,
        )
    return plan


@app.command()
def recipes(output: Output = OutputFormat.text) -> None:
    """List the recipes that ship with the toolkit."""
    from workloads.planning.recipes import all_recipes, summary

    data = [summary(r) for r in all_recipes()]
    if output is OutputFormat.json:
        print_json(data)
        return
    width = max(len(d["name"]) for d in data)
    for d in data:
        shapes = ", ".join(d["shapes"]) or "any"
        typer.echo(f"{d['name']:<{width}}  {d['description']}  [shapes: {shapes}]")


@app.command("import-recipe")
def import_recipe(
    file: Annotated[Path, typer.Argument(help="a tpu-recipes run_recipe.sh, or a file holding an `xpk workload create` line", show_default=False)],
    name: Annotated[Optional[str], typer.Option("--name", help="recipe name (default: the model name and its quantization)")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="recipe file or directory (default: the user recipe directory, $TGK_RECIPES)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing recipe file")] = False,
    output: Output = OutputFormat.text,
) -> None:
    """Turn a tpu-recipes run script into a recipe that `submit` runs; report what it could not carry."""
    from toolkit.errors import FieldError
    from toolkit.paths import user_recipes_dir
    from workloads.planning.import_recipe import import_recipe as convert
    from workloads.planning.recipes import RECIPES_DIR, _recipe_files
    from workloads.render import yamlio

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FieldError("FILE", f"cannot read {file}: {getattr(e, 'strerror', None) or e}", "pass a readable run_recipe.sh") from None
    imported = convert(text, name=name, source=file.name)
    if imported.name in _recipe_files(RECIPES_DIR):
        raise FieldError("--name", f"{imported.name!r} is a recipe the toolkit ships (it would always win over this file)", "pass another --name")
    path = _recipe_path(out, imported.name)
    if path.exists() and not force:
        raise FieldError("--out", f"{path} exists", "pass --force to replace it, or another --name/--out")
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"# Imported by `python -m workloads import-recipe` from {file.name}.\n" + "".join(f"# not carried: {u}\n" for u in imported.unmapped)
    path.write_text(head + yamlio.dump(imported.recipe), encoding="utf-8")
    if output is OutputFormat.json:
        print_json(
            {
                "name": imported.name,
                "path": str(path),
                "device_type": imported.device_type,
                "slices": imported.slices,
                "unmapped": imported.unmapped,
                "recipe": imported.recipe,
            }
        )
        return
    typer.echo(str(path))
    for line in imported.unmapped:
        typer.echo(f"  {line}", err=True)
    typer.echo(
        f"run it with: python -m workloads submit {imported.name} --dry-run"
        + ("" if path.parent == user_recipes_dir() else f"  (with TGK_RECIPES={path.parent})"),
        err=True,
    )


def _recipe_path(out: Path | None, name: str) -> Path:
    """The file: ``--out`` as a file named ``<name>.yaml``, or a directory to put it in."""
    from toolkit.errors import FieldError
    from toolkit.paths import user_recipes_dir

    if out is None:
        return user_recipes_dir() / f"{name}.yaml"
    if out.suffix in (".yaml", ".yml") and not out.is_dir():
        if out.stem != name or out.suffix != ".yaml":
            raise FieldError(
                "--out", f"{out.name} must be named {name}.yaml (recipes are found by file name)", f"pass --out {out.parent / (name + '.yaml')} or a directory"
            )
        return out
    if out.exists() and not out.is_dir():
        raise FieldError("--out", f"{out} is a file that is not a recipe YAML", "pass a directory or NAME.yaml")
    return out / f"{name}.yaml"


@app.command()
def render(
    recipe: RecipeArg,
    out: Annotated[Path, typer.Option("--out", help="directory for base/ and overlays/<run>/")] = Path("runs"),
    slices: SlicesOpt = None,
    pool: PoolOpt = None,
    set_: SetOpt = None,
    steps: StepsOpt = None,
    image: ImageOpt = None,
    team: TeamOpt = None,
    priority: PriorityOpt = None,
    name: NameOpt = None,
    suffix: SuffixOpt = None,
    host_network: HostNetOpt = False,
    max_restarts: RestartsOpt = None,
    checkpoint_every: CheckpointEveryOpt = None,
    runtime: RuntimeOpt = None,
    profile: ProfileOpt = None,
    profile_start: ProfileStartOpt = None,
    spec: SpecOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Write a Kustomize tree for a run: base/<runtime>/ (shared by every run) and overlays/<run>/."""
    from workloads.render.kustomize import render as render_tree
    from workloads.render.kustomize import write_tree

    env = _spec(spec)
    plan = _plan(
        recipe,
        env,
        slices=slices,
        pool=pool,
        sets=set_,
        steps=steps,
        image=image,
        team=team,
        priority=priority,
        name=name,
        suffix=suffix,
        host_network=host_network,
        max_restarts=max_restarts,
        checkpoint_every=checkpoint_every,
        runtime=runtime,
        profile=profile,
        profile_start=profile_start,
    )
    files = render_tree(plan)
    written = write_tree(out, files)
    overlay = out / "overlays" / plan.name
    if output is OutputFormat.json:
        print_json({"run": plan.name, "overlay": str(overlay), "files": [str(p) for p in written], "plan": _summary(plan, env)})
        return
    for p in written:
        typer.echo(str(p))
    typer.echo(f"apply with: kustomize build {overlay} | kubectl apply --server-side -f -", err=True)
    _echo_cost(plan, env)


def _summary(plan: RunPlan, env: EnvSpec) -> dict:
    """The plan's summary with its estimated cost in every capacity mode (each price with its date)."""
    from infra.pricing import plan_cost

    cost = plan_cost(plan, env)
    return {**plan.summary(), "estimated_cost": None if cost is None else cost.to_dict()}


def _echo_cost(plan: RunPlan, env: EnvSpec) -> None:
    """The estimated cost, side by side for every capacity mode, on stderr (stdout stays the manifests/paths)."""
    from infra.pricing import plan_cost, plan_cost_lines

    for line in plan_cost_lines(plan, plan_cost(plan, env)):
        typer.echo(line, err=True)


def _print_objects(objects: list[dict], output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(objects)
    else:
        from workloads.render import yamlio

        typer.echo(yamlio.dump_all(objects), nl=False)


@app.command()
def submit(
    recipe: RecipeArg,
    slices: SlicesOpt = None,
    pool: PoolOpt = None,
    set_: SetOpt = None,
    steps: StepsOpt = None,
    image: ImageOpt = None,
    team: TeamOpt = None,
    priority: PriorityOpt = None,
    name: NameOpt = None,
    suffix: SuffixOpt = None,
    host_network: HostNetOpt = False,
    max_restarts: RestartsOpt = None,
    checkpoint_every: CheckpointEveryOpt = None,
    runtime: RuntimeOpt = None,
    profile: ProfileOpt = None,
    profile_start: ProfileStartOpt = None,
    rehearse_seconds: RehearseOpt = None,
    dry_run: DryRun = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="return after applying; do not wait for Kueue admission")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0, help="seconds to wait for admission")] = TIMEOUT_S,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    spec: SpecOpt = None,
) -> None:
    """Plan a run and apply what `kustomize build` of its overlay gives (server-side); wait until Kueue admits it."""
    from toolkit.names import TGK_FIELD_MANAGER
    from workloads.render.kustomize import build_overlay
    from workloads.render.kustomize import render as render_tree

    env = _spec(spec)
    plan = _plan(
        recipe,
        env,
        slices=slices,
        pool=pool,
        sets=set_,
        steps=steps,
        image=image,
        team=team,
        priority=priority,
        name=name,
        suffix=suffix,
        host_network=host_network,
        max_restarts=max_restarts,
        checkpoint_every=checkpoint_every,
        runtime=runtime,
        profile=profile,
        profile_start=profile_start,
    )
    # The overlay `render` would write, built from its own text: what is applied is
    # exactly what `kustomize build overlays/<run>` of a rendered tree gives.
    objects = build_overlay(render_tree(plan), plan.name)
    if dry_run:
        _print_objects(objects, output)
        if output is OutputFormat.text:
            _echo_cost(plan, env)
        return

    from workloads.cluster.runs import Cluster

    cluster = Cluster.connect(kubeconfig, context)
    objects, rehearsal_note = _rehearsal(objects, plan, cluster, rehearse_seconds)
    objects = _resubmission(cluster, plan, objects, output)
    if objects is None:
        return
    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    t = plan.target
    if output is OutputFormat.text:
        typer.echo(
            f"submitted {t.namespace}/{plan.name}: {plan.program.recipe} on {t.slices} x {t.shape.generation.name} {t.shape.topology} "
            f"({t.nodes} pods, {t.chips} chips), queue {t.local_queue}, priority {t.priority}",
            err=True,
        )
        typer.echo(f"  {_resilience(plan)}", err=True)
        if plan.program.profile:
            typer.echo(f"  {_profile_note(plan)}", err=True)
        _echo_cost(plan, env)
        if rehearsal_note:
            typer.echo(f"  {rehearsal_note}", err=True)
    result = None
    if not no_wait:
        result = _wait(cluster, plan, timeout, quiet=output is OutputFormat.json)
    if output is OutputFormat.json:
        data: dict = {"run": plan.name, "namespace": t.namespace, "applied": [_ref(o) for o in objects], "plan": _summary(plan, env)}
        if result is not None:
            data["admission"] = {
                "admitted": result.admitted,
                "workload": result.workload,
                "state": result.state,
                "flavors": result.flavors,
                "reason": result.reason,
                "waited_seconds": round(result.waited_seconds, 1),
            }
        print_json(data)
    elif result is not None and result.admitted:
        typer.echo(f"admitted after {result.waited_seconds:.0f}s (workload {result.workload}, flavors {result.flavors})")
    if result is not None and not result.admitted:
        raise NotAdmitted(
            f"{t.namespace}/{plan.name} not admitted after {result.waited_seconds:.0f}s: {result.state} {result.reason}".rstrip()
            + " — it stays queued; follow it with `python -m workloads status`"
        )


def _resubmission(cluster, plan: RunPlan, objects: list[dict], output: OutputFormat) -> list[dict] | None:
    """The objects stamped with their digest; None when the very same run is already there (reported, not applied).

    The rendered objects carry a digest (workloads.render.submission); on the local cluster it
    is taken again after the rehearsal's decoration. Another run under the name is refused
    before anything is applied.
    """
    from toolkit.errors import FieldError
    from workloads.render import submission as resubmit

    ns = plan.target.namespace
    objects = resubmit.stamp(objects, _kind(plan).kind)
    found = cluster.find_run(ns, plan.name)
    verdict = resubmit.verdict(found[1] if found else None, objects)
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
    if output is OutputFormat.json:
        print_json({"run": plan.name, "namespace": ns, "applied": [], "existing": True, "phase": status.phase.value, "message": status.message})
    else:
        typer.echo(f"{kind} {ns}/{plan.name} was already submitted with these options; nothing applied. It is {status.phase.value}: {status.message}", err=True)
        typer.echo(f"  follow it with: python -m workloads status {plan.name}", err=True)
    return None


def _rehearsal(objects: list[dict], plan: RunPlan, cluster, seconds: float | None) -> tuple[list[dict], str]:
    """On the local cluster (its kubeconfig context) the run becomes a rehearsal; elsewhere it is applied as rendered."""
    from toolkit.errors import FieldError
    from workloads.local import CONTEXT

    context = getattr(cluster, "context", None)
    if context != CONTEXT:
        if seconds is not None:
            raise FieldError(
                "--rehearse-seconds",
                f"the context is {context!r}, not the local cluster's ({CONTEXT})",
                "drop it: a real cluster runs as long as the run takes",
            )
        return objects, ""
    from workloads.local import rehearsal

    return rehearsal.decorate(objects, plan, seconds=seconds), rehearsal.summary(plan, seconds)


def _resilience(plan: RunPlan) -> str:
    """One line: how the run survives disruptions, and where it resumes from."""
    from workloads.planning.model import RUNTIME_JOB, RUNTIME_RAY

    pol, c = plan.policy, plan.policy.checkpoint
    restarts = f"disruptions restart it (free), other failures up to {pol.max_restarts}x, exit codes {', '.join(map(str, pol.program_error_exit_codes))} end it"
    if plan.runtime == RUNTIME_JOB:
        restarts = f"a plain Job: any pod failure ends it (only a Kueue preemption restarts it whole); resubmit with --name {plan.name} to resume"
    elif plan.runtime == RUNTIME_RAY:
        restarts = f"a RayJob: KubeRay retries a failed job up to {pol.max_restarts}x, each time with a new RayCluster"
    if c is None:
        return f"{restarts}; no checkpoints (a restart begins at step 0)"
    return f"{restarts}; checkpoints every {c.every_minutes:g} min ({c.period_steps} steps) to {plan.program.output_dir}checkpoints/"


def _profile_note(plan: RunPlan) -> str:
    p = plan.program.profile
    assert p is not None
    where = f"uploaded to Vertex AI TensorBoard {p.tensorboard!r} (experiment {plan.name})" if p.tensorboard else "no TensorBoard in the spec: not uploaded"
    return f"profiling steps {p.first_step}-{p.first_step + p.steps - 1} (xplane) to {plan.program.output_dir}tensorboard/, {where}"


def _ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"kind": obj["kind"], "name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})}


def _kind(plan: RunPlan):
    from workloads.cluster.runkinds import BY_RUNTIME

    return BY_RUNTIME[plan.runtime]


def _wait(cluster, plan: RunPlan, timeout: float, *, quiet: bool):
    """Wait for admission with a live status line on stderr (plain lines when not a terminal)."""
    import sys

    if quiet or not sys.stderr.isatty():

        def say(msg: str) -> None:
            if not quiet:
                typer.echo(f"  {msg}", err=True)

        return cluster.wait_admitted(plan.target.namespace, plan.name, timeout=timeout, on_progress=say, kind=_kind(plan))

    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"waiting for Kueue to admit {plan.name} (queue {plan.target.local_queue})") as status:

        def progress(msg: str) -> None:
            status.update(f"{plan.name}: {msg}")

        return cluster.wait_admitted(plan.target.namespace, plan.name, timeout=timeout, on_progress=progress, kind=_kind(plan))


@queues_app.command("apply")
def queues_apply(
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    spec: SpecOpt = None,
) -> None:
    """Apply PriorityClasses, team Namespaces/KSAs, ResourceFlavors, ClusterQueues and LocalQueues (+ xpk's objects, the DCN network's)."""
    from toolkit.names import TGK_FIELD_MANAGER
    from workloads.render.kueue import cluster_objects

    spec_obj = _spec(spec)
    objects = cluster_objects(spec_obj)
    if dry_run:
        _print_objects(objects, output)
        return
    from workloads.cluster.runs import Cluster

    cluster = Cluster.connect(kubeconfig, context)
    cluster.apply(objects, field_manager=TGK_FIELD_MANAGER)
    if output is OutputFormat.json:
        print_json({"applied": [_ref(o) for o in objects]})
    else:
        for o in objects:
            ref = _ref(o)
            typer.echo(f"applied {ref['kind']} {ref.get('namespace', '') + '/' if ref.get('namespace') else ''}{ref['name']}")


@queues_app.command("manager-config")
def queues_manager_config(
    merge: Annotated[
        Optional[Path],
        typer.Option("--merge", help="Kueue controller configuration YAML to lay the spec's settings over (e.g. the release's kueue-manager-config)"),
    ] = None,
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
) -> None:
    """Kueue's controller settings from the spec (waitForPodsReady), alone or merged into a configuration file."""
    from toolkit.errors import FieldError
    from workloads.render import yamlio
    from workloads.render.kueue import manager_settings, merge_manager_config

    settings = manager_settings(_spec(spec))
    config: dict = settings
    if merge is not None:
        try:
            base = yamlio.load(merge.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise FieldError("--merge", f"cannot read {merge}: {getattr(e, 'strerror', None) or e}", "pass the Kueue configuration YAML file") from None
        except Exception as e:  # a YAML syntax error
            raise FieldError("--merge", f"{merge} is not YAML: {str(e).splitlines()[0]}", "pass the Kueue configuration YAML file") from None
        if not isinstance(base, dict) or base.get("kind") != "Configuration":
            raise FieldError("--merge", f"{merge} is not a Kueue Configuration", "pass the controller_manager_config.yaml of kueue-manager-config")
        config = merge_manager_config(base, settings)
    if output is OutputFormat.json:
        print_json(config)
    else:
        typer.echo(yamlio.dump(config), nl=False)
