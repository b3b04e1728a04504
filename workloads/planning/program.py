"""Planning, stage 4 of 4 — the program: the command, arguments and environment every worker runs.

    target -> sizing -> policy -> program        (workloads.planning.planner.plan_run)

From the earlier stages' results, one frozen ``Program``:

- the environment: the recipe's ``env`` and its ``LIBTPU_INIT_ARGS`` for the generation;
- a plain command as the recipe writes it (the flags that only mean something to MaxText
  are refused for it);
- a MaxText run's ``python3 -m <trainer> <config> key=value ...`` (the pre-training trainer, or
  with ``kind: sft`` the fine-tuning one, ``fine_tuning``): identity, model, the
  recipe's args, batch, steps, checkpointing, mesh, then ``--set`` (in place or appended);
  then the dataset's Grain flags (the policy's dataset; an SFT run's conversation column and
  chat template, ``fine_tuning.sft_args``), the checkpoint to start from (``--load-parameters``,
  ``load_parameters``), multi-tier checkpointing's, the checkpoint storage's output
  directory, and the profiler's
  (``--profile``, uploaded to the spec's Vertex AI TensorBoard as the pods' identity);
- every word and environment value checked to be one a program can be given (``program_text``), and no
  credential among them as a plain value; the recipe's ``secret_env`` and ``--secret-env`` as Secret
  references (``secret_env``).

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any

from infra.access import tensorboard_name, tensorboard_problem
from infra.spec import EnvSpec, TeamSpec
from workloads.planning import mounts, pathways, program_text, secret_env
from workloads.planning.checkpoint_shapes import DIMS, LoadParameters, path_problem
from workloads.planning.dataset import maxtext_data_args
from workloads.planning.defaults import DEFAULT_PROFILE_START
from workloads.planning.errors import PlanError
from workloads.planning.fine_tuning import sft_args
from workloads.planning.images import MAXTEXT_SFT_MODULE, MAXTEXT_TRAIN_MODULE
from workloads.planning.maxtext_keys import MESH_AXES, MODEL_KEYS, mesh_key
from workloads.planning.maxtext_sets import arg_text
from workloads.planning.model import RUNTIME_PATHWAYS, RUNTIME_RAY, Checkpointing, Profiling, Program
from workloads.planning.overrides import Overrides
from workloads.planning.policy import CHECKPOINT_KEYS, PolicyChoice
from workloads.planning.recipe_model import Kind, MaxTextSpec, ModelDims, Recipe
from workloads.planning.sizing import Sizing
from workloads.planning.target import Placement

# MaxText keys --profile writes; a --set on one of them next to --profile is a conflict.
PROFILE_KEYS = (
    "profiler",
    "skip_first_n_steps_for_profiler",
    "profiler_steps",
    "use_vertex_tensorboard",
    "vertex_tensorboard_project",
    "vertex_tensorboard_region",
)


def build_program(placed: Placement, sizing: Sizing | None, chosen: PolicyChoice, spec: EnvSpec, o: Overrides) -> Program:
    """The program every worker runs; one PlanError naming the flag or recipe field for what cannot be."""
    recipe = placed.recipe
    env: dict[str, str] = dict(recipe.env)
    flags = recipe.libtpu_flags(placed.target.shape.generation.name)
    if flags:
        env["LIBTPU_INIT_ARGS"] = " ".join(flags)
    secrets = secret_env.references(recipe.secret_env, o.secret_env, env)
    common: dict[str, Any] = dict(
        recipe=recipe.name, kind=recipe.kind.value, image=placed.image, env=tuple(env.items()), secret_env=secrets, steps=placed.steps
    )
    program = _command_program(recipe, o, common) if sizing is None else _maxtext_program(placed, sizing, chosen, spec, o, common)
    _check_carried(program, placed.runtime, "--set" if o.sets else f"recipe {recipe.name}")
    return program


def _command_program(recipe: Recipe, o: Overrides, common: dict[str, Any]) -> Program:
    if o.profile_steps is not None or o.profile_start is not None:
        raise PlanError("--profile", f"recipe {recipe.name} runs a plain command, not MaxText's profiler", "drop --profile or pick a MaxText recipe")
    assert recipe.command is not None  # guaranteed by the recipe model
    return Program(command=tuple(recipe.command), args=(), **common)


def _maxtext_program(placed: Placement, sizing: Sizing, chosen: PolicyChoice, spec: EnvSpec, o: Overrides, common: dict[str, Any]) -> Program:
    recipe, name, policy = placed.recipe, placed.name, chosen.policy
    mt = recipe.maxtext
    assert mt is not None and chosen.output_base is not None  # guaranteed by the recipe model and the policy stage
    sets, base_out, storage = sizing.sets.text, chosen.output_base, policy.checkpoint_storage
    notes = list(sizing.warnings)
    args = _maxtext_args(mt, sizing.model, sets, name=name, base_out=base_out, sizing=sizing, steps=placed.steps, checkpoint=policy.checkpoint)
    dataset = chosen.dataset
    if dataset is not None:
        args.update(maxtext_data_args(dataset))
    if recipe.kind is Kind.SFT:
        args.update(sft_args(dataset, recipe=recipe.name, where="--dataset" if o.dataset else f"recipe {recipe.name} dataset", sets=sets))
    load = load_parameters(args, sizing, mt, o)
    if policy.multi_tier is not None:
        args.update(policy.multi_tier.maxtext_args())
    if storage is not None:
        args["base_output_directory"] = storage.base_output
        if args.get("gcs_metrics") == "true":
            # MaxText uploads these with its GCS client to <base_output_directory>, which is now a mount path.
            args["gcs_metrics"] = "false"
            where = (
                f"metrics reads its TensorBoard event files from {storage.location}{name}/tensorboard/{name}/ when Cloud Logging cannot answer"
                if storage.kind == "gcsfuse"
                else f"its TensorBoard event files stay on Lustre ({storage.base_output}/{name}/tensorboard/{name}/), which metrics cannot read from here"
            )
            notes.append(f"--checkpoint-storage {storage.kind}: MaxText's gcs_metrics turned off (it uploads to a gs:// output only); {where}")
    uid = placed.target.run_as_user
    if storage is not None and storage.kind == "lustre" and uid is not None:
        # Lustre's CSI driver leaves ownership to the file system: fsGroup does not reach it.
        notes.append(
            f"--checkpoint-storage lustre: the run writes {storage.base_output}/ as UID {uid} (group {uid}); that directory on the "
            "instance must be writable by it (docs/data-and-checkpoints.md: set it once)"
        )
    notes += mounts.check_paths(recipe, args, sets, dataset=dataset, storage=storage, multi_tier=policy.multi_tier)
    out_location = f"{storage.location}{name}/" if storage is not None and storage.kind == "lustre" else f"{base_out}/{name}/"
    profile = _profiling(spec, sets, o, placed.team, placed.steps, experiment=experiment_name(name, out_location))
    if profile is not None:
        args.update(profile.maxtext_args())
        common = {**common, "env": (*common["env"], *profile.env().items())}
    if placed.runtime == RUNTIME_PATHWAYS:
        # Single-controller MaxText through the head's proxy (workloads.planning.pathways); --set still wins.
        args.update({k: v for k, v in pathways.maxtext_args(policy.elastic).items() if k not in sets})
        common = {**common, "env": (*((k, v) for k, v in common["env"] if k not in pathways.program_env(name)), *pathways.program_env(name).items())}
    return Program(
        command=("python3", "-m", MAXTEXT_SFT_MODULE if recipe.kind is Kind.SFT else MAXTEXT_TRAIN_MODULE),
        args=(mt.config, *(f"{k}={v}" for k, v in args.items())),
        output_dir=None if storage is not None and storage.kind == "lustre" else f"{base_out}/{name}/",
        sizing=sizing.summary(),
        estimated_step_seconds=sizing.step.seconds,
        estimated_mfu=sizing.step.mfu,
        step_kind=sizing.step.kind,
        step_error=sizing.step.error,
        profile=profile,
        dataset=dataset,
        load_parameters=load,
        warnings=tuple(notes),
        **common,
    )


def _maxtext_args(
    mt: MaxTextSpec,
    model: ModelDims,
    sets: dict[str, str],
    *,
    name: str,
    base_out: str,
    sizing: Sizing,
    steps: int,
    checkpoint: Checkpointing | None = None,
) -> dict[str, str]:
    """Argument order: identity, model, recipe args, sizing, checkpointing, mesh; --set replaces in place or appends."""
    args: dict[str, str] = {"run_name": name, "base_output_directory": base_out, "model_name": mt.model_name}
    if mt.model_name == "default":
        for key in (
            "base_emb_dim",
            "base_num_query_heads",
            "base_num_kv_heads",
            "head_dim",
            "base_num_decoder_layers",
            "base_mlp_dim",
            "vocab_size",
            "max_target_length",
        ):
            args[key] = arg_text(getattr(model, key))
    for key, value in mt.args.items():
        args[key] = arg_text(value)
    args["per_device_batch_size"] = arg_text(sizing.per_device_batch)
    args["steps"] = str(steps)
    # Always explicit: base.yml turns checkpointing on, and a recipe key keeps its place.
    args.update(checkpoint.maxtext_args() if checkpoint else {"enable_checkpointing": "false"})
    for level, degrees in (("ici", sizing.mesh.ici), ("dcn", sizing.mesh.dcn)):
        for axis in MESH_AXES:
            # base.yml defaults ici_fsdp and dcn_data to -1: always write them out.
            if degrees[axis] != 1 or (level, axis) in (("ici", "fsdp"), ("dcn", "data")):
                args[f"{level}_{axis}_parallelism"] = str(degrees[axis])
    for key, value in sets.items():
        if mesh_key(key) or key in CHECKPOINT_KEYS or key in ("per_device_batch_size", "base_output_directory"):
            continue  # already resolved above
        if key in MODEL_KEYS and mt.model_name == "default":
            continue  # written with the model above
        # A preset's dimension (with override_model_config=true, read_sets' rule) goes to MaxText as given:
        # the run must train the model the plan sized.
        args[key] = value
    return args


def load_parameters(args: dict[str, str], sizing: Sizing, mt: MaxTextSpec, o: Overrides) -> LoadParameters | None:
    """``--load-parameters`` into ``args`` (MaxText's load_parameters_path), and what the check before apply compares it to.

    The path a recipe or ``--set`` gives is checked the same way; giving it twice is refused.
    """
    if o.load_parameters is not None:
        if "load_parameters_path" in sizing.sets.text:
            raise PlanError("--set", "load_parameters_path is set by --load-parameters", "drop --set load_parameters_path=..., or drop --load-parameters")
        args["load_parameters_path"] = o.load_parameters
    path = args.get("load_parameters_path", "")
    if not path:
        return None
    where = (
        "--load-parameters"
        if o.load_parameters is not None
        else ("--set" if "load_parameters_path" in sizing.sets.text else "maxtext.args.load_parameters_path")
    )
    bad = path_problem(path)
    if bad:
        raise PlanError(where, bad, "pass the checkpoint's items directory, e.g. gs://BUCKET/_base/NAME/0/items (what `convert` prints)")
    model = sizing.model
    return LoadParameters(
        path=path,
        model_name=mt.model_name,
        dims=tuple((k, int(getattr(model, k))) for k in DIMS),
        scan_layers=args.get("scan_layers", "true").strip().lower() in ("true", "1"),
        tied_embedding=model.tied_embedding,
        dense=model.num_experts == 1,
        gated=model.mlp_matrices == 3,
        field=where,
    )


def experiment_name(run: str, output: str) -> str:
    """The run's Vertex AI TensorBoard experiment: its name and a digest of its output directory (``Profiling``)."""
    return f"{run}-{hashlib.sha256(output.encode()).hexdigest()[:8]}"


def _profiling(spec: EnvSpec, sets: dict[str, str], o: Overrides, team: TeamSpec, steps: int, *, experiment: str | None = None) -> Profiling | None:
    """--profile N [--profile-start K]: MaxText's xplane profiler for steps K..K+N-1, uploaded to the
    spec's Vertex AI TensorBoard as the pods' identity (the traces stay in the bucket without one)."""
    if o.profile_steps is None:
        if o.profile_start is not None:
            raise PlanError("--profile-start", "given without --profile", "add --profile STEPS (how many steps to record)")
        return None
    start = DEFAULT_PROFILE_START if o.profile_start is None else o.profile_start  # both within their bounds (Overrides.problem)
    if start + o.profile_steps > steps:
        raise PlanError(
            "--profile",
            f"steps {start}-{start + o.profile_steps - 1} are past the end of the run ({steps} steps)",
            f"pass --steps {start + o.profile_steps} or more, or a smaller --profile/--profile-start",
        )
    clash = next((k for k in PROFILE_KEYS if k in sets), None)
    if clash:
        raise PlanError("--set", f"{clash} is set by --profile", f"drop --set {clash}=..., or drop --profile")
    problem = tensorboard_problem(spec, team, o.host_network)
    if problem and spec.tensorboard.enabled:
        raise PlanError("--profile", f"the traces cannot be uploaded to the TensorBoard: {problem}", "run on the pod network (drop --host-network)")
    if problem:
        return Profiling(first_step=start, steps=o.profile_steps)
    return Profiling(
        first_step=start, steps=o.profile_steps, tensorboard=tensorboard_name(spec), project=spec.project, region=spec.tensorboard_region, experiment=experiment
    )


def _check_carried(program: Program, runtime: str, field: str) -> None:
    """Every word and env value the program gets can reach it (``program_text``); the recipe and --set were checked as they were read."""
    for text in (*program.command, *program.args, *(v for _, v in program.env)):
        bad = program_text.problem(text)
        if bad:
            raise PlanError(field, f"a program argument {bad}", "remove it")
    # Whatever path a key or variable came by (recipe, --set, an imported recipe): a credential is never a plain value.
    for word in program.args if program.is_maxtext else ():
        secret = program_text.secret_key_problem(word.partition("=")[0])
        if secret:
            raise PlanError(field, *secret)
    for name, _ in program.env:
        secret = program_text.secret_env_problem(name)
        if secret:
            raise PlanError(field, *secret)
    bad_command = program_text.command_problem(program.command, program.args, ray=runtime == RUNTIME_RAY)
    if bad_command:
        raise PlanError(field, *bad_command)
