"""Commands that plan and start runs: ``recipes``, ``import-recipe``, ``render``, ``submit``, ``queues``.

Parse, call, print: the flow (plan -> render -> the cluster's hook -> resubmission check ->
apply -> wait) is the run service's (``workloads.runs``), and ``queues``' is
``workloads.runs.queues``, ``import-recipe``'s ``workloads.runs.recipe_import``; each returns
data, and this module turns flags into their arguments and their results into text or JSON.
The ``--spec`` file (an environment spec, or a fleet file for ``submit`` through its manager)
is read once, here at the edge, and passed down as objects; a run is rendered once
(``runs.render``) and that render is what is printed, written or applied. The run-planning
options are the fields of ``Overrides`` (``workloads.planning.overrides``), given to
``render`` and ``submit`` by ``run_options``. Bad input is raised by the service before
anything is written or applied.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, get_args, get_origin, get_type_hints

import typer

from toolkit.clikit import OutputFormat, make_app, option_group, print_json
from toolkit.errors import ToolkitError
from workloads.cli import ContextOpt, DryRun, KubeconfigOpt, Output, SpecOpt, app
from workloads.planning.defaults import MAX_REHEARSAL_S, MAX_WAIT_S, SUBMIT_TIMEOUT_S
from workloads.planning.overrides import Overrides, flag_of

if TYPE_CHECKING:
    from infra.fleet import Fleet
    from infra.spec import EnvSpec
    from workloads.planning.model import RunPlan
    from workloads.runs import Submission

queues_app = make_app("queues", "Kueue objects derived from the spec (flavors, queues, priorities).")
app.add_typer(queues_app, name="queues")

RecipeArg = Annotated[str, typer.Argument(help="recipe name (see `recipes`)", show_default=False)]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="continue from the checkpoints already in the run's directory (<bucket>/<name>/checkpoints/), though another submission wrote them; the model's shape must be the same",
    ),
]
RehearseOpt = Annotated[
    Optional[float],
    typer.Option(
        "--rehearse-seconds",
        min=0,
        max=MAX_REHEARSAL_S,
        metavar="SECONDS",
        help="local cluster only: how long the run's pods stay Running (default: the plan's estimated run time x the rehearsal time factor)",
    ),
]


def flag_options(cls: type, name: str = "options") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator giving a command one Typer option per field of ``cls`` that has a ``Flag``, in place of its parameter ``name``.

    The option's type follows the field's: ``X | None`` is an optional X, ``bool`` a switch
    (``--x/--no-x``), ``tuple[X, ...]`` a repeatable option; the command receives ``cls(...)``.
    """
    hints = get_type_hints(cls)
    params: list[inspect.Parameter] = []
    repeated: set[str] = set()
    for f in fields(cls):
        flag = flag_of(f)
        if flag is None:
            continue
        kind, default = hints[f.name], f.default
        if get_origin(kind) is tuple:  # a list on the command line
            kind, default = Optional[list[get_args(kind)[0]]], None
            repeated.add(f.name)
        elif kind is not bool:
            kind = Optional[next(a for a in get_args(kind) if a is not type(None))]
        option = typer.Option(flag.decls, help=flag.help, metavar=flag.metavar)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]))

    def build(**values: Any) -> Any:
        return cls(**{k: tuple(v or ()) if k in repeated else v for k, v in values.items()})

    return option_group(name, params, build)


# Gives `render` and `submit` the run-planning options in place of ``options: Overrides = NO_OVERRIDES``.
run_options = flag_options(Overrides)
NO_OVERRIDES = Overrides()


class NotAdmitted(ToolkitError):
    """Applied, but Kueue did not admit the run in time (or refused it)."""

    exit_code = 4


def _spec(path: Path | None) -> tuple[EnvSpec, Fleet | None]:
    """``--spec``, read once: the environment to plan against, and the fleet when the file is one (its manager's environment)."""
    from infra.fleet import Fleet, load_spec_or_fleet

    found = load_spec_or_fleet(path)
    return (found.manager_env(), found) if isinstance(found, Fleet) else (found, None)


def _plan(recipe: str, spec: EnvSpec, options: Overrides) -> RunPlan:
    """The service's plan, its warnings on stderr."""
    from workloads import runs

    plan = runs.plan(recipe, spec, options)
    for line in runs.warnings(plan, spec):
        typer.echo(f"warning: {line}", err=True)
    return plan


@app.command()
def recipes(output: Output = OutputFormat.text) -> None:
    """List the recipes: those that ship with the toolkit, and yours (a file that does not load is named on stderr)."""
    from workloads.planning.recipes import listable_recipes, summary

    good, broken = listable_recipes()
    for line in broken:
        typer.echo(f"warning: {line}", err=True)
    data = [summary(r) for r in good]
    if output is OutputFormat.json:
        print_json(data)
        return
    width = max(len(d["name"]) for d in data)
    for d in data:
        shapes = ", ".join(d["shapes"]) or "any"
        published = f" [published: {d['published']['step_seconds']:g} s/step]" if "published" in d else ""
        typer.echo(f"{d['name']:<{width}}  {d['description']}  [shapes: {shapes}]{published}")


@app.command("import-recipe")
def import_recipe(
    file: Annotated[
        Path,
        typer.Argument(
            help="a tpu-recipes run script (cluster_toolkit/, xpk/ or flat), a k8s_manifest.yaml, or a file holding an `xpk workload create` line",
            show_default=False,
        ),
    ],
    name: Annotated[Optional[str], typer.Option("--name", help="recipe name (default: the model name and its quantization)")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="recipe file or directory (default: the user recipe directory, $TGK_RECIPES)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing recipe file")] = False,
    maxtext_repo: Annotated[
        Optional[Path],
        typer.Option("--maxtext-repo", help="the MaxText checkout a benchmark_runner script runs from (its benchmarks/ configs are read, never run)"),
    ] = None,
    output: Output = OutputFormat.text,
) -> None:
    """Turn a tpu-recipes run script into a recipe that `submit` runs; report what it could not carry."""
    from toolkit.inputfile import RUN_SCRIPT, read_input_text
    from toolkit.paths import user_recipes_dir
    from workloads.runs.recipe_import import import_recipe as import_into_file

    text = read_input_text(file, RUN_SCRIPT, "FILE")  # a regular file of at most 1 MiB: never a FIFO or /dev/zero
    done = import_into_file(text, script=file, name=name, out=out, force=force, maxtext_repo=maxtext_repo)
    imported, path = done.imported, done.path
    if output is OutputFormat.json:
        print_json(
            {
                "name": imported.name,
                "path": str(path),
                "device_type": imported.device_type,
                "slices": imported.slices,
                "carried": imported.carried,
                "unmapped": imported.unmapped,
                "recipe": imported.recipe,
            }
        )
        return
    typer.echo(str(path))
    for line in imported.unmapped:
        typer.echo(f"  {line}", err=True)
    if "published" in imported.recipe:
        from workloads.planning.recipe_model import PublishedFigure

        typer.echo(f"published step time: {PublishedFigure.model_validate(imported.recipe['published']).line()}", err=True)
    typer.echo(
        f"run it with: python -m workloads submit {imported.name} --dry-run"
        + ("" if path.parent == user_recipes_dir() else f"  (with TGK_RECIPES={path.parent})"),
        err=True,
    )


@app.command()
@run_options
def render(
    recipe: RecipeArg,
    out: Annotated[Path, typer.Option("--out", help="directory for base/ and overlays/<run>/")] = Path("runs"),
    options: Overrides = NO_OVERRIDES,
    spec: SpecOpt = None,
    output: Output = OutputFormat.text,
) -> None:
    """Write a Kustomize tree for a run: base/<runtime>/ (shared by every run) and overlays/<run>/."""
    from workloads import runs

    env, _ = _spec(spec)
    plan = _plan(recipe, env, options)
    written = runs.write(out, runs.render(plan))
    overlay = out / "overlays" / plan.name
    if output is OutputFormat.json:
        print_json({"run": plan.name, "overlay": str(overlay), "files": [str(p) for p in written], "plan": runs.summary(plan, env)})
        return
    for p in written:
        typer.echo(str(p))
    typer.echo(f"apply with: kustomize build {overlay} | kubectl apply --server-side -f -", err=True)
    _echo_storage(plan)
    _echo_estimates(plan)
    _echo_cost(plan, env)


def _echo_storage(plan: RunPlan) -> None:
    """Where the run reads its data and keeps its multi-tier checkpoints, with the RAM disk the planner derived (stderr)."""
    from workloads.planning.dataset import mount_dir

    d, m = plan.program.dataset, plan.policy.multi_tier
    if d is not None:
        typer.echo(
            f"dataset {d.name}: gs://{d.bucket}/{d.object_prefix()} mounted read-only at {mount_dir(d)} (GCS FUSE), {d.format.value} read by Grain", err=True
        )
    st = plan.policy.checkpoint_storage
    if st is not None:
        typer.echo(
            f"checkpoint storage {st.kind}: {st.location} mounted read-write at {st.mount_dir} (MaxText base_output_directory={st.base_output})", err=True
        )
    if m is not None:
        f = m.as_dict()
        typer.echo(
            f"multi-tier checkpointing: RAM disk {f['ramdisk_gib_needed']:g} GiB per VM needed (12 B x {m.params / 1e9:.2f}B params x 2 / "
            f"{m.hosts_per_slice} hosts + 15%), {f['ramdisk_gib_configured']:g} GiB configured, {f['vm_memory_gib']:g} GiB VM memory; "
            f"local saves every {m.local_period_steps} steps to {m.directory}, backed up every {m.backup_minutes} min",
            err=True,
        )


def _echo_estimates(plan: RunPlan) -> None:
    """The plan's HBM and step-time estimates, each with the error measured for runs of its kind (stderr)."""
    p = plan.program
    if p.sizing is None or p.estimated_step_seconds is None:
        return
    h = p.sizing.hbm
    parts = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in h.parts().items())
    typer.echo(
        f"estimated HBM: {h.total_bytes / 2**30:.1f} GiB per device of {h.available_bytes / 2**30:g} ({parts} GiB), floor {h.floor_bytes / 2**30:.1f} GiB;"
        f" {h.range_text()}",
        err=True,
    )
    if p.step_error is None:
        measured = f"no published step time measures {plan.target.shape.generation.name}"
    else:
        measured = f"published {p.step_kind} runs took {p.step_error[0]:g}-{p.step_error[1]:g}x this model's estimate (leave-one-out)"
    typer.echo(
        f"estimated step: {p.estimated_step_seconds:.3g} s ({p.step_kind}, {100 * (p.estimated_mfu or 0):.0f}% MFU as MaxText counts it); {measured}", err=True
    )


def _echo_cost(plan: RunPlan, env: EnvSpec) -> None:
    """The estimated cost, side by side for every capacity mode, on stderr (stdout stays the manifests/paths);
    beside it the step time the recipe's publisher measured, when the recipe carries one."""
    from infra.pricing import plan_cost, plan_cost_lines
    from workloads.planning.recipes import load_recipe

    for line in plan_cost_lines(plan, plan_cost(plan, env)):
        typer.echo(line, err=True)
    recipe = load_recipe(plan.program.recipe)
    if recipe.published is not None and plan.program.estimated_step_seconds:
        t = plan.target
        mine = f"{t.shape.key} x {t.slices}"
        theirs = f"{recipe.shapes[0]} x {recipe.slices}" if recipe.shapes else mine
        where = "" if theirs == mine else f"; measured on {theirs}, this run is on {mine}"
        typer.echo(f"published step time: {recipe.published.line()} (the plan estimates {plan.program.estimated_step_seconds:.3g} s/step{where})", err=True)


def _print_objects(objects: list[dict], output: OutputFormat) -> None:
    if output is OutputFormat.json:
        print_json(objects)
    else:
        from workloads.render import yamlio

        typer.echo(yamlio.dump_all(objects), nl=False)


@app.command()
@run_options
def submit(
    recipe: RecipeArg,
    options: Overrides = NO_OVERRIDES,
    rehearse_seconds: RehearseOpt = None,
    resume: ResumeOpt = False,
    dry_run: DryRun = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="return after applying; do not wait for Kueue admission")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0, max=MAX_WAIT_S, help="seconds to wait for admission")] = SUBMIT_TIMEOUT_S,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    spec: SpecOpt = None,
) -> None:
    """Plan a run and apply what `kustomize build` of its overlay gives (server-side); wait until Kueue admits it."""
    from workloads import runs

    env, fleet = _spec(spec)
    if fleet is not None:
        runs.fleet_options(options)  # what one worker has and another does not, refused before planning
    plan = _plan(recipe, env, options)
    rendered = runs.render(plan)
    if fleet is not None:  # submitted to a fleet's manager: MultiKueue runs it on a worker
        rendered = runs.through_fleet(plan, rendered)
    check = runs.checkpoint_check(plan, resume=resume)
    if dry_run:
        _print_objects(list(rendered.objects), output)
        if output is OutputFormat.text:
            _echo_storage(plan)
            _echo_estimates(plan)
            _echo_cost(plan, env)
            if check:
                typer.echo(check, err=True)
            if runs.parameters_note(plan):
                typer.echo(runs.parameters_note(plan), err=True)
        return

    from workloads.cluster.client import Cluster

    if fleet is not None:  # the manager, as the fleet file reaches it (as list and queues status do)
        cluster = Cluster.connect(fleet.manager_kubeconfig or kubeconfig, context or fleet.manager_context)
    else:
        cluster = Cluster.connect(kubeconfig, context)
    sub = runs.apply(cluster, plan, rendered, rehearse_seconds=rehearse_seconds, resume=resume, spec=env)
    t = plan.target
    if sub.existing is not None:
        _echo_existing(sub, output)
        return
    if output is OutputFormat.text:
        typer.echo(
            f"submitted {t.namespace}/{plan.name}: {plan.program.recipe} on {t.slices} x {t.shape.generation.name} {t.shape.topology} "
            f"({t.nodes} pods, {t.chips} chips), queue {t.local_queue}, priority {t.priority}",
            err=True,
        )
        typer.echo(f"  {_resilience(plan)}", err=True)
        if plan.program.profile:
            typer.echo(f"  {_profile_note(plan)}", err=True)
        _echo_storage(plan)
        _echo_cost(plan, env)
        if sub.note:
            typer.echo(f"  {sub.note}", err=True)
        if sub.checkpoints:
            typer.echo(f"  {sub.checkpoints.line()}", err=True)
    if sub.dataset_access:
        typer.echo(f"warning: dataset {plan.program.dataset.name if plan.program.dataset else ''}: {sub.dataset_access}", err=True)
    if sub.secrets:
        typer.echo(f"warning: --secret-env: {sub.secrets}", err=True)
    result = None
    if not no_wait:
        result = _wait(cluster, plan, timeout, quiet=output is OutputFormat.json)
    if output is OutputFormat.json:
        data: dict = {"run": plan.name, "namespace": t.namespace, "applied": sub.refs, "plan": runs.summary(plan, env)}
        if sub.checkpoints:
            data["checkpoints"] = {"state": sub.checkpoints.state, "directory": sub.checkpoints.where, "restorable": sub.checkpoints.checkpoints}
        if sub.dataset_access:
            data["dataset_access"] = sub.dataset_access
        if sub.secrets:
            data["secrets"] = sub.secrets
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


def _echo_existing(sub: Submission, output: OutputFormat) -> None:
    """The very same run was already submitted: say where it is instead of applying it again."""
    plan, e = sub.plan, sub.existing
    ns = plan.target.namespace
    if output is OutputFormat.json:
        print_json({"run": plan.name, "namespace": ns, "applied": [], "existing": True, "phase": e.phase, "message": e.message})
    else:
        typer.echo(f"{e.kind} {ns}/{plan.name} was already submitted with these options; nothing applied. It is {e.phase}: {e.message}", err=True)
        typer.echo(f"  follow it with: python -m workloads status {plan.name}", err=True)


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
    return f"{restarts}; checkpoints every {c.every_minutes:g} min ({c.period_steps} steps) to {plan.checkpoint_dir}"


def _profile_note(plan: RunPlan) -> str:
    p = plan.program.profile
    assert p is not None
    where = f"uploaded to Vertex AI TensorBoard {p.tensorboard!r} (experiment {p.experiment})" if p.tensorboard else "no TensorBoard in the spec: not uploaded"
    return f"profiling steps {p.first_step}-{p.first_step + p.steps - 1} (xplane) to {plan.program.output_dir}tensorboard/, {where}"


def _wait(cluster, plan: RunPlan, timeout: float, *, quiet: bool):
    """Wait for admission with a live status line on stderr (plain lines when not a terminal)."""
    import sys

    from workloads import runs

    if quiet or not sys.stderr.isatty():

        def say(msg: str) -> None:
            if not quiet:
                typer.echo(f"  {msg}", err=True)

        return runs.wait(cluster, plan, timeout, on_progress=say)

    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"waiting for Kueue to admit {plan.name} (queue {plan.target.local_queue})") as status:

        def progress(msg: str) -> None:
            status.update(f"{plan.name}: {msg}")

        return runs.wait(cluster, plan, timeout, on_progress=progress)


@queues_app.command("apply")
def queues_apply(
    dry_run: DryRun = False,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    spec: SpecOpt = None,
    fleet: Annotated[
        Optional[Path],
        typer.Option(
            "--fleet",
            help="a fleet file (see README, 'A fleet of clusters'): each worker's objects and the manager's identity there, "
            "then the manager's kubeconfig Secrets and its MultiKueue queues; each member through its `context`",
        ),
    ] = None,
) -> None:
    """Apply PriorityClasses, team Namespaces/KSAs/NetworkPolicies/priority policies, ResourceFlavors, ClusterQueues and LocalQueues (+ xpk's, the DCN network's)."""
    from workloads.runs import queues

    if fleet is not None:
        _queues_apply_fleet(fleet, dry_run, output, kubeconfig)
        return
    env, _ = _spec(spec)
    objects = queues.objects(env)
    if dry_run:
        _print_objects(objects, output)
        return
    from workloads.cluster.client import Cluster

    refs = queues.apply(Cluster.connect(kubeconfig, context), objects)
    if output is OutputFormat.json:
        print_json({"applied": refs})
    else:
        for r in refs:
            typer.echo(f"applied {r['kind']} {r.get('namespace', '') + '/' if r.get('namespace') else ''}{r['name']}")


def _queues_apply_fleet(path: Path, dry_run: bool, output: OutputFormat, kubeconfig: Path | None) -> None:
    from infra.fleet import load_spec_or_fleet
    from workloads.runs import queues

    fleet = load_spec_or_fleet(path, want="fleet")  # read once; every member's spec checked before anything is applied
    if dry_run:
        _print_objects(queues.fleet_objects(fleet), output)
        return

    manager, workers = queues.connect_fleet(fleet, kubeconfig)  # every member its own cluster, the workers on TLS: else nothing is applied
    res, active = queues.apply_fleet(fleet, manager, workers, progress=lambda m: sys.stderr.write(m + "\n"))
    if output is OutputFormat.json:
        print_json({**res.to_dict(), "active": active})
    else:
        for name, state in active.items():
            typer.echo(f"worker {name}: MultiKueueCluster active: {state}")


@queues_app.command("status")
def queues_status(
    team: Annotated[Optional[str], typer.Option("--team", help="only this team's queue (its namespace's LocalQueues and their ClusterQueue)")] = None,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="only the queues and runs of this namespace")] = None,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    spec: SpecOpt = None,
) -> None:
    """Per team and flavor: nominal TPU quota, in use, borrowed; each waiting run with Kueue's reason and its position (a fleet: every member)."""
    from workloads.cli.overview import queues_status as show

    show(team, namespace, output, spec, kubeconfig, context)


@queues_app.command("rotate-credentials")
def queues_rotate_credentials(
    fleet: Annotated[Path, typer.Option("--fleet", help="the fleet file whose manager's credentials on its workers to replace")],
    worker: Annotated[Optional[list[str]], typer.Option("--worker", help="a worker of the fleet (repeatable; default: every worker)")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    output: Output = OutputFormat.text,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Replace the manager's token on each worker: a new token, the manager's Secret rewritten, its MultiKueueCluster Active, then the old token revoked."""
    from infra.fleet import load_spec_or_fleet
    from toolkit.clikit import confirm
    from workloads.runs import queues

    f = load_spec_or_fleet(fleet, want="fleet")
    names = [f.worker(n).name for n in worker or []]  # an unknown worker is refused before anything is reached
    manager, workers = queues.connect_fleet(f, kubeconfig)
    confirm(f"Replace the manager's token on {', '.join(names or [w.name for w in f.workers])} and revoke the old one(s)?", yes=yes)
    done = queues.rotate_fleet(f, manager, workers, names or None, progress=lambda m: sys.stderr.write(m + "\n"))
    if output is OutputFormat.json:
        print_json({"rotated": [r.to_dict() for r in done]})
    else:
        for r in done:
            typer.echo(f"worker {r.worker}: token Secret {r.token_secret}; revoked {', '.join(r.revoked) or 'none'}; MultiKueueCluster active: {r.active}")


@queues_app.command("manager-config")
def queues_manager_config(
    merge: Annotated[
        Optional[Path],
        typer.Option("--merge", help="the controller's configuration YAML to lay the spec's settings over (e.g. the release's kueue-manager-config)"),
    ] = None,
    controller: Annotated[str, typer.Option("--controller", help="kueue (waitForPodsReady, fair sharing) or jobset (its InPlaceRestart gate)")] = "kueue",
    output: Output = OutputFormat.text,
    spec: SpecOpt = None,
) -> None:
    """A controller's settings from the spec (Kueue's waitForPodsReady; JobSet's in-place restart gate), alone or merged into its configuration file; a fleet file's manager's (Kueue's with multiKueue)."""
    from workloads.render import yamlio
    from workloads.runs import queues

    env, fleet = _spec(spec)
    config = queues.manager_config(fleet or env, merge, controller=controller)
    if output is OutputFormat.json:
        print_json(config)
    else:
        typer.echo(yamlio.dump(config), nl=False)
